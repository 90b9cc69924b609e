// The worker process's own set-up, before any thread exists: the
// parent-death signal and, in the zygote, the one-time work every forked
// worker would otherwise repeat.
#ifndef TRAIND_WORKER_PROCESS_SETUP_H_
#define TRAIND_WORKER_PROCESS_SETUP_H_

namespace traind::worker {

// Under traind (TRAIND_PARENT_PID set): die with it (PR_SET_PDEATHSIG,
// SIGKILL), and unset the variable. False when traind is already gone (it
// died between starting us and this call). Call first, on the main thread.
bool ArmParentDeathSignal();

// The zygote's one-time work that every fold would otherwise repeat:
// oneDNN's CPU engine and JIT machinery (ISA detection, code buffers, the
// primitive cache, its GEMM kernels), brought up by creating and running a
// small dense kernel on this thread alone (OpenMP at one thread for the
// while), ONNX's operator schemas, and the protobuf descriptors of the job
// spec. Creates no thread. Best effort.
void PrewarmZygote();

// A worker forked by the zygote: the OpenMP runtime read its settings when
// the zygote loaded it, so this task's OMP_NUM_THREADS is applied here.
void ApplyOmpNumThreads();

// The threads a task may use to decode its data (an image folder's files):
// OpenMP's, the task's CPU share.
int DecodeThreads();

}  // namespace traind::worker

#endif  // TRAIND_WORKER_PROCESS_SETUP_H_
