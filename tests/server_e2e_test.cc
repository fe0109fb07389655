// End-to-end tests of inflight-server: the real binary on free loopback ports, a repository
// written by its own init-repo for the bundled demo model, driven over HTTP and gRPC, with
// token ids checked against the engine run alone in this process.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>
#include <tuple>

#include "base/fp16.h"
#include "eagle_writer.h"
#include "engine/executor.h"
#include "grpc_service.grpc.pb.h"
#include "llm_grpc_requests.h"
#include "medusa_writer.h"
#include "model/lora.h"
#include "model/model.h"
#include "server_harness.h"
#include "test_util.h"

namespace inflight {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::LlmRequest;
using testing::MetricValue;
using testing::OutputInt32;
using testing::RawInt32;
using testing::ServerProcess;
using testing::SseEvents;
using testing::StopRequest;

std::string DemoModel() { return testing::SourceDir() + "/models/demo/inflight-demo-q8_0.gguf"; }

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void Replace(std::string* s, const std::string& from, const std::string& to) {
  const size_t pos = s->find(from);
  ASSERT_NE(pos, std::string::npos) << from;
  s->replace(pos, from.size(), to);
}

// A copy of the tensorrt_llm model under another name with edits to its config text.
void AddVariant(const fs::path& repo, const std::string& name,
                const std::vector<std::pair<std::string, std::string>>& edits) {
  std::string text = ReadFile(repo / "tensorrt_llm" / "config.pbtxt");
  Replace(&text, "name: \"tensorrt_llm\"", "name: \"" + name + "\"");
  for (const auto& [from, to] : edits) Replace(&text, from, to);
  fs::create_directories(repo / name / "1");
  std::ofstream(repo / name / "config.pbtxt") << text;
}

// A random PEFT adapter (r 4, alpha 8) on q_proj and down_proj of the demo model's 4 layers
// (hidden 192, ffn 512).
void WriteDemoPeftAdapter(const fs::path& dir) {
  fs::create_directories(dir);
  std::ofstream(dir / "adapter_config.json")
      << R"({"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "down_proj"]})";
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0, 0.2f);
  json header = json::object();
  std::string data;
  auto add = [&](const std::string& name, int64_t rows, int64_t cols) {
    const size_t begin = data.size();
    for (int64_t i = 0; i < rows * cols; ++i) {
      const float v = normal(rng);
      data.append(reinterpret_cast<const char*>(&v), 4);
    }
    header[name] = {
        {"dtype", "F32"}, {"shape", {rows, cols}}, {"data_offsets", {begin, data.size()}}};
  };
  for (int l = 0; l < 4; ++l) {
    const std::string p = "base_model.model.model.layers." + std::to_string(l) + ".";
    add(p + "self_attn.q_proj.lora_A.weight", 4, 192);
    add(p + "self_attn.q_proj.lora_B.weight", 192, 4);
    add(p + "mlp.down_proj.lora_A.weight", 4, 512);
    add(p + "mlp.down_proj.lora_B.weight", 192, 4);
  }
  const std::string h = header.dump();
  const uint64_t n = h.size();
  std::ofstream out(dir / "adapter_model.safetensors", std::ios::binary);
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << h << data;
}

// gRPC helpers shared by the tests below.
std::unique_ptr<inference::GRPCInferenceService::Stub> GrpcStub(int port) {
  return inference::GRPCInferenceService::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
}

class ServerE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    repo_ =
        new fs::path(fs::temp_directory_path() / ("inflight_e2e_repo_" + std::to_string(getpid())));
    fs::remove_all(*repo_);
    const std::string cmd = std::string(INFLIGHT_BINARY_DIR) +
                            "/apps/inflight-server init-repo --model " + DemoModel() + " --out " +
                            repo_->string() + " > /dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
    AddVariant(*repo_, "tensorrt_llm_sync", {{"decoupled: true", "decoupled: false"}});
    AddVariant(*repo_, "tensorrt_llm_q1",
               {{"decoupled: true", "decoupled: false"},
                {"key: \"max_queue_size\"\n  value: {\n    string_value: \"0\"",
                 "key: \"max_queue_size\"\n  value: {\n    string_value: \"1\""},
                {"key: \"max_batch_size\"\n  value: {\n    string_value: \"64\"",
                 "key: \"max_batch_size\"\n  value: {\n    string_value: \"1\""}});
    AddVariant(
        *repo_, "tensorrt_llm_spec",
        {{"decoupled: true", "decoupled: false"},
         {"key: \"speculative_decoding_mode\"\n  value: {\n    string_value: \"none\"",
          "key: \"speculative_decoding_mode\"\n  value: {\n    string_value: \"prompt_lookup\""}});
    AddVariant(
        *repo_, "tensorrt_llm_lookahead",
        {{"decoupled: true", "decoupled: false"},
         {"key: \"speculative_decoding_mode\"\n  value: {\n    string_value: \"none\"",
          "key: \"speculative_decoding_mode\"\n  value: {\n    string_value: \"lookahead\""}});
    {
      // Medusa heads (random: drafts verified, rarely accepted) beside the demo model.
      AddVariant(
          *repo_, "tensorrt_llm_medusa",
          {{"decoupled: true", "decoupled: false"},
           {"key: \"speculative_decoding_mode\"\n  value: {\n    string_value: \"none\"",
            "key: \"speculative_decoding_mode\"\n  value: {\n    string_value: \"medusa\""}});
      std::ofstream(*repo_ / "tensorrt_llm_medusa" / "config.pbtxt", std::ios::app)
          << "parameters: {\n  key: \"medusa_model_path\"\n  value: {\n    string_value: "
             "\"medusa\"\n  }\n}\nparameters: {\n  key: \"medusa_choices\"\n  value: {\n    "
             "string_value: \"[[0], [1], [0, 0], [0, 1], [0, 0, 0]]\"\n  }\n}\n";
      auto demo = Model::Load(DemoModel());
      ASSERT_TRUE(demo.ok());
      testing::WriteMedusaHeads((*repo_ / "tensorrt_llm_medusa" / "medusa").string(), 3,
                                (*demo)->config().hidden_size, (*demo)->config().vocab_size);
    }
    {
      // An EAGLE-3 head (random: drafts verified, rarely accepted), chosen by TensorRT-LLM's
      // decoding_mode.
      AddVariant(*repo_, "tensorrt_llm_eagle",
                 {{"decoupled: true", "decoupled: false"},
                  {"key: \"speculative_decoding_mode\"\n  value: {\n    string_value: \"none\"",
                   "key: \"decoding_mode\"\n  value: {\n    string_value: \"eagle\""}});
      std::ofstream(*repo_ / "tensorrt_llm_eagle" / "config.pbtxt", std::ios::app)
          << "parameters: {\n  key: \"eagle_model_path\"\n  value: {\n    string_value: "
             "\"eagle\"\n  }\n}\nparameters: {\n  key: \"eagle_choices\"\n  value: {\n    "
             "string_value: \"[[0], [1], [0, 0], [0, 0, 0]]\"\n  }\n}\n";
      auto demo = Model::Load(DemoModel());
      ASSERT_TRUE(demo.ok());
      testing::EagleHeadSpec spec;
      const ModelConfig& dc = (*demo)->config();
      spec.hidden = spec.target_hidden = dc.hidden_size;
      spec.vocab = dc.vocab_size;
      const int64_t L = dc.num_layers;
      spec.aux = L >= 4 ? std::vector<int64_t>{2, L / 2, L - 3} : std::vector<int64_t>{0, 0, 0};
      spec.dtype = "BF16";
      testing::WriteEagleHead((*repo_ / "tensorrt_llm_eagle" / "eagle").string(), spec);
      // An EAGLE-1/2 head (its own Llama config of one layer; the model's projection).
      AddVariant(*repo_, "tensorrt_llm_eagle1",
                 {{"decoupled: true", "decoupled: false"},
                  {"key: \"speculative_decoding_mode\"\n  value: {\n    string_value: \"none\"",
                   "key: \"speculative_decoding_mode\"\n  value: {\n    string_value: \"eagle\""}});
      std::ofstream(*repo_ / "tensorrt_llm_eagle1" / "config.pbtxt", std::ios::app)
          << "parameters: {\n  key: \"eagle_model_path\"\n  value: {\n    string_value: "
             "\"eagle\"\n  }\n}\n";
      testing::EagleHeadSpec spec1;
      spec1.hidden = spec1.target_hidden = dc.hidden_size;
      spec1.vocab = dc.vocab_size;
      spec1.fc_states = 2;
      spec1.biases = true;
      testing::WriteEagleHead((*repo_ / "tensorrt_llm_eagle1" / "eagle").string(), spec1);
    }
    AddVariant(
        *repo_, "tensorrt_llm_draft",
        {{"decoupled: true", "decoupled: false"},
         {"key: \"speculative_decoding_mode\"\n  value: {\n    string_value: \"none\"",
          "key: \"speculative_decoding_mode\"\n  value: {\n    string_value: \"draft_model\""},
         {"key: \"draft_model_layers\"\n  value: {\n    string_value: \"0\"",
          "key: \"draft_model_layers\"\n  value: {\n    string_value: \"2\""}});
    AddVariant(*repo_, "tensorrt_llm_beam",
               {{"decoupled: true", "decoupled: false"},
                {"key: \"max_beam_width\"\n  value: {\n    string_value: \"1\"",
                 "key: \"max_beam_width\"\n  value: {\n    string_value: \"4\""}});
    {
      // A model that prefetches task 5's adapter (a PEFT folder) from lora_prefetch_dir.
      AddVariant(*repo_, "tensorrt_llm_lora", {{"decoupled: true", "decoupled: false"}});
      std::ofstream(*repo_ / "tensorrt_llm_lora" / "config.pbtxt", std::ios::app)
          << "parameters: {\n  key: \"lora_prefetch_dir\"\n  value: {\n    string_value: "
             "\"loras\"\n  }\n}\n";
      WriteDemoPeftAdapter(*repo_ / "tensorrt_llm_lora" / "loras" / "5");
    }
    AddVariant(*repo_, "tensorrt_llm_beam_stream",
               {{"key: \"max_beam_width\"\n  value: {\n    string_value: \"1\"",
                 "key: \"max_beam_width\"\n  value: {\n    string_value: \"4\""}});
    {
      // The ensemble over the (decoupled) beam-search variant.
      std::string ens = ReadFile(*repo_ / "ensemble" / "config.pbtxt");
      Replace(&ens, "name: \"ensemble\"", "name: \"ensemble_beam\"");
      Replace(&ens, "model_name: \"tensorrt_llm\"", "model_name: \"tensorrt_llm_beam_stream\"");
      fs::create_directories(*repo_ / "ensemble_beam" / "1");
      std::ofstream(*repo_ / "ensemble_beam" / "config.pbtxt") << ens;
    }
    {
      // The BLS model over the prompt-lookup variant.
      std::string bls = ReadFile(*repo_ / "tensorrt_llm_bls" / "config.pbtxt");
      Replace(&bls, "name: \"tensorrt_llm_bls\"", "name: \"bls_spec\"");
      Replace(&bls, "string_value: \"tensorrt_llm\"", "string_value: \"tensorrt_llm_spec\"");
      fs::create_directories(*repo_ / "bls_spec" / "1");
      std::ofstream(*repo_ / "bls_spec" / "config.pbtxt") << bls;
    }
    server_ = ServerProcess::Start({"--model-repository", repo_->string()}).release();
    ASSERT_NE(server_, nullptr);
    auto model = Model::Load(DemoModel());
    ASSERT_TRUE(model.ok()) << model.status().message();
    model_ = model->release();
  }

  static void TearDownTestSuite() {
    if (server_ && ::testing::UnitTest::GetInstance()->failed_test_count() > 0) {
      std::fprintf(stderr, "--- inflight-server log ---\n%s\n", server_->log().c_str());
    }
    delete server_;
    server_ = nullptr;
    delete model_;
    fs::remove_all(*repo_);
    delete repo_;
  }

  void SetUp() override {
    if (!server_) GTEST_SKIP() << "the server did not start";
  }

  static httplib::Client Http() {
    httplib::Client c("127.0.0.1", server_->http_port);
    c.set_read_timeout(120);
    return c;
  }

  static httplib::Result Post(const std::string& path, const std::string& body) {
    return Http().Post(path.c_str(), body, "application/json");
  }

  static std::string Metrics() { return testing::MetricsText(server_->metrics_port); }
  static bool WaitIdle(const std::string& model) {
    return testing::WaitLlmIdle(server_->metrics_port, model);
  }

  // Greedy generated ids of the engine alone (no server, no other request).
  static std::vector<int32_t> Alone(const std::vector<int32_t>& prompt, int max_tokens) {
    ExecutorConfig cfg;
    auto e = Executor::Create(*model_, cfg);
    EXPECT_TRUE(e.ok());
    Request r;
    r.prompt_ids = prompt;
    r.max_tokens = max_tokens;
    r.sampling.temperature = 0;
    r.exclude_input_in_output = true;
    auto id = (*e)->Enqueue(r);
    EXPECT_TRUE(id.ok());
    std::vector<int32_t> out;
    while (true) {
      for (Result& res : (*e)->AwaitResponses(*id, std::chrono::milliseconds(1000))) {
        if (res.is_final) return res.output_token_ids;
      }
    }
  }

  static std::vector<int32_t> Tokens(const std::string& text) {
    return model_->tokenizer()->Encode(text, true);
  }

  static fs::path* repo_;
  static ServerProcess* server_;
  static Model* model_;
};

