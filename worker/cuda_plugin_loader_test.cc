// traind-worker links no CUDA library and loads the CUDA plugin at run
// time: its ELF NEEDED entries, the loader's errors, the plugin's own link
// (static CUDA runtime) and --capabilities.
#include "worker/cuda_plugin_loader.h"

#include <elf.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace traind::worker {
namespace {

// The DT_NEEDED entries of an ELF64 file (what the dynamic loader loads
// with it), read from its section headers. Empty with *error set on failure.
std::vector<std::string> NeededLibraries(const std::string& path, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> needed;
  if (bytes.size() < sizeof(Elf64_Ehdr) || std::memcmp(bytes.data(), ELFMAG, SELFMAG) != 0 ||
      bytes[EI_CLASS] != ELFCLASS64) {
    *error = path + ": not an ELF64 file";
    return needed;
  }
  Elf64_Ehdr eh;
  std::memcpy(&eh, bytes.data(), sizeof(eh));
  auto section = [&](size_t i) {
    Elf64_Shdr sh{};
    const size_t at = eh.e_shoff + i * eh.e_shentsize;
    if (at + sizeof(sh) <= bytes.size()) std::memcpy(&sh, bytes.data() + at, sizeof(sh));
    return sh;
  };
  for (size_t i = 0; i < eh.e_shnum; ++i) {
    const Elf64_Shdr dyn = section(i);
    if (dyn.sh_type != SHT_DYNAMIC) continue;
    const Elf64_Shdr strtab = section(dyn.sh_link);
    for (size_t off = dyn.sh_offset; off + sizeof(Elf64_Dyn) <= dyn.sh_offset + dyn.sh_size &&
                                     off + sizeof(Elf64_Dyn) <= bytes.size();
         off += sizeof(Elf64_Dyn)) {
      Elf64_Dyn d;
      std::memcpy(&d, bytes.data() + off, sizeof(d));
      if (d.d_tag == DT_NULL) break;
      if (d.d_tag == DT_NEEDED && strtab.sh_offset + d.d_un.d_val < bytes.size()) {
        needed.emplace_back(bytes.data() + strtab.sh_offset + d.d_un.d_val);
      }
    }
    return needed;
  }
  *error = path + ": no dynamic section";
  return needed;
}

// CUDA's libraries: the driver, the runtime, the math libraries, NCCL, NVML.
const std::regex kCudaLibrary(
    R"(^lib(cuda|cudart|cublas|cublasLt|cudnn.*|nccl|nvrtc|nvJitLink|nvidia-ml|cusparse|cufft|curand|cusolver)\.so.*)");

TEST(WorkerLinkTest, TraindWorkerNeedsNoCudaLibrary) {
  std::string error;
  const std::vector<std::string> needed = NeededLibraries(TRAIND_WORKER_PATH, &error);
  ASSERT_FALSE(needed.empty()) << error;
  for (const std::string& lib : needed) {
    EXPECT_FALSE(std::regex_match(lib, kCudaLibrary))
        << TRAIND_WORKER_PATH << " links " << lib
        << ": CUDA libraries belong in the plugin (libtraind_cuda.so), loaded only for GPU tasks";
  }
}

TEST(WorkerLinkTest, PluginLinksCudaRuntimeStaticallyAndNoDriver) {
#ifndef TRAIND_CUDA_PLUGIN_PATH
  GTEST_SKIP() << "built without CUDA (TRAIND_WITH_CUDA=OFF)";
#else
  std::string error;
  const std::vector<std::string> needed = NeededLibraries(TRAIND_CUDA_PLUGIN_PATH, &error);
  ASSERT_FALSE(needed.empty()) << error;
  bool cublas = false;
  for (const std::string& lib : needed) {
    // One CUDA runtime (static, inside the plugin); the stub libcuda.so
    // would make it fail to load without a driver.
    EXPECT_EQ(lib.rfind("libcudart", 0), std::string::npos) << lib;
    EXPECT_EQ(lib.rfind("libcuda.so", 0), std::string::npos) << lib;
    cublas = cublas || lib.rfind("libcublas", 0) == 0;
  }
  EXPECT_TRUE(cublas) << "the plugin should link cuBLAS";
#endif
}

TEST(CudaPluginLoaderTest, MissingFileNamesThePath) {
  const std::string path = "/nonexistent/traind/libtraind_cuda.so";
  const absl::StatusOr<std::unique_ptr<CudaPlugin>> plugin = CudaPlugin::Load(path);
  ASSERT_FALSE(plugin.ok());
  EXPECT_EQ(plugin.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(plugin.status().message().find(path), std::string::npos) << plugin.status();
  EXPECT_NE(plugin.status().message().find("No such file"), std::string::npos) << plugin.status();
}

TEST(CudaPluginLoaderTest, FileThatIsNotALibraryIsRefused) {
  const testing::TempDir dir("traind-plugin-test");
  ASSERT_FALSE(dir.path().empty());
  const std::string path = dir.Write("libtraind_cuda.so", "not a shared object\n");
  const absl::StatusOr<std::unique_ptr<CudaPlugin>> plugin = CudaPlugin::Load(path);
  ASSERT_FALSE(plugin.ok());
  EXPECT_NE(plugin.status().message().find(path), std::string::npos) << plugin.status();
  EXPECT_NE(plugin.status().message().find("cannot load the CUDA plugin"), std::string::npos)
      << plugin.status();
}

TEST(CudaPluginLoaderTest, LibraryWithoutEntryPointIsNotAPlugin) {
  const absl::StatusOr<std::unique_ptr<CudaPlugin>> plugin =
      CudaPlugin::Load(TRAIND_FAKE_PLUGIN_NO_ENTRY_PATH);
  ASSERT_FALSE(plugin.ok());
  EXPECT_NE(plugin.status().message().find(engine::kCudaPluginEntryPoint), std::string::npos)
      << plugin.status();
  EXPECT_NE(plugin.status().message().find("not a traind CUDA plugin"), std::string::npos)
      << plugin.status();
}

TEST(CudaPluginLoaderTest, PluginOfAnotherBuildIsRefused) {
  const absl::StatusOr<std::unique_ptr<CudaPlugin>> plugin =
      CudaPlugin::Load(TRAIND_FAKE_PLUGIN_WRONG_ABI_PATH);
  ASSERT_FALSE(plugin.ok());
  EXPECT_NE(plugin.status().message().find("another traind-worker"), std::string::npos)
      << plugin.status();
}

TEST(CudaPluginLoaderTest, SearchesBesideTheExecutableThenLibTraind) {
  const std::vector<std::string> path = CudaPlugin::DefaultSearchPath();
  ASSERT_EQ(path.size(), 2u);
  // This test binary lives in the build's bin/, as traind-worker does.
  const std::string bin_dir = TRAIND_BIN_DIR;
  EXPECT_EQ(path[0], bin_dir + "/libtraind_cuda.so");
  EXPECT_EQ(path[1], bin_dir + "/../lib/traind/libtraind_cuda.so");
}

TEST(CudaPluginLoaderTest, RealPluginLoadsAndExplainsMissingDevices) {
#ifndef TRAIND_CUDA_PLUGIN_PATH
  const absl::StatusOr<std::unique_ptr<CudaPlugin>> missing = CudaPlugin::LoadDefault();
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("not found"), std::string::npos) << missing.status();
  GTEST_SKIP() << "built without CUDA (TRAIND_WITH_CUDA=OFF)";
#else
  const absl::StatusOr<std::unique_ptr<CudaPlugin>> plugin = CudaPlugin::LoadDefault();
  ASSERT_TRUE(plugin.ok()) << plugin.status();
  EXPECT_EQ((*plugin)->path(), CudaPlugin::DefaultSearchPath()[0]);
  EXPECT_NE(std::string((*plugin)->build_info()).find("cuBLAS"), std::string::npos);
  std::string reason;
  const int devices = (*plugin)->DeviceCount(&reason);
  auto backend = (*plugin)->CreateBackend(0, traind::v1::FP32);
  if (devices == 0) {
    EXPECT_FALSE(reason.empty());
    ASSERT_FALSE(backend.ok());
    EXPECT_EQ(backend.status().code(), absl::StatusCode::kFailedPrecondition) << backend.status();
    EXPECT_NE(backend.status().message().find("no CUDA device"), std::string::npos)
        << backend.status();
    return;
  }
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_NE((*backend)->name().find("cuda"), std::string::npos);
  // One rank: a communicator of size 1 needs no peer.
  auto id = (*plugin)->NewNcclUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  auto comm = (*plugin)->CreateCommunicator(backend->get(), *id, 0, 1, 30);
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_EQ((*comm)->size(), 1);
  comm->reset();  // finalized before the backend goes
#endif
}

// Runs `command` through the shell; stdout and stderr into *out / *err.
int RunCommand(const std::string& command, std::string* out, std::string* err) {
  const testing::TempDir dir("traind-worker-run");
  if (dir.path().empty()) return -1;
  const std::string o = dir.Path("out"), e = dir.Path("err");
  const int status = std::system(absl::StrCat(command, " >", o, " 2>", e).c_str());
  std::ifstream fo(o), fe(e);
  out->assign(std::istreambuf_iterator<char>(fo), std::istreambuf_iterator<char>());
  err->assign(std::istreambuf_iterator<char>(fe), std::istreambuf_iterator<char>());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// `traind-worker --capabilities`'s tokens, in order.
std::vector<std::string> Capabilities(const std::string& env, std::string* err) {
  std::string out;
  EXPECT_EQ(RunCommand(absl::StrCat(env, TRAIND_WORKER_PATH, " --capabilities"), &out, err), 0)
      << *err;
  EXPECT_TRUE(!out.empty() && out.back() == '\n' && out.find('\n') == out.size() - 1) << out;
  std::vector<std::string> tokens;
  std::istringstream in(out);
  for (std::string t; in >> t;) tokens.push_back(t);
  return tokens;
}

bool Has(const std::vector<std::string>& tokens, const std::string& t) {
  return std::find(tokens.begin(), tokens.end(), t) != tokens.end();
}

TEST(WorkerCapabilitiesTest, ListsCudaOnlyWithADeviceAndSaysWhyNot) {
  std::string err;
  const std::vector<std::string> tokens = Capabilities("", &err);
  ASSERT_FALSE(tokens.empty());
  EXPECT_EQ(tokens[0], "cpu");
  for (const std::string& t : tokens) {
    EXPECT_TRUE(t == "cpu" || t == "cpu-bf16" || t == "cuda") << t;
  }
  if (Has(tokens, "cuda")) return;  // a GPU machine with the plugin
  // Why CUDA is absent goes to stderr: no plugin, or the plugin's reason.
  EXPECT_NE(err.find("cuda"), std::string::npos) << err;
}

// bf16 is oneDNN's answer under the worker's environment: capped at AVX2,
// no CPU has bf16 matmuls (traind takes this line for submit's check).
TEST(WorkerCapabilitiesTest, Bf16FollowsOneDnnsIsaCap) {
  std::string err;
  EXPECT_FALSE(Has(Capabilities("env ONEDNN_MAX_CPU_ISA=AVX2 ", &err), "cpu-bf16"));
  EXPECT_FALSE(Has(Capabilities("env DNNL_MAX_CPU_ISA=AVX2 ", &err), "cpu-bf16"));
  EXPECT_TRUE(Has(Capabilities("env ONEDNN_MAX_CPU_ISA=AVX2 ", &err), "cpu"));
}

TEST(WorkerGpuTaskTest, GpuSpecWithoutUsableGpuFailsWithTheReason) {
  std::string out, err;
  if (Has(Capabilities("", &err), "cuda")) {
    GTEST_SKIP() << "this machine has a usable GPU";
  }
  const testing::TempDir dir("traind-worker-gpu");
  ASSERT_FALSE(dir.path().empty());
  const std::string spec = dir.Path("gpu.yaml");
  std::ofstream(spec) << "name: gpu\n"
                         "data: {path: " TRAIND_SOURCE_DIR
                         "/examples/data/iris.csv, label: species}\n"
                         "model: {layers: [{dense: {units: 3}}]}\n"
                         "loss: {softmax_cross_entropy: {}}\n"
                         "optimizer: {sgd: {learning_rate: 0.1}}\n"
                         "training: {epochs: 1, batch_size: 16}\n"
                         "resources: {device: gpu, count: 1}\n";
  const int code = RunCommand(absl::StrCat(TRAIND_WORKER_PATH, " --spec=", spec), &out, &err);
  EXPECT_EQ(code, 1) << err;  // failed (not a usage error, not a crash)
  EXPECT_TRUE(err.find("no CUDA device") != std::string::npos ||
              err.find("no CUDA plugin") != std::string::npos ||
              err.find("cannot load the CUDA plugin") != std::string::npos)
      << err;
}

}  // namespace
}  // namespace traind::worker
