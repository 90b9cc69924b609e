// The environment every worker process starts from, whatever launches it.
#ifndef TRAIND_SERVER_LAUNCH_WORKER_ENVIRONMENT_H_
#define TRAIND_SERVER_LAUNCH_WORKER_ENVIRONMENT_H_

#include <string>
#include <vector>

namespace traind::server {

// The environment every worker process starts from: PATH and LANG, plus the
// settings of traind's own environment that change what oneDNN can do
// (ONEDNN_MAX_CPU_ISA, ONEDNN_CPU_ISA_HINTS and their DNNL_ spellings) or
// which library multiplies (TRAIND_CPU_GEMM), so the capabilities probe, the
// zygote and every task see the same CPU and multiply alike.
// `environ` is traind's environment (a null-terminated array, as `environ`).
std::vector<std::string> BaseWorkerEnvironment(const char* const* environ);

}  // namespace traind::server

#endif  // TRAIND_SERVER_LAUNCH_WORKER_ENVIRONMENT_H_
