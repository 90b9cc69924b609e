// cpu_bench's convprofile mode (bench/conv_profile.cc).
#ifndef TRAIND_BENCH_CONV_PROFILE_H_
#define TRAIND_BENCH_CONV_PROFILE_H_

namespace traind::bench {

// argv[1] is "convprofile"; returns the process's exit status.
int ConvProfile(int argc, char** argv);

}  // namespace traind::bench

#endif  // TRAIND_BENCH_CONV_PROFILE_H_
