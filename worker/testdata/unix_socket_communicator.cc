#include "worker/testdata/unix_socket_communicator.h"

#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status.h"

namespace traind::engine::testdata {
namespace {

// The id: this prefix, 32 hex digits naming the socket, zeros to 128 bytes.
constexpr absl::string_view kIdPrefix = "traind cpu-backed stand-in group ";
constexpr size_t kIdRandomBytes = 16;
constexpr absl::string_view kSocketPrefix = "traind-standin-";

constexpr uint32_t kMagic = 0x544e4443;  // every frame starts with it
enum Kind : uint32_t {
  kHello = 1,   // rank -> rank 0: value = rank, extra = size
  kReady = 2,   // rank 0 -> rank: every rank has joined
  kFloat = 3,   // value = count, then the values
  kDouble = 4,  // value = count, then the values
  kAbort = 5,   // value = message bytes, extra = absl::StatusCode, then the message
};
struct Header {
  uint32_t magic = kMagic;
  uint32_t kind = 0;
  int64_t value = 0;
  int64_t extra = 0;
};
constexpr int64_t kMaxAbortMessage = 64 * 1024;

template <typename T>
constexpr Kind KindOf();
template <>
constexpr Kind KindOf<float>() {
  return kFloat;
}
template <>
constexpr Kind KindOf<double>() {
  return kDouble;
}

std::string Seconds(absl::Duration d) { return absl::StrCat(absl::ToDoubleSeconds(d), " s"); }

// The abstract socket address the id names.
absl::Status AddressOf(const std::string& id, sockaddr_un* addr, socklen_t* len) {
  if (id.size() != kUnixSocketUniqueIdBytes || !absl::StartsWith(id, kIdPrefix)) {
    return absl::InvalidArgumentError(absl::StrCat("stand-in NCCL: unique id of ", id.size(),
                                                   " bytes is not one of this stand-in's"));
  }
  const std::string name = absl::StrCat(
      kSocketPrefix, absl::string_view(id).substr(kIdPrefix.size(), 2 * kIdRandomBytes));
  std::memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  addr->sun_path[0] = '\0';  // abstract: no file
  std::memcpy(addr->sun_path + 1, name.data(), name.size());
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return absl::OkStatus();
}

enum class Io { kOk, kEof, kTimeout, kError };

// Waits until `fd` is ready for `events` or the deadline passes. Hang-ups
// and errors count as ready: the next send or recv reports them.
Io WaitReady(int fd, short events, absl::Time deadline) {
  for (;;) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return Io::kTimeout;
    pollfd p{fd, events, 0};
    const int ms = static_cast<int>(
        std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, std::numeric_limits<int>::max()));
    const int rv = poll(&p, 1, ms);
    if (rv > 0) return Io::kOk;
    if (rv < 0 && errno != EINTR) return Io::kError;
  }
}

Io SendAll(int fd, const void* data, size_t n, absl::Time deadline) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      p += w;
      n -= static_cast<size_t>(w);
    } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (Io r = WaitReady(fd, POLLOUT, deadline); r != Io::kOk) return r;
    } else if (w < 0 && errno == EINTR) {
      continue;
    } else if (w < 0 && (errno == EPIPE || errno == ECONNRESET)) {
      return Io::kEof;
    } else {
      return Io::kError;
    }
  }
  return Io::kOk;
}

Io RecvAll(int fd, void* data, size_t n, absl::Time deadline) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = recv(fd, p, n, MSG_DONTWAIT);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
    } else if (r == 0) {
      return Io::kEof;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (Io w = WaitReady(fd, POLLIN, deadline); w != Io::kOk) return w;
    } else if (errno == EINTR) {
      continue;
    } else if (errno == ECONNRESET) {
      return Io::kEof;
    } else {
      return Io::kError;
    }
  }
  return Io::kOk;
}