fs::path* ServerE2eTest::repo_ = nullptr;
ServerProcess* ServerE2eTest::server_ = nullptr;
Model* ServerE2eTest::model_ = nullptr;

TEST_F(ServerE2eTest, ReferenceCommandsWorkVerbatim) {
  const std::string body =
      R"({"text_input": "What is machine learning?", "max_tokens": 20, "bad_words": "", "stop_words": ""})";
  for (const std::string model : {"ensemble", "tensorrt_llm_bls"}) {
    auto r = Post("/v2/models/" + model + "/generate", body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    json j = json::parse(r->body);
    EXPECT_EQ(j["model_name"], model);
    EXPECT_EQ(j["model_version"], "1");
    ASSERT_TRUE(j["text_output"].is_string());
    // exclude_input_in_output defaults to false, as in the reference: the prompt comes back.
    EXPECT_EQ(j["text_output"].get<std::string>().rfind("What is machine learning?", 0), 0u) << j;
  }
  auto s = Post(
      "/v2/models/ensemble/generate_stream",
      R"({"text_input": "Once upon a time", "max_tokens": 12, "stream": true, "bad_words": "", "stop_words": ""})");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->status, 200);
  EXPECT_EQ(s->get_header_value("Content-Type"), "text/event-stream; charset=utf-8");
  EXPECT_EQ(s->body.rfind("data: {", 0), 0u) << s->body;
  auto events = SseEvents(s->body);
  EXPECT_GE(events.size(), 2u);
  for (const auto& e : events) {
    EXPECT_EQ(e["model_name"], "ensemble");
    EXPECT_TRUE(e["text_output"].is_string());
  }
  // The backend's gauges are set by its stats thread (every stats_check_period_ms).
  std::string metrics;
  for (int i = 0; i < 100; ++i) {
    metrics = Metrics();
    if (metrics.find("# TYPE nv_trt_llm_general_metrics ") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
  for (const char* family :
       {"nv_inference_request_success", "nv_inference_count", "nv_inference_exec_count",
        "nv_inference_request_duration_us", "nv_inference_compute_infer_duration_us",
        "nv_trt_llm_request_metrics", "nv_trt_llm_kv_cache_block_metrics",
        "nv_trt_llm_inflight_batcher_metrics", "nv_trt_llm_general_metrics",
        "nv_trt_llm_runtime_memory_metrics", "nv_llm_input_token_len", "nv_llm_output_token_len",
        "inflight_time_to_first_token_seconds", "inflight_inter_token_latency_seconds",
        "inflight_request_latency_seconds", "inflight_queue_time_seconds", "nv_cpu_utilization"}) {
    EXPECT_NE(metrics.find(std::string("# TYPE ") + family + " "), std::string::npos) << family;
  }
  EXPECT_GE(MetricValue(metrics, "nv_inference_request_success", {{"model", "ensemble"}}), 2);
  // One inter-token latency observation per token after a request's first (the 12-token
  // stream alone gives 11), not one per request.
  EXPECT_GE(MetricValue(metrics, "inflight_inter_token_latency_seconds_count",
                        {{"model", "tensorrt_llm"}}),
            11);
  // TensorRT-LLM's KV block series are there; the window group's (sliding-window layers) are
  // not, as the demo model has none (openai_test's WindowKvGroupTest has a model with one).
  for (const char* type : {"max", "free", "used", "tokens_per", "reused", "fraction"}) {
    EXPECT_GE(MetricValue(metrics, "nv_trt_llm_kv_cache_block_metrics",
                          {{"model", "tensorrt_llm"}, {"kv_cache_block_type", type}}),
              0)
        << type;
  }
  EXPECT_EQ(metrics.find("kv_cache_block_type=\"window_"), std::string::npos);
}

TEST_F(ServerE2eTest, StreamedTextEqualsNonStreamedText) {
  for (const std::string prompt : {"Once upon a time", "Tom had a red ball.", "The little cat"}) {
    for (const std::string model : {"ensemble", "tensorrt_llm_bls"}) {
      json req = {{"text_input", prompt}, {"max_tokens", 40}, {"exclude_input_in_output", true}};
      auto whole = Post("/v2/models/" + model + "/generate", req.dump());
      ASSERT_TRUE(whole);
      ASSERT_EQ(whole->status, 200) << whole->body;
      const std::string text = json::parse(whole->body)["text_output"];
      req["stream"] = true;
      auto streamed = Post("/v2/models/" + model + "/generate_stream", req.dump());
      ASSERT_TRUE(streamed);
      std::string joined;
      for (const auto& e : SseEvents(streamed->body)) joined += e["text_output"].get<std::string>();
      EXPECT_EQ(joined, text) << model << " / " << prompt;
      EXPECT_NE(text.find(' '), std::string::npos) << "spaces between words are kept: " << text;
      EXPECT_EQ(text.find("\xEF\xBF\xBD"), std::string::npos);
    }
  }
}

TEST_F(ServerE2eTest, StopWordsGivenAsTextStopGeneration) {
  json req = {
      {"text_input", "Once upon a time"}, {"max_tokens", 60}, {"exclude_input_in_output", true}};
  auto full_r = Post("/v2/models/ensemble/generate", req.dump());
  ASSERT_TRUE(full_r);
  const std::string full = json::parse(full_r->body)["text_output"];
  // Two later words made of letters only; generation must stop after whichever comes first.
  std::vector<std::pair<size_t, std::string>> words;
  for (size_t i = 0; i < full.size();) {
    size_t j = i;
    while (j < full.size() && std::isalpha(static_cast<unsigned char>(full[j]))) ++j;
    if (j > i + 2 && i > 0 && full[i - 1] == ' ') words.push_back({i, full.substr(i, j - i)});
    i = j + 1;
  }
  ASSERT_GE(words.size(), 8u) << full;
  const std::string first = words[3].second, second = words[7].second;
  size_t expected_end = std::min(full.find(" " + first) + 1 + first.size(),
                                 full.find(" " + second) + 1 + second.size());
  req["stop_words"] = {second, first};
  auto stopped = Post("/v2/models/ensemble/generate", req.dump());
  ASSERT_TRUE(stopped);
  ASSERT_EQ(stopped->status, 200) << stopped->body;
  const std::string text = json::parse(stopped->body)["text_output"];
  EXPECT_EQ(text, full.substr(0, expected_end))
      << "stop words '" << first << "', '" << second << "' in: " << full;
}

TEST_F(ServerE2eTest, GrpcModelInferAndStreamMatchTheEngineAlone) {
  auto stub = GrpcStub(server_->grpc_port);
  const std::vector<int32_t> prompt = Tokens("Lily went to the park with her dog.");
  const std::vector<int32_t> alone = Alone(prompt, 24);
  auto build = [&](const std::string& model, bool streaming) {
    return LlmRequest(model, "req-7", {prompt}, 24, streaming);
  };
  auto ids_of = [](const inference::ModelInferResponse& r) { return OutputInt32(r, "output_ids"); };
  {
    grpc::ClientContext ctx;
    inference::ModelInferResponse resp;
    grpc::Status s = stub->ModelInfer(&ctx, build("tensorrt_llm_sync", false), &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(resp.id(), "req-7");
    std::vector<int32_t> expected = prompt;  // exclude_input_in_output is false
    expected.insert(expected.end(), alone.begin(), alone.end());
    EXPECT_EQ(ids_of(resp), expected);
  }
  {
    grpc::ClientContext ctx;
    inference::ModelInferResponse resp;
    grpc::Status s = stub->ModelInfer(&ctx, build("tensorrt_llm", false), &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNIMPLEMENTED);
    EXPECT_EQ(s.error_message(),
              "ModelInfer RPC doesn't support models with decoupled transaction policy");
  }
  {
    grpc::ClientContext ctx;
    auto stream = stub->ModelStreamInfer(&ctx);
    ASSERT_TRUE(stream->Write(build("tensorrt_llm", true)));
    stream->WritesDone();
    inference::ModelStreamInferResponse r;
    std::vector<int32_t> got;
    int finals = 0, responses = 0;
    while (stream->Read(&r)) {
      ASSERT_TRUE(r.error_message().empty()) << r.error_message();
      EXPECT_EQ(r.infer_response().id(), "req-7");
      auto v = ids_of(r.infer_response());
      got.insert(got.end(), v.begin(), v.end());
      ++responses;
      finals += r.infer_response().parameters().at("triton_final_response").bool_param();
    }
    EXPECT_TRUE(stream->Finish().ok());
    EXPECT_EQ(got, alone);
    EXPECT_EQ(finals, 1);
    EXPECT_GE(responses, 2);
  }
}

// Beam search through KServe HTTP, gRPC and the ensemble: the beams come back together as
// output_ids [1, beams, L] (padded with -1), sequence_length and cum_log_probs [1, beams],
// equal to the engine's own beam search; the ensemble detokenizes each beam; a width above
// max_beam_width is refused.
TEST_F(ServerE2eTest, BeamSearchOverHttpGrpcAndTheEnsemble) {
  const std::vector<int32_t> prompt = Tokens("Once upon a time, there was a little girl who");
  // The engine's beams for the same request, in process.
  ExecutorConfig cfg;
  cfg.max_beam_width = 4;
  auto e = Executor::Create(*model_, cfg);
  ASSERT_TRUE(e.ok());
  Request q;
  q.prompt_ids = prompt;
  q.max_tokens = 12;
  q.beam_width = 3;
  q.num_return_sequences = 3;
  q.exclude_input_in_output = true;
  q.return_log_probs = true;
  auto id = (*e)->Enqueue(q);
  ASSERT_TRUE(id.ok());
  Result want;
  for (bool done = false; !done;) {
    for (Result& res : (*e)->AwaitResponses(*id, std::chrono::milliseconds(1000))) {
      if (res.is_final) {
        want = std::move(res);
        done = true;
      }
    }
  }
  ASSERT_EQ(want.beams.size(), 3u);
  int64_t longest = 0;
  for (const BeamOutput& b : want.beams)
    longest = std::max<int64_t>(longest, b.output_token_ids.size());
  auto check = [&](const std::vector<int64_t>& shape, const std::vector<int32_t>& ids,
                   const std::vector<int32_t>& lengths, const std::vector<float>& cum,
                   const std::string& via) {
    ASSERT_EQ(shape, (std::vector<int64_t>{1, 3, longest})) << via;
    ASSERT_EQ(lengths.size(), 3u) << via;
    ASSERT_EQ(cum.size(), 3u) << via;
    for (size_t k = 0; k < 3; ++k) {
      const auto& b = want.beams[k].output_token_ids;
      EXPECT_EQ(lengths[k], static_cast<int32_t>(b.size())) << via;
      std::vector<int32_t> row(ids.begin() + k * longest, ids.begin() + (k + 1) * longest);
      std::vector<int32_t> padded = b;
      padded.resize(longest, -1);
      EXPECT_EQ(row, padded) << via << " beam " << k;
      EXPECT_NEAR(cum[k], want.beams[k].cum_log_prob, 1e-4) << via;
    }
    EXPECT_GE(cum[0], cum[2]) << via;
  };
  const json inputs = json::array({
      {{"name", "input_ids"},
       {"datatype", "INT32"},
       {"shape", {1, prompt.size()}},
       {"data", prompt}},
      {{"name", "input_lengths"},
       {"datatype", "INT32"},
       {"shape", {1, 1}},
       {"data", {prompt.size()}}},
      {{"name", "request_output_len"}, {"datatype", "INT32"}, {"shape", {1, 1}}, {"data", {12}}},
      {{"name", "exclude_input_in_output"},
       {"datatype", "BOOL"},
       {"shape", {1, 1}},
       {"data", {true}}},
      {{"name", "return_log_probs"}, {"datatype", "BOOL"}, {"shape", {1, 1}}, {"data", {true}}},
      {{"name", "num_return_sequences"}, {"datatype", "INT32"}, {"shape", {1, 1}}, {"data", {3}}},
  });
  auto with_width = [&](int width) {
    json in = inputs;
    in.push_back(
        {{"name", "beam_width"}, {"datatype", "INT32"}, {"shape", {1, 1}}, {"data", {width}}});
    return json{{"inputs", in}}.dump();
  };
  {
    auto r = Post("/v2/models/tensorrt_llm_beam/infer", with_width(3));
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json j = json::parse(r->body);
    json ids, lengths, cum;
    for (const json& o : j["outputs"]) {
      if (o["name"] == "output_ids") ids = o;
      if (o["name"] == "sequence_length") lengths = o;
      if (o["name"] == "cum_log_probs") cum = o;
      EXPECT_NE(o["name"], "sequence_index") << "beams come back in one response";
    }
    check(ids["shape"].get<std::vector<int64_t>>(), ids["data"].get<std::vector<int32_t>>(),
          lengths["data"].get<std::vector<int32_t>>(), cum["data"].get<std::vector<float>>(),
          "HTTP");
  }
  {
    auto stub = GrpcStub(server_->grpc_port);
    inference::ModelInferRequest g = LlmRequest("tensorrt_llm_beam", "beam", {prompt}, 12, false);
    auto add = [&](const char* name, const char* dtype, const std::string& raw) {
      auto* in = g.add_inputs();
      in->set_name(name);
      in->set_datatype(dtype);
      in->add_shape(1);
      in->add_shape(1);
      g.add_raw_input_contents(raw);
    };
    add("exclude_input_in_output", "BOOL", std::string(1, '\1'));
    add("return_log_probs", "BOOL", std::string(1, '\1'));
    add("num_return_sequences", "INT32", RawInt32({3}));
    add("beam_width", "INT32", RawInt32({3}));
    grpc::ClientContext ctx;
    inference::ModelInferResponse resp;
    grpc::Status st = stub->ModelInfer(&ctx, g, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    std::vector<int64_t> shape;
    std::vector<float> cum;
    for (int i = 0; i < resp.outputs_size(); ++i) {
      if (resp.outputs(i).name() == "output_ids")
        shape.assign(resp.outputs(i).shape().begin(), resp.outputs(i).shape().end());
      if (resp.outputs(i).name() == "cum_log_probs") {
        const std::string& raw = resp.raw_output_contents(i);
        cum.resize(raw.size() / sizeof(float));
        std::memcpy(cum.data(), raw.data(), raw.size());
      }
    }
    check(shape, OutputInt32(resp, "output_ids"), OutputInt32(resp, "sequence_length"), cum,
          "gRPC");
  }
  {
    // The ensemble: one text per beam.
    const json body = {{"text_input", "Once upon a time, there was a little girl who"},
                       {"max_tokens", 12},
                       {"beam_width", 3},
                       {"num_return_sequences", 3},
                       {"exclude_input_in_output", true}};
    auto r = Post("/v2/models/ensemble_beam/generate", body.dump());
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json j = json::parse(r->body);
    ASSERT_TRUE(j["text_output"].is_array()) << r->body;
    ASSERT_EQ(j["text_output"].size(), 3u) << r->body;
    // (The postprocessing keeps the space that begins the continuation's first word.)
    auto trimmed = [](std::string t) { return t.erase(0, t.find_first_not_of(' ')); };
    for (size_t k = 0; k < 3; ++k) {
      EXPECT_EQ(trimmed(j["text_output"][k].get<std::string>()),
                trimmed(model_->tokenizer()->Decode(want.beams[k].output_token_ids, true)))
          << k;
    }
    // Streamed: every event holds the live beams' whole texts so far (provisional); the last
    // one the same texts as the unstreamed response.
    json stream_body = body;
    stream_body["stream"] = true;
    auto s = Post("/v2/models/ensemble_beam/generate_stream", stream_body.dump());
    ASSERT_TRUE(s);
    ASSERT_EQ(s->status, 200) << s->body;
    const auto events = SseEvents(s->body);
    ASSERT_GE(events.size(), 3u) << s->body;
    size_t previous = 0;
    for (size_t i = 0; i + 1 < events.size(); ++i) {
      ASSERT_TRUE(events[i]["text_output"].is_array()) << events[i];
      ASSERT_EQ(events[i]["text_output"].size(), 3u) << events[i];
      const size_t len = events[i]["text_output"][0].get<std::string>().size();
      EXPECT_GE(len, previous) << "the best beam so far grows: " << events[i];
      previous = len;
    }
    EXPECT_EQ(events.back()["text_output"], j["text_output"]) << s->body;
  }
  // Refusals: wider than max_beam_width, and any beam search on a max_beam_width 1 model.
  for (const auto& [model, width] : std::vector<std::pair<std::string, int>>{
           {"tensorrt_llm_beam", 5}, {"tensorrt_llm_sync", 2}}) {
    auto r = Post("/v2/models/" + model + "/infer", with_width(width));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << r->body;
    EXPECT_NE(
        r->body.find("beam_width " + std::to_string(width) + " is outside [1, max_beam_width"),
        std::string::npos)
        << r->body;
  }
  EXPECT_TRUE(WaitIdle("tensorrt_llm_beam"));
}

// Guided decoding through KServe HTTP, gRPC and the ensemble: the output follows the regex or
// schema the request names, and bad guides get 400 (501 for ebnf_grammar) with the reason.
TEST_F(ServerE2eTest, GuidedDecodingOverHttpGrpcAndTheEnsemble) {
  const std::vector<int32_t> prompt = Tokens("Once upon a time");
  const int32_t eos = model_->tokenizer()->eos_id();
  auto body = [&](const std::string& type, const std::string& guide) {
    json inputs = json::array({
        {{"name", "input_ids"},
         {"datatype", "INT32"},
         {"shape", {1, prompt.size()}},
         {"data", prompt}},
        {{"name", "input_lengths"},
         {"datatype", "INT32"},
         {"shape", {1, 1}},
         {"data", {prompt.size()}}},
        {{"name", "request_output_len"}, {"datatype", "INT32"}, {"shape", {1, 1}}, {"data", {48}}},
        {{"name", "end_id"}, {"datatype", "INT32"}, {"shape", {1, 1}}, {"data", {eos}}},
        {{"name", "exclude_input_in_output"},
         {"datatype", "BOOL"},
         {"shape", {1, 1}},
         {"data", {true}}},
        {{"name", "runtime_top_k"}, {"datatype", "INT32"}, {"shape", {1, 1}}, {"data", {40}}},
        {{"name", "guided_decoding_guide_type"},
         {"datatype", "BYTES"},
         {"shape", {1, 1}},
         {"data", {type}}},
    });
    if (!guide.empty())
      inputs.push_back({{"name", "guided_decoding_guide"},
                        {"datatype", "BYTES"},
                        {"shape", {1, 1}},
                        {"data", {guide}}});
    return json{{"inputs", inputs}}.dump();
  };
  auto text_of = [&](const json& j) {
    for (const json& o : j["outputs"]) {
      if (o["name"] == "output_ids")
        return model_->tokenizer()->Decode(o["data"].get<std::vector<int32_t>>(), true);
    }
    return std::string();
  };
  const std::string pattern = "[0-9]{3}-[a-z]{2,4}( [A-Z][a-z]{1,6}){1,2}";
  {
    // An EBNF grammar (xgrammar's notation).
    const std::string grammar =
        "root ::= greeting \" \" name \"!\"\ngreeting ::= \"Hi\" | \"Hello\"\nname ::= [A-Z] "
        "[a-z]{1,8}\n";
    auto r = Post("/v2/models/tensorrt_llm_sync/infer", body("ebnf_grammar", grammar));
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const std::string text = text_of(json::parse(r->body));
    EXPECT_TRUE(std::regex_match(text, std::regex("(Hi|Hello) [A-Z][a-z]{1,8}!")))
        << "'" << text << "'";
  }
  {
    // A structural tag (xgrammar's format): a tag around a regex, then the output ends.
    const std::string tag =
        R"({"type": "structural_tag", "format": {"type": "tag", "begin": "<answer>", )"
        R"("content": {"type": "regex", "pattern": "[0-9]{3}"}, "end": "</answer>"}})";
    auto r = Post("/v2/models/tensorrt_llm_sync/infer", body("structural_tag", tag));
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const std::string text = text_of(json::parse(r->body));
    EXPECT_TRUE(std::regex_match(text, std::regex("<answer>[0-9]{3}</answer>")))
        << "'" << text << "'";
  }
  for (int i = 0; i < 3; ++i) {
    auto r = Post("/v2/models/tensorrt_llm_sync/infer", body("regex", pattern));
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const std::string text = text_of(json::parse(r->body));
    EXPECT_TRUE(std::regex_match(text, std::regex(pattern))) << "'" << text << "'";
  }
  const std::string schema =
      R"({"type": "object", "properties": {"hero": {"type": "string", "maxLength": 10}, "age": {"type": "integer", "minimum": 1, "maximum": 99}, "tags": {"type": "array", "items": {"enum": ["brave", "kind", "sly"]}, "maxItems": 2}}, "required": ["hero", "age", "tags"]})";
  auto check_schema_output = [](const std::string& text) {
    ASSERT_TRUE(json::accept(text)) << text;
    const json v = json::parse(text);
    ASSERT_TRUE(v.is_object()) << text;
    EXPECT_TRUE(v["hero"].is_string() && v["hero"].get<std::string>().size() <= 10 * 4) << text;
    EXPECT_TRUE(v["age"].is_number_integer() && v["age"] >= 1 && v["age"] <= 99) << text;
    ASSERT_TRUE(v["tags"].is_array()) << text;
    EXPECT_LE(v["tags"].size(), 2u) << text;
    for (const json& t : v["tags"]) EXPECT_TRUE(t == "brave" || t == "kind" || t == "sly") << text;
  };
  {
    auto stub = GrpcStub(server_->grpc_port);
    inference::ModelInferRequest g = LlmRequest("tensorrt_llm_sync", "guided", {prompt}, 48, false);
    auto add_string = [&](const char* name, const std::string& v) {
      auto* in = g.add_inputs();
      in->set_name(name);
      in->set_datatype("BYTES");
      in->add_shape(1);
      in->add_shape(1);
      std::string raw(4, '\0');
      const uint32_t n = static_cast<uint32_t>(v.size());
      std::memcpy(raw.data(), &n, 4);
      g.add_raw_input_contents(raw + v);
    };
    add_string("guided_decoding_guide_type", "json_schema");
    add_string("guided_decoding_guide", schema);
    auto* in = g.add_inputs();
    in->set_name("end_id");
    in->set_datatype("INT32");
    in->add_shape(1);
    in->add_shape(1);
    g.add_raw_input_contents(RawInt32({eos}));
    auto* ex = g.add_inputs();
    ex->set_name("exclude_input_in_output");
    ex->set_datatype("BOOL");
    ex->add_shape(1);
    ex->add_shape(1);
    g.add_raw_input_contents(std::string(1, '\1'));
    grpc::ClientContext ctx;
    inference::ModelInferResponse resp;
    grpc::Status st = stub->ModelInfer(&ctx, g, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    check_schema_output(model_->tokenizer()->Decode(OutputInt32(resp, "output_ids"), true));
  }
  {
    const json req = {{"text_input", "Once upon a time"},
                      {"max_tokens", 64},
                      {"exclude_input_in_output", true},
                      {"top_k", 40},
                      {"guided_decoding_guide_type", "json_schema"},
                      {"guided_decoding_guide", schema}};
    for (const std::string model : {"ensemble", "tensorrt_llm_bls"}) {
      auto r = Post("/v2/models/" + model + "/generate", req.dump());
      ASSERT_TRUE(r);
      ASSERT_EQ(r->status, 200) << r->body;
      check_schema_output(json::parse(r->body)["text_output"].get<std::string>());
    }
  }
  const std::vector<std::tuple<std::string, std::string, int, std::string>> bad = {
      {"regex", "[0-9", 400, "regex: unterminated ["},
      {"json_schema", R"({"type": "array", "uniqueItems": true})", 400,
       "keyword 'uniqueItems' is not supported"},
      {"json_schema", "{not json", 400, "json schema: not valid JSON"},
      {"structural_tag", "{}", 400, "structural_tag: format is missing"},
      {"structural_tag", R"({"format": {"type": "tag", "begin": 1}})", 400,
       "structural_tag: format.begin must be a string"},
      {"ebnf_grammar", "root ::= root \"a\"", 400, "left-recursive"},
      {"yaml", "", 400, "is not one of json, json_schema, regex, ebnf_grammar, structural_tag"},
      {"regex", "", 400, "guided_decoding_guide is empty"},
      {"regex", std::string(70000, 'a'), 400, "at most 65536 are taken"},
  };
  for (const auto& [type, guide, status, message] : bad) {
    auto r = Post("/v2/models/tensorrt_llm_sync/infer", body(type, guide));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, status) << r->body;
    EXPECT_NE(r->body.find(message), std::string::npos) << r->body;
  }
  EXPECT_TRUE(WaitIdle("tensorrt_llm_sync"));
}

// LoRA through KServe: a request sends its adapter in TensorRT-LLM's tensor form with a task
// id, later requests the id alone; a model prefetches a PEFT folder from lora_prefetch_dir;
// outputs equal the engine's with the same adapter; an unknown id gets the reference's error.
TEST_F(ServerE2eTest, LoraAdaptersByTaskIdAndFromThePrefetchDir) {
  const std::vector<int32_t> prompt = Tokens("Once upon a time, there was a little girl who");
  const ModelConfig& c = model_->config();
  // q_proj (module 1) and v_proj (3) of every layer, rank 4, FP16-exact values.
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0, 0.3f);
  const int64_t r = 4, cols = r * (c.hidden_size + c.q_dim());
  std::vector<float> weights;
  std::vector<int32_t> config;
  for (int l = 0; l < c.num_layers; ++l) {
    for (int32_t module : {1, 3}) {
      const int64_t out = module == 1 ? c.q_dim() : c.kv_dim();
      std::vector<float> row(cols, 0.0f);
      for (int64_t i = 0; i < r * (c.hidden_size + out); ++i)
        row[i] = Fp16ToFp32(Fp32ToFp16(normal(rng)));
      weights.insert(weights.end(), row.begin(), row.end());
      config.insert(config.end(), {module, l, static_cast<int32_t>(r)});
    }
  }
  const int64_t rows = static_cast<int64_t>(config.size() / 3);
  auto adapter = LoraAdapter::FromTensors(c, weights, rows, cols, config);
  ASSERT_TRUE(adapter.ok()) << adapter.status().ToString();
  auto engine_output = [&](std::shared_ptr<const LoraAdapter> lora) {
    ExecutorConfig cfg;
    auto e = Executor::Create(*model_, cfg);
    EXPECT_TRUE(e.ok());
    Request q;
    q.prompt_ids = prompt;
    q.max_tokens = 16;
    q.sampling.temperature = 0;
    q.exclude_input_in_output = true;
    q.lora = std::move(lora);
    auto id = (*e)->Enqueue(q);
    EXPECT_TRUE(id.ok());
    for (;;) {
      for (Result& res : (*e)->AwaitResponses(*id, std::chrono::milliseconds(1000))) {
        if (res.is_final) return res.output_token_ids;
      }
    }
  };
  const std::vector<int32_t> want = engine_output(*adapter);
  ASSERT_NE(want, Alone(prompt, 16)) << "the adapter changes nothing";
  auto body = [&](const std::string& model, uint64_t task, bool with_weights,
                  const std::vector<int32_t>& cfg_rows) {
    json inputs = json::array({
        {{"name", "input_ids"},
         {"datatype", "INT32"},
         {"shape", {1, prompt.size()}},
         {"data", prompt}},
        {{"name", "input_lengths"},
         {"datatype", "INT32"},
         {"shape", {1, 1}},
         {"data", {prompt.size()}}},
        {{"name", "request_output_len"}, {"datatype", "INT32"}, {"shape", {1, 1}}, {"data", {16}}},
        {{"name", "exclude_input_in_output"},
         {"datatype", "BOOL"},
         {"shape", {1, 1}},
         {"data", {true}}},
        {{"name", "lora_task_id"}, {"datatype", "UINT64"}, {"shape", {1, 1}}, {"data", {task}}},
    });
    if (with_weights) {
      const int64_t n = static_cast<int64_t>(cfg_rows.size() / 3);
      std::vector<float> w(weights.begin(), weights.begin() + n * cols);
      inputs.push_back(
          {{"name", "lora_weights"}, {"datatype", "FP16"}, {"shape", {1, n, cols}}, {"data", w}});
      inputs.push_back({{"name", "lora_config"},
                        {"datatype", "INT32"},
                        {"shape", {1, n, 3}},
                        {"data", cfg_rows}});
    }
    return json{{"inputs", inputs}}.dump();
  };
  auto ids_of = [](const std::string& body) {
    const json parsed = json::parse(body);
    for (const json& o : parsed["outputs"]) {
      if (o["name"] == "output_ids") return o["data"].get<std::vector<int32_t>>();
    }
    return std::vector<int32_t>();
  };
  // First use: the weights with the id; then the id alone.
  for (bool first : {true, false}) {
    auto res =
        Post("/v2/models/tensorrt_llm_sync/infer", body("tensorrt_llm_sync", 7, first, config));
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    EXPECT_EQ(ids_of(res->body), want) << (first ? "with weights" : "by task id");
  }
  // The prefetched PEFT adapter of task 5.
  const fs::path peft = *repo_ / "tensorrt_llm_lora" / "loras" / "5";
  auto prefetched = LoraAdapter::FromPeftFolder(c, peft.string());
  ASSERT_TRUE(prefetched.ok());
  auto res5 = Post("/v2/models/tensorrt_llm_lora/infer", body("tensorrt_llm_lora", 5, false, {}));
  ASSERT_TRUE(res5);
  ASSERT_EQ(res5->status, 200) << res5->body;
  EXPECT_EQ(ids_of(res5->body), engine_output(*prefetched));
  // Through the ensemble (text in, text out) by task id, once the ensemble's LLM model
  // (tensorrt_llm, decoupled) has the adapter (/generate carries scalars and 1-D arrays only,
  // as Triton's, so the weights go by KServe infer).
  {
    auto stub = GrpcStub(server_->grpc_port);
    grpc::ClientContext ctx;
    auto stream = stub->ModelStreamInfer(&ctx);
    inference::ModelInferRequest g = LlmRequest("tensorrt_llm", "lora-prime", {prompt}, 16, false);
    auto add = [&](const char* name, const char* dtype, std::vector<int64_t> shape,
                   const std::string& raw) {
      auto* in = g.add_inputs();
      in->set_name(name);
      in->set_datatype(dtype);
      for (int64_t d : shape) in->add_shape(d);
      g.add_raw_input_contents(raw);
    };
    const uint64_t task = 21;
    std::string fp16;
    for (float v : weights) {
      const uint16_t h = Fp32ToFp16(v);
      fp16.append(reinterpret_cast<const char*>(&h), 2);
    }
    add("exclude_input_in_output", "BOOL", {1, 1}, std::string(1, '\1'));
    add("lora_task_id", "UINT64", {1, 1}, std::string(reinterpret_cast<const char*>(&task), 8));
    add("lora_weights", "FP16", {1, rows, cols}, fp16);
    add("lora_config", "INT32", {1, rows, 3}, RawInt32(config));
    ASSERT_TRUE(stream->Write(g));
    stream->WritesDone();
    inference::ModelStreamInferResponse r;
    std::vector<int32_t> got;
    while (stream->Read(&r)) {
      EXPECT_TRUE(r.error_message().empty()) << r.error_message();
      const auto ids = OutputInt32(r.infer_response(), "output_ids");
      got.insert(got.end(), ids.begin(), ids.end());
    }
    ASSERT_TRUE(stream->Finish().ok());
    EXPECT_EQ(got, want);
    const json req = {{"text_input", "Once upon a time, there was a little girl who"},
                      {"max_tokens", 16},
                      {"exclude_input_in_output", true},
                      {"lora_task_id", 21}};
    for (const std::string model : {"ensemble", "tensorrt_llm_bls"}) {
      auto res = Post("/v2/models/" + model + "/generate", req.dump());
      ASSERT_TRUE(res);
      ASSERT_EQ(res->status, 200) << res->body.substr(0, 300);
      auto trimmed = [](std::string t) { return t.erase(0, t.find_first_not_of(' ')); };
      EXPECT_EQ(trimmed(json::parse(res->body)["text_output"].get<std::string>()),
                trimmed(model_->tokenizer()->Decode(want, true)))
          << model;
    }
  }
  // Errors.
  std::vector<int32_t> bad_module = config;
  bad_module[0] = 42;
  const std::vector<std::tuple<std::string, int, std::string>> bad = {
      {body("tensorrt_llm_sync", 99, false, {}), 400,
       "LoRA task 99 not found in cache. Please send LoRA weights with request"},
      {body("tensorrt_llm_sync", 8, true, bad_module), 400, "module id 42"},
  };
  for (const auto& [b, status, message] : bad) {
    auto res = Post("/v2/models/tensorrt_llm_sync/infer", b);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, status) << res->body;
    EXPECT_NE(res->body.find(message), std::string::npos) << res->body;
  }
  EXPECT_TRUE(WaitIdle("tensorrt_llm_sync"));
}

// P-tuning through KServe: virtual token ids (vocab_size + i) in input_ids take their
// embeddings from prompt_embedding_table; the output equals the engine's with the same table,
// and a table of real tokens' embeddings gives those tokens' output.
TEST_F(ServerE2eTest, PromptEmbeddingTableOverHttp) {
  const ModelConfig& c = model_->config();
  const std::vector<int32_t> real = Tokens("Once upon a time, there was a little girl who");
  // Rows: the first 4 prompt tokens' embeddings, rounded to FP16 as the request carries them.
  std::vector<float> table(4 * c.hidden_size);
  for (int i = 0; i < 4; ++i) model_->EmbeddingRow(real[i], table.data() + i * c.hidden_size);
  for (float& v : table) v = Fp16ToFp32(Fp32ToFp16(v));
  std::vector<int32_t> prompt = real;
  for (int i = 0; i < 4; ++i) prompt[i] = c.vocab_size + i;
  ExecutorConfig cfg;
  auto e = Executor::Create(*model_, cfg);
  ASSERT_TRUE(e.ok());
  Request q;
  q.prompt_ids = prompt;
  q.max_tokens = 16;
  q.sampling.temperature = 0;
  q.exclude_input_in_output = true;
  q.prompt_table = std::make_shared<std::vector<float>>(table);
  auto id = (*e)->Enqueue(q);
  ASSERT_TRUE(id.ok());
  std::vector<int32_t> want;
  for (bool done = false; !done;) {
    for (Result& res : (*e)->AwaitResponses(*id, std::chrono::milliseconds(1000))) {
      if (res.is_final) {
        want = res.output_token_ids;
        done = true;
      }
    }
  }
  auto body = [&](const std::vector<int32_t>& ids, int64_t rows, int vocab_rows) {
    json inputs = json::array({
        {{"name", "input_ids"}, {"datatype", "INT32"}, {"shape", {1, ids.size()}}, {"data", ids}},
        {{"name", "input_lengths"},
         {"datatype", "INT32"},
         {"shape", {1, 1}},
         {"data", {ids.size()}}},
        {{"name", "request_output_len"}, {"datatype", "INT32"}, {"shape", {1, 1}}, {"data", {16}}},
        {{"name", "exclude_input_in_output"},
         {"datatype", "BOOL"},
         {"shape", {1, 1}},
         {"data", {true}}},
    });
    if (rows > 0) {
      std::vector<float> t(table.begin(), table.begin() + rows * c.hidden_size);
      inputs.push_back({{"name", "prompt_embedding_table"},
                        {"datatype", "FP16"},
                        {"shape", {1, rows, c.hidden_size}},
                        {"data", t}});
    }
    if (vocab_rows > 0)
      inputs.push_back({{"name", "prompt_vocab_size"},
                        {"datatype", "INT32"},
                        {"shape", {1, 1}},
                        {"data", {vocab_rows}}});
    return json{{"inputs", inputs}}.dump();
  };
  auto ids_of = [](const std::string& text) {
    const json parsed = json::parse(text);
    for (const json& o : parsed["outputs"]) {
      if (o["name"] == "output_ids") return o["data"].get<std::vector<int32_t>>();
    }
    return std::vector<int32_t>();
  };
  auto r = Post("/v2/models/tensorrt_llm_sync/infer", body(prompt, 4, 4));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(ids_of(r->body), want);
  const std::vector<int32_t> plain = Alone(real, 16);
  // The FP16 rounding of the rows rarely changes a greedy token; when it does not, the
  // virtual tokens are the real ones.
  if (want != plain) std::fprintf(stderr, "note: FP16 rows changed the greedy output\n");
  // A virtual id past the table (or past prompt_vocab_size), and a table of the wrong width.
  for (const auto& [b, message] : std::vector<std::pair<std::string, std::string>>{
           {body(prompt, 4, 3), "outside the vocabulary"},
           {body(prompt, 0, 0), "outside the vocabulary"},
           {body(prompt, 4, 9), "prompt_vocab_size must be in [1, 4]"}}) {
    auto res = Post("/v2/models/tensorrt_llm_sync/infer", b);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400) << res->body;
    EXPECT_NE(res->body.find(message), std::string::npos) << res->body;
  }
  EXPECT_TRUE(WaitIdle("tensorrt_llm_sync"));
}

// Speculative decoding through KServe HTTP and gRPC: a client's draft_input_ids, the model's
// prompt lookup and a draft model (the demo model's first 2 layers) change no greedy output; the
// perf metrics and Prometheus count the drafts; bad drafts get 400 / INVALID_ARGUMENT and
// draft_logits UNIMPLEMENTED.
TEST_F(ServerE2eTest, SpeculativeDecodingOverHttpAndGrpc) {
  const std::vector<int32_t> prompt =
      Tokens("Lily went to the park. Lily went to the park. Lily went to the");
  const std::vector<int32_t> alone = Alone(prompt, 24);
  const std::vector<int32_t> guess(alone.begin(), alone.begin() + 4);
  auto body = [&](const std::string& extra) {
    json inputs = json::array({
        {{"name", "input_ids"},
         {"datatype", "INT32"},
         {"shape", {1, prompt.size()}},
         {"data", prompt}},
        {{"name", "input_lengths"},
         {"datatype", "INT32"},
         {"shape", {1, 1}},
         {"data", {prompt.size()}}},
        {{"name", "request_output_len"}, {"datatype", "INT32"}, {"shape", {1, 1}}, {"data", {24}}},
        {{"name", "exclude_input_in_output"},
         {"datatype", "BOOL"},
         {"shape", {1, 1}},
         {"data", {true}}},
        {{"name", "return_perf_metrics"},
         {"datatype", "BOOL"},
         {"shape", {1, 1}},
         {"data", {true}}},
    });
    if (!extra.empty()) inputs.push_back(json::parse(extra));
    return json{{"inputs", inputs}}.dump();
  };
  auto output = [](const json& j, const std::string& name) {
    for (const json& o : j["outputs"])
      if (o["name"] == name) return o["data"];
    return json();
  };
  const std::string drafts = json{
      {"name", "draft_input_ids"},
      {"datatype", "INT32"},
      {"shape", {1, guess.size()}},
      {"data", guess}}.dump();
  {
    // With the draft model's logits of the guesses too (greedy: the same output).
    json both = json::array({json::parse(drafts)});
    std::vector<float> logits(guess.size() * 1024, 0.0f);
    for (size_t i = 0; i < guess.size(); ++i) logits[i * 1024 + guess[i]] = 3.0f;
    both.push_back({{"name", "draft_logits"},
                    {"datatype", "FP32"},
                    {"shape", {1, guess.size(), 1024}},
                    {"data", logits}});
    json b = json::parse(body(""));
    for (const json& x : both) b["inputs"].push_back(x);
    auto r = Post("/v2/models/tensorrt_llm_sync/infer", b.dump());
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(output(json::parse(r->body), "output_ids").get<std::vector<int32_t>>(), alone);
  }
  for (const std::string model :
       {"tensorrt_llm_sync", "tensorrt_llm_spec", "tensorrt_llm_draft", "tensorrt_llm_lookahead",
        "tensorrt_llm_medusa", "tensorrt_llm_eagle", "tensorrt_llm_eagle1"}) {
    auto r = Post("/v2/models/" + model + "/infer", body(drafts));
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json j = json::parse(r->body);
    EXPECT_EQ(output(j, "output_ids").get<std::vector<int32_t>>(), alone) << model;
    const int total = output(j, "total_draft_tokens")[0],
              accepted = output(j, "total_accepted_draft_tokens")[0];
    EXPECT_GE(accepted, 4) << model << ": the client's 4 right drafts";
    EXPECT_GE(total, accepted);
    if (model == "tensorrt_llm_sync") {
      EXPECT_EQ(total, 4) << "no prompt lookup without speculative_decoding_mode";
    } else {
      EXPECT_GT(total, 4) << model
                          << ": prompt lookup, a draft model, lookahead, Medusa or EAGLE add "
                             "drafts";
    }
    EXPECT_NEAR(output(j, "acceptance_rate")[0].get<double>(),
                static_cast<double>(accepted) / total, 1e-6);
    // The request's inter-token latency (24 tokens): p50 <= p99, both measured.
    const double p50 = output(j, "inter_token_latency_p50_ms")[0],
                 p99 = output(j, "inter_token_latency_p99_ms")[0];
    EXPECT_GT(p50, 0) << model;
    EXPECT_GE(p99, p50) << model;
  }
  // gRPC: prompt lookup alone, and the per-request switch num_draft_tokens = 0.
  auto stub = GrpcStub(server_->grpc_port);
  for (int32_t per_request : {-1, 0}) {
    inference::ModelInferRequest q = LlmRequest("tensorrt_llm_spec", "spec", {prompt}, 24, false);
    auto add = [&](const char* name, const char* dtype, const std::string& raw) {
      auto* in = q.add_inputs();
      in->set_name(name);
      in->set_datatype(dtype);
      in->add_shape(1);
      in->add_shape(1);
      q.add_raw_input_contents(raw);
    };
    add("exclude_input_in_output", "BOOL", std::string(1, '\1'));
    add("return_perf_metrics", "BOOL", std::string(1, '\1'));
    if (per_request == 0) add("num_draft_tokens", "INT32", RawInt32({0}));
    grpc::ClientContext ctx;
    inference::ModelInferResponse resp;
    grpc::Status s = stub->ModelInfer(&ctx, q, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(OutputInt32(resp, "output_ids"), alone);
    const std::vector<int32_t> total = OutputInt32(resp, "total_draft_tokens");
    ASSERT_EQ(total.size(), 1u);
    if (per_request == 0) {
      EXPECT_EQ(total[0], 0);
    } else {
      EXPECT_GT(total[0], 0);
    }
  }
  // Bad drafts.
  const std::string forty_drafts = json{
      {"name", "draft_input_ids"},
      {"datatype", "INT32"},
      {"shape", {1, 40}},
      {"data",
       std::vector<int32_t>(40, 5)}}.dump();
  const std::vector<std::pair<std::string, std::pair<int, std::string>>> bad = {
      {R"({"name": "draft_input_ids", "datatype": "INT32", "shape": [1, 2], "data": [5, 99999]})",
       {400, "outside the vocabulary"}},
      {forty_drafts, {400, "at most 32"}},
      {R"({"name": "num_draft_tokens", "datatype": "INT32", "shape": [1, 1], "data": [99]})",
       {400, "num_draft_tokens must be in [0, 32]"}},
      {R"({"name": "draft_logits", "datatype": "FP32", "shape": [1, 1, 2], "data": [0.5, 0.5]})",
       {400, "draft_logits must be [draft tokens, 1024]"}},
  };
  for (const auto& [extra, want] : bad) {
    auto r = Post("/v2/models/tensorrt_llm_spec/infer", body(extra));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, want.first) << r->body;
    EXPECT_NE(r->body.find(want.second), std::string::npos) << r->body;
  }
  // Lookahead's per-request triple: within the model's (1, 5, 4), each field named when not.
  const std::vector<std::pair<std::string, std::string>> bad_lookahead = {
      {R"({"name": "lookahead_window_size", "datatype": "INT32", "shape": [1, 1], "data": [9]})",
       "lookahead_window_size 9 exceeds the model's 1"},
      {R"({"name": "lookahead_ngram_size", "datatype": "INT32", "shape": [1, 1], "data": [1]})",
       "lookahead_ngram_size must be >= 2"},
      {R"({"name": "lookahead_verification_set_size", "datatype": "INT32", "shape": [1, 1],
           "data": [-3]})",
       "lookahead_verification_set_size must be a whole number"},
  };
  for (const auto& [extra, want] : bad_lookahead) {
    auto r = Post("/v2/models/tensorrt_llm_lookahead/infer", body(extra));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << r->body;
    EXPECT_NE(r->body.find(want), std::string::npos) << r->body;
  }
  {
    // A smaller triple of the request's own keeps the output.
    auto r = Post("/v2/models/tensorrt_llm_lookahead/infer",
                  body(R"({"name": "lookahead_ngram_size", "datatype": "INT32", "shape": [1, 1],
                           "data": [3]})"));
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(output(json::parse(r->body), "output_ids").get<std::vector<int32_t>>(), alone);
  }
  {
    // Through the ensemble to a model that does not run lookahead: 400 naming the fields.
    auto r = Post("/v2/models/ensemble/generate",
                  R"({"text_input": "Lily went to the park.", "max_tokens": 4,
                      "lookahead_window_size": 2})");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << r->body;
    EXPECT_NE(r->body.find("lookahead_window_size"), std::string::npos) << r->body;
  }
  // The BLS model passes num_draft_tokens on (0: no drafts for this request).
  for (int per_request : {-1, 0}) {
    json body = {{"text_input", "Lily went to the park. Lily went to the park. Lily went to the"},
                 {"max_tokens", 24},
                 {"return_perf_metrics", true}};
    if (per_request == 0) body["num_draft_tokens"] = 0;
    auto r = Post("/v2/models/bls_spec/generate", body.dump());
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json j = json::parse(r->body);
    if (per_request == 0) {
      EXPECT_EQ(j["total_draft_tokens"], 0) << r->body;
    } else {
      EXPECT_GT(j["total_draft_tokens"].get<int>(), 0) << r->body;
    }
  }
  EXPECT_TRUE(WaitIdle("tensorrt_llm_spec"));
  const std::string metrics = Metrics();
  // Acceptance per mode.
  for (const char* series : {"inflight_speculative_accepted_draft_tokens_total{mode=\"prompt_"
                             "lookup\",model=\"tensorrt_llm_spec\"",
                             "inflight_speculative_accepted_draft_tokens_total{mode=\"lookahead\","
                             "model=\"tensorrt_llm_lookahead\"",
                             "inflight_speculative_draft_tokens_total{mode=\"draft_model\",model="
                             "\"tensorrt_llm_draft\"",
                             "inflight_speculative_draft_tokens_total{mode=\"eagle\",model="
                             "\"tensorrt_llm_eagle\""}) {
    EXPECT_NE(metrics.find(series), std::string::npos) << series;
  }
}

