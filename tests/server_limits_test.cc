// End-to-end tests of what a hostile or careless client can do to inflight-server, and of
// where it used to differ from Triton + TensorRT-LLM: each names the defect it guards
// against. The real binary on loopback, a repository from its own init-repo.
#include <arpa/inet.h>
#include <fcntl.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <optional>
#include <sstream>

#include "grpc_service.grpc.pb.h"
#include "raw_connection.h"
#include "server_harness.h"
#include "test_util.h"

namespace inflight {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;
using testing::kAddressSanitizer;
using testing::MetricValue;
using testing::RawConnection;
using testing::RssKb;
using testing::ServerProcess;
using testing::SseEvents;

std::string DemoModel() { return testing::SourceDir() + "/models/demo/inflight-demo-q8_0.gguf"; }
constexpr int kDemoContext = 512;
// zlib for the client side of HTTP compression: window_bits 15 + 16 gzip, 15 zlib (HTTP's
// "deflate"), -15 raw deflate.
std::string Deflate(const std::string& data, int window_bits, int level = Z_DEFAULT_COMPRESSION) {
  z_stream z{};
  deflateInit2(&z, level, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&z, data.size()) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}
std::string Inflate(const std::string& data, int window_bits) {
  z_stream z{};
  inflateInit2(&z, window_bits);
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  std::string out;
  char buf[65536];
  int rc = Z_OK;
  while (rc == Z_OK) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof buf;
    rc = inflate(&z, Z_NO_FLUSH);
    out.append(buf, sizeof buf - z.avail_out);
  }
  inflateEnd(&z);
  return rc == Z_STREAM_END ? out : "<not " + std::to_string(window_bits) + " data>";
}

// One HTTP/1.1 exchange on a raw connection: status, headers (lower-case names) and body.
struct RawResponse {
  int status = 0;
  std::map<std::string, std::string> headers;
  std::string body;
};
RawResponse RawPost(int port, const std::string& path,
                    const std::vector<std::pair<std::string, std::string>>& headers,
                    const std::string& body) {
  RawConnection c(port);
  std::string req = "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  for (const auto& [k, v] : headers) req += k + ": " + v + "\r\n";
  req += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  RawResponse out;
  if (!c.Send(req)) return out;
  const std::string raw = c.Read(std::chrono::seconds(60));
  const size_t end = raw.find("\r\n\r\n");
  if (end == std::string::npos || raw.size() < 12) return out;
  out.status = std::atoi(raw.c_str() + 9);
  std::istringstream lines(raw.substr(0, end));
  std::string line;
  std::getline(lines, line);
  while (std::getline(lines, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    out.headers[name] = line.substr(line.find_first_not_of(' ', colon + 1));
  }
  out.body = raw.substr(end + 4);
  return out;
}

// Adds an input with typed `contents` to a gRPC request; returns them to fill.
inference::InferTensorContents* AddTypedInput(inference::ModelInferRequest* q, const char* name,
                                              const char* dtype,
                                              const std::vector<int64_t>& shape) {
  auto* in = q->add_inputs();
  in->set_name(name);
  in->set_datatype(dtype);
  for (int64_t d : shape) in->add_shape(d);
  return in->mutable_contents();
}

std::string WriteRepository(const std::string& model, const std::string& tag) {
  const fs::path repo =
      fs::temp_directory_path() / ("inflight_limits_" + tag + "_" + std::to_string(getpid()));
  fs::remove_all(repo);
  const std::string cmd = std::string(INFLIGHT_BINARY_DIR) +
                          "/apps/inflight-server init-repo --model " + model + " --out " +
                          repo.string() + " > /dev/null";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream in(repo / "tensorrt_llm" / "config.pbtxt");
  std::stringstream ss;
  ss << in.rdbuf();
  auto add_variant = [&](const std::string& name,
                         std::vector<std::pair<std::string, std::string>> edits) {
    std::string text = ss.str();
    edits.emplace_back("name: \"tensorrt_llm\"", "name: \"" + name + "\"");
    for (const auto& [from, to] : edits) {
      const size_t pos = text.find(from);
      ASSERT_NE(pos, std::string::npos) << from;
      text.replace(pos, from.size(), to);
    }
    fs::create_directories(repo / name / "1");
    std::ofstream(repo / name / "config.pbtxt") << text;
  };
  // A non-decoupled copy of tensorrt_llm, for /infer and gRPC ModelInfer.
  add_variant("tensorrt_llm_sync", {{"decoupled: true", "decoupled: false"}});
  // One with a 1024-token KV cache (64 blocks) and the default queue bound.
  add_variant("tensorrt_llm_small_kv", {{"decoupled: true", "decoupled: false"},
                                        {"${max_tokens_in_paged_kv_cache}", "1024"}});
  return repo.string();
}

class ServerLimitsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    repo_ = new std::string(WriteRepository(DemoModel(), "demo"));
    trace_file_ = new std::string(*repo_ + ".trace.json");
    server_ = ServerProcess::Start({"--model-repository", *repo_, "--trace-file", *trace_file_,
                                    "--http-header-timeout-ms", "1000", "--http-write-timeout-ms",
                                    "3000", "--http-max-stream-buffer-bytes", "65536",
                                    "--http-max-header-count", "100"})
                  .release();
  }
  static void TearDownTestSuite() {
    if (server_ && ::testing::UnitTest::GetInstance()->failed_test_count() > 0) {
      std::fprintf(stderr, "--- inflight-server log ---\n%s\n", server_->log().c_str());
    }
    delete server_;
    fs::remove_all(*repo_);
    fs::remove(*trace_file_);
    delete repo_;
    delete trace_file_;
  }
  void SetUp() override {
    if (!server_) GTEST_SKIP() << "the server did not start";
  }

  static httplib::Client Http() {
    httplib::Client c("127.0.0.1", server_->http_port);
    c.set_read_timeout(60);
    return c;
  }
  static json PostJson(const std::string& path, const json& body, int* status = nullptr) {
    auto r = Http().Post(path.c_str(), body.dump(), "application/json");
    if (!r) return json();
    if (status) *status = r->status;
    return json::parse(r->body, nullptr, false);
  }
  static std::string Metrics() { return testing::MetricsText(server_->metrics_port); }
  // The client's HTTP/2 receive window is pinned at 64 kB (no BDP probing): a reader that
  // reads nothing then leaves the output in the server's stream, where the bound applies,
  // instead of a window that grew to megabytes while responses flowed fast.
  static std::unique_ptr<inference::GRPCInferenceService::Stub> GrpcStub() {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
    args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 64 * 1024);
    return inference::GRPCInferenceService::NewStub(
        grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(server_->grpc_port),
                                  grpc::InsecureChannelCredentials(), args));
  }
  static double Canceled(const std::string& model) {
    return std::max(0.0, MetricValue(Metrics(), "nv_inference_request_failure",
                                     {{"model", model}, {"reason", "CANCELED"}}));
  }
  static bool WaitIdle(const std::string& model) {
    return testing::WaitLlmIdle(server_->metrics_port, model);
  }
  // Latency of one GET /v2/health/ready on a new connection.
  static double HealthMs() {
    const auto t0 = Clock::now();
    auto r = Http().Get("/v2/health/ready");
    EXPECT_TRUE(r && r->status == 200);
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  }

  static std::string* repo_;
  static std::string* trace_file_;
  static ServerProcess* server_;
};

std::string* ServerLimitsTest::repo_ = nullptr;
std::string* ServerLimitsTest::trace_file_ = nullptr;
ServerProcess* ServerLimitsTest::server_ = nullptr;

