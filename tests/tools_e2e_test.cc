// End-to-end tests of inflight-bench and inflight-client against the real inflight-server on
// loopback: the report agrees with the server's own counters, failures are counted and end
// the tool with a clear message, early stop cancels in the server, batched prompts match.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <atomic>
#include <filesystem>
#include <fstream>

#include "server_harness.h"
#include "test_util.h"

namespace inflight {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::MetricValue;
using testing::ServerProcess;

std::string Bin(const std::string& name) {
  return std::string(INFLIGHT_BINARY_DIR) + "/apps/" + name;
}
std::string DemoModel() { return testing::SourceDir() + "/models/demo/inflight-demo-q8_0.gguf"; }

struct CommandRun {
  int exit_code = -1;
  std::string out, err;
};

// Runs a command with a time limit (a hang fails the test instead of stalling it).
CommandRun RunCommand(const std::string& cmd, int timeout_s = 120) {
  const std::string out_file =
      fs::temp_directory_path() / ("inflight_tools_out_" + std::to_string(getpid()));
  const std::string err_file = out_file + ".err";
  CommandRun r;
  const int status = std::system(
      ("timeout " + std::to_string(timeout_s) + " " + cmd + " > " + out_file + " 2> " + err_file)
          .c_str());
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream o(out_file), e(err_file);
  std::stringstream so, se;
  so << o.rdbuf();
  se << e.rdbuf();
  r.out = so.str();
  r.err = se.str();
  fs::remove(out_file);
  fs::remove(err_file);
  return r;
}

std::unique_ptr<ServerProcess> StartServer(const std::string& model, const fs::path& repo) {
  fs::remove_all(repo);
  if (RunCommand(Bin("inflight-server") + " init-repo --model " + model + " --out " + repo.string())
          .exit_code != 0)
    return nullptr;
  return ServerProcess::Start({"--model-repository", repo.string()});
}

std::string Metrics(int port) {
  httplib::Client c("127.0.0.1", port);
  auto r = c.Get("/metrics");
  return r ? r->body : "";
}

double Sum(const std::string& metrics, const char* family) {
  return std::max(0.0, MetricValue(metrics, family, {{"model", "tensorrt_llm"}}));
}

void ExpectOrdered(const json& p, const std::string& what) {
  EXPECT_LE(p["p50"].get<double>(), p["p90"].get<double>()) << what;
  EXPECT_LE(p["p90"].get<double>(), p["p99"].get<double>()) << what;
  EXPECT_GT(p["avg"].get<double>(), 0) << what;
}

class ToolsE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    repo_ = new fs::path(fs::temp_directory_path() /
                         ("inflight_tools_repo_" + std::to_string(getpid())));
    server_ = StartServer(DemoModel(), *repo_).release();
  }
  static void TearDownTestSuite() {
    delete server_;
    fs::remove_all(*repo_);
    delete repo_;
  }
  void SetUp() override {
    if (!server_) GTEST_SKIP() << "the server did not start";
  }
  static fs::path* repo_;
  static ServerProcess* server_;
};
fs::path* ToolsE2eTest::repo_ = nullptr;
ServerProcess* ToolsE2eTest::server_ = nullptr;

TEST_F(ToolsE2eTest, BenchReportAgreesWithTheServer) {
  for (const std::string protocol : {"http", "grpc", "openai", "openai-chat"}) {
    const int port = protocol == "grpc" ? server_->grpc_port : server_->http_port;
    const std::string before = Metrics(server_->metrics_port);
    CommandRun r = RunCommand(Bin("inflight-bench") + " -i " + protocol + " --url 127.0.0.1:" +
                              std::to_string(port) + " --tokenizer " + DemoModel() +
                              " -n 12 --concurrency 4 --warmup 2 --json - token-norm-dist" +
                              " --input-mean 30 --input-stdev 0 --output-mean 20 --output-stdev 0");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::string after = Metrics(server_->metrics_port);
    json j = json::parse(r.out);
    EXPECT_EQ(j["total_requests"], 12) << protocol;
    EXPECT_EQ(j["succeeded"], 12) << protocol;
    EXPECT_EQ(j["total_output_tokens"], 12 * 20) << protocol;
    EXPECT_DOUBLE_EQ(j["avg_input_tokens"].get<double>(), 30.0) << protocol;
    // The server counted the same tokens (12 measured + 2 warm-up requests).
    EXPECT_EQ(
        Sum(after, "nv_llm_output_token_len_sum") - Sum(before, "nv_llm_output_token_len_sum"),
        14 * 20)
        << protocol;
    // A chat prompt is the template's rendering of the 30-token text (longer).
    if (protocol != "openai-chat") {
      EXPECT_EQ(
          Sum(after, "nv_llm_input_token_len_sum") - Sum(before, "nv_llm_input_token_len_sum"),
          14 * 30)
          << protocol;
    }
    ExpectOrdered(j["latency_ms"], protocol + " latency");
    ExpectOrdered(j["time_to_first_token_ms"], protocol + " ttft");
    ExpectOrdered(j["inter_token_latency_ms"], protocol + " itl");
    EXPECT_GT(j["output_tokens_per_sec"].get<double>(), 0);
  }
}

