// How inflight-server's HTTP side holds many connections (bench/connections_bench.sh runs it
// against a server on the demo model):
//   idle N        N idle keep-alive connections held open, then GET /v2/health/ready latency
//                 on new connections (p50/p99/max), against the same with none held
//   slowloris N   N connections sending request headers at one byte per second each, and
//                 health latency meanwhile, against the same without them
//   streams N     N concurrent generate_stream requests (tensorrt_llm, T tokens each, no end
//                 id) on one poll loop: how many complete with exactly T token events, wall
//                 time, output tokens/s, and the server's peak RSS
//   openai-streams N  the same through the OpenAI API: N concurrent streamed
//                 /v1/chat/completions on the ensemble (ignore_eos, T tokens each): how many
//                 end with [DONE] and a usage chunk of exactly T completion tokens
// connections_bench --port P [--server-pid PID] [--tokens T] SCENARIO N
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
int g_port = 8000;
int g_server_pid = 0;

int Connect(bool nonblocking = false) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(g_port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (nonblocking) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  return fd;
}

bool SendAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

// One GET /v2/health/ready on a new connection; milliseconds, or -1 on failure.
double HealthMs() {
  const auto t0 = Clock::now();
  const int fd = Connect();
  if (fd < 0) return -1;
  std::string resp;
  if (SendAll(fd, "GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")) {
    char buf[4096];
    ssize_t n;
    while ((n = recv(fd, buf, sizeof buf, 0)) > 0) resp.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  if (resp.rfind("HTTP/1.1 200", 0) != 0) return -1;
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

struct Latency {
  double p50 = 0, p99 = 0, max = 0;
  int failed = 0;
};

Latency HealthLatency(int count, std::chrono::milliseconds gap) {
  std::vector<double> ms;
  Latency l;
  for (int i = 0; i < count; ++i) {
    const double x = HealthMs();
    if (x < 0) {
      ++l.failed;
    } else {
      ms.push_back(x);
    }
    std::this_thread::sleep_for(gap);
  }
  if (ms.empty()) return l;
  std::sort(ms.begin(), ms.end());
  l.p50 = ms[ms.size() / 2];
  l.p99 = ms[std::min(ms.size() - 1, ms.size() * 99 / 100)];
  l.max = ms.back();
  return l;
}

void PrintLatency(const char* label, const Latency& l) {
  std::printf("%-34s p50 %7.2f ms  p99 %7.2f ms  max %7.2f ms  failed %d\n", label, l.p50, l.p99,
              l.max, l.failed);
}

int64_t ServerRssKb() {
  if (g_server_pid <= 0) return -1;
  std::ifstream in("/proc/" + std::to_string(g_server_pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6);
  }
  return -1;
}

int Idle(int n) {
  PrintLatency("health, no idle connections", HealthLatency(200, std::chrono::milliseconds(2)));
  const int64_t rss0 = ServerRssKb();
  std::vector<int> fds;
  const auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) {
    const int fd = Connect();
    if (fd < 0) {
      std::fprintf(stderr, "connection %d failed: %s\n", i, std::strerror(errno));
      break;
    }
    fds.push_back(fd);
  }
  std::printf("opened %zu idle connections in %.1f s; server RSS %+.1f MB\n", fds.size(),
              std::chrono::duration<double>(Clock::now() - t0).count(),
              (ServerRssKb() - rss0) / 1024.0);
  char label[64];
  std::snprintf(label, sizeof label, "health, %zu idle connections", fds.size());
  PrintLatency(label, HealthLatency(200, std::chrono::milliseconds(2)));
  int open = 0;
  for (int fd : fds) {
    char c;
    const ssize_t r = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    open += r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
  std::printf("still open afterwards: %d of %zu\n", open, fds.size());
  for (int fd : fds) close(fd);
  return open == static_cast<int>(fds.size()) && fds.size() == static_cast<size_t>(n) ? 0 : 1;
}

int Slowloris(int n) {
  const Latency base = HealthLatency(200, std::chrono::milliseconds(20));
  PrintLatency("health, alone", base);
  std::vector<int> fds;
  for (int i = 0; i < n; ++i) {
    const int fd = Connect(true);
    if (fd >= 0 && SendAll(fd, "POST /v2/models/ensemble/generate HTTP/1.1\r\nHost: x\r\n"))
      fds.push_back(fd);
  }
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    // One byte per connection per second, spread over the second.
    while (!stop) {
      for (size_t i = 0; i < fds.size() && !stop; ++i) {
        send(fds[i], "X", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (i % 100 == 99)
          std::this_thread::sleep_for(
              std::chrono::milliseconds(100 * 100 / std::max<size_t>(fds.size(), 100)));
      }
    }
  });
  char label[64];
  std::snprintf(label, sizeof label, "health, %zu slowloris connections", fds.size());
  const Latency with = HealthLatency(200, std::chrono::milliseconds(20));
  PrintLatency(label, with);
  stop = true;
  trickle.join();
  std::printf("slowloris delay of other clients: p99 %+.2f ms\n", with.p99 - base.p99);
  for (int fd : fds) close(fd);
  return with.failed == 0 ? 0 : 1;
}

struct Stream {
  int fd = -1;
  std::string pending;  // unparsed bytes
  int events = 0;
  bool done = false, failed = false;
  bool usage_ok = false;  // OpenAI: the usage chunk counted the tokens asked for
};

int Streams(int n, int tokens, bool openai) {
  const std::string body =
      openai
          ? "{\"model\": \"ensemble\", \"messages\": [{\"role\": \"user\", \"content\": \"Tell me "
            "a story\"}], "
            "\"max_tokens\": " +
                std::to_string(tokens) +
                ", \"ignore_eos\": true, \"stream\": true, "
                "\"stream_options\": {\"include_usage\": true}}"
          : "{\"input_ids\": [1, 450, 471, 338], \"input_lengths\": 4, \"request_output_len\": " +
                std::to_string(tokens) + ", \"end_id\": -1, \"streaming\": true}";
  const std::string request =
      std::string("POST ") +
      (openai ? "/v1/chat/completions" : "/v2/models/tensorrt_llm/generate_stream") +
      " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  const std::string usage = "\"completion_tokens\":" + std::to_string(tokens) + ",";
  std::vector<Stream> streams(n);
  const int64_t rss0 = ServerRssKb();
  int64_t rss_peak = rss0;
  const auto t0 = Clock::now();
  for (auto& s : streams) {
    s.fd = Connect(false);
    if (s.fd < 0 || !SendAll(s.fd, request)) {
      s.failed = s.done = true;
      continue;
    }
    fcntl(s.fd, F_SETFL, fcntl(s.fd, F_GETFL) | O_NONBLOCK);
  }
  auto last_rss = Clock::now();
  int open = n;
  while (open > 0 && Clock::now() - t0 < std::chrono::minutes(10)) {
    std::vector<pollfd> p;
    std::vector<Stream*> who;
    for (auto& s : streams) {
      if (s.done) continue;
      p.push_back({s.fd, POLLIN, 0});
      who.push_back(&s);
    }
    if (poll(p.data(), p.size(), 100) < 0) break;
    for (size_t i = 0; i < p.size(); ++i) {
      if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Stream& s = *who[i];
      char buf[65536];
      const ssize_t r = recv(s.fd, buf, sizeof buf, 0);
      if (r <= 0) {
        s.done = true;
        s.failed = true;
        continue;
      }
      s.pending.append(buf, static_cast<size_t>(r));
      size_t pos;
      while ((pos = s.pending.find("data: ")) != std::string::npos) {
        const size_t end = s.pending.find("\n\n", pos);
        if (end == std::string::npos) break;
        const std::string event = s.pending.substr(pos, end - pos);
        if (event.find("\"error\"") != std::string::npos) s.failed = true;
        if (openai && event.find(usage) != std::string::npos) s.usage_ok = true;
        ++s.events;
        s.pending.erase(0, end + 2);
      }
      if (s.pending.find("0\r\n\r\n") != std::string::npos) s.done = true;
    }
    open = 0;
    for (auto& s : streams) open += !s.done;
    if (Clock::now() - last_rss > std::chrono::milliseconds(100)) {
      rss_peak = std::max(rss_peak, ServerRssKb());
      last_rss = Clock::now();
    }
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  int complete = 0;
  int64_t total_events = 0;
  for (auto& s : streams) {
    complete += !s.failed && s.done && (openai ? s.usage_ok : s.events == tokens);
    total_events += s.events;
    if (s.fd >= 0) close(s.fd);
  }
  std::printf(
      "%d concurrent %s streams of %d tokens: %d complete with exactly %d tokens, %.1f s, %.0f "
      "output tok/s; "
      "server RSS %.1f MB -> peak %.1f MB\n",
      n, openai ? "OpenAI chat" : "generate_stream", tokens, complete, tokens, secs,
      static_cast<double>(openai ? static_cast<int64_t>(complete) * tokens : total_events) / secs,
      rss0 / 1024.0, rss_peak / 1024.0);
  return complete == n ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string scenario;
  int n = 0, tokens = 32;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--port" && i + 1 < argc) {
      g_port = std::atoi(argv[++i]);
    } else if (a == "--server-pid" && i + 1 < argc) {
      g_server_pid = std::atoi(argv[++i]);
    } else if (a == "--tokens" && i + 1 < argc) {
      tokens = std::atoi(argv[++i]);
    } else if (scenario.empty()) {
      scenario = a;
    } else {
      n = std::atoi(a.c_str());
    }
  }
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
  if (scenario == "idle" && n > 0) return Idle(n);
  if (scenario == "slowloris" && n > 0) return Slowloris(n);
  if (scenario == "streams" && n > 0) return Streams(n, tokens, false);
  if (scenario == "openai-streams" && n > 0) return Streams(n, tokens, true);
  std::fprintf(stderr,
               "usage: connections_bench --port P [--server-pid PID] [--tokens T] "
               "idle|slowloris|streams|openai-streams N\n");
  return 2;
}
