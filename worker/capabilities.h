// traind-worker --capabilities: what this worker can train on.
#ifndef TRAIND_WORKER_CAPABILITIES_H_
#define TRAIND_WORKER_CAPABILITIES_H_

namespace traind::worker {

// Prints one line of tokens on stdout: "cpu"; "cpu-bf16" when oneDNN has
// bf16 matmuls on this CPU (under this process's ONEDNN_MAX_CPU_ISA); "cuda"
// when the plugin loads and sees a device. Why CUDA is absent goes to stderr
// (traind logs it). traind takes bf16 support from here, so submit and
// training agree on it. Returns the exit status (0).
int PrintCapabilities();

}  // namespace traind::worker

#endif  // TRAIND_WORKER_CAPABILITIES_H_