// tritonclient.http posts the index request with no body and no Content-Length: it hung
// until the client timed out. Chunked request bodies work too.
TEST_F(ServerLimitsTest, RequestsWithoutABodyOrWithAChunkedBodyAreAnswered) {
  RawConnection c(server_->http_port);
  ASSERT_TRUE(c.connected());
  ASSERT_TRUE(c.Send("POST /v2/repository/index HTTP/1.1\r\nHost: localhost\r\n\r\n"));
  const std::string index = c.Read(milliseconds(5000), "]");
  EXPECT_EQ(index.rfind("HTTP/1.1 200", 0), 0u) << index;
  EXPECT_NE(index.find("\"name\":\"ensemble\""), std::string::npos) << index;

  const std::string body = R"({"text_input": "Once upon a time", "max_tokens": 5})";
  char size[16];
  std::snprintf(size, sizeof size, "%zx", body.size());
  ASSERT_TRUE(
      c.Send("POST /v2/models/ensemble/generate HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: "
             "chunked\r\n\r\n" +
             std::string(size) + "\r\n" + body + "\r\n0\r\n\r\n"));
  const std::string generated = c.Read(milliseconds(10000), "}");
  EXPECT_EQ(generated.rfind("HTTP/1.1 200", 0), 0u) << generated;
  EXPECT_NE(generated.find("\"text_output\":\"Once upon a time"), std::string::npos) << generated;
}

// The reference's preprocessing always returns all its outputs; clients that chain the
// three models by hand failed on the missing ones. Empty word lists pad to [[0], [-1]].
TEST_F(ServerLimitsTest, PreprocessingReturnsEveryOutputOfTheReference) {
  int status = 0;
  json r = PostJson("/v2/models/preprocessing/infer",
                    {{"inputs",
                      {{{"name", "QUERY"},
                        {"datatype", "BYTES"},
                        {"shape", {1, 1}},
                        {"data", {"Once upon a time"}}},
                       {{"name", "REQUEST_OUTPUT_LEN"},
                        {"datatype", "INT32"},
                        {"shape", {1, 1}},
                        {"data", {8}}}}}},
                    &status);
  ASSERT_EQ(status, 200) << r.dump();
  std::map<std::string, json> out;
  for (const json& o : r["outputs"]) out[o["name"].get<std::string>()] = o;
  for (const char* name : {"INPUT_ID", "REQUEST_INPUT_LEN", "DECODER_INPUT_ID",
                           "REQUEST_DECODER_INPUT_LEN", "BAD_WORDS_IDS", "STOP_WORDS_IDS",
                           "EMBEDDING_BIAS", "REQUEST_OUTPUT_LEN", "OUT_END_ID", "OUT_PAD_ID"}) {
    EXPECT_TRUE(out.count(name)) << name << " missing in " << r.dump();
  }
  EXPECT_EQ(out["DECODER_INPUT_ID"]["shape"], json({1, 1}));
  EXPECT_EQ(out["DECODER_INPUT_ID"]["data"], out["OUT_PAD_ID"]["data"]);
  EXPECT_EQ(out["REQUEST_DECODER_INPUT_LEN"]["data"], json({1}));
  EXPECT_EQ(out["EMBEDDING_BIAS"]["shape"], json({1, 0}));
  EXPECT_EQ(out["STOP_WORDS_IDS"]["shape"], json({1, 2, 1}));
  EXPECT_EQ(out["STOP_WORDS_IDS"]["data"], json({0, -1}));
  EXPECT_EQ(out["BAD_WORDS_IDS"]["data"], json({0, -1}));
  // The ensemble passes them on to tensorrt_llm, which still generates.
  json g = PostJson("/v2/models/ensemble/generate",
                    {{"text_input", "Once upon a time"}, {"max_tokens", 4}}, &status);
  EXPECT_EQ(status, 200) << g.dump();
}

// embedding_bias_words / embedding_bias_weights: preprocessing turns them into a [1, vocab]
// bias (each word's tokens get its weight), the ensemble hands it to tensorrt_llm, and a large
// bias on one word makes greedy decoding say it every time.
TEST_F(ServerLimitsTest, EmbeddingBiasWordsSteerTheOutput) {
  int status = 0;
  json r = PostJson(
      "/v2/models/preprocessing/infer",
      {{"inputs",
        {{{"name", "QUERY"},
          {"datatype", "BYTES"},
          {"shape", {1, 1}},
          {"data", {"Once upon a time"}}},
         {{"name", "REQUEST_OUTPUT_LEN"}, {"datatype", "INT32"}, {"shape", {1, 1}}, {"data", {8}}},
         {{"name", "EMBEDDING_BIAS_WORDS"},
          {"datatype", "BYTES"},
          {"shape", {1, 2}},
          {"data", {"dog", "cat"}}},
         {{"name", "EMBEDDING_BIAS_WEIGHTS"},
          {"datatype", "FP32"},
          {"shape", {1, 2}},
          {"data", {2.5, -1.0}}}}}},
      &status);
  ASSERT_EQ(status, 200) << r.dump();
  json bias;
  for (const json& o : r["outputs"]) {
    if (o["name"] == "EMBEDDING_BIAS") bias = o;
  }
  ASSERT_EQ(bias["shape"].size(), 2u);
  EXPECT_EQ(bias["shape"][0], 1);
  EXPECT_GT(bias["shape"][1].get<int>(), 256);  // the tokenizer's vocabulary
  int positive = 0, negative = 0;
  for (const json& v : bias["data"]) {
    positive += v.get<double>() > 0;
    negative += v.get<double>() < 0;
  }
  EXPECT_GE(positive, 1);
  EXPECT_GE(negative, 1);
  // A bias of 100 on " dog": every greedy token is one of its tokens.
  json g = PostJson("/v2/models/ensemble/generate",
                    {{"text_input", "Once upon a time"},
                     {"max_tokens", 6},
                     {"embedding_bias_words", {" dog"}},
                     {"embedding_bias_weights", {100.0}}},
                    &status);
  ASSERT_EQ(status, 200) << g.dump();
  const std::string text = g["text_output"];
  EXPECT_NE(text.find("dog"), std::string::npos) << text;
  json plain = PostJson("/v2/models/ensemble/generate",
                        {{"text_input", "Once upon a time"}, {"max_tokens", 6}}, &status);
  EXPECT_NE(plain["text_output"], g["text_output"]);
  // Words and weights must pair up.
  json bad = PostJson("/v2/models/ensemble/generate",
                      {{"text_input", "Once upon a time"},
                       {"max_tokens", 6},
                       {"embedding_bias_words", {"dog", "cat"}},
                       {"embedding_bias_weights", {1.0}}},
                      &status);
  EXPECT_EQ(status, 400) << bad.dump();
  EXPECT_NE(
      bad.dump().find("Embedding bias words must have same dimension as embedding bias weights"),
      std::string::npos)
      << bad.dump();
}

// A `stop` request answered non-streaming: the reference sends an empty final response
// (no tensors); we answered with an error.
TEST_F(ServerLimitsTest, StopRequestGetsAnEmptyResponse) {
  int status = 0;
  auto tensor = [](const char* name, const char* dtype, json data) {
    return json{{"name", name}, {"datatype", dtype}, {"shape", {1, data.size()}}, {"data", data}};
  };
  json r =
      PostJson("/v2/models/tensorrt_llm_sync/infer",
               {{"id", "to-stop"},
                {"inputs",
                 {tensor("input_ids", "INT32", {1, 2, 3}), tensor("input_lengths", "INT32", {3}),
                  tensor("request_output_len", "INT32", {4}), tensor("stop", "BOOL", {true})}}},
               &status);
  EXPECT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["id"], "to-stop");
  EXPECT_EQ(r["outputs"], json::array()) << r.dump();

  auto stub = GrpcStub();
  inference::ModelInferRequest q;
  q.set_model_name("tensorrt_llm_sync");
  q.set_id("to-stop");
  auto add = [&](const char* name, const char* dtype, std::vector<int64_t> shape) {
    return AddTypedInput(&q, name, dtype, shape);
  };
  add("input_ids", "INT32", {1, 1})->add_int_contents(1);
  add("input_lengths", "INT32", {1, 1})->add_int_contents(1);
  add("request_output_len", "INT32", {1, 1})->add_int_contents(4);
  add("stop", "BOOL", {1, 1})->add_bool_contents(true);
  grpc::ClientContext ctx;
  inference::ModelInferResponse resp;
  grpc::Status s = stub->ModelInfer(&ctx, q, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.outputs_size(), 0);
}

