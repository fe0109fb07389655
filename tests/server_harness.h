// End-to-end test helpers: the real inflight-server binary on free loopback ports, an HTTP
// client, SSE parsing and Prometheus text lookups.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

namespace inflight::testing {

class ServerProcess {
 public:
  // Starts `inflight-server args...` with every port 0 and waits until the three services
  // report their ports (up to 60 s). Null (and a test failure) when it does not come up.
  // `launcher`: a command the server runs under (e.g. mpirun -np 2), searched in PATH.
  static std::unique_ptr<ServerProcess> Start(const std::vector<std::string>& args,
                                              const std::vector<std::string>& launcher = {}) {
    auto p = std::unique_ptr<ServerProcess>(new ServerProcess());
    int fds[2];
    if (pipe(fds) != 0) return nullptr;
    std::vector<std::string> argv = launcher;
    for (std::string a : {std::string(INFLIGHT_BINARY_DIR) + "/apps/inflight-server",
                          std::string("--http-port"), std::string("0"), std::string("--grpc-port"),
                          std::string("0"), std::string("--metrics-port"), std::string("0")}) {
      argv.push_back(a);
    }
    argv.insert(argv.end(), args.begin(), args.end());
    p->pid_ = fork();
    if (p->pid_ == 0) {
      dup2(fds[1], 2);
      close(fds[0]);
      std::vector<char*> cargv;
      for (auto& a : argv) cargv.push_back(a.data());
      cargv.push_back(nullptr);
      execvp(cargv[0], cargv.data());
      _exit(127);
    }
    close(fds[1]);
    p->reader_ = std::thread([p = p.get(), fd = fds[0]] {
      char buf[4096];
      ssize_t n;
      while ((n = read(fd, buf, sizeof buf)) > 0) {
        std::lock_guard<std::mutex> lock(p->mu_);
        p->log_.append(buf, n);
      }
      close(fd);
    });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < deadline) {
      {
        std::lock_guard<std::mutex> lock(p->mu_);
        p->http_port = Port(p->log_, "HTTPService");
        p->grpc_port = Port(p->log_, "GRPCInferenceService");
        p->metrics_port = Port(p->log_, "Metrics Service");
      }
      if (p->http_port > 0 && p->grpc_port > 0 && p->metrics_port > 0) return p;
      int status;
      if (waitpid(p->pid_, &status, WNOHANG) == p->pid_) {
        p->pid_ = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ADD_FAILURE() << "inflight-server did not start:\n" << p->log();
    return nullptr;
  }

  ~ServerProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int status = 0;
      for (int i = 0; i < 600 && waitpid(pid_, &status, WNOHANG) == 0; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      if (waitpid(pid_, &status, WNOHANG) == 0) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
      }
    }
    if (reader_.joinable()) reader_.join();
  }

  std::string log() {
    std::lock_guard<std::mutex> lock(mu_);
    return log_;
  }
  pid_t pid() const { return pid_; }

  int http_port = 0, grpc_port = 0, metrics_port = 0;

 private:
  ServerProcess() = default;
  static int Port(const std::string& log, const std::string& service) {
    std::smatch m;
    std::regex re("Started " + service + " at [0-9.]+:([0-9]+)");
    return std::regex_search(log, m, re) ? std::stoi(m[1]) : 0;
  }

  pid_t pid_ = -1;
  std::thread reader_;
  std::mutex mu_;
  std::string log_;
};

// The data events of an SSE body ("data: {...}\n\n" each).
inline std::vector<nlohmann::json> SseEvents(const std::string& body) {
  std::vector<nlohmann::json> out;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    const size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) break;
    out.push_back(nlohmann::json::parse(body.substr(pos + 6, end - pos - 6)));
    pos = end + 2;
  }
  return out;
}

// The value of the first sample of `name` whose labels include every `labels` pair; -1 if none.
inline double MetricValue(const std::string& text, const std::string& name,
                          const std::vector<std::pair<std::string, std::string>>& labels = {}) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name, 0) != 0) continue;
    const char next = line.size() > name.size() ? line[name.size()] : '\0';
    if (next != '{' && next != ' ') continue;
    bool all = true;
    for (const auto& [k, v] : labels)
      all = all && line.find(k + "=\"" + v + "\"") != std::string::npos;
    if (!all) continue;
    return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return -1;
}

