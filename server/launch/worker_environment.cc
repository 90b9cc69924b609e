#include "server/launch/worker_environment.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace traind::server {

std::vector<std::string> BaseWorkerEnvironment(const char* const* environ) {
  // oneDNN's ISA caps and traind's GEMM library policy
  // (worker/engine/backend/cpu/cpu_gemm.h): the workers multiply as traind's
  // environment says.
  static constexpr const char* kPassed[] = {"ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA",
                                            "ONEDNN_CPU_ISA_HINTS", "DNNL_CPU_ISA_HINTS",
                                            "TRAIND_CPU_GEMM"};
  std::vector<std::string> env = {"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"};
  for (const char* const* e = environ; e != nullptr && *e != nullptr; ++e) {
    const absl::string_view entry(*e);
    for (const char* name : kPassed) {
      if (absl::StartsWith(entry, absl::StrCat(name, "="))) env.emplace_back(entry);
    }
  }
  return env;
}

}  // namespace traind::server