// tritonclient's request_compression_algorithm ("gzip" / "deflate") compresses the whole
// body, and Inference-Header-Content-Length counts the JSON header inside the decompressed
// body: we did not decompress and answered 400 "... out of range". Its
// response_compression_algorithm asks with Accept-Encoding, and the answer is compressed with
// the header length still that of the plain JSON.
TEST_F(ServerLimitsTest, HttpInferRequestsAndResponsesCompress) {
  const std::string prompt = "Once upon a time";
  std::string binary;
  const uint32_t len = static_cast<uint32_t>(prompt.size());
  binary.append(reinterpret_cast<const char*>(&len), 4).append(prompt);
  const int32_t output_len = 8;
  binary.append(reinterpret_cast<const char*>(&output_len), 4);
  const std::string header = json{{"inputs",
                                   {{{"name", "QUERY"},
                                     {"datatype", "BYTES"},
                                     {"shape", {1, 1}},
                                     {"parameters", {{"binary_data_size", 4 + prompt.size()}}}},
                                    {{"name", "REQUEST_OUTPUT_LEN"},
                                     {"datatype", "INT32"},
                                     {"shape", {1, 1}},
                                     {"parameters", {{"binary_data_size", 4}}}}}},
                                  {"parameters", {{"binary_data_output", true}}}}
                                 .dump();
  const std::string body = header + binary;
  const std::string path = "/v2/models/preprocessing/infer";
  const std::pair<std::string, std::string> header_length{"Inference-Header-Content-Length",
                                                          std::to_string(header.size())};
  const RawResponse plain = RawPost(server_->http_port, path, {header_length}, body);
  ASSERT_EQ(plain.status, 200) << plain.body;
  ASSERT_TRUE(plain.headers.count("inference-header-content-length"));
  EXPECT_EQ(plain.headers.count("content-encoding"), 0u);

  struct Coding {
    std::string name;
    int window_bits;
  };
  for (const Coding& request : {Coding{"gzip", 15 + 16}, Coding{"deflate", 15},
                                Coding{"deflate", -15} /* raw deflate, accepted too */}) {
    for (const Coding& response : {Coding{"", 0}, Coding{"gzip", 15 + 16}, Coding{"deflate", 15}}) {
      SCOPED_TRACE(request.name + std::to_string(request.window_bits) + " -> " + response.name);
      std::vector<std::pair<std::string, std::string>> headers = {
          header_length, {"Content-Encoding", request.name}};
      if (!response.name.empty()) headers.emplace_back("Accept-Encoding", response.name);
      const RawResponse r =
          RawPost(server_->http_port, path, headers, Deflate(body, request.window_bits));
      ASSERT_EQ(r.status, 200) << r.body;
      EXPECT_EQ(r.headers.at("inference-header-content-length"),
                plain.headers.at("inference-header-content-length"));
      if (response.name.empty()) {
        EXPECT_EQ(r.headers.count("content-encoding"), 0u);
        EXPECT_EQ(r.body, plain.body);
      } else {
        ASSERT_TRUE(r.headers.count("content-encoding"));
        EXPECT_EQ(r.headers.at("content-encoding"), response.name);
        EXPECT_NE(r.body, plain.body);
        EXPECT_EQ(Inflate(r.body, response.window_bits), plain.body);
      }
    }
  }
  // Preference by q-value; identity when nothing supported is asked for.
  RawResponse r =
      RawPost(server_->http_port, path,
              {header_length, {"Accept-Encoding", "gzip;q=0.5, deflate;q=0.9, br"}}, body);
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["content-encoding"], "deflate");
  r = RawPost(server_->http_port, path, {header_length, {"Accept-Encoding", "br, zstd"}}, body);
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.headers.count("content-encoding"), 0u);

  // A JSON-only request compressed, no binary part.
  const std::string json_body = json{
      {"inputs",
       {{{"name", "QUERY"}, {"datatype", "BYTES"}, {"shape", {1, 1}}, {"data", {prompt}}},
        {{"name", "REQUEST_OUTPUT_LEN"},
         {"datatype", "INT32"},
         {"shape", {1, 1}},
         {"data", {8}}}}}}.dump();
  const RawResponse json_plain = RawPost(server_->http_port, path, {}, json_body);
  r = RawPost(server_->http_port, path, {{"Content-Encoding", "gzip"}}, Deflate(json_body, 31));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, json_plain.body);

  // Corrupt, truncated, unsupported: 400 with a JSON error.
  const std::string gz = Deflate(body, 31);
  for (const auto& [encoding, data] :
       std::vector<std::pair<std::string, std::string>>{{"gzip", "definitely not gzip"},
                                                        {"gzip", gz.substr(0, gz.size() / 2)},
                                                        {"deflate", "\x78\x9c garbage"},
                                                        {"br", body}}) {
    r = RawPost(server_->http_port, path, {header_length, {"Content-Encoding", encoding}}, data);
    EXPECT_EQ(r.status, 400) << encoding << ": " << r.body;
    EXPECT_TRUE(json::parse(r.body, nullptr, false).contains("error")) << r.body;
  }
}

// A zip bomb: a small gzip body that decompresses past the request-size limit (64 MiB) is
// refused without holding the result.
TEST_F(ServerLimitsTest, CompressedBodiesAreBoundedByTheRequestSizeLimit) {
  const std::string bomb = Deflate(std::string(80u << 20, '\0'), 31, 1);
  ASSERT_LT(bomb.size(), 1u << 20);
  const RawResponse r = RawPost(server_->http_port, "/v2/models/preprocessing/infer",
                                {{"Content-Encoding", "gzip"}}, bomb);
  EXPECT_TRUE(r.status == 400 || r.status == 413) << r.status << " " << r.body;
  EXPECT_NE(r.body.find("exceeds the maximum allowed input size"), std::string::npos) << r.body;
  // The server keeps its memory (the 80 MiB never lived there at once) and answers on.
  EXPECT_LT(RssKb(server_->pid()), 1024 * 1024);
  EXPECT_EQ(Http().Get("/v2/health/ready")->status, 200);
}

