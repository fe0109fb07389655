// Disaggregated serving end to end: two inflight servers on the demo model's repository (one
// serves context phases, the other generation phases) and a front server whose tensorrt_llm
// model is the router to them (init-repo --disaggregated-context-url/-generation-url). The
// front serves exactly the aggregated texts and token ids (greedy, streamed, seeded sampling,
// n = 2, beams, a shared prefix, long prompts), the generation server counts every transfer in
// nv_trt_llm_disaggregated_serving_metrics, a corrupt hand-off is refused, and killing either
// worker ends open streams with an error naming it and makes the router not ready within 5 s.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>

#include "llm_grpc_requests.h"
#include "server_harness.h"
#include "test_util.h"

namespace inflight {
namespace {

namespace fs = std::filesystem;
using testing::Generate;
using testing::GenerateStream;
using testing::Streamed;

std::string DemoModel() { return testing::SourceDir() + "/models/demo/inflight-demo-q8_0.gguf"; }

const std::vector<std::string> kPrompts = {
    "Once upon a time",
    "The little dog ran to the park with his ball and his friend, a big cat who liked to sleep "
    "in the sun all day long. One day they found a box under a tree.",
    "Lily and Ben went to the park"};

int HttpStatus(int port, const std::string& path) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(1);
  auto r = c.Get(path.c_str());
  return r ? r->status : 0;
}

void AddInput(inference::ModelInferRequest* q, const char* name, const char* dtype,
              std::vector<int64_t> shape, const std::string& raw) {
  auto* in = q->add_inputs();
  in->set_name(name);
  in->set_datatype(dtype);
  for (int64_t d : shape) in->add_shape(d);
  q->add_raw_input_contents(raw);
}

template <typename T>
std::string Raw(T v) {
  return std::string(reinterpret_cast<const char*>(&v), sizeof v);
}

// Every response of one gRPC stream request: the output_ids of each, per sequence_index, and
// the error; `last` is the final response.
struct GrpcOutcome {
  std::vector<std::vector<int32_t>> ids;  // per response
  std::string error;
  inference::ModelInferResponse last;
};
GrpcOutcome RunGrpc(int port, inference::ModelInferRequest q) {
  auto stub = inference::GRPCInferenceService::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  (*q.mutable_parameters())["triton_enable_empty_final_response"].set_bool_param(true);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto stream = stub->ModelStreamInfer(&ctx);
  GrpcOutcome out;
  if (!stream->Write(q)) {
    out.error = "write failed";
    return out;
  }
  stream->WritesDone();
  inference::ModelStreamInferResponse resp;
  while (stream->Read(&resp)) {
    if (!resp.error_message().empty()) {
      out.error = resp.error_message();
      break;
    }
    const auto& ir = resp.infer_response();
    out.ids.push_back(testing::OutputInt32(ir, "output_ids"));
    out.last = ir;
    if (ir.parameters().count("triton_final_response") &&
        ir.parameters().at("triton_final_response").bool_param())
      break;
  }
  ctx.TryCancel();
  stream->Finish();
  return out;
}

// Every token of a stream's responses, in order.
std::vector<int32_t> AllIds(const GrpcOutcome& o) {
  std::vector<int32_t> all;
  for (const auto& v : o.ids) all.insert(all.end(), v.begin(), v.end());
  return all;
}

class DisaggregatedServerTest : public ::testing::Test {
 protected:
  // The shared-memory transport: both workers name one segment folder (in their repository),
  // segments live kShmTtlMs.
  virtual bool Shm() const { return false; }
  static constexpr int kShmTtlMs = 3000;