TEST_F(ToolsE2eTest, BenchDatasetSharedPrefixSweepAndTable) {
  const std::string url = " --url 127.0.0.1:" + std::to_string(server_->http_port);
  CommandRun table = RunCommand(Bin("inflight-bench") + url + " --tokenizer " + DemoModel() +
                                " -n 8 --request-rate 40 dataset " + testing::SourceDir() +
                                "/bench/datasets/demo-stories.json");
  ASSERT_EQ(table.exit_code, 0) << table.err;
  for (const char* row : {"Requests/Sec", "OP tokens/sec", "Avg. latency (ms)", "P99 latency (ms)",
                          "P90 latency (ms)", "Avg. IP tokens per request",
                          "Avg. OP tokens per request", "Total latency (ms)", "Total requests",
                          "P99 time to first token (ms)", "P99 inter-token latency (ms)"}) {
    EXPECT_NE(table.out.find(row), std::string::npos) << row << "\n" << table.out;
  }
  const fs::path svg =
      fs::temp_directory_path() / ("inflight_sweep_" + std::to_string(getpid()) + ".svg");
  CommandRun sweep =
      RunCommand(Bin("inflight-bench") + url + " --tokenizer " + DemoModel() +
                 " -n 6 --sweep-rates 10,40 --svg " + svg.string() +
                 " --json - shared-prefix --prefix-len 64 --suffix-len 8 --output-len 8");
  ASSERT_EQ(sweep.exit_code, 0) << sweep.err;
  json j = json::parse(sweep.out);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["request_rate"], 10.0);
  EXPECT_EQ(j[1]["total_output_tokens"], 6 * 8);
  std::ifstream f(svg);
  std::stringstream s;
  s << f.rdbuf();
  EXPECT_NE(s.str().find("<svg"), std::string::npos);
  EXPECT_NE(s.str().find("10 req/s"), std::string::npos);
  fs::remove(svg);
}

TEST_F(ToolsE2eTest, BatchInputsMatchEachPromptAlone) {
  const std::string base = Bin("inflight-client") +
                           " -i grpc --url 127.0.0.1:" + std::to_string(server_->grpc_port) +
                           " -o 12 --json";
  const std::vector<std::string> prompts = {"1,300,400,500,600", "1,310,410", "1,320,420,520"};
  std::vector<json> alone;
  for (const auto& p : prompts) {
    CommandRun r = RunCommand(base + " --input-ids " + p);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    alone.push_back(json::parse(r.out.substr(0, r.out.find('\n'))));
  }
  CommandRun batch = RunCommand(base + " --batch-inputs --input-ids " + prompts[0] +
                                " --input-ids " + prompts[1] + " --input-ids " + prompts[2]);
  ASSERT_EQ(batch.exit_code, 0) << batch.err;
  std::stringstream lines(batch.out);
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) {
    json j = json::parse(line);
    const int b = j["batch_index"];
    ASSERT_LT(b, 3);
    EXPECT_EQ(j["output_ids"], alone[b]["output_ids"]) << "prompt " << b;
    EXPECT_EQ(j["output_ids"].size(), 12u);
    ++n;
  }
  EXPECT_EQ(n, 3);
}

