// A stand-in for traind-worker in the launcher's tests: the same zygote
// entry point (--zygote) and a few behaviours chosen by argv[1]:
//   report        print its parent, process group, stdin, open descriptors
//                 and environment
//   exit N        exit with status N
//   sleep         wait to be signalled
//   mark FILE     append a line to FILE, then exit 0
#include <dirent.h>
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
  if (mode == "mark" && argc == 3) {
    FILE* f = std::fopen(argv[2], "a");
    if (f == nullptr) return 3;
    std::fprintf(f, "ran\n");
    std::fclose(f);
    return 0;
  }
  if (mode == "sleep") {
    for (;;) pause();
  }
  if (mode == "report") {
    char target[256] = {};
    (void)!readlink("/proc/self/fd/0", target, sizeof(target) - 1);
    std::printf("ppid=%d\npgid=%d\nstdin=%s\nargv1=%s\n", static_cast<int>(getppid()),
                static_cast<int>(getpgid(0)), target, argv[1]);
    if (DIR* d = opendir("/proc/self/fd"); d != nullptr) {
      const int self = dirfd(d);
      while (dirent* e = readdir(d)) {
        if (e->d_name[0] != '.' && std::atoi(e->d_name) != self) std::printf("fd %s\n", e->d_name);
      }
      closedir(d);
    }
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