class UnixSocketCommunicator final : public Communicator {
 public:
  // `fds`: rank 0 holds one socket per other rank (fds[r], fds[0] = -1);
  // the others one socket to rank 0 (fds[0]).
  UnixSocketCommunicator(int rank, int size, absl::Duration timeout, std::vector<int> fds)
      : rank_(rank),
        size_(size),
        timeout_(timeout),
        fds_(std::move(fds)),
        clean_(fds_.size(), true) {}
  ~UnixSocketCommunicator() override {
    for (int fd : fds_) {
      if (fd >= 0) close(fd);
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::Status AllReduceSum(float* data, int64_t count) override { return AllReduce(data, count); }
  absl::Status AllReduceSum(double* data, int64_t count) override { return AllReduce(data, count); }
  void Abort(absl::string_view reason) override {
    const absl::Status s = absl::AbortedError(absl::StrCat("rank ", rank_, " aborted: ", reason));
    // Between collectives (the usual case) the streams are at a frame
    // boundary: tell the peers why. During one (another thread), only shut
    // the sockets down: the pending call wakes up and fails.
    std::unique_lock<std::mutex> op(op_mu_, std::try_to_lock);
    AbortGroup(s, op.owns_lock());
  }

 private:
  template <typename T>
  absl::Status AllReduce(T* data, int64_t count) {
    std::lock_guard<std::mutex> op(op_mu_);
    if (absl::Status s = Aborted(); !s.ok()) return s;
    if (count < 0) return absl::InvalidArgumentError(absl::StrCat("AllReduceSum of ", count));
    if (size_ == 1 || count == 0) return absl::OkStatus();
    const absl::Time deadline = absl::Now() + timeout_;
    const size_t bytes = static_cast<size_t>(count) * sizeof(T);
    const Header header{kMagic, KindOf<T>(), count, 0};
    if (rank_ != 0) {
      TRAIND_RETURN_IF_ERROR(Send(0, &header, sizeof(header), deadline));
      TRAIND_RETURN_IF_ERROR(Send(0, data, bytes, deadline));
      Header got;
      TRAIND_RETURN_IF_ERROR(RecvHeader(0, &got, deadline));
      TRAIND_RETURN_IF_ERROR(CheckHeader(0, got, header));
      return Recv(0, data, bytes, deadline);
    }
    // Rank 0: sum in rank order, then send every rank the same sums.
    sum_.assign(bytes, 0);
    in_.resize(bytes);
    T* sum = reinterpret_cast<T*>(sum_.data());
    const T* in = reinterpret_cast<const T*>(in_.data());
    for (int64_t i = 0; i < count; ++i) sum[i] += data[i];
    for (int r = 1; r < size_; ++r) {
      Header got;
      TRAIND_RETURN_IF_ERROR(RecvHeader(r, &got, deadline));
      TRAIND_RETURN_IF_ERROR(CheckHeader(r, got, header));
      TRAIND_RETURN_IF_ERROR(Recv(r, in_.data(), bytes, deadline));
      for (int64_t i = 0; i < count; ++i) sum[i] += in[i];
    }
    for (int r = 1; r < size_; ++r) {
      TRAIND_RETURN_IF_ERROR(Send(r, &header, sizeof(header), deadline));
      TRAIND_RETURN_IF_ERROR(Send(r, sum_.data(), bytes, deadline));
    }
    std::memcpy(data, sum_.data(), bytes);
    return absl::OkStatus();
  }

  absl::Status CheckHeader(int peer, const Header& got, const Header& want) {
    if (got.kind == want.kind && got.value == want.value) return absl::OkStatus();
    return Fail(absl::InternalError(absl::StrCat("stand-in NCCL: rank ", peer, " reduces ",
                                                 got.value, " values of kind ", got.kind, ", rank ",
                                                 rank_, " ", want.value, " of kind ", want.kind)));
  }

  absl::Status Send(int peer, const void* data, size_t n, absl::Time deadline) {
    const Io io = SendAll(fds_[peer], data, n, deadline);
    if (io == Io::kOk) return absl::OkStatus();
    clean_[peer] = false;  // a frame may be cut short
    if (io == Io::kEof) {
      // The peer shut its socket down; it may have said why first.
      Header h;
      if (RecvAll(fds_[peer], &h, sizeof(h), absl::Now()) == Io::kOk && h.magic == kMagic &&
          h.kind == kAbort) {
        return FailWithAbortMessage(peer, h, absl::Now());
      }
    }
    return Fail(IoError(io, peer, "sending to"));
  }
  absl::Status Recv(int peer, void* data, size_t n, absl::Time deadline) {
    const Io io = RecvAll(fds_[peer], data, n, deadline);
    if (io == Io::kOk) return absl::OkStatus();
    return Fail(IoError(io, peer, "receiving from"));
  }
  // A header; a peer's abort message fails the call with its status.
  absl::Status RecvHeader(int peer, Header* h, absl::Time deadline) {
    TRAIND_RETURN_IF_ERROR(Recv(peer, h, sizeof(*h), deadline));
    if (h->magic != kMagic) {
      return Fail(absl::InternalError(
          absl::StrCat("stand-in NCCL: rank ", rank_, ": garbled frame from rank ", peer)));
    }
    if (h->kind != kAbort) return absl::OkStatus();
    return FailWithAbortMessage(peer, *h, deadline);
  }
  // Reads the message of the abort header `h` from `peer` and fails with it.
  absl::Status FailWithAbortMessage(int peer, const Header& h, absl::Time deadline) {
    std::string message(static_cast<size_t>(std::clamp<int64_t>(h.value, 0, kMaxAbortMessage)),
                        '\0');
    TRAIND_RETURN_IF_ERROR(Recv(peer, message.data(), message.size(), deadline));
    absl::StatusCode code = static_cast<absl::StatusCode>(h.extra);
    if (code == absl::StatusCode::kOk) code = absl::StatusCode::kAborted;
    return Fail(absl::Status(code, message));
  }

  absl::Status IoError(Io io, int peer, absl::string_view what) const {
    switch (io) {
      case Io::kEof:
        return absl::UnavailableError(absl::StrCat("stand-in NCCL: rank ", peer,
                                                   " closed its connection to rank ", rank_,
                                                   " (it exited or aborted)"));
      case Io::kTimeout:
        return absl::DeadlineExceededError(absl::StrCat("stand-in NCCL: rank ", rank_, ": ", what,
                                                        " rank ", peer, " took over ",
                                                        Seconds(timeout_)));
      default:
        return absl::UnavailableError(absl::StrCat("stand-in NCCL: rank ", rank_, ": ", what,
                                                   " rank ", peer, ": ", std::strerror(errno)));
    }
  }

  // The group's failure, once aborted.
  absl::Status Aborted() {
    std::lock_guard<std::mutex> lock(mu_);
    return failure_;
  }
  // A collective failed with `s` (op_mu_ held): aborts the group unless it
  // already was, and returns the group's first failure.
  absl::Status Fail(absl::Status s) {
    AbortGroup(s, /*tell_peers=*/true);
    return Aborted();
  }
  // Records `s` as the group's failure, sends it to the peers whose stream
  // from this rank is at a frame boundary (`tell_peers`; op_mu_ held), and
  // shuts every socket down. Only the first call does anything.
  void AbortGroup(const absl::Status& s, bool tell_peers) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.ok()) return;
    failure_ = s;
    const std::string message(s.message().substr(0, kMaxAbortMessage));
    const Header h{kMagic, kAbort, static_cast<int64_t>(message.size()),
                   static_cast<int64_t>(s.code())};
    for (size_t r = 0; r < fds_.size(); ++r) {
      if (fds_[r] < 0) continue;
      if (tell_peers && clean_[r]) {
        // Best effort, without waiting: a peer that does not read gets EOF.
        const absl::Time now = absl::Now();
        if (SendAll(fds_[r], &h, sizeof(h), now) == Io::kOk) {
          (void)SendAll(fds_[r], message.data(), message.size(), now);
        }
      }
      shutdown(fds_[r], SHUT_RDWR);
    }
  }