TEST_F(ServerE2eTest, ConcurrentStreamingClientsAreBatchedAndKeepTheirOutputs) {
  constexpr int kClients = 32, kTokens = 64;
  std::vector<std::vector<int32_t>> prompts, expected;
  for (int i = 0; i < kClients; ++i) {
    std::string text = "Once upon a time, there was a";
    for (int k = 0; k < i % 7; ++k) text += " little";
    text += i % 2 ? " girl named Mia" : " dog named Max";
    text += " who liked number " + std::to_string(i) + ".";
    prompts.push_back(Tokens(text));
    expected.push_back(Alone(prompts.back(), kTokens));
  }
  std::atomic<bool> done{false};
  double max_scheduled = 0;
  std::thread poller([&] {
    while (!done) {
      max_scheduled = std::max(
          max_scheduled, MetricValue(Metrics(), "nv_trt_llm_request_metrics",
                                     {{"model", "tensorrt_llm"}, {"request_type", "scheduled"}}));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  std::vector<std::vector<int32_t>> got(kClients);
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] {
      json req = {{"input_ids", prompts[i]},
                  {"input_lengths", prompts[i].size()},
                  {"request_output_len", kTokens},
                  {"streaming", true}};
      auto r = Post("/v2/models/tensorrt_llm/generate_stream", req.dump());
      if (!r) {
        ADD_FAILURE() << "client " << i << ": " << httplib::to_string(r.error());
        return;
      }
      EXPECT_EQ(r->status, 200) << r->body;
      for (const auto& e : SseEvents(r->body)) {
        const json& ids = e["output_ids"];
        if (ids.is_array()) {
          for (int id : ids) got[i].push_back(id);
        } else {
          got[i].push_back(ids.get<int>());
        }
      }
    });
  }
  for (auto& t : clients) t.join();
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  done = true;
  poller.join();
  for (int i = 0; i < kClients; ++i) EXPECT_EQ(got[i], expected[i]) << "client " << i;
  EXPECT_GT(max_scheduled, 1)
      << "nv_trt_llm_request_metrics{request_type=scheduled} never showed a batch";
  EXPECT_TRUE(WaitIdle("tensorrt_llm"));
}

