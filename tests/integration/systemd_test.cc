// traind under a systemd notify socket: READY=1 once it serves, WATCHDOG=1
// pings at half of WATCHDOG_USEC, STOPPING=1 on SIGTERM. The test plays
// systemd's part: a unix datagram socket named by NOTIFY_SOCKET.
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/testing/traind_process.h"

namespace traind::testing {
namespace {

class NotifySocket {
 public:
  explicit NotifySocket(const std::string& path) : path_(path) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
    ok_ = fd_ >= 0 && bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~NotifySocket() {
    if (fd_ >= 0) close(fd_);
    unlink(path_.c_str());
  }
  bool ok() const { return ok_; }

  // The next datagram, or "" after `timeout_ms`.
  std::string Receive(int timeout_ms) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) return "";
    char buf[4096];
    ssize_t n = recv(fd_, buf, sizeof(buf), 0);
    return n > 0 ? std::string(buf, n) : "";
  }

  // Datagrams until one contains `what` (returned), or "" after `timeout_ms`.
  std::string WaitFor(const std::string& what, int timeout_ms, std::vector<std::string>* seen) {
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < end) {
      int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                      end - std::chrono::steady_clock::now())
                                      .count());
      std::string m = Receive(std::max(1, left));
      if (m.empty()) continue;
      seen->push_back(m);
      if (m.find(what) != std::string::npos) return m;
    }
    return "";
  }

 private:
  std::string path_;
  int fd_ = -1;
  bool ok_ = false;
};

TEST(SystemdNotifyTest, ReadyWatchdogAndStopping) {
  TempDir dir;
  NotifySocket notify(dir.path() + "/notify.sock");
  ASSERT_TRUE(notify.ok());
  TraindProcess daemon(dir.path() + "/state", {"--cpu-slots=1"});
  daemon.SetEnv("NOTIFY_SOCKET", dir.path() + "/notify.sock");
  daemon.SetEnv("WATCHDOG_USEC", "400000");  // pings every 200 ms
  ASSERT_TRUE(daemon.Start()) << daemon.Log();

  std::vector<std::string> seen;
  std::string ready = notify.WaitFor("READY=1", 10000, &seen);
  ASSERT_FALSE(ready.empty()) << daemon.Log();
  EXPECT_NE(ready.find("STATUS=serving on unix:"), std::string::npos) << ready;
  EXPECT_NE(ready.find("MAINPID=" + std::to_string(daemon.pid())), std::string::npos) << ready;

  // Several pings within about two seconds.
  int pings = 0;
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (std::chrono::steady_clock::now() < end) {
    std::string m = notify.Receive(100);
    if (m.find("WATCHDOG=1") != std::string::npos) ++pings;
  }
  EXPECT_GE(pings, 4) << daemon.Log();
  EXPECT_LE(pings, 20);

  // The API answered before READY was sent (the fixture connected).
  traind::v1::ServerInfo info;
  auto ctx = Ctx();
  EXPECT_TRUE(daemon.stub()->GetServerInfo(ctx.get(), {}, &info).ok());

  // Like systemd, keep reading while traind stops: a notify socket left full
  // blocks the sender's sd_notify calls.
  const int pid = daemon.pid();
  std::atomic<bool> stopped{false};
  std::vector<std::string> after;
  std::thread drain([&] {
    while (!stopped.load()) {
      std::string m = notify.Receive(20);
      if (!m.empty()) after.push_back(m);
    }
  });
  int status = daemon.Stop(SIGTERM);
  stopped.store(true);
  drain.join();
  for (std::string m = notify.Receive(0); !m.empty(); m = notify.Receive(0)) after.push_back(m);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  bool stopping = false;
  for (const std::string& m : after) stopping |= m.find("STOPPING=1") != std::string::npos;
  EXPECT_TRUE(stopping) << "pid " << pid;
}

TEST(SystemdNotifyTest, NoNotifySocketNoNotifications) {
  // Without NOTIFY_SOCKET traind runs as before (the quickstart case).
  TempDir dir;
  TraindProcess daemon(dir.path() + "/state", {"--cpu-slots=1"});
  ASSERT_TRUE(daemon.Start()) << daemon.Log();
  EXPECT_EQ(daemon.Log().find("watchdog"), std::string::npos);
}

}  // namespace
}  // namespace traind::testing