  const int rank_, size_;
  const absl::Duration timeout_;
  const std::vector<int> fds_;
  std::vector<bool> clean_;  // guarded by op_mu_ (read by AbortGroup with it held)
  std::vector<char> sum_, in_;

  std::mutex op_mu_;  // held by a collective
  std::mutex mu_;
  absl::Status failure_;  // guarded by mu_
};

absl::Status JoinError(Io io, int rank, int peer, absl::Duration timeout) {
  switch (io) {
    case Io::kEof:
      return absl::UnavailableError(absl::StrCat("stand-in NCCL: rank ", peer,
                                                 " closed its connection to rank ", rank,
                                                 " while the group formed"));
    case Io::kTimeout:
      return absl::DeadlineExceededError(absl::StrCat("stand-in NCCL: rank ", rank, ": rank ", peer,
                                                      " did not join within ", Seconds(timeout)));
    default:
      return absl::UnavailableError(absl::StrCat("stand-in NCCL: rank ", rank, ": joining rank ",
                                                 peer, ": ", std::strerror(errno)));
  }
}

// Closes the sockets it holds unless released.
struct Fds {
  std::vector<int> fds;
  ~Fds() {
    for (int fd : fds) {
      if (fd >= 0) close(fd);
    }
  }
  std::vector<int> Release() { return std::exchange(fds, {}); }
};