struct BadCase {
  std::string name, method, path, body;
  int status;
  std::string error;  // substring of the "error" field
};

TEST_F(ServerE2eTest, BadInputGetsTheSpecErrorAndTheServerKeepsServing) {
  std::string long_text;
  for (int i = 0; i < 700; ++i) long_text += "dog ";
  auto infer = [](const std::string& inputs) { return R"({"inputs": [)" + inputs + "]}"; };
  const std::string ids =
      R"({"name": "input_ids", "datatype": "INT32", "shape": [1, 3], "data": [1, 2, 3]})";
  const std::string len =
      R"({"name": "input_lengths", "datatype": "INT32", "shape": [1, 1], "data": [3]})";
  const std::string out =
      R"({"name": "request_output_len", "datatype": "INT32", "shape": [1, 1], "data": [4]})";
  const std::vector<BadCase> cases = {
      {"malformed JSON", "POST", "/v2/models/ensemble/generate", R"({"text_input": "hi")", 400,
       "invalid JSON"},
      {"malformed JSON infer", "POST", "/v2/models/tensorrt_llm_sync/infer", "{nope", 400,
       "invalid JSON"},
      {"wrong datatype", "POST", "/v2/models/tensorrt_llm_sync/infer",
       infer(R"({"name": "input_ids", "datatype": "FP32", "shape": [1, 3], "data": [1, 2, 3]},)" +
             len + "," + out),
       400, "data-type is 'FP32', but model 'tensorrt_llm_sync' expects 'INT32'"},
      {"wrong shape", "POST", "/v2/models/tensorrt_llm_sync/infer",
       infer(
           ids +
           R"(, {"name": "input_lengths", "datatype": "INT32", "shape": [1, 2], "data": [3, 3]},)" +
           out),
       400, "unexpected shape for input 'input_lengths'"},
      {"element count", "POST", "/v2/models/tensorrt_llm_sync/infer",
       infer(R"({"name": "input_ids", "datatype": "INT32", "shape": [1, 4], "data": [1, 2, 3]},)" +
             len + "," + out),
       400, "expected 4 elements"},
      {"missing required input", "POST", "/v2/models/tensorrt_llm_sync/infer",
       infer(ids + "," + len), 400, "missing required input(s) ['request_output_len']"},
      {"unknown model", "POST", "/v2/models/nope/generate", "{}", 404,
       "Request for unknown model: 'nope' is not found"},
      {"unknown version", "POST", "/v2/models/ensemble/versions/7/generate",
       R"({"text_input": "hi", "max_tokens": 3})", 404, "version 7 is not found"},
      {"prompt longer than the context", "POST", "/v2/models/ensemble/generate",
       json{{"text_input", long_text}, {"max_tokens", 4}}.dump(), 400, "context"},
      {"max_tokens 0", "POST", "/v2/models/ensemble/generate",
       R"({"text_input": "hi", "max_tokens": 0})", 400, "request_output_len must be at least 1"},
      // The two requests that crashed the server: a shape whose product wraps int64 around to
      // 1 (7 x 7905747460161236407 = 2^64 x 3 + 1) and 10^5 nested arrays.
      {"shape product overflows int64", "POST", "/v2/models/tensorrt_llm_sync/infer",
       infer(
           ids + "," + len + "," + out +
           R"(, {"name": "prompt_embedding_table", "datatype": "FP16", "shape": [1, 7, 7905747460161236407], "data": [1]})"),
       400, "overflows"},
      {"10^5 nested arrays in infer data", "POST", "/v2/models/tensorrt_llm_sync/infer",
       infer(R"({"name": "input_ids", "datatype": "INT32", "shape": [1, 1], "data": )" +
             std::string(100000, '[') + "1" + std::string(100000, ']') + "}"),
       400, "nesting deeper than"},
      {"10^5 nested arrays in generate", "POST", "/v2/models/ensemble/generate",
       R"({"text_input": )" + std::string(100000, '[') + std::string(100000, ']') + "}", 400,
       "nesting deeper than"},
      {"generate on a decoupled stream", "POST", "/v2/models/tensorrt_llm/generate",
       R"({"input_ids": [1, 2, 3], "input_lengths": 3, "request_output_len": 4, "streaming": true})",
       200, "generate expects model to produce exactly 1 response"},
      {"infer on a decoupled model", "POST", "/v2/models/tensorrt_llm/infer",
       infer(ids + "," + len + "," + out), 501,
       "HTTP end point doesn't support models with decoupled transaction policy"},
      {"reserved parameter", "POST", "/v2/models/tensorrt_llm_sync/infer",
       R"({"parameters": {"triton_x": 1}, "inputs": [)" + ids + "," + len + "," + out + "]}", 400,
       "parameter keys starting with 'triton_' are reserved"},
      {"bad parameter type", "POST", "/v2/models/ensemble/generate",
       R"({"text_input": "hi", "max_tokens": 3, "foo": [1]})", 400,
       "parameter 'foo' has invalid type"},
      {"token id out of range", "POST", "/v2/models/tensorrt_llm/generate",
       R"({"input_ids": [1, 99999], "input_lengths": 2, "request_output_len": 4})", 400, ""},
      {"wrong method", "GET", "/v2/models/ensemble/generate", "", 405, "Method Not Allowed"},
      {"unknown path", "GET", "/v2/nothing/here", "", 404, "Not Found"},
  };
  for (const BadCase& c : cases) {
    auto cli = Http();
    auto r = c.method == "GET" ? cli.Get(c.path.c_str())
                               : cli.Post(c.path.c_str(), c.body, "application/json");
    ASSERT_TRUE(r) << c.name;
    EXPECT_EQ(r->status, c.status) << c.name << ": " << r->body;
    json j = json::parse(r->body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << c.name << ": " << r->body;
    EXPECT_NE(j["error"].get<std::string>().find(c.error), std::string::npos)
        << c.name << ": " << j["error"];
    // After each: no KV block held, nothing left running.
    EXPECT_TRUE(WaitIdle("tensorrt_llm")) << c.name;
    EXPECT_TRUE(WaitIdle("tensorrt_llm_sync")) << c.name;
  }
  auto ok = Post("/v2/models/ensemble/generate",
                 R"({"text_input": "Once upon a time", "max_tokens": 5})");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
}

TEST_F(ServerE2eTest, FullQueueIsRefusedWith503AndNothingLeaks) {
  const std::vector<int32_t> prompt = Tokens("Once upon a time there was a dog.");
  json body = {{"inputs",
                {{{"name", "input_ids"},
                  {"datatype", "INT32"},
                  {"shape", {1, prompt.size()}},
                  {"data", prompt}},
                 {{"name", "input_lengths"},
                  {"datatype", "INT32"},
                  {"shape", {1, 1}},
                  {"data", {prompt.size()}}},
                 {{"name", "request_output_len"},
                  {"datatype", "INT32"},
                  {"shape", {1, 1}},
                  {"data", {400}}}}}};
  std::vector<int> statuses(8);
  std::vector<std::string> bodies(8);
  std::vector<std::thread> clients;
  for (int i = 0; i < 8; ++i) {
    clients.emplace_back([&, i] {
      auto r = Post("/v2/models/tensorrt_llm_q1/infer", body.dump());
      statuses[i] = r ? r->status : -1;
      bodies[i] = r ? r->body : "";
    });
  }
  for (auto& t : clients) t.join();
  int refused = 0, served = 0;
  for (int i = 0; i < 8; ++i) {
    if (statuses[i] == 503) {
      ++refused;
      EXPECT_NE(bodies[i].find("Maximum queue size of 1 has been reached, please try again later"),
                std::string::npos)
          << bodies[i];
    } else {
      EXPECT_EQ(statuses[i], 200) << bodies[i];
      ++served;
    }
  }
  EXPECT_GE(refused, 1);
  EXPECT_GE(served, 1);
  EXPECT_TRUE(WaitIdle("tensorrt_llm_q1"));
  const std::string m = Metrics();
  EXPECT_GE(MetricValue(m, "nv_inference_request_failure",
                        {{"model", "tensorrt_llm_q1"}, {"reason", "REJECTED"}}),
            refused);
}

TEST_F(ServerE2eTest, ClientThatLeavesIsCancelledAndItsBlocksFreed) {
  const auto canceled = [] {
    return std::max(0.0, MetricValue(Metrics(), "nv_inference_request_failure",
                                     {{"model", "tensorrt_llm"}, {"reason", "CANCELED"}}));
  };
  const double before = canceled();
  const std::vector<int32_t> prompt = Tokens("Once upon a time");
  {
    // HTTP: the client closes the stream after the first event.
    httplib::Request req;
    req.method = "POST";
    req.path = "/v2/models/tensorrt_llm/generate_stream";
    req.body = json{
        {"input_ids", prompt},
        {"input_lengths", prompt.size()},
        {"request_output_len", 480},
        {"streaming",
         true}}.dump();
    req.set_header("Content-Type", "application/json");
    int events = 0;
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      events += std::string(data, n).find("data: ") != std::string::npos;
      return events < 1;
    };
    auto cli = Http();
    cli.send(req);
    EXPECT_EQ(events, 1);
  }
  bool seen = false;
  for (int i = 0; i < 100 && !seen; ++i) {
    seen = canceled() >= before + 1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(seen) << "the request was not cancelled";
  EXPECT_TRUE(WaitIdle("tensorrt_llm"));
  {
    // gRPC: the client cancels the stream after the first response.
    auto stub = GrpcStub(server_->grpc_port);
    grpc::ClientContext ctx;
    auto stream = stub->ModelStreamInfer(&ctx);
    // Typed `contents` this time instead of raw bytes.
    inference::ModelInferRequest q;
    q.set_model_name("tensorrt_llm");
    q.set_id("leaving");
    auto add = [&](const char* name, const char* dtype, std::vector<int64_t> shape) {
      auto* in = q.add_inputs();
      in->set_name(name);
      in->set_datatype(dtype);
      for (int64_t d : shape) in->add_shape(d);
      return in->mutable_contents();
    };
    auto* ids = add("input_ids", "INT32", {1, static_cast<int64_t>(prompt.size())});
    for (int32_t id : prompt) ids->add_int_contents(id);
    add("input_lengths", "INT32", {1, 1})->add_int_contents(static_cast<int32_t>(prompt.size()));
    add("request_output_len", "INT32", {1, 1})->add_int_contents(480);
    add("streaming", "BOOL", {1, 1})->add_bool_contents(true);
    ASSERT_TRUE(stream->Write(q));
    inference::ModelStreamInferResponse r;
    ASSERT_TRUE(stream->Read(&r));
    EXPECT_TRUE(r.error_message().empty()) << r.error_message();
    ctx.TryCancel();
    while (stream->Read(&r)) {
    }
    stream->Finish();
  }
  seen = false;
  for (int i = 0; i < 100 && !seen; ++i) {
    seen = canceled() >= before + 2;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(seen) << "the gRPC request was not cancelled";
  EXPECT_TRUE(WaitIdle("tensorrt_llm"));
}

TEST_F(ServerE2eTest, MetadataConfigReadyIndexAndStatistics) {
  auto cli = Http();
  ASSERT_EQ(
      Post("/v2/models/ensemble/generate", R"({"text_input": "Once", "max_tokens": 3})")->status,
      200);
  EXPECT_EQ(cli.Get("/v2/health/live")->status, 200);
  EXPECT_EQ(cli.Get("/v2/health/ready")->status, 200);
  EXPECT_EQ(cli.Get("/v2/models/ensemble/ready")->status, 200);
  auto not_ready = cli.Get("/v2/models/nope/ready");
  EXPECT_EQ(not_ready->status, 400);
  EXPECT_EQ(json::parse(not_ready->body)["error"], "Model version not ready");
  json meta = json::parse(cli.Get("/v2/models/ensemble")->body);
  EXPECT_EQ(meta["platform"], "ensemble");
  EXPECT_EQ(meta["inputs"][0]["name"], "text_input");
  EXPECT_EQ(meta["inputs"][0]["datatype"], "BYTES");
  EXPECT_EQ(meta["inputs"][0]["shape"], json({-1, 1}));
  json config = json::parse(cli.Get("/v2/models/tensorrt_llm/config")->body);
  EXPECT_EQ(config["model_transaction_policy"]["decoupled"], true);
  EXPECT_EQ(config["input"][0]["dims"], json({-1}));  // int64 as numbers
  EXPECT_EQ(config["input"][0]["data_type"], "TYPE_INT32");
  EXPECT_EQ(config["parameters"]["gpt_model_type"]["string_value"], "inflight_fused_batching");
  json ens_config = json::parse(cli.Get("/v2/models/ensemble/config")->body);
  EXPECT_EQ(ens_config["model_transaction_policy"]["decoupled"], true)
      << "decoupled propagates from the steps";
  json index = json::parse(cli.Post("/v2/repository/index", "{}", "application/json")->body);
  EXPECT_EQ(index.size(), 18u);
  for (const auto& m : index) EXPECT_EQ(m["state"], "READY") << m;
  auto load = cli.Post("/v2/repository/models/ensemble/load", "{}", "application/json");
  EXPECT_EQ(load->status, 503);
  EXPECT_EQ(json::parse(load->body)["error"],
            "explicit model load / unload is not allowed if polling is enabled");
  json stats = json::parse(cli.Get("/v2/models/ensemble/stats")->body);
  ASSERT_EQ(stats["model_stats"].size(), 1u);
  EXPECT_GE(stats["model_stats"][0]["inference_stats"]["success"]["count"].get<int>(), 1);
  json server = json::parse(cli.Get("/v2")->body);
  EXPECT_TRUE(server["extensions"].is_array());
}

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

TEST_F(ServerE2eTest, RealPrometheusScrapesTheSameValues) {
  const std::string prometheus = "/usr/bin/prometheus";
  if (!fs::exists(prometheus)) {
    if (testing::InCi())
      FAIL() << "CI=true but " << prometheus << " is missing (scripts/install-deps.sh installs it)";
    GTEST_SKIP() << prometheus << " is not installed (Debian package prometheus)";
  }
  const fs::path dir =
      fs::temp_directory_path() / ("inflight_prometheus_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "data");
  std::ofstream(dir / "prometheus.yml")
      << "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: inflight\n"
         "    static_configs:\n      - targets: ['127.0.0.1:"
      << server_->metrics_port << "']\n";
  const int port = FreePort();
  const pid_t pid = fork();
  if (pid == 0) {
    freopen("/dev/null", "w", stdout);
    freopen((dir / "prometheus.log").c_str(), "w", stderr);
    execl(prometheus.c_str(), prometheus.c_str(),
          ("--config.file=" + (dir / "prometheus.yml").string()).c_str(),
          ("--storage.tsdb.path=" + (dir / "data").string()).c_str(),
          ("--web.listen-address=127.0.0.1:" + std::to_string(port)).c_str(), nullptr);
    _exit(127);
  }
  for (int i = 0; i < 3; ++i) {
    auto r = Post("/v2/models/ensemble/generate",
                  R"({"text_input": "Once upon a time", "max_tokens": 8})");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200);
  }
  // Nothing else runs now, so the counters stand still until Prometheus has scraped them.
  const std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::string>>>>
      samples = {
          {"nv_inference_request_success", {{"model", "ensemble"}}},
          {"nv_inference_exec_count", {{"model", "tensorrt_llm"}}},
          {"nv_llm_output_token_len_count", {{"model", "tensorrt_llm"}}},
          {"nv_trt_llm_kv_cache_block_metrics",
           {{"model", "tensorrt_llm"}, {"kv_cache_block_type", "max"}}},
      };
  httplib::Client prom("127.0.0.1", port);
  bool matched = false;
  std::string last;
  for (int attempt = 0; attempt < 60 && !matched; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    const std::string ours = Metrics();
    matched = true;
    for (const auto& [name, labels] : samples) {
      std::string query = name + "{";
      for (size_t i = 0; i < labels.size(); ++i)
        query += (i ? "," : "") + labels[i].first + "=\"" + labels[i].second + "\"";
      query += "}";
      auto r =
          prom.Get(("/api/v1/query?query=" + httplib::detail::encode_query_param(query)).c_str());
      if (!r || r->status != 200) {
        matched = false;
        break;
      }
      json j = json::parse(r->body, nullptr, false);
      if (j.is_discarded() || j["data"]["result"].empty()) {
        matched = false;
        last = r->body;
        break;
      }
      const double scraped = std::stod(j["data"]["result"][0]["value"][1].get<std::string>());
      const double own = MetricValue(ours, name, labels);
      last = name + ": prometheus " + std::to_string(scraped) + ", server " + std::to_string(own);
      matched = matched && own >= 1 && scraped == own;
    }
  }
  kill(pid, SIGTERM);
  waitpid(pid, nullptr, 0);
  EXPECT_TRUE(matched) << last;
  fs::remove_all(dir);
}

TEST_F(ServerE2eTest, InvalidUtf8FromTheModelIsReplacedNotFatal) {
  // A lone continuation byte (random weights emit such tokens) once made the JSON encoder throw
  // and the server abort. Now it becomes U+FFFD and the server keeps serving.
  const int32_t lone = model_->tokenizer()->Find("<0xB2>");
  ASSERT_GE(lone, 0);
  const int32_t word = Tokens("dog").back();
  json req = {{"TOKENS_BATCH", {word, lone, word}}, {"SEQUENCE_LENGTH", 3}};
  auto r = Post("/v2/models/postprocessing/generate", req.dump());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const std::string text = json::parse(r->body)["OUTPUT"];
  EXPECT_NE(text.find("\xEF\xBF\xBD"), std::string::npos) << text;
  EXPECT_NE(text.find("dog"), std::string::npos) << text;
  // The same through the SSE path (where the exception used to end the process).
  auto stream = Post("/v2/models/postprocessing/generate_stream", req.dump());
  ASSERT_TRUE(stream);
  auto events = SseEvents(stream->body);
  ASSERT_EQ(events.size(), 1u) << stream->body;
  EXPECT_EQ(events[0]["OUTPUT"], text);
  EXPECT_EQ(Http().Get("/v2/health/live")->status, 200);
}

TEST_F(ServerE2eTest, BatchedRequestFansOutWithBatchIndex) {
  const std::vector<std::vector<int32_t>> rows = {Tokens("Tom saw a big red bus."),
                                                  Tokens("Mia ate a sweet green pear.")};
  ASSERT_NE(rows[0].size(), rows[1].size()) << "the shorter row is padded";
  auto stub = GrpcStub(server_->grpc_port);
  grpc::ClientContext ctx;
  auto stream = stub->ModelStreamInfer(&ctx);
  ASSERT_TRUE(stream->Write(LlmRequest("tensorrt_llm", "batch", rows, 16, true)));
  stream->WritesDone();
  std::vector<std::vector<int32_t>> got(2);
  inference::ModelStreamInferResponse r;
  int finals = 0;
  while (stream->Read(&r)) {
    ASSERT_TRUE(r.error_message().empty()) << r.error_message();
    auto index = OutputInt32(r.infer_response(), "batch_index");
    ASSERT_EQ(index.size(), 1u);
    ASSERT_LT(index[0], 2);
    auto ids = OutputInt32(r.infer_response(), "output_ids");
    got[index[0]].insert(got[index[0]].end(), ids.begin(), ids.end());
    finals += r.infer_response().parameters().at("triton_final_response").bool_param();
  }
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(finals, 1) << "only the last response of the batch is final";
  EXPECT_EQ(got[0], Alone(rows[0], 16));
  EXPECT_EQ(got[1], Alone(rows[1], 16));
}

TEST_F(ServerE2eTest, StopRequestEndsTheRunningRequestWithTheSameId) {
  const std::vector<int32_t> prompt = Tokens("Once upon a time");
  auto stub = GrpcStub(server_->grpc_port);
  grpc::ClientContext ctx;
  auto stream = stub->ModelStreamInfer(&ctx);
  ASSERT_TRUE(stream->Write(LlmRequest("tensorrt_llm", "to-stop", {prompt}, 480, true)));
  inference::ModelStreamInferResponse r;
  ASSERT_TRUE(stream->Read(&r));
  ASSERT_TRUE(r.error_message().empty()) << r.error_message();
  // The reference's stop: a new request with the same id and stop=true (other inputs ignored).
  ASSERT_TRUE(stream->Write(StopRequest("tensorrt_llm", "to-stop", prompt)));
  stream->WritesDone();
  int tokens = 1, finals = 0, empty_finals = 0;
  while (stream->Read(&r)) {
    ASSERT_TRUE(r.error_message().empty()) << r.error_message();
    const bool final = r.infer_response().parameters().at("triton_final_response").bool_param();
    finals += final;
    if (r.infer_response().outputs_size() == 0) {
      empty_finals += final;
    } else {
      tokens += static_cast<int>(OutputInt32(r.infer_response(), "output_ids").size());
    }
  }
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(finals, 2) << "the stopped request and the stop request each end once";
  EXPECT_EQ(empty_finals, 1) << "the stop request is answered with an empty final response";
  EXPECT_LT(tokens, 480);
  EXPECT_TRUE(WaitIdle("tensorrt_llm"));
}

TEST_F(ServerE2eTest, BinaryTensorExtensionOnInfer) {
  const std::vector<int32_t> prompt = Tokens("The little cat");
  json header = {
      {"inputs",
       {{{"name", "input_ids"},
         {"datatype", "INT32"},
         {"shape", {1, prompt.size()}},
         {"parameters", {{"binary_data_size", prompt.size() * 4}}}},
        {{"name", "input_lengths"},
         {"datatype", "INT32"},
         {"shape", {1, 1}},
         {"data", {prompt.size()}}},
        {{"name", "request_output_len"}, {"datatype", "INT32"}, {"shape", {1, 1}}, {"data", {6}}}}},
      {"outputs",
       {{{"name", "output_ids"}, {"parameters", {{"binary_data", true}}}},
        {{"name", "sequence_length"}}}}};
  const std::string h = header.dump();
  httplib::Headers headers = {{"Inference-Header-Content-Length", std::to_string(h.size())}};
  auto r = Http().Post("/v2/models/tensorrt_llm_sync/infer", headers, h + RawInt32(prompt),
                       "application/octet-stream");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const size_t json_len = std::stoul(r->get_header_value("Inference-Header-Content-Length"));
  json resp = json::parse(r->body.substr(0, json_len));
  ASSERT_EQ(resp["outputs"].size(), 2u) << resp;
  EXPECT_EQ(resp["outputs"][0]["name"], "output_ids");
  const size_t n = resp["outputs"][0]["parameters"]["binary_data_size"];
  std::vector<int32_t> ids(n / 4);
  if (n > 0) std::memcpy(ids.data(), r->body.data() + json_len, n);
  std::vector<int32_t> expected = prompt;
  const auto gen = Alone(prompt, 6);
  expected.insert(expected.end(), gen.begin(), gen.end());
  EXPECT_EQ(ids, expected);
  EXPECT_EQ(resp["outputs"][1]["data"], json({expected.size()}));
}

TEST_F(ServerE2eTest, GrpcUnaryRpcs) {
  auto stub = GrpcStub(server_->grpc_port);
  {
    grpc::ClientContext ctx;
    inference::ServerLiveResponse r;
    ASSERT_TRUE(stub->ServerLive(&ctx, {}, &r).ok());
    EXPECT_TRUE(r.live());
  }
  {
    grpc::ClientContext ctx;
    inference::ModelMetadataRequest q;
    q.set_name("tensorrt_llm");
    inference::ModelMetadataResponse r;
    ASSERT_TRUE(stub->ModelMetadata(&ctx, q, &r).ok());
    EXPECT_EQ(r.platform(), "tensorrtllm");
    EXPECT_EQ(r.inputs(0).name(), "input_ids");
    EXPECT_EQ(r.inputs(0).shape_size(), 2);
  }
  {
    grpc::ClientContext ctx;
    inference::ModelConfigRequest q;
    q.set_name("ensemble");
    inference::ModelConfigResponse r;
    ASSERT_TRUE(stub->ModelConfig(&ctx, q, &r).ok());
    EXPECT_EQ(r.config().ensemble_scheduling().step_size(), 3);
  }
  {
    grpc::ClientContext ctx;
    inference::ModelConfigRequest q;
    q.set_name("nope");
    inference::ModelConfigResponse r;
    EXPECT_EQ(stub->ModelConfig(&ctx, q, &r).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  {
    grpc::ClientContext ctx;
    inference::RepositoryIndexResponse r;
    ASSERT_TRUE(stub->RepositoryIndex(&ctx, {}, &r).ok());
    EXPECT_EQ(r.models_size(), 18);
  }
  {
    grpc::ClientContext ctx;
    inference::ModelStatisticsRequest q;
    inference::ModelStatisticsResponse r;
    ASSERT_TRUE(stub->ModelStatistics(&ctx, q, &r).ok());
    EXPECT_EQ(r.model_stats_size(), 18);
  }
  {
    // A bad request on the stream gets an error response and the stream stays usable.
    grpc::ClientContext ctx;
    auto stream = stub->ModelStreamInfer(&ctx);
    inference::ModelInferRequest bad = LlmRequest("tensorrt_llm", "bad", {{1, 2}}, 0, true);
    ASSERT_TRUE(stream->Write(bad));
    ASSERT_TRUE(stream->Write(LlmRequest("tensorrt_llm", "good", {{1, 2}}, 3, false)));
    stream->WritesDone();
    inference::ModelStreamInferResponse r;
    std::map<std::string, std::string> errors;
    int good = 0;
    while (stream->Read(&r)) {
      if (!r.error_message().empty()) errors[r.infer_response().id()] = r.error_message();
      if (r.infer_response().id() == "good" && r.error_message().empty()) ++good;
    }
    EXPECT_TRUE(stream->Finish().ok());
    EXPECT_EQ(errors.size(), 1u);
    EXPECT_NE(errors["bad"].find("request_output_len must be at least 1"), std::string::npos);
    EXPECT_EQ(good, 1);
  }
}

TEST(ServerExplicitModeTest, LoadAndUnloadThroughTheRepositoryApi) {
  const fs::path repo =
      fs::temp_directory_path() / ("inflight_explicit_repo_" + std::to_string(getpid()));
  fs::remove_all(repo);
  const std::string cmd = std::string(INFLIGHT_BINARY_DIR) +
                          "/apps/inflight-server init-repo --model " + DemoModel() + " --out " +
                          repo.string() + " > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  // A broken model fails alone; the rest of the repository still loads.
  fs::create_directories(repo / "broken" / "1");
  std::ofstream(repo / "broken" / "config.pbtxt")
      << "name: \"broken\"\nbackend: \"tensorrtllm\"\nmax_batch_sise: 3\n";
  // Flags may come from a config file and from the environment too.
  std::ofstream(repo / "server.toml") << "model-control-mode = \"explicit\"\n";
  setenv("INFLIGHT_LOAD_MODEL", "preprocessing", 1);
  auto server = ServerProcess::Start(
      {"--model-repository", repo.string(), "--config-file", (repo / "server.toml").string()});
  unsetenv("INFLIGHT_LOAD_MODEL");
  ASSERT_NE(server, nullptr);
  httplib::Client c("127.0.0.1", server->http_port);
  auto index = [&] {
    std::map<std::string, std::string> states;
    for (const auto& m :
         json::parse(c.Post("/v2/repository/index", "", "application/json")->body)) {
      states[m["name"]] = m.value("state", "");
    }
    return states;
  };
  EXPECT_EQ(index()["preprocessing"], "READY");
  EXPECT_EQ(index()["ensemble"], "");
  EXPECT_EQ(c.Get("/v2/models/ensemble/ready")->status, 400);
  // Loading the ensemble loads its steps.
  auto load = c.Post("/v2/repository/models/ensemble/load", "", "application/json");
  ASSERT_EQ(load->status, 200) << load->body;
  EXPECT_EQ(index()["tensorrt_llm"], "READY");
  auto gen = c.Post("/v2/models/ensemble/generate",
                    R"({"text_input": "Once upon a time", "max_tokens": 4})", "application/json");
  EXPECT_EQ(gen->status, 200) << gen->body;
  auto broken = c.Post("/v2/repository/models/broken/load", "", "application/json");
  EXPECT_EQ(broken->status, 400);
  EXPECT_NE(json::parse(broken->body)["error"].get<std::string>().find("max_batch_sise"),
            std::string::npos)
      << broken->body;
  EXPECT_EQ(index()["broken"], "UNAVAILABLE");
  auto unload = c.Post("/v2/repository/models/ensemble/unload",
                       R"({"parameters": {"unload_dependents": true}})", "application/json");
  ASSERT_EQ(unload->status, 200) << unload->body;
  EXPECT_EQ(c.Get("/v2/models/ensemble/ready")->status, 400);
  EXPECT_EQ(c.Get("/v2/models/tensorrt_llm/ready")->status, 400);
  auto after = c.Post("/v2/models/ensemble/generate", R"({"text_input": "x", "max_tokens": 4})",
                      "application/json");
  EXPECT_EQ(after->status, 404);
  auto missing = c.Post("/v2/repository/models/nothing/load", "", "application/json");
  EXPECT_EQ(missing->status, 404);
  server.reset();
  fs::remove_all(repo);
}

TEST(ServerPollModeTest, NewAndRemovedModelsAreNoticed) {
  const fs::path repo =
      fs::temp_directory_path() / ("inflight_poll_repo_" + std::to_string(getpid()));
  const fs::path full =
      fs::temp_directory_path() / ("inflight_poll_full_" + std::to_string(getpid()));
  fs::remove_all(repo);
  fs::remove_all(full);
  const std::string cmd = std::string(INFLIGHT_BINARY_DIR) +
                          "/apps/inflight-server init-repo --model " + DemoModel() + " --out " +
                          full.string() + " > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  fs::create_directories(repo);
  fs::copy(full / "weights", repo / "weights",
           fs::copy_options::recursive);  // what the configs name
  fs::copy(full / "preprocessing", repo / "preprocessing", fs::copy_options::recursive);
  auto server = ServerProcess::Start({"--model-repository", repo.string(), "--model-control-mode",
                                      "poll", "--repository-poll-secs", "1"});
  ASSERT_NE(server, nullptr);
  httplib::Client c("127.0.0.1", server->http_port);
  auto ready = [&](const std::string& m) {
    return c.Get(("/v2/models/" + m + "/ready").c_str())->status == 200;
  };
  EXPECT_TRUE(ready("preprocessing"));
  EXPECT_FALSE(ready("postprocessing"));
  fs::copy(full / "postprocessing", repo / "postprocessing", fs::copy_options::recursive);
  bool appeared = false;
  for (int i = 0; i < 100 && !appeared; ++i) {
    appeared = ready("postprocessing");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(appeared);
  fs::remove_all(repo / "preprocessing");
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    gone = !ready("preprocessing");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(gone);
  EXPECT_EQ(c.Post("/v2/repository/models/preprocessing/load", "", "application/json")->status,
            503);
  server.reset();
  fs::remove_all(repo);
  fs::remove_all(full);
}

}  // namespace
}  // namespace inflight
