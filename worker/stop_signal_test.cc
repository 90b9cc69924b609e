// The stop flags: set by SIGTERM/SIGUSR2, and by the signals a launcher
// wrote down for the worker before its handlers were installed
// ($TRAIND_STOP_SIGNALS_FILE). Each case runs in a child process: the
// flags are process-wide and never cleared.
#include "worker/stop_signal.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace traind::worker {
namespace {

// What a child that installed the handlers saw: 1 = stop, 2 = preempt.
// `file` is the signals file's text (nullptr: no TRAIND_STOP_SIGNALS_FILE);
// `raise_after`, a signal the child sends itself once the handlers are in.
int FlagsInAChild(const char* file, int raise_after = 0) {
  char path[] = "/tmp/traind-stop-signals-XXXXXX";
  const int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  close(fd);
  if (file != nullptr) std::ofstream(path) << file;
  const pid_t pid = fork();
  if (pid == 0) {
    if (file != nullptr) {
      setenv("TRAIND_STOP_SIGNALS_FILE", path, 1);
    } else {
      unsetenv("TRAIND_STOP_SIGNALS_FILE");
    }
    InstallStopSignalHandlers();
    if (raise_after != 0) raise(raise_after);
    _exit((StopSignalReceived() ? 1 : 0) | (PreemptSignalReceived() ? 2 : 0));
  }
  int status = 0;
  waitpid(pid, &status, 0);
  unlink(path);
  EXPECT_TRUE(WIFEXITED(status)) << status;
  return WEXITSTATUS(status);
}

TEST(StopSignalTest, NoSignalNoFlag) {
  EXPECT_EQ(FlagsInAChild(nullptr), 0);
  EXPECT_EQ(FlagsInAChild(""), 0);
}

TEST(StopSignalTest, SignalsAfterTheHandlersSetTheFlags) {
  EXPECT_EQ(FlagsInAChild(nullptr, SIGTERM), 1);
  EXPECT_EQ(FlagsInAChild(nullptr, SIGINT), 1);
  EXPECT_EQ(FlagsInAChild(nullptr, SIGUSR2), 3);
}

TEST(StopSignalTest, SignalsWrittenDownBeforeTheHandlersCountAsReceived) {
  EXPECT_EQ(FlagsInAChild("USR2\n"), 3);
  EXPECT_EQ(FlagsInAChild("TERM\n"), 1);
  EXPECT_EQ(FlagsInAChild("TERM\nUSR2\n"), 3);
  // Only whole lines naming a stop signal.
  EXPECT_EQ(FlagsInAChild("HUP\nUSR2x\n"), 0);
}

TEST(StopSignalTest, AMissingSignalsFileIsNoSignal) {
  const pid_t pid = fork();
  if (pid == 0) {
    setenv("TRAIND_STOP_SIGNALS_FILE", "/nonexistent/traind/signals", 1);
    InstallStopSignalHandlers();
    _exit(StopSignalReceived() ? 1 : 0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace traind::worker