  void SetUp() override {
    root_ = fs::temp_directory_path() / ("disagg_server_" + std::to_string(getpid()));
    const std::string init = std::string(INFLIGHT_BINARY_DIR) +
                             "/apps/inflight-server init-repo --model " + DemoModel() +
                             " --max-beam-width 2 --force";
    ASSERT_EQ(std::system((init + " --out " + (root_ / "workers").string() +
                           (Shm() ? " --context-phase-shm-dir handoff" : "") + " >/dev/null")
                              .c_str()),
              0);
    if (Shm()) {
      std::ofstream(root_ / "workers/tensorrt_llm/config.pbtxt", std::ios::app)
          << "parameters: { key: \"context_phase_shm_ttl_ms\" value: { string_value: \""
          << kShmTtlMs << "\" } }\n";
    }
    ctx_ = testing::ServerProcess::Start({"--model-repository", (root_ / "workers").string()});
    gen_ = testing::ServerProcess::Start({"--model-repository", (root_ / "workers").string()});
    ASSERT_TRUE(ctx_ && gen_);
    ctx_url_ = "127.0.0.1:" + std::to_string(ctx_->grpc_port);
    gen_url_ = "127.0.0.1:" + std::to_string(gen_->grpc_port);
    ASSERT_EQ(std::system((init + " --out " + (root_ / "front").string() +
                           " --disaggregated-context-url " + ctx_url_ +
                           " --disaggregated-generation-url " + gen_url_ +
                           (Shm() ? " --disaggregated-transport shm" : "") + " >/dev/null")
                              .c_str()),
              0);
    front_ = testing::ServerProcess::Start({"--model-repository", (root_ / "front").string()});
    ASSERT_TRUE(front_);
    for (int i = 0; i < 100 && HttpStatus(front_->http_port, "/v2/health/ready") != 200; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_EQ(HttpStatus(front_->http_port, "/v2/health/ready"), 200) << front_->log();
  }
  void TearDown() override {
    front_.reset();
    ctx_.reset();
    gen_.reset();
    fs::remove_all(root_);
  }

  double Transfers(const std::string& type) {
    return testing::MetricValue(testing::MetricsText(gen_->metrics_port),
                                "nv_trt_llm_disaggregated_serving_metrics",
                                {{"disaggregated_serving_type", type}});
  }

  fs::path root_;
  std::unique_ptr<testing::ServerProcess> ctx_, gen_, front_;
  std::string ctx_url_, gen_url_;
};

TEST_F(DisaggregatedServerTest, TheRouterServesTheAggregatedTextsAndTokens) {
  // Texts through the ensemble, whole and streamed: the context server serves them aggregated.
  for (const std::string& p : kPrompts)
    EXPECT_EQ(Generate(front_->http_port, p), Generate(ctx_->http_port, p)) << p;
  const Streamed want = GenerateStream(ctx_->http_port, kPrompts[1], 40);
  const Streamed got = GenerateStream(front_->http_port, kPrompts[1], 40);
  EXPECT_EQ(got.error, "");
  EXPECT_EQ(got.text, want.text);
  ASSERT_FALSE(want.text.empty());

  // Token ids over gRPC: long prompts sharing a prefix, greedy, streamed, seeded sampling,
  // n = 2 and beams.
  std::mt19937 rng(7);
  std::vector<int32_t> prefix(70);
  for (int32_t& t : prefix) t = 3 + static_cast<int32_t>(rng() % 500);
  int sent = 0;
  for (int i = 0; i < 8; ++i) {
    std::vector<int32_t> prompt = i % 2 == 0 ? prefix : std::vector<int32_t>();
    for (int j = 0; j < 5 + 23 * i; ++j) prompt.push_back(3 + static_cast<int32_t>(rng() % 500));
    auto q = testing::LlmRequest("tensorrt_llm", "r" + std::to_string(i), {prompt}, 12, i % 3 == 0);
    if (i == 2 || i == 5) {
      AddInput(&q, "temperature", "FP32", {1, 1}, Raw(0.8f));
      AddInput(&q, "runtime_top_k", "INT32", {1, 1}, Raw(int32_t{20}));
      AddInput(&q, "seed", "UINT64", {1, 1}, Raw(uint64_t{100} + i));
    }
    if (i == 4) {
      AddInput(&q, "temperature", "FP32", {1, 1}, Raw(1.0f));
      AddInput(&q, "seed", "UINT64", {1, 1}, Raw(uint64_t{9}));
      AddInput(&q, "num_return_sequences", "INT32", {1, 1}, Raw(int32_t{2}));
    }
    if (i == 7) AddInput(&q, "beam_width", "INT32", {1, 1}, Raw(int32_t{2}));
    const GrpcOutcome a = RunGrpc(ctx_->grpc_port, q);
    // The router sets the transport itself, whatever a client asks.
    if (i == 1) (*q.mutable_parameters())["context_phase_transport"].set_string_param("shm");
    const GrpcOutcome d = RunGrpc(front_->grpc_port, q);
    ++sent;
    ASSERT_EQ(a.error, "") << i;
    EXPECT_EQ(d.error, "") << i;
    // Streams: the same tokens in all (the router sends the first one ahead, alone).
    const std::vector<int32_t> a_all = AllIds(a), d_all = AllIds(d);
    EXPECT_EQ(d_all, a_all) << "request " << i;
    EXPECT_FALSE(a_all.empty());
  }
  // A first token that is the end token: nothing is output, as aggregated (the context phase
  // streams nothing ahead); with min_tokens it is banned in both phases alike.
  {
    const std::vector<int32_t> prompt(prefix.begin(), prefix.begin() + 40);
    const GrpcOutcome plain =
        RunGrpc(ctx_->grpc_port, testing::LlmRequest("tensorrt_llm", "e", {prompt}, 4, false));
    ASSERT_EQ(plain.error, "");
    ASSERT_FALSE(plain.ids.empty());
    ASSERT_GT(plain.ids.back().size(), prompt.size());
    const int32_t first = plain.ids.back()[prompt.size()];
    for (bool streaming : {false, true}) {
      for (int32_t min_tokens : {0, 2}) {
        auto q = testing::LlmRequest("tensorrt_llm", "e", {prompt}, 4, streaming);
        AddInput(&q, "end_id", "INT32", {1, 1}, Raw(first));
        if (min_tokens > 0) AddInput(&q, "min_tokens", "INT32", {1, 1}, Raw(min_tokens));
        const GrpcOutcome a = RunGrpc(ctx_->grpc_port, q);
        const GrpcOutcome d = RunGrpc(front_->grpc_port, q);
        ++sent;
        ASSERT_EQ(a.error, "");
        EXPECT_EQ(d.error, "") << streaming << " " << min_tokens;
        EXPECT_EQ(AllIds(d), AllIds(a))
            << "streaming " << streaming << ", min_tokens " << min_tokens;
      }
    }
  }
  // The OpenAI API of the front server runs through the router too.
  const nlohmann::json completion = {
      {"model", "ensemble"}, {"prompt", kPrompts[1]}, {"max_tokens", 24}, {"temperature", 0}};
  auto complete = [&](int port) {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(60);
    auto r = c.Post("/v1/completions", completion.dump(), "application/json");
    if (!r || r->status != 200) return std::string("<error>") + (r ? r->body : "");
    return nlohmann::json::parse(r->body)["choices"][0]["text"].get<std::string>();
  };
  const std::string openai = complete(front_->http_port);
  EXPECT_EQ(openai, complete(ctx_->http_port));
  EXPECT_EQ(openai.find("<error>"), std::string::npos) << openai;
  // Every generation phase counted (3 texts + 1 stream + the token requests + the completion),
  // with its time.
  EXPECT_EQ(Transfers("request_count"), 5 + sent);
  EXPECT_GT(Transfers("kv_cache_transfer_ms"), 0);
}

TEST_F(DisaggregatedServerTest, ACorruptHandOffIsRefusedNeverDecoded) {
  std::vector<int32_t> prompt;
  for (int i = 0; i < 100; ++i) prompt.push_back(5 + (i * 31) % 400);
  auto q = testing::LlmRequest("tensorrt_llm", "c", {prompt}, 8, false);
  (*q.mutable_parameters())["request_type"].set_string_param("context_only");
  const GrpcOutcome c = RunGrpc(ctx_->grpc_port, q);
  ASSERT_EQ(c.error, "");
  std::string handoff;
  for (int i = 0; i < c.last.outputs_size(); ++i)
    if (c.last.outputs(i).name() == "context_phase_params") handoff = c.last.raw_output_contents(i);
  ASSERT_GT(handoff.size(), 1000u) << "no hand-off in the context response";

  auto generation = [&](const std::string& blob) {
    auto g = testing::LlmRequest("tensorrt_llm", "g", {prompt}, 8, false);
    (*g.mutable_parameters())["request_type"].set_string_param("generation_only");
    AddInput(&g, "context_phase_params", "UINT8", {1, static_cast<int64_t>(blob.size())}, blob);
    return RunGrpc(gen_->grpc_port, g);
  };
  const GrpcOutcome good = generation(handoff);
  ASSERT_EQ(good.error, "");
  const GrpcOutcome plain =
      RunGrpc(gen_->grpc_port, testing::LlmRequest("tensorrt_llm", "p", {prompt}, 8, false));
  EXPECT_EQ(good.ids.back(), plain.ids.back());
  std::string corrupt = handoff;
  corrupt[corrupt.size() / 2] ^= 0x01;
  const GrpcOutcome bad = generation(corrupt);
  EXPECT_NE(bad.error.find("checksum"), std::string::npos) << bad.error;
  EXPECT_EQ(generation(handoff.substr(0, handoff.size() - 4)).error.empty(), false);
  // An unknown request_type is refused naming the three values.
  auto unknown = testing::LlmRequest("tensorrt_llm", "u", {prompt}, 8, false);
  (*unknown.mutable_parameters())["request_type"].set_string_param("context_first");
  EXPECT_NE(RunGrpc(gen_->grpc_port, unknown).error.find("context_and_generation, context_only"),
            std::string::npos);
  // The shared-memory transport on a model without a segment folder: refused, naming it.
  auto in_shm = q;
  (*in_shm.mutable_parameters())["context_phase_transport"].set_string_param("shm");
  EXPECT_NE(RunGrpc(ctx_->grpc_port, in_shm).error.find("no context_phase_shm_dir"),
            std::string::npos);
  std::string descriptor = "IFKVSHM1" + std::string(8, '\0') + std::string(32, 'a');
  EXPECT_NE(generation(descriptor).error.find("no context_phase_shm_dir"), std::string::npos);
  // Only the good one was a transfer.
  EXPECT_EQ(Transfers("request_count"), 1);
}

// A client that leaves mid-stream cancels the generation phase on the other server: its K/V
// blocks are free again.
TEST_F(DisaggregatedServerTest, AClientThatLeavesCancelsTheGenerationPhase) {
  httplib::Client c("127.0.0.1", front_->http_port);
  c.set_read_timeout(60);
  const nlohmann::json body = {
      {"text_input", "Once upon a time"}, {"max_tokens", 480}, {"stream", true}};
  httplib::Request req;
  req.method = "POST";
  req.path = "/v2/models/ensemble/generate_stream";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  std::string raw;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    raw.append(data, n);
    return testing::SseEvents(raw).size() < 5;  // leave after 5 events
  };
  c.send(req);
  EXPECT_GE(testing::SseEvents(raw).size(), 5u);
  EXPECT_TRUE(testing::WaitLlmIdle(gen_->metrics_port, "tensorrt_llm"))
      << "the generation server still holds the request's blocks";
}

// The test ends both workers: it runs last in its own process under ctest anyway.
TEST_F(DisaggregatedServerTest, KillingAWorkerEndsItsStreamsNamingItAndTurnsTheRouterNotReady) {
  // Streams of 480 tokens (min_tokens: the end token does not end them).
  const std::vector<std::string> prompts = {"Once upon a time", "The little dog",
                                            "Lily and Ben went to the park"};
  std::vector<std::atomic<int>> events(3);
  std::vector<Streamed> results(3);
  std::vector<std::thread> streams;
  for (int i = 0; i < 3; ++i) {
    streams.emplace_back([&, i] {
      results[i] =
          GenerateStream(front_->http_port, prompts[i], 480, &events[i], {{"min_tokens", 480}});
    });
  }
  for (int i = 0; i < 500 && (events[0] < 3 || events[1] < 3 || events[2] < 3); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(kill(gen_->pid(), SIGKILL), 0);
  const auto killed = std::chrono::steady_clock::now();
  for (auto& t : streams) t.join();
  const double ended_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  EXPECT_LT(ended_s, 5.0);
  for (int i = 0; i < 3; ++i) {
    EXPECT_NE(results[i].error.find("generation model 'tensorrt_llm' at " + gen_url_),
              std::string::npos)
        << "stream " << i << ": '" << results[i].error << "' after " << events[i]
        << " events: " << results[i].text;
  }
  while (HttpStatus(front_->http_port, "/v2/models/tensorrt_llm/ready") == 200 &&
         std::chrono::steady_clock::now() - killed < std::chrono::seconds(10))
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const double not_ready_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  std::printf("streams ended %.2f s, router not ready %.2f s after the kill\n", ended_s,
              not_ready_s);
  EXPECT_LT(not_ready_s, 5.0);
  EXPECT_NE(HttpStatus(front_->http_port, "/v2/health/ready"), 200);
  EXPECT_EQ(HttpStatus(front_->http_port, "/v2/health/live"), 200);
  // A new request is refused at once, naming the dead worker.
  EXPECT_NE(Generate(front_->http_port, kPrompts[0]).find(gen_url_), std::string::npos);

  // The context worker dies too: its name shows.
  ASSERT_EQ(kill(ctx_->pid(), SIGKILL), 0);
  std::string answer;
  for (int i = 0; i < 100; ++i) {
    answer = Generate(front_->http_port, kPrompts[0]);
    if (answer.find(ctx_url_) != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_NE(answer.find("context model 'tensorrt_llm' at " + ctx_url_), std::string::npos)
      << answer;
}

// The K/V through a shared-memory segment: the router carries only the descriptor, the
// outputs are the aggregated ones, every segment is taken (the folder ends empty), a
// descriptor is good once, a segment changed in the folder is refused by its checksum, and a
// segment nobody takes expires.
class DisaggregatedShmTest : public DisaggregatedServerTest {
 protected:
  bool Shm() const override { return true; }
};

double SegmentMetric(const testing::ServerProcess& server, const std::string& what) {
  return testing::MetricValue(testing::MetricsText(server.metrics_port),
                              "inflight_kv_handoff_segments", {{"value", what}});
}

// inflight_kv_handoff_segments{value=what} reaches `want` (metrics are sampled every 100 ms).
bool Segments(const testing::ServerProcess& server, const std::string& what, double want) {
  for (int i = 0; i < 30; ++i) {
    if (SegmentMetric(server, what) == want) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ADD_FAILURE() << what << ": " << SegmentMetric(server, what) << ", want " << want;
  return false;
}

TEST_F(DisaggregatedShmTest, TheHandOffGoesThroughASegmentReadOnce) {
  const fs::path folder = root_ / "workers/tensorrt_llm/handoff";
  ASSERT_TRUE(fs::is_directory(folder));
  std::mt19937 rng(11);
  int sent = 0;
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> prompt;
    for (int j = 0; j < 20 + 60 * i; ++j) prompt.push_back(3 + static_cast<int32_t>(rng() % 500));
    auto q = testing::LlmRequest("tensorrt_llm", "s" + std::to_string(i), {prompt}, 10, i % 2 == 1);
    if (i == 2) {
      AddInput(&q, "temperature", "FP32", {1, 1}, Raw(0.8f));
      AddInput(&q, "seed", "UINT64", {1, 1}, Raw(uint64_t{42}));
    }
    if (i == 3) AddInput(&q, "beam_width", "INT32", {1, 1}, Raw(int32_t{2}));
    const GrpcOutcome a = RunGrpc(ctx_->grpc_port, q);
    const GrpcOutcome d = RunGrpc(front_->grpc_port, q);
    ++sent;
    ASSERT_EQ(a.error, "") << i;
    EXPECT_EQ(d.error, "") << i;
    const std::vector<int32_t> a_all = AllIds(a), d_all = AllIds(d);
    EXPECT_EQ(d_all, a_all) << "request " << i;
  }
  EXPECT_EQ(Generate(front_->http_port, kPrompts[1]), Generate(ctx_->http_port, kPrompts[1]));
  ++sent;
  EXPECT_EQ(Transfers("request_count"), sent);
  EXPECT_TRUE(fs::is_empty(folder)) << "a segment was left behind";
  // Each went through a segment: written by the context server, taken by the generation one.
  EXPECT_TRUE(Segments(*ctx_, "written", sent));
  EXPECT_TRUE(Segments(*gen_, "taken", sent));
  EXPECT_TRUE(Segments(*ctx_, "declined", 0));

  // A context phase asked for a segment answers its 48-byte descriptor.
  std::vector<int32_t> prompt;
  for (int i = 0; i < 90; ++i) prompt.push_back(5 + (i * 37) % 400);
  auto q = testing::LlmRequest("tensorrt_llm", "c", {prompt}, 8, false);
  (*q.mutable_parameters())["request_type"].set_string_param("context_only");
  (*q.mutable_parameters())["context_phase_transport"].set_string_param("shm");
  auto context_phase = [&] {
    const GrpcOutcome c = RunGrpc(ctx_->grpc_port, q);
    EXPECT_EQ(c.error, "");
    for (int i = 0; i < c.last.outputs_size(); ++i)
      if (c.last.outputs(i).name() == "context_phase_params") return c.last.raw_output_contents(i);
    return std::string();
  };
  auto generation = [&](const std::string& blob) {
    auto g = testing::LlmRequest("tensorrt_llm", "g", {prompt}, 8, false);
    (*g.mutable_parameters())["request_type"].set_string_param("generation_only");
    AddInput(&g, "context_phase_params", "UINT8", {1, static_cast<int64_t>(blob.size())}, blob);
    return RunGrpc(gen_->grpc_port, g);
  };
  const std::string descriptor = context_phase();
  ASSERT_EQ(descriptor.size(), 48u);
  EXPECT_EQ(std::distance(fs::directory_iterator(folder), fs::directory_iterator()), 1);
  // A request refused before it is accepted leaves the segment for a corrected one.
  {
    auto g = testing::LlmRequest("tensorrt_llm", "g", {prompt}, 8, false);
    (*g.mutable_parameters())["request_type"].set_string_param("generation_only");
    AddInput(&g, "context_phase_params", "UINT8", {1, 48}, descriptor);
    AddInput(&g, "beam_width", "INT32", {1, 1}, Raw(int32_t{64}));
    EXPECT_NE(RunGrpc(gen_->grpc_port, g).error.find("beam_width"), std::string::npos);
  }
  const GrpcOutcome good = generation(descriptor);
  ASSERT_EQ(good.error, "");
  const GrpcOutcome plain =
      RunGrpc(gen_->grpc_port, testing::LlmRequest("tensorrt_llm", "p", {prompt}, 8, false));
  EXPECT_EQ(good.ids.back(), plain.ids.back());
  EXPECT_NE(generation(descriptor).error.find("is gone"), std::string::npos);

  // Changed in the folder: its checksum refuses it.
  const std::string changed = context_phase();
  ASSERT_EQ(changed.size(), 48u);
  {
    const fs::path seg = folder / ("ifkv-" + changed.substr(16));
    std::fstream f(seg, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(seg) / 2));
    f.put('\x5a');
  }
  EXPECT_NE(generation(changed).error.find("checksum"), std::string::npos);

  // Nobody takes it: it expires (the context server's periodic sweep removes it).
  const std::string orphan = context_phase();
  ASSERT_EQ(orphan.size(), 48u);
  EXPECT_TRUE(fs::exists(folder / ("ifkv-" + orphan.substr(16))));
  const auto start = std::chrono::steady_clock::now();
  while (!fs::is_empty(folder) &&
         std::chrono::steady_clock::now() - start < std::chrono::milliseconds(kShmTtlMs + 5000))
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_TRUE(fs::is_empty(folder)) << "an orphan segment outlived its lifetime";
  EXPECT_NE(generation(orphan).error.find("is gone"), std::string::npos);
  EXPECT_EQ(Transfers("request_count"), sent + 1);
  EXPECT_TRUE(Segments(*ctx_, "written", sent + 3));
  // Either server's sweep may have removed the orphan.
  const auto expired = [&] {
    return SegmentMetric(*ctx_, "expired") + SegmentMetric(*gen_, "expired");
  };
  for (int i = 0; i < 30 && expired() != 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(expired(), 1);
}

}  // namespace
}  // namespace inflight
