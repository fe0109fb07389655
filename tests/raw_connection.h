// What the server tests need below a client library: a raw HTTP connection (for what a
// well-behaved client will not send, or a client that stops reading), the server's resident
// memory, and whether the build runs under ASan (whose quarantine keeps freed memory resident).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>

// GCC says __SANITIZE_ADDRESS__, clang __has_feature(address_sanitizer) (the ASan tree is
// built with clang).
#if defined(__SANITIZE_ADDRESS__)
#define INFLIGHT_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define INFLIGHT_TEST_ASAN 1
#endif
#endif

namespace inflight::testing {

#if defined(INFLIGHT_TEST_ASAN)
inline constexpr bool kAddressSanitizer = true;  // the server under test is built the same way
#else
inline constexpr bool kAddressSanitizer = false;
#endif

// VmRSS of a process in kB; -1 when it cannot be read.
inline int64_t RssKb(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

// A raw HTTP connection to 127.0.0.1; receive_buffer > 0 makes the client's side hold little.
class RawConnection {
 public:
  using Clock = std::chrono::steady_clock;
  using milliseconds = std::chrono::milliseconds;

  explicit RawConnection(int port, int receive_buffer = 0) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    if (receive_buffer > 0)
      setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof receive_buffer);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~RawConnection() { Close(); }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  bool connected() const { return connected_; }
  int fd() const { return fd_; }
  // False once the peer has closed or reset the connection.
  bool Send(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  // Reads until `done(all read so far)`, the peer closes, or `timeout` passes.
  template <typename Done>
  std::string ReadUntil(milliseconds timeout, Done done) {
    std::string out;
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline && !done(out)) {
      pollfd p{fd_, POLLIN, 0};
      const int left = static_cast<int>(
          std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count());
      if (poll(&p, 1, std::clamp(left, 1, 10)) <= 0) continue;
      char buf[65536];
      const ssize_t n = recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        closed_ = true;
        break;
      }
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }
  // Reads until the peer closes, `until` has arrived, or `timeout` passes.
  std::string Read(milliseconds timeout, const std::string& until = "") {
    return ReadUntil(timeout, [&](const std::string& out) {
      return !until.empty() && out.find(until) != std::string::npos;
    });
  }
  // True when the server has closed this connection (without reading what it sent).
  bool ClosedByPeer(milliseconds timeout) {
    Read(timeout);
    return closed_;
  }
  // Still open and nothing to read.
  bool OpenAndQuiet() {
    char c;
    const ssize_t n = recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
  void GrowReceiveBuffer() {
    const int size = 1 << 20;
    setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
  }
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  bool closed_ = false;
};

}  // namespace inflight::testing
