// Soak and chaos run of the real server (issue 14): mixed KServe HTTP (generate, SSE), gRPC
// (ModelStreamInfer) and OpenAI (chat, streamed) load at saturation with API keys on, plus
// random client disconnects, slow readers, gRPC cancels, bad requests (each of a known kind),
// model reloads in explicit mode, and a SIGTERM at the end with streams still open.
//
// It checks that every request ended with a result or a clear error of the kind it provoked,
// that the KV blocks in use return to 0, that RSS after warm-up stays within 10%, that no file
// descriptor leaks, and that the server exits cleanly (code 0) on SIGTERM. Exit 1 on any
// failure, with the figures printed either way (and as JSON with --json).
//
//   soak --server build/apps/inflight-server --model models/demo/inflight-demo-q8_0.gguf --seconds
//   600
#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "grpc_service.grpc.pb.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kKey = "soak-public-key";
constexpr const char* kAdminKey = "soak-admin-key";

// ---- the server process ----

// The server's log line when a version a reload replaced is gone.
constexpr char kRetiredLine[] = "(replaced by a reload)";

struct Server {
  pid_t pid = -1;
  int http_port = 0, grpc_port = 0, metrics_port = 0;
  std::thread reader;
  std::mutex mu;
  std::string log;
  size_t scanned = 0;  // log bytes searched for kRetiredLine
  size_t retired = 0;  // kRetiredLine lines seen
  size_t Count(const char*) {
    std::lock_guard<std::mutex> lock(mu);
    return retired;
  }
};

int PortIn(const std::string& log, const std::string& service) {
  std::smatch m;
  std::regex re("Started " + service + " at [0-9.]+:([0-9]+)");
  return std::regex_search(log, m, re) ? std::stoi(m[1]) : 0;
}

bool StartServer(Server* s, const std::string& bin, const std::string& repo) {
  int fds[2];
  if (pipe(fds) != 0) return false;
  std::vector<std::string> argv = {bin,        "--model-repository",
                                   repo,       "--http-port",
                                   "0",        "--grpc-port",
                                   "0",        "--metrics-port",
                                   "0",        "--model-control-mode",
                                   "explicit", "--load-model",
                                   "*",        "--api-key",
                                   kKey,       "--admin-key",
                                   kAdminKey,  "--http-write-timeout-ms",
                                   "5000",     "--exit-timeout-secs",
                                   "10"};
  s->pid = fork();
  if (s->pid == 0) {
    dup2(fds[1], 2);
    close(fds[0]);
    std::vector<char*> c;
    for (auto& a : argv) c.push_back(a.data());
    c.push_back(nullptr);
    execv(c[0], c.data());
    _exit(127);
  }
  close(fds[1]);
  s->reader = std::thread([s, fd = fds[0]] {
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) {
      std::lock_guard<std::mutex> lock(s->mu);
      s->log.append(buf, static_cast<size_t>(n));
      for (size_t at; (at = s->log.find(kRetiredLine, s->scanned)) != std::string::npos;) {
        ++s->retired;
        s->scanned = at + 1;
      }
      s->scanned =
          std::max(s->scanned, s->log.size() - std::min(s->log.size(), sizeof kRetiredLine));
      if (s->log.size() > (8 << 20)) {
        const size_t cut = s->log.size() - (4 << 20);
        s->log.erase(0, cut);
        s->scanned -= std::min(s->scanned, cut);
      }
    }
    close(fd);
  });
  for (int i = 0; i < 3000; ++i) {
    {
      std::lock_guard<std::mutex> lock(s->mu);
      s->http_port = PortIn(s->log, "HTTPService");
      s->grpc_port = PortIn(s->log, "GRPCInferenceService");
      s->metrics_port = PortIn(s->log, "Metrics Service");
    }
    if (s->http_port && s->grpc_port && s->metrics_port) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

int64_t ProcValue(pid_t pid, const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::stoll(line.substr(key.size() + 1));
  }
  return -1;
}
int64_t RssKb(pid_t pid) { return ProcValue(pid, "VmRSS"); }
int64_t OpenFds(pid_t pid) {
  int64_t n = 0;
  std::error_code ec;
  for (auto it = fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec);
       !ec && it != fs::directory_iterator(); it.increment(ec)) {
    ++n;
  }
  return n;
}

