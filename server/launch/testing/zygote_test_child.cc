// A stand-in for traind-worker in the launcher's tests: the same zygote
// entry point (--zygote) and a few behaviours chosen by argv[1]:
//   report        print its parent, process group, stdin and environment
//   exit N        exit with status N
//   sleep         wait to be signalled
#include <fcntl.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "worker/zygote/zygote.h"

extern char** environ;

namespace {

int ChildMain(int argc, char** argv) {
  if (const char* parent = std::getenv("TRAIND_PARENT_PID"); parent != nullptr) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != std::atoi(parent)) return 99;
  }
  if (argc < 2) return 2;
  const std::string mode = argv[1];
  if (mode == "exit" && argc == 3) return std::atoi(argv[2]);
  if (mode == "sleep") {
    for (;;) pause();
  }
  if (mode == "report") {
    char target[256] = {};
    (void)!readlink("/proc/self/fd/0", target, sizeof(target) - 1);
    std::printf("ppid=%d\npgid=%d\nstdin=%s\nargv1=%s\n", static_cast<int>(getppid()),
                static_cast<int>(getpgid(0)), target, argv[1]);
    for (char** e = environ; *e != nullptr; ++e) std::printf("env %s\n", *e);
    std::fprintf(stderr, "to stderr\n");
    return 0;
  }
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], traind::zygote::kZygoteFlag) == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    return traind::zygote::RunZygote(traind::zygote::kZygoteControlFd, ChildMain);
  }
  return ChildMain(argc, argv);
}
