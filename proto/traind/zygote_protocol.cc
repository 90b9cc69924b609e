#include "traind/zygote_protocol.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace traind::zygote {
namespace {

// Requests carry argv and the environment: a few KiB. Bounded well below
// the socket's buffer so that one message always fits.
constexpr size_t kMaxMessage = 128 * 1024;

void PutU32(std::string* out, uint32_t v) { out->append(reinterpret_cast<const char*>(&v), 4); }

bool GetU32(const std::string& in, size_t* at, uint32_t* v) {
  if (in.size() - *at < 4) return false;
  std::memcpy(v, in.data() + *at, 4);
  *at += 4;
  return true;
}

void PutStrings(std::string* out, const std::vector<std::string>& list) {
  PutU32(out, static_cast<uint32_t>(list.size()));
  for (const std::string& s : list) {
    PutU32(out, static_cast<uint32_t>(s.size()));
    out->append(s);
  }
}

bool GetStrings(const std::string& in, size_t* at, std::vector<std::string>* list) {
  uint32_t n = 0;
  if (!GetU32(in, at, &n) || n > kMaxMessage) return false;
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t len = 0;
    if (!GetU32(in, at, &len) || in.size() - *at < len) return false;
    list->emplace_back(in.data() + *at, len);
    *at += len;
  }
  return true;
}

absl::Status Errno(absl::string_view what) {
  return absl::InternalError(absl::StrCat("zygote: ", what, ": ", strerror(errno)));
}

// Reads one message (and at most one passed descriptor).
absl::StatusOr<std::string> ReceiveMessage(int fd, int* passed_fd) {
  std::string buf(kMaxMessage, '\0');
  iovec iov{buf.data(), buf.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return Errno("recvmsg");
  if (passed_fd != nullptr) *passed_fd = -1;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      int got = -1;
      std::memcpy(&got, CMSG_DATA(c), sizeof(int));
      if (passed_fd != nullptr) {
        *passed_fd = got;
      } else {
        close(got);
      }
    }
  }
  if (n == 0) return absl::NotFoundError("zygote: control socket closed");
  if (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
    if (passed_fd != nullptr && *passed_fd >= 0) {
      close(*passed_fd);
      *passed_fd = -1;
    }
    return absl::InvalidArgumentError("zygote: message truncated");
  }
  buf.resize(static_cast<size_t>(n));
  return buf;
}

absl::Status SendMessage(int fd, const std::string& payload, int pass_fd) {
  if (payload.size() > kMaxMessage) {
    return absl::InvalidArgumentError(
        absl::StrCat("zygote: request of ", payload.size(), " bytes (at most ", kMaxMessage, ")"));
  }
  iovec iov{const_cast<char*>(payload.data()), payload.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (pass_fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
  }
  ssize_t n;
  do {
    n = sendmsg(fd, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return Errno("sendmsg");
  return absl::OkStatus();
}

}  // namespace

absl::Status SendSpawnRequest(int fd, const SpawnRequest& request) {
  std::string payload;
  PutStrings(&payload, request.argv);
  PutStrings(&payload, request.env);
  return SendMessage(fd, payload, request.log_fd);
}

absl::StatusOr<SpawnReply> ReceiveSpawnReply(int fd, absl::Duration timeout) {
  pollfd p{fd, POLLIN, 0};
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    const int64_t ms = std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now()));
    int n = poll(&p, 1, static_cast<int>(ms));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errno("poll");
    if (n == 0) {
      return absl::DeadlineExceededError(
          absl::StrCat("zygote: no reply within ", absl::FormatDuration(timeout)));
    }
    break;
  }
  SpawnReply reply;
  absl::StatusOr<std::string> m = ReceiveMessage(fd, &reply.go_fd);
  if (!m.ok()) return m.status();
  if (m->size() < 8) {
    if (reply.go_fd >= 0) close(reply.go_fd);
    return absl::InvalidArgumentError("zygote: short reply");
  }
  int32_t head[2];
  std::memcpy(head, m->data(), sizeof(head));
  reply.pid = head[0];
  reply.error = head[1];
  reply.what = m->substr(8);
  return reply;
}

absl::StatusOr<SpawnRequest> ReceiveSpawnRequest(int fd) {
  SpawnRequest request;
  absl::StatusOr<std::string> m = ReceiveMessage(fd, &request.log_fd);
  if (!m.ok()) return m.status();
  size_t at = 0;
  if (!GetStrings(*m, &at, &request.argv) || !GetStrings(*m, &at, &request.env) ||
      at != m->size()) {
    if (request.log_fd >= 0) close(request.log_fd);
    return absl::InvalidArgumentError("zygote: malformed request");
  }
  return request;
}

absl::Status SendSpawnReply(int fd, const SpawnReply& reply) {
  std::string payload(8, '\0');
  int32_t head[2] = {static_cast<int32_t>(reply.pid), reply.error};
  std::memcpy(payload.data(), head, sizeof(head));
  payload += reply.what;
  return SendMessage(fd, payload, reply.go_fd);
}

}  // namespace traind::zygote