double Metric(const std::string& text, const std::string& name, const std::string& label) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name, 0) == 0 && line.find(label) != std::string::npos)
      return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return -1;
}

// ---- outcomes ----

// Every request ends in exactly one of these. "ok" and the deliberate kinds are expected;
// anything under "unexpected" fails the run.
class Tally {
 public:
  void Add(const std::string& kind) {
    std::lock_guard<std::mutex> lock(mu_);
    ++counts_[kind];
  }
  void Unexpected(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    ++counts_["unexpected"];
    if (examples_.size() < 20) examples_.push_back(what);
  }
  std::map<std::string, int64_t> counts() {
    std::lock_guard<std::mutex> lock(mu_);
    return counts_;
  }
  std::vector<std::string> examples() {
    std::lock_guard<std::mutex> lock(mu_);
    return examples_;
  }

 private:
  std::mutex mu_;
  std::map<std::string, int64_t> counts_;
  std::vector<std::string> examples_;
};

httplib::Headers Auth(const char* key = kKey) {
  return {{"Authorization", std::string("Bearer ") + key}};
}

struct Load {
  int port = 0, grpc_port = 0;
  Tally* tally = nullptr;
  std::atomic<bool>* stop = nullptr;
};

std::string Prompt(std::mt19937& rng) {
  static const char* kWords[] = {"the", "little", "dog", "ran", "to",    "a",
                                 "big", "tree",   "and", "sat", "under", "sun"};
  // 128-1024 prompt words is past the demo model's 512-token context; 20-200 is realistic for it.
  const int n = 20 + static_cast<int>(rng() % 180);
  std::string p = "Once upon a time";
  for (int i = 0; i < n; ++i) p += std::string(" ") + kWords[rng() % 12];
  return p;
}

// A plain HTTP POST; its status (-1: no answer) and body.
std::pair<int, std::string> Post(int port, const std::string& path, const std::string& body,
                                 const httplib::Headers& h) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(120);
  auto r = c.Post(path.c_str(), h, body, "application/json");
  return r ? std::make_pair(r->status, r->body) : std::make_pair(-1, std::string());
}

// A streamed POST read to the end, or given up after `give_up_after` bytes (a disconnect), or
// read slowly. The status, the body read, and whether the client hung up itself.
struct StreamResult {
  int status = -1;
  std::string body;
  bool hung_up = false;
};
StreamResult Stream(int port, const std::string& path, const std::string& body,
                    size_t give_up_after, int slow_ms) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(120);
  StreamResult out;
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body;
  req.set_header("Content-Type", "application/json");
  req.set_header("Authorization", std::string("Bearer ") + kKey);
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    out.body.append(data, n);
    if (slow_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms));
    if (give_up_after > 0 && out.body.size() >= give_up_after) {
      out.hung_up = true;
      return false;
    }
    return true;
  };
  auto r = c.send(req);
  if (r) out.status = r->status;
  return out;
}

bool SseEndedCleanly(const std::string& body, bool openai) {
  if (openai)
    return body.find("data: [DONE]") != std::string::npos &&
           body.find("\"error\"") == std::string::npos;
  return body.find("data: ") != std::string::npos && body.find("\"error\"") == std::string::npos;
}