// Forwards one TCP connection to 127.0.0.1:`port`, counting the bytes that come back.
class CountingProxy {
 public:
  explicit CountingProxy(int target) {
    listen_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(listen_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    listen(listen_, 1);
    socklen_t len = sizeof a;
    getsockname(listen_, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
    thread_ = std::thread([this, target] {
      const int client = accept(listen_, nullptr, nullptr);
      if (client < 0) return;
      RawConnection upstream(target);
      const int server = upstream.fd();
      pollfd p[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
      char buf[65536];
      while (!stop_ && poll(p, 2, 50) >= 0) {
        bool closed = false;
        for (int i = 0; i < 2; ++i) {
          if (!(p[i].revents & (POLLIN | POLLHUP))) continue;
          const ssize_t n = recv(p[i].fd, buf, sizeof buf, 0);
          if (n <= 0) {
            closed = true;
            break;
          }
          if (i == 1) from_server += n;
          send(p[1 - i].fd, buf, static_cast<size_t>(n), MSG_NOSIGNAL);
        }
        if (closed) break;
      }
      close(client);
    });
  }
  ~CountingProxy() {
    stop_ = true;
    shutdown(listen_, SHUT_RDWR);
    close(listen_);
    thread_.join();
  }
  int port = 0;
  std::atomic<int64_t> from_server{0};

 private:
  int listen_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// tritonclient.grpc's compression_algorithm: by default a compressed request is refused with
// UNIMPLEMENTED before it is inflated (Debian's gRPC does not bound the inflated size). With
// --grpc-allow-compression requests come gzip/deflate-compressed (grpc-encoding) and their
// outputs equal those of an uncompressed call; with Triton's
// --grpc-infer-response-compression-level the answers come compressed too (fewer bytes on the
// wire than for a client that accepts only identity), with the same outputs.
TEST_F(ServerLimitsTest, GrpcCompressedCallsAnswerTheSame) {
  std::string prompt;
  for (int i = 0; i < 1000; ++i) prompt += "the little dog ";
  auto request = [&] {
    inference::ModelInferRequest q;
    q.set_model_name("preprocessing");
    AddTypedInput(&q, "QUERY", "BYTES", {1, 1})->add_bytes_contents(prompt);
    AddTypedInput(&q, "REQUEST_OUTPUT_LEN", "INT32", {1, 1})->add_int_contents(8);
    return q;
  };
  // The response, and the bytes the server sent for it (through a counting proxy).
  auto call = [&](int port, std::optional<grpc_compression_algorithm> algorithm,
                  bool accept_compressed, int64_t* bytes,
                  grpc::StatusCode expected = grpc::StatusCode::OK) {
    CountingProxy proxy(port);
    grpc::ChannelArguments args;
    if (algorithm) args.SetCompressionAlgorithm(*algorithm);
    if (!accept_compressed) args.SetInt(GRPC_COMPRESSION_CHANNEL_ENABLED_ALGORITHMS_BITSET, 1);
    inference::ModelInferResponse resp;
    {
      auto stub = inference::GRPCInferenceService::NewStub(grpc::CreateCustomChannel(
          "127.0.0.1:" + std::to_string(proxy.port), grpc::InsecureChannelCredentials(), args));
      grpc::ClientContext ctx;
      if (algorithm) ctx.set_compression_algorithm(*algorithm);
      const grpc::Status s = stub->ModelInfer(&ctx, request(), &resp);
      EXPECT_EQ(s.error_code(), expected) << s.error_message();
    }
    *bytes = proxy.from_server;
    return resp;
  };
  int64_t plain_bytes = 0, bytes = 0;
  const inference::ModelInferResponse plain =
      call(server_->grpc_port, std::nullopt, true, &plain_bytes);
  ASSERT_GT(plain.outputs_size(), 0);
  ASSERT_GT(plain.ByteSizeLong(), 4000u);
  for (const auto algorithm : {GRPC_COMPRESS_GZIP, GRPC_COMPRESS_DEFLATE}) {
    call(server_->grpc_port, algorithm, true, &bytes, grpc::StatusCode::UNIMPLEMENTED);
  }
  auto decompressing =
      ServerProcess::Start({"--model-repository", *repo_, "--grpc-allow-compression"});
  ASSERT_TRUE(decompressing);
  for (const auto algorithm : {GRPC_COMPRESS_GZIP, GRPC_COMPRESS_DEFLATE}) {
    const inference::ModelInferResponse r = call(decompressing->grpc_port, algorithm, true, &bytes);
    EXPECT_EQ(r.SerializeAsString(), plain.SerializeAsString()) << algorithm;
    EXPECT_GT(bytes, static_cast<int64_t>(plain.ByteSizeLong())) << "not asked: not compressed";
  }
  decompressing.reset();
  auto compressing = ServerProcess::Start({"--model-repository", *repo_, "--grpc-allow-compression",
                                           "--grpc-infer-response-compression-level", "high"});
  ASSERT_TRUE(compressing);
  int64_t identity_bytes = 0;
  const inference::ModelInferResponse identity =
      call(compressing->grpc_port, std::nullopt, false, &identity_bytes);
  EXPECT_EQ(identity.SerializeAsString(), plain.SerializeAsString());
  EXPECT_GT(identity_bytes, static_cast<int64_t>(plain.ByteSizeLong()));
  for (const auto algorithm : {GRPC_COMPRESS_GZIP, GRPC_COMPRESS_DEFLATE}) {
    const inference::ModelInferResponse r = call(compressing->grpc_port, algorithm, true, &bytes);
    EXPECT_EQ(r.SerializeAsString(), plain.SerializeAsString()) << algorithm;
    EXPECT_LT(bytes * 2, identity_bytes) << "the answer is compressed";
  }
}

// A `stop` through non-streaming /generate answered 200 with an error body ("generate expects
// model to produce exactly 1 response"): its one (empty) response is the answer, as for /infer.
TEST_F(ServerLimitsTest, StopThroughGenerateGetsItsEmptyResponse) {
  int status = 0;
  json r = PostJson("/v2/models/tensorrt_llm_sync/generate",
                    {{"id", "to-stop"},
                     {"input_ids", {1, 2, 3}},
                     {"input_lengths", 3},
                     {"request_output_len", 4},
                     {"stop", true}},
                    &status);
  EXPECT_EQ(status, 200) << r.dump();
  EXPECT_FALSE(r.contains("error")) << r.dump();
  EXPECT_EQ(r["id"], "to-stop") << r.dump();
  EXPECT_EQ(r["model_name"], "tensorrt_llm_sync") << r.dump();
  // Without an id it is the request's error, with its status.
  r = PostJson(
      "/v2/models/tensorrt_llm_sync/generate",
      {{"input_ids", {1, 2, 3}}, {"input_lengths", 3}, {"request_output_len", 4}, {"stop", true}},
      &status);
  EXPECT_GE(status, 400) << r.dump();
  EXPECT_NE(r.value("error", "").find("request ID is not provided"), std::string::npos) << r.dump();
}

// Triton's system shared-memory extension (tritonclient.utils.shared_memory): inputs read
// from and outputs written to client-registered POSIX shared memory; keys confined to shared
// memory object names; a region the client shrinks afterwards is an error, not a crash.
TEST_F(ServerLimitsTest, SystemSharedMemoryCarriesInputsAndOutputs) {
  const std::string in_key = "/inflight_test_in_" + std::to_string(getpid());
  const std::string out_key = "/inflight_test_out_" + std::to_string(getpid());
  auto make = [](const std::string& key, size_t size) {
    const int fd = shm_open(key.c_str(), O_CREAT | O_RDWR, 0600);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(size)), 0);
    return fd;
  };
  const int in_fd = make(in_key, 64), out_fd = make(out_key, 4096);
  const int32_t ids[3] = {1, 450, 471};
  ASSERT_EQ(pwrite(in_fd, ids, sizeof ids, 16), static_cast<ssize_t>(sizeof ids));
  int status = 0;
  PostJson("/v2/systemsharedmemory/region/in/register",
           {{"key", in_key}, {"offset", 0}, {"byte_size", 64}}, &status);
  EXPECT_EQ(status, 200);
  PostJson("/v2/systemsharedmemory/region/out/register",
           {{"key", out_key}, {"offset", 0}, {"byte_size", 4096}}, &status);
  EXPECT_EQ(status, 200);
  auto st = Http().Get("/v2/systemsharedmemory/status");
  ASSERT_TRUE(st);
  EXPECT_EQ(json::parse(st->body).size(), 2u) << st->body;

  auto scalar = [](const char* name, int v) {
    return json{{"name", name}, {"datatype", "INT32"}, {"shape", {1, 1}}, {"data", {v}}};
  };
  json inputs = {{{"name", "input_ids"},
                  {"datatype", "INT32"},
                  {"shape", {1, 3}},
                  {"parameters",
                   {{"shared_memory_region", "in"},
                    {"shared_memory_offset", 16},
                    {"shared_memory_byte_size", 12}}}},
                 scalar("input_lengths", 3),
                 scalar("request_output_len", 8)};
  json r = PostJson(
      "/v2/models/tensorrt_llm_sync/infer",
      {{"inputs", inputs},
       {"outputs",
        {{{"name", "output_ids"},
          {"parameters", {{"shared_memory_region", "out"}, {"shared_memory_byte_size", 4096}}}}}}},
      &status);
  ASSERT_EQ(status, 200) << r.dump();
  ASSERT_EQ(r["outputs"].size(), 1u) << r.dump();
  EXPECT_FALSE(r["outputs"][0].contains("data"));
  const size_t bytes = r["outputs"][0]["parameters"]["shared_memory_byte_size"].get<size_t>();
  std::vector<int32_t> from_shm(bytes / 4);
  ASSERT_EQ(pread(out_fd, from_shm.data(), bytes, 0), static_cast<ssize_t>(bytes));
  // The same request with JSON tensors.
  inputs[0] = {
      {"name", "input_ids"}, {"datatype", "INT32"}, {"shape", {1, 3}}, {"data", {1, 450, 471}}};
  json plain = PostJson("/v2/models/tensorrt_llm_sync/infer",
                        {{"inputs", inputs}, {"outputs", {{{"name", "output_ids"}}}}}, &status);
  ASSERT_EQ(status, 200) << plain.dump();
  EXPECT_EQ(json(from_shm), plain["outputs"][0]["data"]);

  // gRPC sees the same regions and reads/writes them the same way.
  {
    auto stub = GrpcStub();
    grpc::ClientContext status_ctx;
    inference::SystemSharedMemoryStatusResponse regions;
    ASSERT_TRUE(stub->SystemSharedMemoryStatus(
                        &status_ctx, inference::SystemSharedMemoryStatusRequest(), &regions)
                    .ok());
    EXPECT_EQ(regions.regions().size(), 2u);
    EXPECT_EQ(regions.regions().at("in").key(), in_key);
    inference::ModelInferRequest q;
    q.set_model_name("tensorrt_llm_sync");
    auto* ids_in = q.add_inputs();
    ids_in->set_name("input_ids");
    ids_in->set_datatype("INT32");
    ids_in->add_shape(1);
    ids_in->add_shape(3);
    (*ids_in->mutable_parameters())["shared_memory_region"].set_string_param("in");
    (*ids_in->mutable_parameters())["shared_memory_offset"].set_int64_param(16);
    (*ids_in->mutable_parameters())["shared_memory_byte_size"].set_int64_param(12);
    for (auto [name, v] : {std::pair{"input_lengths", 3}, std::pair{"request_output_len", 8}}) {
      auto* in = q.add_inputs();
      in->set_name(name);
      in->set_datatype("INT32");
      in->add_shape(1);
      in->add_shape(1);
      in->mutable_contents()->add_int_contents(v);
    }
    auto* out = q.add_outputs();
    out->set_name("output_ids");
    (*out->mutable_parameters())["shared_memory_region"].set_string_param("out");
    (*out->mutable_parameters())["shared_memory_offset"].set_int64_param(1024);
    (*out->mutable_parameters())["shared_memory_byte_size"].set_int64_param(1024);
    grpc::ClientContext ctx;
    inference::ModelInferResponse resp;
    grpc::Status gs = stub->ModelInfer(&ctx, q, &resp);
    ASSERT_TRUE(gs.ok()) << gs.error_message();
    ASSERT_EQ(resp.outputs_size(), 1);
    EXPECT_EQ(resp.raw_output_contents(0), "");
    std::vector<int32_t> grpc_shm(bytes / 4);
    ASSERT_EQ(pread(out_fd, grpc_shm.data(), bytes, 1024), static_cast<ssize_t>(bytes));
    EXPECT_EQ(grpc_shm, from_shm);
  }

  // Keys are shared-memory object names only; regions must lie inside their object.
  for (const auto& [key, size, message] :
       {std::tuple{std::string("/../../etc/passwd"), 8, "is not a shared memory object name"},
        std::tuple{std::string("etc/shadow"), 8, "is not a shared memory object name"},
        std::tuple{std::string("/inflight_no_such_object"), 8, "Unable to open"},
        std::tuple{in_key, 65, "outside the object"}}) {
    json e = PostJson("/v2/systemsharedmemory/region/bad/register",
                      {{"key", key}, {"byte_size", size}}, &status);
    EXPECT_EQ(status, 400) << key;
    EXPECT_NE(e.dump().find(message), std::string::npos) << e.dump();
  }
  // The client shrinks its object after registering it.
  ASSERT_EQ(ftruncate(in_fd, 0), 0);
  inputs[0] = {{"name", "input_ids"},
               {"datatype", "INT32"},
               {"shape", {1, 3}},
               {"parameters",
                {{"shared_memory_region", "in"},
                 {"shared_memory_offset", 16},
                 {"shared_memory_byte_size", 12}}}};
  json e = PostJson("/v2/models/tensorrt_llm_sync/infer", {{"inputs", inputs}}, &status);
  EXPECT_EQ(status, 400) << e.dump();
  EXPECT_NE(e.dump().find("shorter than registered"), std::string::npos) << e.dump();

  PostJson("/v2/systemsharedmemory/unregister", json::object(), &status);
  EXPECT_EQ(status, 200);
  st = Http().Get("/v2/systemsharedmemory/status");
  ASSERT_TRUE(st);
  EXPECT_EQ(st->body, "[]");
  close(in_fd);
  close(out_fd);
  shm_unlink(in_key.c_str());
  shm_unlink(out_key.c_str());
}

// prompt + max_tokens over the context: the reference clamps max_tokens (with a warning) and
// refuses only a prompt that leaves no room; we refused the request.
TEST_F(ServerLimitsTest, MaxTokensBeyondTheContextIsClamped) {
  int status = 0;
  json r = PostJson("/v2/models/tensorrt_llm_sync/generate",
                    {{"input_ids", {1, 450, 471}},
                     {"input_lengths", 3},
                     {"request_output_len", 100000000},
                     {"end_id", -1},
                     {"exclude_input_in_output", true}},
                    &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["output_ids"].size(), static_cast<size_t>(kDemoContext - 3))
      << r.dump().substr(0, 300);
  EXPECT_NE(server_->log().find("clamped to"), std::string::npos);
  std::vector<int32_t> full(kDemoContext, 450);
  r = PostJson("/v2/models/tensorrt_llm_sync/generate",
               {{"input_ids", full}, {"input_lengths", full.size()}, {"request_output_len", 1}},
               &status);
  EXPECT_EQ(status, 400) << r.dump();
  EXPECT_NE(r["error"].get<std::string>().find("maximum input length"), std::string::npos)
      << r.dump();
  EXPECT_TRUE(WaitIdle("tensorrt_llm_sync"));
}

// The shape whose product wraps around int64 also came over gRPC (raw contents of one
// element matched the wrapped count) and read out of bounds.
TEST_F(ServerLimitsTest, OverflowingShapeOverGrpcIsRefused) {
  auto stub = GrpcStub();
  for (const auto& [name, dtype, bytes] :
       {std::tuple{"prompt_embedding_table", "FP16", 2}, std::tuple{"input_ids", "INT32", 4}}) {
    inference::ModelInferRequest q;
    q.set_model_name("tensorrt_llm_sync");
    auto add = [&](const char* n, const char* t, std::vector<int64_t> shape, std::string raw) {
      auto* in = q.add_inputs();
      in->set_name(n);
      in->set_datatype(t);
      for (int64_t d : shape) in->add_shape(d);
      q.add_raw_input_contents(std::move(raw));
    };
    const int32_t one = 1;
    const std::string raw_one(reinterpret_cast<const char*>(&one), 4);
    if (std::string(name) != "input_ids") add("input_ids", "INT32", {1, 1}, raw_one);
    add("input_lengths", "INT32", {1, 1}, raw_one);
    add("request_output_len", "INT32", {1, 1}, raw_one);
    // 7 x 7905747460161236407 = 3 x 2^64 + 1: one element after wrapping.
    add(name, dtype, {1, 7, 7905747460161236407LL}, std::string(bytes, '\1'));
    grpc::ClientContext ctx;
    inference::ModelInferResponse resp;
    grpc::Status s = stub->ModelInfer(&ctx, q, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << name << ": " << s.error_message();
  }
  auto r = Http().Get("/v2/health/live");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

// Any number of headers and any header size were accepted (8 requests with 10^6 headers
// cost 830 MB): now 431 past the count or byte limit, and the memory comes back.
TEST_F(ServerLimitsTest, HeaderCountAndSizeAreBounded) {
  {
    RawConnection c(server_->http_port);
    std::string req = "GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n";
    for (int i = 0; i < 150; ++i) req += "X-" + std::to_string(i) + ": y\r\n";
    ASSERT_TRUE(c.Send(req + "\r\n"));
    const std::string resp = c.Read(milliseconds(5000), "}");
    EXPECT_EQ(resp.rfind("HTTP/1.1 431", 0), 0u) << resp;
    EXPECT_NE(resp.find("more than 100 request headers"), std::string::npos) << resp;
  }
  {
    RawConnection c(server_->http_port);
    c.Send("GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(100000, 'a') +
           "\r\n\r\n");
    const std::string resp = c.Read(milliseconds(5000), "}");
    EXPECT_EQ(resp.rfind("HTTP/1.1 431", 0), 0u) << resp.substr(0, 200);
  }
  const int64_t before = RssKb(server_->pid());
  std::vector<std::thread> senders;
  for (int k = 0; k < 8; ++k) {
    senders.emplace_back([] {
      RawConnection c(server_->http_port);
      std::string chunk;
      for (int i = 0; i < 10000; ++i) chunk += "X-h: v\r\n";
      c.Send("GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n");
      for (int i = 0; i < 100 && c.Send(chunk); ++i) {  // 10^6 headers, until the server closes
      }
      c.Read(milliseconds(2000));
    });
  }
  for (auto& t : senders) t.join();
  std::this_thread::sleep_for(milliseconds(200));
  const int64_t after = RssKb(server_->pid());
  if (!kAddressSanitizer) {
    EXPECT_LE(after, before + before / 10) << "RSS " << before << " kB -> " << after << " kB";
  }
  EXPECT_LT(HealthMs(), 1000);
}

// 130 slowloris connections (headers at a few bytes a second) timed every other client
// out: now they are closed at the header deadline and others are served meanwhile.
TEST_F(ServerLimitsTest, SlowlorisConnectionsNeitherStallOthersNorStay) {
  std::vector<std::unique_ptr<RawConnection>> slow;
  for (int i = 0; i < 300; ++i) {
    slow.push_back(std::make_unique<RawConnection>(server_->http_port));
    ASSERT_TRUE(slow.back()->connected());
    slow.back()->Send("POST /v2/models/ensemble/generate HTTP/1.1\r\nHost: x\r\n");
  }
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    while (!stop) {
      for (auto& c : slow) c->Send("X");
      std::this_thread::sleep_for(milliseconds(200));
    }
  });
  std::vector<double> ms;
  for (int i = 0; i < 30; ++i) ms.push_back(HealthMs());
  std::sort(ms.begin(), ms.end());
  EXPECT_LT(ms.back(), 500) << "slowest health check";
  // The header deadline is 1 s: every trickling connection is answered 408 and closed.
  std::this_thread::sleep_for(milliseconds(1500));
  stop = true;
  trickle.join();
  int closed = 0;
  for (auto& c : slow) closed += c->ClosedByPeer(milliseconds(2000));
  EXPECT_EQ(closed, 300);
}

// Idle keep-alive connections cost a socket each, not a thread: health stays fast and the
// connections stay open.
TEST_F(ServerLimitsTest, ThousandsOfIdleConnectionsDoNotDelayHealth) {
  std::vector<std::unique_ptr<RawConnection>> idle;
  for (int i = 0; i < 2000; ++i) {
    idle.push_back(std::make_unique<RawConnection>(server_->http_port));
    ASSERT_TRUE(idle.back()->connected()) << i;
  }
  std::vector<double> ms;
  for (int i = 0; i < 50; ++i) ms.push_back(HealthMs());
  std::sort(ms.begin(), ms.end());
  // Under ASan every request costs a few times more; 100 ms was missed by 17 ms there once.
  EXPECT_LT(ms[ms.size() * 99 / 100], kAddressSanitizer ? 250 : 100)
      << "p99 health latency with 2000 idle connections";
  int open = 0;
  for (auto& c : idle) open += c->OpenAndQuiet();
  EXPECT_EQ(open, 2000);
}

// A client that reads a logits stream slowly made the server buffer ~300 MB for it: now
// the unread output is bounded and the request is cancelled, its KV blocks freed.
TEST_F(ServerLimitsTest, SlowReadersAreCancelledAndCostABoundedAmount) {
  const double canceled_before = Canceled("tensorrt_llm");
  const int64_t rss_before = RssKb(server_->pid());
  const std::string body = json{{"input_ids", {1, 450, 471}}, {"input_lengths", 3},
                                {"request_output_len", 480},  {"end_id", -1},
                                {"streaming", true},          {"return_generation_logits", true}}
                               .dump();
  std::vector<std::unique_ptr<RawConnection>> readers;
  for (int i = 0; i < 8; ++i) {
    readers.push_back(std::make_unique<RawConnection>(server_->http_port, /*receive_buffer=*/4096));
    ASSERT_TRUE(
        readers.back()->Send("POST /v2/models/tensorrt_llm/generate_stream HTTP/1.1\r\nHost: x\r\n"
                             "Content-Type: application/json\r\nContent-Length: " +
                             std::to_string(body.size()) + "\r\n\r\n" + body));
  }
  // A stream is cancelled 5 s after its unread output reaches the bound: the engine must first
  // produce that much, slower under ASan on a loaded machine (10 s was missed once there).
  bool cancelled = false;
  for (int i = 0; i < (kAddressSanitizer ? 600 : 200) && !cancelled; ++i) {
    cancelled = Canceled("tensorrt_llm") >= canceled_before + 8;
    std::this_thread::sleep_for(milliseconds(50));
  }
  EXPECT_TRUE(cancelled) << "slow readers were not cancelled";
  const int64_t rss_peak = RssKb(server_->pid());
  // 480 tokens x 1024 logits as JSON is ~6 MB per stream (~48 MB for 8 unbounded); the
  // bound is 64 kB each, plus allocator slack. (Under ASan freed memory stays in its
  // quarantine, so RSS says nothing there.)
  if (!kAddressSanitizer) {
    EXPECT_LT(rss_peak - rss_before, 16 * 1024) << "kB held for 8 slow readers";
  }
  EXPECT_TRUE(WaitIdle("tensorrt_llm"));
  // A reader that comes back gets what was buffered and then the reason, as a last event.
  const std::string got = readers[0]->Read(milliseconds(10000), "0\r\n\r\n");
  EXPECT_NE(got.find("data: {"), std::string::npos);
  const size_t error = got.rfind("data: {\"error\"");
  ASSERT_NE(error, std::string::npos) << got.substr(got.size() > 300 ? got.size() - 300 : 0);
  EXPECT_NE(got.find("too slowly", error), std::string::npos) << got.substr(error);
}

// The same bound on a gRPC stream (the sync server buffered without limit): a reader that
// reads nothing pauses its request, which is cancelled after 5 s paused and the call ends
// with RESOURCE_EXHAUSTED. Open streams do not hold threads: 300 of them wait while a unary
// call is answered at once.
TEST_F(ServerLimitsTest, GrpcStreamsAreBoundedAndHoldNoThreads) {
  auto stub = GrpcStub();
  const double canceled_before = Canceled("tensorrt_llm");
  grpc::ClientContext ctx;
  auto stream = stub->ModelStreamInfer(&ctx);
  inference::ModelInferRequest q;
  q.set_model_name("tensorrt_llm");
  auto add = [&](const char* name, const char* dtype, std::vector<int64_t> shape) {
    return AddTypedInput(&q, name, dtype, shape);
  };
  auto* ids = add("input_ids", "INT32", {1, 3});
  for (int32_t id : {1, 450, 471}) ids->add_int_contents(id);
  add("input_lengths", "INT32", {1, 1})->add_int_contents(3);
  add("request_output_len", "INT32", {1, 1})->add_int_contents(480);
  add("end_id", "INT32", {1, 1})->add_int_contents(-1);
  add("streaming", "BOOL", {1, 1})->add_bool_contents(true);
  add("return_generation_logits", "BOOL", {1, 1})->add_bool_contents(true);
  ASSERT_TRUE(stream->Write(q));
  stream->WritesDone();
  bool cancelled = false;
  for (int i = 0; i < 200 && !cancelled; ++i) {  // the client reads nothing meanwhile
    cancelled = Canceled("tensorrt_llm") >= canceled_before + 1;
    std::this_thread::sleep_for(milliseconds(50));
  }
  EXPECT_TRUE(cancelled) << "the slow gRPC reader's request was not cancelled";
  inference::ModelStreamInferResponse r;
  int responses = 0;
  while (stream->Read(&r)) ++responses;
  grpc::Status status = stream->Finish();
  EXPECT_GT(responses, 0);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  EXPECT_NE(status.error_message().find("too slowly"), std::string::npos) << status.error_message();
  EXPECT_TRUE(WaitIdle("tensorrt_llm"));

  // 300 open streams that send nothing, then a unary call.
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<
      grpc::ClientReaderWriter<inference::ModelInferRequest, inference::ModelStreamInferResponse>>>
      open;
  for (int i = 0; i < 300; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    open.push_back(stub->ModelStreamInfer(contexts.back().get()));
  }
  const auto t0 = Clock::now();
  grpc::ClientContext live_ctx;
  inference::ServerLiveResponse live;
  ASSERT_TRUE(stub->ServerLive(&live_ctx, inference::ServerLiveRequest(), &live).ok());
  EXPECT_TRUE(live.live());
  EXPECT_LT(Clock::now() - t0, milliseconds(1000));
  for (auto& c : contexts) c->TryCancel();
  for (auto& o : open) o->Finish();
}

// Triton's logging extension: settings read and changed over HTTP and gRPC, applied to the
// server's log (a warning line is written or not), log_file read-only over the network.
TEST_F(ServerLimitsTest, LoggingSettingsOverHttpAndGrpc) {
  auto get = Http().Get("/v2/logging");
  ASSERT_TRUE(get);
  json settings = json::parse(get->body);
  EXPECT_EQ(settings["log_warning"], true);
  EXPECT_EQ(settings["log_format"], "default");
  int status = 0;
  json e = PostJson("/v2/logging", {{"log_file", "/tmp/x"}}, &status);
  EXPECT_EQ(status, 501) << e.dump();
  e = PostJson("/v2/logging", {{"log_info", "yes"}}, &status);
  EXPECT_EQ(status, 400) << e.dump();
  // Warnings off: the clamp warning is no longer written.
  json off = PostJson("/v2/logging", {{"log_warning", false}}, &status);
  ASSERT_EQ(status, 200) << off.dump();
  EXPECT_EQ(off["log_warning"], false);
  auto clamped = [&] {
    const std::string log = server_->log();
    size_t n = 0;
    for (size_t pos = 0; (pos = log.find("clamped to", pos)) != std::string::npos; ++pos) ++n;
    return n;
  };
  const size_t before = clamped();
  PostJson("/v2/models/tensorrt_llm_sync/generate",
           {{"input_ids", {1, 450, 471}},
            {"input_lengths", 3},
            {"request_output_len", 100000},
            {"end_id", 2}},
           &status);
  EXPECT_EQ(status, 200);
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(clamped(), before);
  // Back on over gRPC, and the same view there.
  auto stub = GrpcStub();
  inference::LogSettingsRequest q;
  (*q.mutable_settings())["log_warning"].set_bool_param(true);
  grpc::ClientContext ctx;
  inference::LogSettingsResponse r;
  ASSERT_TRUE(stub->LogSettings(&ctx, q, &r).ok());
  EXPECT_TRUE(r.settings().at("log_warning").bool_param());
  EXPECT_EQ(r.settings().at("log_format").string_param(), "default");
  PostJson("/v2/models/tensorrt_llm_sync/generate",
           {{"input_ids", {1, 450, 471}},
            {"input_lengths", 3},
            {"request_output_len", 100000},
            {"end_id", 2}},
           &status);
  for (int i = 0; i < 50 && clamped() == before; ++i) std::this_thread::sleep_for(milliseconds(20));
  EXPECT_EQ(clamped(), before + 1);
}

// Triton's trace extension: global and per-model settings over HTTP and gRPC, and
// TIMESTAMPS traces of sampled requests in the trace file (rate, count, log frequency).
TEST_F(ServerLimitsTest, TraceSettingsAndTimestampTraces) {
  auto get = Http().Get("/v2/trace/setting");
  ASSERT_TRUE(get);
  json global = json::parse(get->body);
  EXPECT_EQ(global["trace_level"], json({"OFF"}));
  EXPECT_EQ(global["trace_file"], *trace_file_);
  int status = 0;
  PostJson("/v2/trace/setting", {{"trace_file", "/tmp/elsewhere"}}, &status);
  EXPECT_EQ(status, 501);
  PostJson("/v2/trace/setting", {{"trace_rate", "often"}}, &status);
  EXPECT_EQ(status, 400);
  PostJson("/v2/models/nope/trace/setting", {{"trace_rate", "1"}}, &status);
  EXPECT_EQ(status, 404);
  json model = PostJson("/v2/models/ensemble/trace/setting",
                        {{"trace_level", {"TIMESTAMPS"}},
                         {"trace_rate", "1"},
                         {"trace_count", "2"},
                         {"log_frequency", "1"}},
                        &status);
  ASSERT_EQ(status, 200) << model.dump();
  EXPECT_EQ(model["trace_level"], json({"TIMESTAMPS"}));
  EXPECT_EQ(json::parse(Http().Get("/v2/trace/setting")->body)["trace_level"], json({"OFF"}));
  for (int i = 0; i < 3; ++i) {
    PostJson("/v2/models/ensemble/generate",
             {{"text_input", "Once upon a time"}, {"max_tokens", 3}}, &status);
    EXPECT_EQ(status, 200);
  }
  // Two traces (trace_count 2), one file line each (log_frequency 1): model then timestamps.
  std::vector<json> lines;
  for (int i = 0; i < 100 && lines.size() < 2; ++i) {
    std::this_thread::sleep_for(milliseconds(20));
    lines.clear();
    std::ifstream in(*trace_file_);
    for (std::string line; std::getline(in, line);) lines.push_back(json::parse(line));
  }
  ASSERT_EQ(lines.size(), 2u);
  for (const json& l : lines) {
    ASSERT_EQ(l.size(), 2u) << l.dump();
    EXPECT_EQ(l[0]["model_name"], "ensemble");
    EXPECT_EQ(l[0]["id"], l[1]["id"]);
    const json& ts = l[1]["timestamps"];
    ASSERT_EQ(ts.size(), 5u) << l.dump();
    EXPECT_EQ(ts[0]["name"], "REQUEST_START");
    EXPECT_EQ(ts[4]["name"], "REQUEST_END");
    for (size_t i = 1; i < ts.size(); ++i)
      EXPECT_LE(ts[i - 1]["ns"].get<uint64_t>(), ts[i]["ns"].get<uint64_t>());
  }
  // gRPC sees the same settings; an empty value list clears the model's override.
  auto stub = GrpcStub();
  inference::TraceSettingRequest q;
  q.set_model_name("ensemble");
  grpc::ClientContext ctx;
  inference::TraceSettingResponse r;
  ASSERT_TRUE(stub->TraceSetting(&ctx, q, &r).ok());
  EXPECT_EQ(r.settings().at("trace_count").value(0), "0");
  (*q.mutable_settings())["trace_level"];  // no values: clear
  grpc::ClientContext clear_ctx;
  ASSERT_TRUE(stub->TraceSetting(&clear_ctx, q, &r).ok());
  EXPECT_EQ(r.settings().at("trace_level").value(0), "OFF");
}

// The standard gRPC health service answers (what Kubernetes gRPC probes call).
TEST_F(ServerLimitsTest, GrpcHealthServiceAnswersServing) {
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->grpc_port),
                                     grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  grpc::ByteBuffer request, response;  // HealthCheckRequest{service: ""} is empty on the wire
  grpc::Slice empty;
  request = grpc::ByteBuffer(&empty, 1);
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) { done.set_value(s); });
  const grpc::Status s = done.get_future().get();
  ASSERT_TRUE(s.ok()) << s.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const auto& sl : slices) bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  EXPECT_EQ(bytes, std::string("\x08\x01"));  // HealthCheckResponse{status: SERVING}
}