// GET /metrics of the server's metrics port ("" when it does not answer).
inline std::string MetricsText(int metrics_port) {
  httplib::Client c("127.0.0.1", metrics_port);
  auto r = c.Get("/metrics");
  return r ? r->body : "";
}

// The text of a /v2/models/ensemble/generate request ("<error ...>" when it fails).
inline std::string Generate(int port, const std::string& prompt, int max_tokens = 40) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60);
  const nlohmann::json body = {{"text_input", prompt}, {"max_tokens", max_tokens}};
  auto r = c.Post("/v2/models/ensemble/generate", body.dump(), "application/json");
  if (!r || r->status != 200)
    return "<error " + (r ? std::to_string(r->status) + " " + r->body : std::string("no answer")) +
           ">";
  return nlohmann::json::parse(r->body)["text_output"].get<std::string>();
}

// The streamed text of a generate_stream request, and the error event's message if any.
struct Streamed {
  std::string text, error;
};
// `extra`: more fields of the request body (e.g. min_tokens).
inline Streamed GenerateStream(int port, const std::string& prompt, int max_tokens,
                               std::atomic<int>* events = nullptr,
                               const nlohmann::json& extra = nlohmann::json::object()) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60);
  nlohmann::json body = {{"text_input", prompt}, {"max_tokens", max_tokens}, {"stream", true}};
  body.update(extra);
  std::string raw;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v2/models/ensemble/generate_stream";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    raw.append(data, n);
    if (events) events->store(static_cast<int>(SseEvents(raw).size()));
    return true;
  };
  c.send(req);
  Streamed out;
  for (const nlohmann::json& e : SseEvents(raw)) {
    if (e.contains("error")) out.error = e["error"].get<std::string>();
    if (e.contains("text_output")) out.text += e["text_output"].get<std::string>();
  }
  return out;
}

// Waits (up to 10 s) until the LLM model `model` holds no KV block and runs nothing; the
// gauges are set every stats_check_period_ms.
inline bool WaitLlmIdle(int metrics_port, const std::string& model) {
  for (int i = 0; i < 200; ++i) {
    const std::string m = MetricsText(metrics_port);
    const double used = MetricValue(m, "nv_trt_llm_kv_cache_block_metrics",
                                    {{"model", model}, {"kv_cache_block_type", "used"}});
    const double active = MetricValue(m, "nv_trt_llm_request_metrics",
                                      {{"model", model}, {"request_type", "active"}});
    const double free = MetricValue(m, "nv_trt_llm_kv_cache_block_metrics",
                                    {{"model", model}, {"kv_cache_block_type", "free"}});
    const double max = MetricValue(m, "nv_trt_llm_kv_cache_block_metrics",
                                   {{"model", model}, {"kv_cache_block_type", "max"}});
    if (used == 0 && active == 0 && free == max && max > 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// Runs a shell command; its exit status and what it printed on stdout.
inline std::pair<int, std::string> RunCommand(const std::string& cmd) {
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {-1, "popen failed"};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  return {pclose(p), out};
}

// Runs `node tests/SCRIPT_AND_ARGS`; its exit status and everything it printed.
inline std::pair<int, std::string> RunNode(const std::string& script_and_args) {
  return RunCommand("node " + std::string(INFLIGHT_SOURCE_DIR) + "/tests/" + script_and_args +
                    " 2>&1");
}

// A suite's end: the server's log when a test failed, the server stopped, its folder removed.
inline void EndSuite(ServerProcess*& server, std::filesystem::path*& dir) {
  if (server && ::testing::UnitTest::GetInstance()->failed_test_count() > 0)
    std::fprintf(stderr, "--- inflight-server log ---\n%s\n", server->log().c_str());
  delete server;
  server = nullptr;
  if (dir) std::filesystem::remove_all(*dir);
  delete dir;
  dir = nullptr;
}

}  // namespace inflight::testing