void Worker(Load load, unsigned seed) {
  std::mt19937 rng(seed);
  Tally& t = *load.tally;
  auto stub = inference::GRPCInferenceService::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(load.grpc_port), grpc::InsecureChannelCredentials()));
  while (!load.stop->load()) {
    const int action = static_cast<int>(rng() % 100);
    const int max_tokens = 16 + static_cast<int>(rng() % 112);
    if (action < 20) {  // KServe generate
      json b = {{"text_input", Prompt(rng)}, {"max_tokens", max_tokens}};
      auto [status, body] = Post(load.port, "/v2/models/ensemble/generate", b.dump(), Auth());
      if (status == 200 && body.find("text_output") != std::string::npos)
        t.Add("ok http generate");
      else if (status == 503)
        t.Add("overload 503");
      else
        t.Unexpected("generate " + std::to_string(status) + " " + body.substr(0, 200));
    } else if (action < 35) {  // KServe generate_stream (SSE)
      json b = {{"text_input", Prompt(rng)}, {"max_tokens", max_tokens}, {"stream", true}};
      StreamResult r = Stream(load.port, "/v2/models/ensemble/generate_stream", b.dump(), 0, 0);
      if (r.status == 200 && SseEndedCleanly(r.body, false))
        t.Add("ok http generate_stream");
      else if (r.status == 503)
        t.Add("overload 503");
      else
        t.Unexpected("generate_stream " + std::to_string(r.status) + " " + r.body.substr(0, 200));
    } else if (action < 55) {  // OpenAI chat, streamed
      json b = {{"model", "ensemble"},
                {"messages", {{{"role", "user"}, {"content", Prompt(rng)}}}},
                {"max_tokens", max_tokens},
                {"stream", true},
                {"temperature", 0.8}};
      StreamResult r = Stream(load.port, "/v1/chat/completions", b.dump(), 0, 0);
      if (r.status == 200 && SseEndedCleanly(r.body, true))
        t.Add("ok openai chat stream");
      else if (r.status == 503)
        t.Add("overload 503");
      else
        t.Unexpected("openai chat " + std::to_string(r.status) + " " + r.body.substr(0, 200));
    } else if (action <
               70) {  // gRPC ModelStreamInfer; one in three cancelled after the first response
      const bool cancel = rng() % 3 == 0;
      grpc::ClientContext ctx;
      ctx.AddMetadata("authorization", std::string("Bearer ") + kKey);
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
      auto stream = stub->ModelStreamInfer(&ctx);
      inference::ModelInferRequest q;
      q.set_model_name("ensemble");
      auto add = [&](const char* name, const char* type) {
        auto* in = q.add_inputs();
        in->set_name(name);
        in->set_datatype(type);
        in->add_shape(1);
        in->add_shape(1);
        return in->mutable_contents();
      };
      add("text_input", "BYTES")->add_bytes_contents(Prompt(rng));
      add("max_tokens", "INT32")->add_int_contents(max_tokens);
      add("stream", "BOOL")->add_bool_contents(true);
      stream->Write(q);
      stream->WritesDone();
      inference::ModelStreamInferResponse r;
      int responses = 0;
      bool error = false;
      while (stream->Read(&r)) {
        ++responses;
        if (!r.error_message().empty()) error = true;
        if (cancel) {
          ctx.TryCancel();
          break;
        }
      }
      const grpc::Status s = stream->Finish();
      if (cancel && (s.error_code() == grpc::StatusCode::CANCELLED || s.ok()))
        t.Add("cancel grpc (deliberate)");
      else if (s.ok() && responses > 0 && !error)
        t.Add("ok grpc stream");
      else if (error && r.error_message().find("Maximum queue size") != std::string::npos)
        t.Add("overload 503");
      else
        t.Unexpected("grpc stream " + std::to_string(s.error_code()) + " " + s.error_message() +
                     " " + r.error_message());
    } else if (action < 78) {  // a client that disconnects mid-stream
      json b = {{"model", "ensemble"},
                {"prompt", Prompt(rng)},
                {"max_tokens", 200},
                {"ignore_eos", true},
                {"stream", true}};
      StreamResult r = Stream(load.port, "/v1/completions", b.dump(), 300 + rng() % 2000, 0);
      if (r.hung_up || (r.status == 200 && SseEndedCleanly(r.body, true)))
        t.Add("disconnect (deliberate)");
      else if (r.status == 503)
        t.Add("overload 503");
      else
        t.Unexpected("disconnect " + std::to_string(r.status) + " " + r.body.substr(0, 200));
    } else if (action < 84) {  // a slow reader (reads, but slowly)
      json b = {{"text_input", Prompt(rng)}, {"max_tokens", 64}, {"stream", true}};
      StreamResult r = Stream(load.port, "/v2/models/ensemble/generate_stream", b.dump(), 0, 20);
      if (r.status == 200 && SseEndedCleanly(r.body, false))
        t.Add("slow reader ok");
      else if (r.status == 503)
        t.Add("overload 503");
      else
        t.Unexpected("slow reader " + std::to_string(r.status) + " " + r.body.substr(0, 200));
    } else {  // bad requests, each of a known kind with a known answer
      const int kind = static_cast<int>(rng() % 6);
      std::pair<int, std::string> r;
      int want = 400;
      std::string name;
      switch (kind) {
        case 0:
          name = "bad json";
          r = Post(load.port, "/v2/models/ensemble/generate", "{\"text_input\": ", Auth());
          break;
        case 1:
          name = "unknown model";
          want = 404;
          r = Post(load.port, "/v2/models/nosuch/generate", R"({"text_input": "x"})", Auth());
          break;
        case 2:
          name = "no key";
          want = 401;
          r = Post(load.port, "/v1/completions", R"({"model": "ensemble", "prompt": "x"})", {});
          break;
        case 3:
          name = "public key on model control";
          want = 403;
          r = Post(load.port, "/v2/repository/models/ensemble/unload", "{}", Auth());
          break;
        case 4:
          name = "prompt past the context";
          r = Post(load.port, "/v1/completions",
                   json{{"model", "ensemble"}, {"prompt", std::string(20000, 'a')}}.dump(), Auth());
          break;
        default:
          name = "bad field";
          r = Post(
              load.port, "/v1/chat/completions",
              R"({"model": "ensemble", "messages": [{"role": "user", "content": "x"}], "n": 0})",
              Auth());
          break;
      }
      if (r.first == want && r.second.find("error") != std::string::npos)
        t.Add("bad request " + name + " (deliberate)");
      else
        t.Unexpected("bad request " + name + ": " + std::to_string(r.first) + " " +
                     r.second.substr(0, 200));
    }
  }
}