// The admission queue is bounded by default (the reference's 0 meant unbounded): derived
// from the KV cache (as many waiting requests as blocks, at least 64); beyond it 503 with
// Retry-After, and every admitted request completes.
TEST_F(ServerLimitsTest, DefaultQueueBoundRefusesWith503AndRetryAfter) {
  std::atomic<int> refused{0}, served{0}, other{0};
  std::atomic<bool> retry_after{true};
  std::vector<std::thread> clients;
  for (int i = 0; i < 160; ++i) {
    clients.emplace_back([&] {
      auto r = Http().Post("/v2/models/tensorrt_llm_small_kv/generate",
                           json{{"input_ids", {1, 450, 471}},
                                {"input_lengths", 3},
                                {"request_output_len", 200},
                                {"end_id", -1}}
                               .dump(),
                           "application/json");
      if (r && r->status == 503) {
        ++refused;
        retry_after =
            retry_after && r->get_header_value("Retry-After") == "1" &&
            r->body.find("Maximum queue size of 64 has been reached") != std::string::npos;
      } else if (r && r->status == 200 && json::parse(r->body)["output_ids"].size() == 203) {
        ++served;
      } else {
        ++other;
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_GT(refused, 0);
  EXPECT_GE(served, 64);
  EXPECT_EQ(other, 0);
  EXPECT_TRUE(retry_after);
  EXPECT_TRUE(WaitIdle("tensorrt_llm_small_kv"));
}

// SIGTERM: ensemble streams kept running during the drain (their steps used to be refused
// at once), streams still open at the exit timeout end with an error event instead of
// looking complete, and the process exits within the timeout plus a second.
TEST(ServerShutdownTest, DrainsEnsembleStreamsThenEndsTheRestWithAnError) {
  const std::string tokenizer =
      testing::SharedDir() + "/models/tokenizers/llama2-sentencepiece/tokenizer.model";
  REQUIRE_SHARED_FILE(tokenizer);
  const fs::path dir =
      fs::temp_directory_path() / ("inflight_shutdown_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string model = (dir / "small-f32.gguf").string();
  const std::string make = std::string(INFLIGHT_BINARY_DIR) +
                           "/apps/inflight-model make-random --arch llama --preset small " +
                           "--dtype f32 --tokenizer " + tokenizer + " -o " + model + " > /dev/null";
  ASSERT_EQ(std::system(make.c_str()), 0);
  const std::string repo = WriteRepository(model, "shutdown");
  auto server = ServerProcess::Start({"--model-repository", repo, "--exit-timeout-secs", "1"});
  ASSERT_NE(server, nullptr);

  struct Stream {
    std::string path, body, text;
    std::vector<Clock::time_point> event_times;
    std::mutex mu;
  };
  std::vector<std::unique_ptr<Stream>> streams;
  for (const char* model_name : {"ensemble", "tensorrt_llm_bls"}) {
    auto s = std::make_unique<Stream>();
    s->path = std::string("/v2/models/") + model_name + "/generate_stream";
    s->body =
        json{{"text_input", "Once upon a time"}, {"max_tokens", 1800}, {"stream", true}}.dump();
    streams.push_back(std::move(s));
  }
  {
    auto s = std::make_unique<Stream>();
    s->path = "/v2/models/tensorrt_llm/generate_stream";
    s->body = json{
        {"input_ids", {1, 450, 471}},
        {"input_lengths", 3},
        {"request_output_len", 1800},
        {"end_id", -1},
        {"streaming",
         true}}.dump();
    streams.push_back(std::move(s));
  }
  std::vector<std::thread> clients;
  for (auto& sp : streams) {
    clients.emplace_back([&server, s = sp.get()] {
      httplib::Client c("127.0.0.1", server->http_port);
      c.set_read_timeout(30);
      httplib::Request req;
      req.method = "POST";
      req.path = s->path;
      req.body = s->body;
      req.set_header("Content-Type", "application/json");
      req.content_receiver = [s](const char* data, size_t n, uint64_t, uint64_t) {
        std::lock_guard<std::mutex> lock(s->mu);
        s->text.append(data, n);
        s->event_times.push_back(Clock::now());
        return true;
      };
      c.send(req);
    });
  }
  auto all_started = [&] {
    for (auto& s : streams) {
      std::lock_guard<std::mutex> lock(s->mu);
      if (s->text.find("data: ") == std::string::npos) return false;
    }
    return true;
  };
  for (int i = 0; i < 600 && !all_started(); ++i) std::this_thread::sleep_for(milliseconds(50));
  ASSERT_TRUE(all_started());
  const auto signalled = Clock::now();
  kill(server->pid(), SIGTERM);
  int status = 0;
  bool exited = false;
  while (!exited && Clock::now() - signalled < std::chrono::seconds(10)) {
    exited = waitpid(server->pid(), &status, WNOHANG) == server->pid();
    if (!exited) std::this_thread::sleep_for(milliseconds(10));
  }
  const double exit_s = std::chrono::duration<double>(Clock::now() - signalled).count();
  ASSERT_TRUE(exited);
  // The drain's timeout plus the step in flight and the teardown (slower under ASan, where
  // 2.08 s was seen once).
  EXPECT_LT(exit_s, 1.0 + (kAddressSanitizer ? 2.0 : 1.0))
      << "exit took " << exit_s << " s with --exit-timeout-secs 1";
  for (auto& t : clients) t.join();
  for (auto& s : streams) {
    const auto events = SseEvents(s->text);
    ASSERT_FALSE(events.empty()) << s->path;
    int after_signal = 0;
    for (auto t : s->event_times) after_signal += t > signalled + milliseconds(100);
    EXPECT_GE(after_signal, 2) << s->path << ": the stream stopped at the signal";
    EXPECT_TRUE(events.back().contains("error"))
        << s->path << " ended without an error: " << events.back().dump();
    if (events.back().contains("error")) {
      EXPECT_NE(events.back()["error"].get<std::string>().find("shutdown"), std::string::npos)
          << events.back().dump();
    }
  }
  fs::remove_all(dir);
  fs::remove_all(repo);
}

}  // namespace
}  // namespace inflight
