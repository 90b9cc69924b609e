// The worker zygote: a traind-worker process, started once by traind, that
// has done its dynamic linking and static initialization and then forks a
// fresh worker for every task attempt.
//
// A worker started this way is still a new process: the zygote never
// starts a thread, never opens a gRPC channel, never loads the CUDA plugin
// and never trains, so each forked worker begins from the same clean image
// and its exit still releases everything it acquired (CUDA contexts
// included). What it saves is exec + dynamic linking + static initializers
// of ~60 shared libraries, paid once instead of once per fold.
//
// Process tree: traind (a child subreaper) -> zygote -> intermediate ->
// worker. The intermediate exits as soon as the worker is forked, so the
// worker is re-parented to traind before traind hears its pid: traind
// waits for it, signals its process group and sees it exit exactly as if
// it had spawned it. The worker then arms PR_SET_PDEATHSIG against traind.
//
// The protocol between traind and the zygote is traind/zygote_protocol.h.
#ifndef TRAIND_WORKER_ZYGOTE_ZYGOTE_H_
#define TRAIND_WORKER_ZYGOTE_ZYGOTE_H_

#include "traind/zygote_protocol.h"

namespace traind::zygote {

// Runs the zygote loop on `control_fd` until traind closes it; returns the
// zygote's exit status. In each forked worker, `worker_main(argc, argv)`
// runs with the request's argv and environment, stdin on /dev/null,
// stdout/stderr on the log, its own process group, no blocked signals and
// default dispositions, and only once its parent is traind (the zygote's
// parent, which must be a child subreaper); the worker process exits with
// worker_main's return value.
int RunZygote(int control_fd, int (*worker_main)(int, char**));

}  // namespace traind::zygote

#endif  // TRAIND_WORKER_ZYGOTE_ZYGOTE_H_