// While a reload runs (and a second after), two copies of the model are alive: RSS samples
// then are reported apart, not compared with the steady ones.
std::atomic<int64_t> reload_busy_until_ms{0};
int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch())
      .count();
}

// Reloads a model every few seconds (load the new version, then swap; requests keep running).
void Reloader(Server* server, int port, Tally* tally, std::atomic<bool>* stop, int every_s) {
  std::mt19937 rng(7);
  while (!stop->load()) {
    for (int i = 0; i < every_s * 10 && !stop->load(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (stop->load()) break;
    const char* model = rng() % 2 ? "tensorrt_llm" : "ensemble";
    reload_busy_until_ms = INT64_MAX;
    const size_t retired = server->Count(kRetiredLine);
    auto [status, body] =
        Post(port, std::string("/v2/repository/models/") + model + "/load", "{}", Auth(kAdminKey));
    // The old version lives on until its running requests end (the server logs when it goes).
    for (int i = 0; i < 600 && status == 200 && server->Count(kRetiredLine) == retired; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    reload_busy_until_ms = NowMs() + 1500;
    if (status == 200)
      tally->Add(std::string("reload ") + model);
    else
      tally->Unexpected("reload " + std::string(model) + ": " + std::to_string(status) + " " +
                        body.substr(0, 200));
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "soak: mixed load with chaos against inflight-server; checks nothing is lost or leaked"};
  std::string server_bin = "build/apps/inflight-server",
              model = "models/demo/inflight-demo-q8_0.gguf", json_out;
  int seconds = 60, clients = 24, reload_every = 10;
  double warmup_fraction = 0.2;
  app.add_option("--server", server_bin, "inflight-server binary");
  app.add_option("--model", model, "GGUF model the repository is made for");
  app.add_option("--seconds", seconds, "Length of the load phase")->check(CLI::Range(10, 86400));
  app.add_option("--clients", clients,
                 "Concurrent clients (saturation: more than the batch takes at once)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--reload-every", reload_every, "Seconds between model reloads")
      ->check(CLI::Range(1, 3600));
  bool reloads = true;
  app.add_option("--reloads", reloads, "Reload models during the run");
  app.add_option("--warmup-fraction", warmup_fraction,
                 "Part of the run before RSS is taken as the baseline")
      ->check(CLI::Range(0.05, 0.9));
  app.add_option("--json", json_out, "Write the figures here as JSON");
  CLI11_PARSE(app, argc, argv);
  signal(SIGPIPE, SIG_IGN);

  const fs::path repo = fs::temp_directory_path() / ("inflight_soak_" + std::to_string(getpid()));
  fs::remove_all(repo);
  const std::string init =
      server_bin + " init-repo --model " + model + " --out " + repo.string() + " > /dev/null";
  if (std::system(init.c_str()) != 0) {
    std::fprintf(stderr, "soak: init-repo failed\n");
    return 1;
  }
  Server server;
  if (!StartServer(&server, server_bin, repo.string())) {
    std::fprintf(stderr, "soak: the server did not start:\n%s\n", server.log.c_str());
    return 1;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const int64_t fds_start = OpenFds(server.pid), rss_start = RssKb(server.pid);

  Tally tally;
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < clients; ++i) {
    threads.emplace_back(Worker, Load{server.http_port, server.grpc_port, &tally, &stop},
                         1000u + static_cast<unsigned>(i));
  }
  if (reloads) {
    threads.emplace_back(
        Reloader, &server, server.http_port, &tally, &stop,
        std::min(reload_every, std::max(1, static_cast<int>(seconds * warmup_fraction / 2))));
  }

  // Samples RSS and descriptors once a second.
  const auto t0 = Clock::now();
  const auto warm =
      t0 + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000 * warmup_fraction));
  const auto end = t0 + std::chrono::seconds(seconds);
  // The baseline is the peak RSS of the warm-up under load; later peaks must stay within 10%.
  int64_t rss_warm = 0, rss_max_after = 0, rss_reload_peak = 0, fds_max = 0;
  std::vector<std::pair<double, int64_t>> rss_series;  // (seconds, kB) every 10 s, for the trend
  while (Clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    const int64_t rss = RssKb(server.pid);
    const double at = std::chrono::duration<double>(Clock::now() - t0).count();
    if (rss_series.empty() || at - rss_series.back().first >= 10) rss_series.emplace_back(at, rss);
    fds_max = std::max(fds_max, OpenFds(server.pid));
    if (NowMs() < reload_busy_until_ms.load()) {
      rss_reload_peak = std::max(rss_reload_peak, rss);
    } else if (Clock::now() < warm) {
      rss_warm = std::max(rss_warm, rss);
    } else {
      rss_max_after = std::max(rss_max_after, rss);
    }
  }
  stop = true;
  for (auto& t : threads) t.join();
  const double load_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const int64_t rss_end = RssKb(server.pid);

  // Quiet: every KV block back, descriptors back to where they started.
  httplib::Client metrics("127.0.0.1", server.metrics_port);
  double kv_used = -1, active = -1;
  for (int i = 0; i < 200; ++i) {
    auto m = metrics.Get("/metrics", Auth(kAdminKey));
    if (m && m->status == 200) {
      kv_used =
          Metric(m->body, "nv_trt_llm_kv_cache_block_metrics", "kv_cache_block_type=\"used\"");
      active = Metric(m->body, "nv_trt_llm_request_metrics", "request_type=\"active\"");
      if (kv_used == 0 && active == 0) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const int64_t fds_end = OpenFds(server.pid);

  // SIGTERM with streams open: each must end with its text or a clear error, and the server
  // must exit 0 within its exit timeout.
  std::atomic<int> term_ok{0}, term_error{0}, term_lost{0};
  std::vector<std::thread> last;
  for (int i = 0; i < 8; ++i) {
    last.emplace_back([&, i] {
      // 32 choices of 400 tokens each: seconds of work, still running at the signal.
      json b = {{"model", "ensemble"}, {"prompt", "Once upon a time"},
                {"max_tokens", 400},   {"ignore_eos", true},
                {"stream", true},      {"n", 32}};
      StreamResult r = Stream(server.http_port, "/v1/completions", b.dump(), 0, i % 2 ? 5 : 0);
      if (r.status == 200 && r.body.find("data: [DONE]") != std::string::npos) {
        (r.body.find("\"error\"") == std::string::npos ? term_ok : term_error)++;
      } else if (r.status == 503) {
        term_error++;
      } else {
        term_lost++;
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const auto term_at = Clock::now();
  kill(server.pid, SIGTERM);
  int status = 0;
  bool exited = false;
  for (int i = 0; i < 600 && !exited; ++i) {
    exited = waitpid(server.pid, &status, WNOHANG) == server.pid;
    if (!exited) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const double exit_s = std::chrono::duration<double>(Clock::now() - term_at).count();
  if (!exited) {
    kill(server.pid, SIGKILL);
    waitpid(server.pid, &status, 0);
  }
  for (auto& t : last) t.join();
  server.reader.join();
  fs::remove_all(repo);
  const bool clean_exit = exited && WIFEXITED(status) && WEXITSTATUS(status) == 0;

  // ---- report ----
  auto counts = tally.counts();
  int64_t total = 0;
  for (const auto& [k, v] : counts) total += v;
  std::vector<std::string> failures;
  if (counts.count("unexpected"))
    failures.push_back(std::to_string(counts["unexpected"]) + " requests ended unexpectedly");
  if (kv_used != 0)
    failures.push_back("KV blocks in use after the load: " + std::to_string(kv_used));
  if (rss_warm > 0 && static_cast<double>(rss_max_after) > static_cast<double>(rss_warm) * 1.10) {
    failures.push_back("RSS grew past 10% after warm-up: peak " + std::to_string(rss_warm) +
                       " -> " + std::to_string(rss_max_after) + " kB");
  }
  if (fds_end > fds_start + 2)
    failures.push_back("descriptors leaked: " + std::to_string(fds_start) + " -> " +
                       std::to_string(fds_end));
  if (term_lost > 0)
    failures.push_back(std::to_string(term_lost.load()) +
                       " streams open at SIGTERM got no result or error");
  if (!clean_exit) failures.push_back("the server did not exit cleanly on SIGTERM");

  std::printf("soak: %.0f s, %d clients, %lld requests (%.1f/s)\n", load_s, clients,
              static_cast<long long>(total), total / load_s);
  for (const auto& [k, v] : counts)
    std::printf("  %-44s %lld\n", k.c_str(), static_cast<long long>(v));
  for (const auto& e : tally.examples()) std::printf("  unexpected: %s\n", e.c_str());
  std::printf(
      "RSS kB: start %lld, warm-up peak %lld, peak after warm-up %lld, end (quiet) %lld; during "
      "reloads (two "
      "copies of the model) up to %lld\n",
      static_cast<long long>(rss_start), static_cast<long long>(rss_warm),
      static_cast<long long>(rss_max_after), static_cast<long long>(rss_end),
      static_cast<long long>(rss_reload_peak));
  std::printf("RSS every 10 s (MB):");
  for (const auto& [at, kb] : rss_series) std::printf(" %.0f", kb / 1024.0);
  std::printf("\n");
  std::printf("descriptors: start %lld, max %lld, end %lld\n", static_cast<long long>(fds_start),
              static_cast<long long>(fds_max), static_cast<long long>(fds_end));
  std::printf("KV blocks used after the load: %.0f, active requests: %.0f\n", kv_used, active);
  std::printf(
      "SIGTERM with 8 streams open: %d complete, %d ended with an error event, %d lost; exit %s in "
      "%.2f s\n",
      term_ok.load(), term_error.load(), term_lost.load(), clean_exit ? "0" : "NOT CLEAN", exit_s);
  for (const auto& f : failures) std::printf("FAIL: %s\n", f.c_str());
  if (failures.empty()) std::printf("PASS\n");
  if (!json_out.empty()) {
    json j = {{"seconds", load_s},
              {"clients", clients},
              {"requests", total},
              {"outcomes", counts},
              {"rss_kb",
               {{"start", rss_start},
                {"warmup_peak", rss_warm},
                {"peak_after_warmup", rss_max_after},
                {"end", rss_end},
                {"reload_peak", rss_reload_peak}}},
              {"rss_series_kb", rss_series},
              {"fds", {{"start", fds_start}, {"max", fds_max}, {"end", fds_end}}},
              {"kv_blocks_used_end", kv_used},
              {"sigterm",
               {{"complete", term_ok.load()},
                {"error_event", term_error.load()},
                {"lost", term_lost.load()},
                {"clean_exit", clean_exit},
                {"exit_seconds", exit_s}}},
              {"failures", failures}};
    std::ofstream(json_out) << j.dump(2) << "\n";
  }
  if (!failures.empty()) {
    std::lock_guard<std::mutex> lock(server.mu);
    std::fprintf(
        stderr, "--- server log (tail) ---\n%s\n",
        server.log.substr(server.log.size() > 6000 ? server.log.size() - 6000 : 0).c_str());
  }
  return failures.empty() ? 0 : 1;
}