absl::Status JoinAsRankZero(const sockaddr_un& addr, socklen_t len, int size,
                            absl::Duration timeout, absl::Time deadline, Fds* peers) {
  Fds listener{{socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)}};
  const int lfd = listener.fds[0];
  if (lfd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  if (bind(lfd, reinterpret_cast<const sockaddr*>(&addr), len) != 0 || listen(lfd, size) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("stand-in NCCL: rank 0 cannot listen: ", std::strerror(errno)));
  }
  peers->fds.assign(size, -1);
  for (int joined = 1; joined < size;) {
    if (Io io = WaitReady(lfd, POLLIN, deadline); io != Io::kOk) {
      std::string missing;
      for (int r = 1; r < size; ++r) {
        if (peers->fds[r] < 0) absl::StrAppend(&missing, missing.empty() ? "" : ", ", r);
      }
      if (io == Io::kTimeout) {
        return absl::DeadlineExceededError(absl::StrCat("stand-in NCCL: rank 0: rank(s) ", missing,
                                                        " did not join within ", Seconds(timeout)));
      }
      return absl::UnavailableError(absl::StrCat("poll: ", std::strerror(errno)));
    }
    const int fd = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
      return absl::UnavailableError(absl::StrCat("accept: ", std::strerror(errno)));
    }
    Fds conn{{fd}};
    Header hello;
    if (Io io = RecvAll(fd, &hello, sizeof(hello), deadline); io != Io::kOk) {
      if (io == Io::kEof) continue;  // gone before saying who it is: its exit tells
      return JoinError(io, 0, -1, timeout);
    }
    if (hello.magic != kMagic || hello.kind != kHello || hello.extra != size || hello.value < 1 ||
        hello.value >= size || peers->fds[hello.value] >= 0) {
      return absl::InternalError(absl::StrCat("stand-in NCCL: rank 0 of ", size,
                                              ": unexpected hello (rank ", hello.value, " of ",
                                              hello.extra, ")"));
    }
    peers->fds[hello.value] = conn.Release()[0];
    ++joined;
  }
  const Header ready{kMagic, kReady, 0, 0};
  for (int r = 1; r < size; ++r) {
    if (Io io = SendAll(peers->fds[r], &ready, sizeof(ready), deadline); io != Io::kOk) {
      return JoinError(io, 0, r, timeout);
    }
  }
  return absl::OkStatus();
}

absl::Status JoinAsPeer(const sockaddr_un& addr, socklen_t len, int rank, int size,
                        absl::Duration timeout, absl::Time deadline, Fds* peers) {
  peers->fds.assign(1, -1);
  for (;;) {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
    if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), len) == 0) {
      peers->fds[0] = fd;
      break;
    }
    const int err = errno;
    close(fd);
    if (err != ECONNREFUSED && err != ENOENT && err != EAGAIN && err != EINTR) {
      return absl::UnavailableError(
          absl::StrCat("stand-in NCCL: rank ", rank, ": connect: ", std::strerror(err)));
    }
    if (absl::Now() >= deadline) return JoinError(Io::kTimeout, rank, 0, timeout);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // rank 0 not listening yet
  }
  const Header hello{kMagic, kHello, rank, size};
  if (Io io = SendAll(peers->fds[0], &hello, sizeof(hello), deadline); io != Io::kOk) {
    return JoinError(io, rank, 0, timeout);
  }
  Header ready;
  if (Io io = RecvAll(peers->fds[0], &ready, sizeof(ready), deadline); io != Io::kOk) {
    return JoinError(io, rank, 0, timeout);
  }
  if (ready.magic != kMagic || ready.kind != kReady) {
    return absl::InternalError(absl::StrCat("stand-in NCCL: rank ", rank, ": unexpected reply"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> NewUnixSocketUniqueId() {
  unsigned char random[kIdRandomBytes];
  size_t got = 0;
  while (got < sizeof(random)) {
    const ssize_t n = getrandom(random + got, sizeof(random) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::InternalError(absl::StrCat("getrandom: ", std::strerror(errno)));
    got += static_cast<size_t>(n);
  }
  std::string id = absl::StrCat(kIdPrefix, absl::BytesToHexString(absl::string_view(
                                               reinterpret_cast<char*>(random), sizeof(random))));
  id.resize(kUnixSocketUniqueIdBytes, '\0');
  return id;
}

absl::StatusOr<std::unique_ptr<Communicator>> CreateUnixSocketCommunicator(
    const std::string& unique_id, int rank, int size, absl::Duration timeout) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("stand-in NCCL: rank ", rank, " of ", size));
  }
  sockaddr_un addr;
  socklen_t len = 0;
  if (absl::Status s = AddressOf(unique_id, &addr, &len); !s.ok()) return s;
  const absl::Time deadline = absl::Now() + timeout;
  Fds peers;
  if (size > 1) {
    absl::Status joined = rank == 0 ? JoinAsRankZero(addr, len, size, timeout, deadline, &peers)
                                    : JoinAsPeer(addr, len, rank, size, timeout, deadline, &peers);
    if (!joined.ok()) return joined;
  }
  return std::make_unique<UnixSocketCommunicator>(rank, size, timeout, peers.Release());
}

}  // namespace traind::engine::testdata