TEST(ToolsFailureTest, BenchCountsErrorsAndExitsWhenTheServerStops) {
  const fs::path repo =
      fs::temp_directory_path() / ("inflight_tools_stop_" + std::to_string(getpid()));
  auto server = StartServer(DemoModel(), repo);
  ASSERT_NE(server, nullptr);
  const pid_t pid = server->pid();
  const int metrics_port = server->metrics_port;
  // Killed once the server has answered some requests (however slow a loaded CI machine makes
  // the start), while most of the 100 (5 s of arrivals) are still to come.
  std::thread killer([pid, metrics_port] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (Sum(Metrics(metrics_port), "nv_inference_request_success") < 3 &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    // The LLM model counts a success before the ensemble's answer reaches the client: give
    // those answers a moment on a loaded machine.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    kill(pid, SIGKILL);
  });
  const auto start = std::chrono::steady_clock::now();
  CommandRun r = RunCommand(
      Bin("inflight-bench") + " --no-progress --url 127.0.0.1:" +
          std::to_string(server->http_port) + " --tokenizer " + DemoModel() +
          " -n 100 --request-rate 20 --json - token-norm-dist --input-mean 20 --output-mean 30",
      90);
  killer.join();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 60)
      << "the tool hung";
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("requests failed"), std::string::npos) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["total_requests"], 100);
  EXPECT_GT(j["succeeded"].get<int>(), 0) << "some finished before the server stopped";
  int64_t errors = 0;
  for (const auto& [kind, n] : j["errors"].items()) errors += n.get<int64_t>();
  EXPECT_EQ(errors + j["succeeded"].get<int64_t>(), 100);
  EXPECT_GT(errors, 0);
  server.reset();
  fs::remove_all(repo);
}

TEST(ToolsSlowModelTest, ClientStopAfterMsCancelsInTheServer) {
  // A model slow enough that 200 tokens take well over 200 ms: random weights of an 8-layer
  // 512-wide Llama in F32 with Llama 2's tokenizer.
  const std::string tokenizer =
      testing::SharedDir() + "/models/tokenizers/llama2-sentencepiece/tokenizer.model";
  REQUIRE_SHARED_FILE(tokenizer);
  const fs::path dir =
      fs::temp_directory_path() / ("inflight_tools_slow_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string model = (dir / "small-f32.gguf").string();
  CommandRun make = RunCommand(Bin("inflight-model") +
                               " make-random --arch llama --preset small --dtype f32 --tokenizer " +
                               tokenizer + " -o " + model);
  ASSERT_EQ(make.exit_code, 0) << make.err;
  auto server = StartServer(model, dir / "repo");
  ASSERT_NE(server, nullptr);
  const auto canceled = [&] {
    return std::max(0.0, MetricValue(Metrics(server->metrics_port), "nv_inference_request_failure",
                                     {{"model", "tensorrt_llm"}, {"reason", "CANCELED"}}));
  };
  const std::string client =
      Bin("inflight-client") + " --url 127.0.0.1:" + std::to_string(server->http_port) +
      " --model tensorrt_llm --input-ids 1,450,471,338,263 --request-output-len 200 --json";
  CommandRun full = RunCommand(client);
  ASSERT_EQ(full.exit_code, 0) << full.err;
  EXPECT_EQ(json::parse(full.out)["output_ids"].size(), 200u);
  const double before = canceled();
  CommandRun stopped = RunCommand(client + " --stop-after-ms 200");
  ASSERT_EQ(stopped.exit_code, 0) << stopped.err;
  const size_t got = json::parse(stopped.out)["output_ids"].size();
  EXPECT_LT(got, 200u);
  EXPECT_NE(stopped.err.find("stopped after 200 ms"), std::string::npos) << stopped.err;
  bool cancelled = false, freed = false;
  for (int i = 0; i < 100 && !(cancelled && freed); ++i) {
    const std::string m = Metrics(server->metrics_port);
    cancelled = canceled() >= before + 1;
    freed = MetricValue(m, "nv_trt_llm_kv_cache_block_metrics",
                        {{"model", "tensorrt_llm"}, {"kv_cache_block_type", "used"}}) == 0 &&
            MetricValue(m, "nv_trt_llm_request_metrics",
                        {{"model", "tensorrt_llm"}, {"request_type", "active"}}) == 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(cancelled) << "the server did not count the request as cancelled";
  EXPECT_TRUE(freed) << "KV blocks were not freed";
  server.reset();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace inflight
