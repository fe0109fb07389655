// The real server on a network (issue 14): API keys on every endpoint of every port, Triton's
// restricted API groups, TLS and mutual TLS (certificates made by openssl here), prefix-cache
// salts (no KV block shared across salts or keys, full sharing within one), and per-key
// limits (429 + Retry-After) and per-request limits. Each check fails on a server without the
// feature: it answered everything, to anyone, in plaintext.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>

#include "grpc_service.grpc.pb.h"
#include "llm_grpc_requests.h"
#include "server_harness.h"
#include "test_util.h"

namespace inflight {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::LlmRequest;
using testing::OutputInt32;
using testing::ServerProcess;
using testing::StopRequest;

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Runs a shell command; its stdout.
std::string Shell(const std::string& cmd, int* exit_code = nullptr) {
  std::string out;
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  const int status = pclose(f);
  if (exit_code) *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

class SecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("inflight_security_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const std::string cmd = std::string(INFLIGHT_BINARY_DIR) +
                            "/apps/inflight-server init-repo --model " + testing::SourceDir() +
                            "/models/demo/inflight-demo-q8_0.gguf --out " +
                            (dir_ / "repo").string() + " > /dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  void TearDown() override {
    if (server_ && HasFailure())
      std::fprintf(stderr, "--- server log ---\n%s\n", server_->log().c_str());
    server_.reset();
  }

  void StartServer(std::vector<std::string> args) {
    args.insert(args.begin(), {"--model-repository", (dir_ / "repo").string()});
    server_ = ServerProcess::Start(args);
    ASSERT_NE(server_, nullptr);
  }

  httplib::Client Http(int port = 0) {
    httplib::Client c("127.0.0.1", port ? port : server_->http_port);
    c.set_read_timeout(120);
    return c;
  }
  static httplib::Headers Bearer(const std::string& key) {
    return key.empty() ? httplib::Headers{} : httplib::Headers{{"Authorization", "Bearer " + key}};
  }

  std::unique_ptr<inference::GRPCInferenceService::Stub> Stub(
      std::shared_ptr<grpc::ChannelCredentials> creds = nullptr,
      const std::string& host = "127.0.0.1") {
    if (!creds) creds = grpc::InsecureChannelCredentials();
    return inference::GRPCInferenceService::NewStub(
        grpc::CreateChannel(host + ":" + std::to_string(server_->grpc_port), creds));
  }
  static void Authorize(grpc::ClientContext* ctx, const std::string& key) {
    if (!key.empty()) ctx->AddMetadata("authorization", "Bearer " + key);
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  }

  // grpc.health.v1.Health/Check for the whole server: the call's status and the serving status.
  // `bytes`: the request message as sent ("" is HealthCheckRequest with service "").
  std::pair<grpc::StatusCode, int> HealthCheck(
      const std::string& key, const std::string& bytes = "",
      const std::string& method = "/grpc.health.v1.Health/Check") {
    grpc::GenericStub stub(grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->grpc_port),
                                               grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    Authorize(&ctx, key);
    grpc::ByteBuffer request, response;
    grpc::Slice slice(bytes.data(), bytes.size());
    request = grpc::ByteBuffer(&slice, 1);
    std::promise<grpc::Status> done;
    stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response,
                   [&done](grpc::Status s) { done.set_value(s); });
    const grpc::Status s = done.get_future().get();
    std::vector<grpc::Slice> slices;
    int serving = -1;
    if (s.ok() && response.Dump(&slices).ok() && !slices.empty() && slices[0].size() == 2)
      serving = slices[0].begin()[1];
    return {s.error_code(), serving};
  }

  // A prompt of `words` words (tens of tokens: several KV blocks of 32).
  static std::string LongPrompt(int words = 60) {
    static const char* kWords[] = {"the", "little", "dog",  "ran", "to",
                                   "a",   "big",    "tree", "and", "sat"};
    std::string p = "Once upon a time";
    for (int i = 0; i < words; ++i) p += std::string(" ") + kWords[(i * 7) % 10];
    return p;
  }

  // usage.prompt_tokens_details.cached_tokens of one OpenAI completion (-1 on failure).
  int64_t CachedTokens(const std::string& prompt, const std::string& key, const std::string& salt) {
    json body = {{"model", "ensemble"}, {"prompt", prompt}, {"max_tokens", 2}, {"temperature", 0}};
    if (!salt.empty()) body["cache_salt"] = salt;
    auto r = Http().Post("/v1/completions", Bearer(key), body.dump(), "application/json");
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
    if (!r || r->status != 200) return -1;
    return json::parse(r->body)["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
  }

  static inline fs::path dir_;
  std::unique_ptr<ServerProcess> server_;
};

// A ModelInfer of the (non-decoupled) preprocessing model.
inference::ModelInferRequest PreprocessingRequest() {
  inference::ModelInferRequest q;
  q.set_model_name("preprocessing");
  auto* in = q.add_inputs();
  in->set_name("QUERY");
  in->set_datatype("BYTES");
  in->add_shape(1);
  in->add_shape(1);
  in->mutable_contents()->add_bytes_contents("Hi");
  auto* len = q.add_inputs();
  len->set_name("REQUEST_OUTPUT_LEN");
  len->set_datatype("INT32");
  len->add_shape(1);
  len->add_shape(1);
  len->mutable_contents()->add_int_contents(2);
  return q;
}

// One long streamed OpenAI request (64 choices run to 400 tokens) that holds a concurrency
// slot from its first event until Release, when the client hangs up.
class SlotHolder {
 public:
  SlotHolder(int port, const std::string& key) {
    std::promise<void> started;
    auto started_future = started.get_future();
    thread_ = std::thread([this, port, key, started = std::move(started)]() mutable {
      httplib::Client c("127.0.0.1", port);
      c.set_read_timeout(120);
      bool first = true;
      httplib::Request req;
      req.method = "POST";
      req.path = "/v1/completions";
      req.body = json{
          {"model", "ensemble"},
          {"prompt", "Once upon a time"},
          {"max_tokens", 400},
          {"ignore_eos", true},
          {"n", 64},
          {"stream",
           true}}.dump();
      req.set_header("Content-Type", "application/json");
      if (!key.empty()) req.set_header("Authorization", "Bearer " + key);
      req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
        if (first) started.set_value(), first = false;
        return !stop_.load();  // false: the client gives up (closes the connection)
      };
      c.send(req);
      if (first) started.set_value();
    });
    started_future.wait();
  }
  ~SlotHolder() { Release(); }
  void Release() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

struct Endpoint {
  const char* method;
  std::string path;
  std::string body;
  bool admin;  // in the default admin groups
};

std::vector<Endpoint> HttpEndpoints() {
  const std::string gen = R"({"text_input": "Once upon a time", "max_tokens": 2})";
  const std::string infer =
      R"({"inputs": [{"name": "QUERY", "shape": [1, 1], "datatype": "BYTES", "data": ["Hi"]},
                                           {"name": "REQUEST_OUTPUT_LEN", "shape": [1, 1], "datatype": "INT32", "data": [2]}]})";
  return {
      {"GET", "/v2/health/live", "", false},
      {"GET", "/v2/health/ready", "", false},
      {"GET", "/v2", "", false},
      {"GET", "/v2/models/ensemble", "", false},
      {"GET", "/v2/models/ensemble/ready", "", false},
      {"GET", "/v2/models/ensemble/config", "", false},
      {"POST", "/v2/models/ensemble/generate", gen, false},
      {"POST", "/v2/models/ensemble/generate_stream", gen, false},
      {"POST", "/v2/models/preprocessing/infer", infer, false},  // the ensemble is decoupled
      {"GET", "/v1/models", "", false},
      {"POST", "/v1/completions", R"({"model": "ensemble", "prompt": "Hi", "max_tokens": 2})",
       false},
      {"POST", "/v1/chat/completions",
       R"({"model": "ensemble", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})",
       false},
      {"GET", "/v2/models/stats", "", true},
      {"GET", "/v2/models/ensemble/stats", "", true},
      {"POST", "/v2/repository/index", "", true},
      {"POST", "/v2/repository/models/nosuchmodel/unload", "{}", true},
      {"GET", "/v2/trace/setting", "", true},
      {"GET", "/v2/logging", "", true},
      {"GET", "/v2/systemsharedmemory/status", "", true},
      {"GET", "/inflight/snapshot", "", true},
  };
}

int Call(httplib::Client& c, const Endpoint& e, const httplib::Headers& h) {
  auto r = std::string(e.method) == "GET" ? c.Get(e.path.c_str(), h)
                                          : c.Post(e.path.c_str(), h, e.body, "application/json");
  return r ? r->status : -1;
}

TEST_F(SecurityTest, ApiKeysGuardEveryHttpEndpointAndTheMetricsPort) {
  StartServer({"--api-key", "public-key-1", "--admin-key", "admin-key-1"});
  auto http = Http();
  for (const Endpoint& e : HttpEndpoints()) {
    SCOPED_TRACE(std::string(e.method) + " " + e.path);
    if (e.path.rfind("/v2/health/", 0) == 0) {
      // The server's probes stay open (Kubernetes sends no key): HealthProbesAreOpenByDefault.
      EXPECT_EQ(Call(http, e, {}), 200);
      continue;
    }
    EXPECT_EQ(Call(http, e, {}), 401);
    EXPECT_EQ(Call(http, e, Bearer("public-key-2")), 401);
    EXPECT_EQ(Call(http, e, {{"Authorization", "Basic cHVibGljLWtleS0x"}}), 401);
    const int with_public = Call(http, e, Bearer("public-key-1"));
    if (e.admin) {
      EXPECT_EQ(with_public, 403);
    } else {
      EXPECT_TRUE(with_public >= 200 && with_public < 300) << with_public;
    }
    const int with_admin = Call(http, e, Bearer("admin-key-1"));
    EXPECT_NE(with_admin, 401);
    EXPECT_NE(with_admin, 403);
  }
  // A refusal tells nothing: no model names, no key hints.
  auto r = http.Get("/v2/models/ensemble/config");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, R"({"error":"unauthenticated"})");
  EXPECT_EQ(r->get_header_value("WWW-Authenticate"), "Bearer");
  // The OpenAI API answers in its own error shape.
  r = http.Post("/v1/completions", R"({"model": "ensemble", "prompt": "Hi"})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(json::parse(r->body)["error"]["message"], "unauthenticated");
  // The web page itself holds no data (it asks for the key in the browser).
  r = http.Get("/");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);

  // Metrics: admin only by default.
  auto metrics = Http(server_->metrics_port);
  EXPECT_EQ(metrics.Get("/metrics")->status, 401);
  EXPECT_EQ(metrics.Get("/metrics", Bearer("public-key-1"))->status, 403);
  auto m = metrics.Get("/metrics", Bearer("admin-key-1"));
  EXPECT_EQ(m->status, 200);
  EXPECT_NE(m->body.find("nv_inference_request_success"), std::string::npos);
}

TEST_F(SecurityTest, ApiKeysGuardEveryGrpcMethod) {
  StartServer({"--api-key", "public-key-1", "--admin-key", "admin-key-1"});
  auto stub = Stub();
  // {call, admin}: each runs one RPC with the given key and returns its status code.
  using CallFn = std::function<grpc::StatusCode(const std::string&)>;
  std::vector<std::pair<std::string, std::pair<CallFn, bool>>> calls;
  auto unary = [&](const std::string& name, auto rpc, bool admin) {
    calls.push_back({name,
                     {[rpc](const std::string& key) {
                        grpc::ClientContext ctx;
                        Authorize(&ctx, key);
                        return rpc(&ctx).error_code();
                      },
                      admin}});
  };
  unary(
      "ServerLive",
      [&](grpc::ClientContext* c) {
        inference::ServerLiveResponse r;
        return stub->ServerLive(c, {}, &r);
      },
      false);
  unary(
      "ServerReady",
      [&](grpc::ClientContext* c) {
        inference::ServerReadyResponse r;
        return stub->ServerReady(c, {}, &r);
      },
      false);
  unary(
      "ServerMetadata",
      [&](grpc::ClientContext* c) {
        inference::ServerMetadataResponse r;
        return stub->ServerMetadata(c, {}, &r);
      },
      false);
  unary(
      "ModelMetadata",
      [&](grpc::ClientContext* c) {
        inference::ModelMetadataRequest q;
        q.set_name("ensemble");
        inference::ModelMetadataResponse r;
        return stub->ModelMetadata(c, q, &r);
      },
      false);
  unary(
      "ModelConfig",
      [&](grpc::ClientContext* c) {
        inference::ModelConfigRequest q;
        q.set_name("ensemble");
        inference::ModelConfigResponse r;
        return stub->ModelConfig(c, q, &r);
      },
      false);
  unary(
      "ModelInfer",
      [&](grpc::ClientContext* c) {
        inference::ModelInferResponse r;
        return stub->ModelInfer(c, PreprocessingRequest(), &r);
      },
      false);
  unary(
      "ModelStatistics",
      [&](grpc::ClientContext* c) {
        inference::ModelStatisticsResponse r;
        return stub->ModelStatistics(c, {}, &r);
      },
      true);
  unary(
      "RepositoryIndex",
      [&](grpc::ClientContext* c) {
        inference::RepositoryIndexResponse r;
        return stub->RepositoryIndex(c, {}, &r);
      },
      true);
  unary(
      "RepositoryModelUnload",
      [&](grpc::ClientContext* c) {
        inference::RepositoryModelUnloadRequest q;
        q.set_model_name("nosuchmodel");
        inference::RepositoryModelUnloadResponse r;
        return stub->RepositoryModelUnload(c, q, &r);
      },
      true);
  unary(
      "LogSettings",
      [&](grpc::ClientContext* c) {
        inference::LogSettingsResponse r;
        return stub->LogSettings(c, {}, &r);
      },
      true);
  unary(
      "TraceSetting",
      [&](grpc::ClientContext* c) {
        inference::TraceSettingResponse r;
        return stub->TraceSetting(c, {}, &r);
      },
      true);
  unary(
      "SystemSharedMemoryStatus",
      [&](grpc::ClientContext* c) {
        inference::SystemSharedMemoryStatusResponse r;
        return stub->SystemSharedMemoryStatus(c, {}, &r);
      },
      true);
  calls.push_back({"ModelStreamInfer",
                   {[&](const std::string& key) {
                      grpc::ClientContext ctx;
                      Authorize(&ctx, key);
                      auto stream = stub->ModelStreamInfer(&ctx);
                      stream->WritesDone();
                      inference::ModelStreamInferResponse r;
                      while (stream->Read(&r)) {
                      }
                      return stream->Finish().error_code();
                    },
                    false}});
  for (const auto& [name, call] : calls) {
    SCOPED_TRACE(name);
    const auto& [fn, admin] = call;
    if (name == "ServerLive" || name == "ServerReady") {
      EXPECT_EQ(fn(""), grpc::StatusCode::OK);  // probes: HealthProbesAreOpenByDefault
      continue;
    }
    EXPECT_EQ(fn(""), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(fn("wrong"), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(fn("public-key-1"),
              admin ? grpc::StatusCode::PERMISSION_DENIED : grpc::StatusCode::OK);
    const grpc::StatusCode with_admin = fn("admin-key-1");
    EXPECT_NE(with_admin, grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_NE(with_admin, grpc::StatusCode::PERMISSION_DENIED);
  }
  // The standard health service is a probe too: SERVING with or without a key.
  EXPECT_EQ(HealthCheck(""), std::make_pair(grpc::StatusCode::OK, 1));
  EXPECT_EQ(HealthCheck("public-key-1"), std::make_pair(grpc::StatusCode::OK, 1));
  // What an attacker sends the hand-written health service: truncated or overlong varints,
  // a length past the end, an unknown wire type, an unknown service, an unknown method.
  const std::string k = "public-key-1";
  EXPECT_EQ(HealthCheck(k, std::string("\x0a\x05"
                                       "ab",
                                       4))
                .first,
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(
      HealthCheck(k, std::string("\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 12)).first,
      grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(HealthCheck(k, std::string("\x0f\x00", 2)).first, grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(HealthCheck(k, std::string("\x0a\x05nosvc", 7)).first, grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(HealthCheck(k, std::string("\x0a\x1einference.GRPCInferenceService", 32)),
            std::make_pair(grpc::StatusCode::OK, 1));
  EXPECT_EQ(HealthCheck(k, std::string("\x10\x05\x0a\x00", 4)),
            std::make_pair(grpc::StatusCode::OK, 1));  // unknown field skipped
  EXPECT_EQ(HealthCheck(k, "", "/grpc.health.v1.Health/Nope").first,
            grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(HealthCheck("", "", "/no.such.Service/Call").first, grpc::StatusCode::UNIMPLEMENTED);
}

// With --api-key, /v2/health/live|ready answered 401 without a key, and Kubernetes probes
// carry none: the server's own probes are open by default (as in Triton and vLLM) while a
// model's readiness and everything else still needs the key; --api-key-health guards them.
TEST_F(SecurityTest, HealthProbesAreOpenByDefault) {
  auto grpc_live = [&](const std::string& key) {
    grpc::ClientContext ctx;
    Authorize(&ctx, key);
    inference::ServerLiveResponse r;
    return Stub()->ServerLive(&ctx, {}, &r).error_code();
  };
  auto grpc_ready = [&](const std::string& key) {
    grpc::ClientContext ctx;
    Authorize(&ctx, key);
    inference::ServerReadyResponse r;
    return Stub()->ServerReady(&ctx, {}, &r).error_code();
  };
  StartServer({"--api-key", "public-key-1"});
  auto http = Http();
  for (const char* path : {"/v2/health/live", "/v2/health/ready"}) {
    EXPECT_EQ(http.Get(path)->status, 200) << path;
    EXPECT_EQ(http.Get(path, Bearer("public-key-1"))->status, 200) << path;
  }
  EXPECT_EQ(http.Get("/v2/models/ensemble/ready")->status, 401);
  EXPECT_EQ(http.Get("/v2")->status, 401);
  EXPECT_EQ(grpc_live(""), grpc::StatusCode::OK);
  EXPECT_EQ(grpc_ready(""), grpc::StatusCode::OK);
  EXPECT_EQ(HealthCheck(""), std::make_pair(grpc::StatusCode::OK, 1));
  {
    grpc::ClientContext ctx;
    Authorize(&ctx, "");
    inference::ModelReadyRequest q;
    q.set_name("ensemble");
    inference::ModelReadyResponse r;
    EXPECT_EQ(Stub()->ModelReady(&ctx, q, &r).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }

  StartServer({"--api-key", "public-key-1", "--api-key-health"});
  auto guarded = Http();
  for (const char* path : {"/v2/health/live", "/v2/health/ready"}) {
    EXPECT_EQ(guarded.Get(path)->status, 401) << path;
    EXPECT_EQ(guarded.Get(path, Bearer("public-key-1"))->status, 200) << path;
  }
  EXPECT_EQ(grpc_live(""), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(grpc_ready(""), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(grpc_live("public-key-1"), grpc::StatusCode::OK);
  EXPECT_EQ(HealthCheck("").first, grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(HealthCheck("public-key-1"), std::make_pair(grpc::StatusCode::OK, 1));
}

TEST_F(SecurityTest, RestrictedGroupsNeedTheirOwnHeader) {
  // Triton's options: the control plane behind a header of its own, the rest open.
  StartServer({"--http-restricted-api", "model-repository,statistics:admin-token=s3cret",
               "--grpc-restricted-protocol", "model-repository:admin-token=s3cret"});
  auto http = Http();
  EXPECT_EQ(http.Post("/v2/repository/index", "", "application/json")->status, 401);
  EXPECT_EQ(
      http.Post("/v2/repository/index", {{"admin-token", "wrong"}}, "", "application/json")->status,
      401);
  EXPECT_EQ(http.Post("/v2/repository/index", {{"admin-token", "s3cret"}}, "", "application/json")
                ->status,
            200);
  EXPECT_EQ(http.Get("/v2/models/stats")->status, 401);
  EXPECT_EQ(http.Get("/v2/models/stats", {{"Admin-Token", "s3cret"}})->status, 200);
  EXPECT_EQ(http.Post("/v2/models/ensemble/generate", R"({"text_input": "Hi", "max_tokens": 2})",
                      "application/json")
                ->status,
            200);

  auto stub = Stub();
  inference::RepositoryIndexResponse r;
  {
    grpc::ClientContext ctx;
    EXPECT_EQ(stub->RepositoryIndex(&ctx, {}, &r).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("admin-token", "s3cret");
    EXPECT_TRUE(stub->RepositoryIndex(&ctx, {}, &r).ok());
    EXPECT_GE(r.models_size(), 5);
  }
  {
    grpc::ClientContext ctx;
    inference::ServerLiveResponse live;
    EXPECT_TRUE(stub->ServerLive(&ctx, {}, &live).ok());
  }
}

TEST_F(SecurityTest, ControlPlaneHasItsOwnKeyWithKeysAndRestrictedGroupsTogether) {
  // Public keys for the data plane; model control only with the restricted header (not with a
  // public key, not with no key).
  StartServer({"--api-key", "pub", "--http-restricted-api", "model-repository:x-admin=adm",
               "--model-control-mode", "explicit", "--load-model", "*"});
  auto http = Http();
  const std::string unload = "/v2/repository/models/ensemble/unload";
  EXPECT_EQ(http.Post(unload.c_str(), "{}", "application/json")->status, 401);
  EXPECT_EQ(http.Post(unload.c_str(), Bearer("pub"), "{}", "application/json")->status, 403);
  EXPECT_EQ(http.Post("/v2/models/ensemble/generate", Bearer("pub"),
                      R"({"text_input": "Hi", "max_tokens": 2})", "application/json")
                ->status,
            200);
  EXPECT_EQ(http.Post(unload.c_str(), {{"x-admin", "adm"}}, "{}", "application/json")->status, 200);
  EXPECT_EQ(http.Post("/v2/models/ensemble/generate", Bearer("pub"),
                      R"({"text_input": "Hi", "max_tokens": 2})", "application/json")
                ->status,
            404);
}

TEST_F(SecurityTest, KeysFromAFileAndTheEnvironmentNameTenants) {
  const fs::path keys = dir_ / "keys.txt";
  std::ofstream(keys) << "# tenants\nalpha-key alpha\n\nbeta-key   beta  # trailing comment\n";
  setenv("INFLIGHT_API_KEY", "env-key-1,env-key-2", 1);
  StartServer({"--api-key-file", keys.string()});
  unsetenv("INFLIGHT_API_KEY");
  auto http = Http();
  for (const std::string k : {"alpha-key", "beta-key", "env-key-1", "env-key-2"}) {
    EXPECT_EQ(http.Get("/v2", Bearer(k))->status, 200) << k;
  }
  EXPECT_EQ(http.Get("/v2", Bearer("alpha"))->status, 401);
  EXPECT_EQ(http.Get("/v2", Bearer("# tenants"))->status, 401);
}

TEST_F(SecurityTest, TheProjectsClientToolSendsTheKey) {
  StartServer({"--api-key", "tool-key"});
  const std::string client = std::string(INFLIGHT_BINARY_DIR) + "/apps/inflight-client ";
  int code = 0;
  const std::string http =
      " --url 127.0.0.1:" + std::to_string(server_->http_port) + " --text 'Once upon a time' -o 4";
  const std::string grpc = " -i grpc --url 127.0.0.1:" + std::to_string(server_->grpc_port) +
                           " --input-ids 1,450,471 -o 4";
  Shell(client + "--api-key tool-key" + http + " 2>&1", &code);
  EXPECT_EQ(code, 0);
  Shell(client + "--api-key tool-key" + grpc + " 2>&1", &code);
  EXPECT_EQ(code, 0);
  const std::string refused = Shell(client + http + " 2>&1", &code);
  EXPECT_NE(code, 0);
  EXPECT_NE(refused.find("401"), std::string::npos) << refused;
  Shell("INFLIGHT_CLIENT_API_KEY=tool-key " + client + grpc + " 2>&1", &code);
  EXPECT_EQ(code, 0);
  Shell(client + grpc + " 2>&1", &code);
  EXPECT_NE(code, 0);
}

class TlsTest : public SecurityTest {
 protected:
  static void SetUpTestSuite() {
    SecurityTest::SetUpTestSuite();
    // A CA, a server certificate for localhost / 127.0.0.1 and a client certificate, made now.
    const std::string d = dir_.string();
    const std::string script = "set -e; cd " + d +
                               "; "
                               "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
                               "-nodes -keyout ca.key -out ca.pem "
                               "-subj /CN=inflight-test-ca -days 1 2>/dev/null; "
                               "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
                               "-nodes -keyout server.key -out server.csr "
                               "-subj /CN=localhost 2>/dev/null; "
                               "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > san.ext; "
                               "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key "
                               "-CAcreateserial -out server.pem -days 1 "
                               "-extfile san.ext 2>/dev/null; "
                               "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
                               "-nodes -keyout client.key -out client.csr "
                               "-subj /CN=client 2>/dev/null; "
                               "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key "
                               "-CAcreateserial -out client.pem -days 1 2>/dev/null";
    ASSERT_EQ(std::system(("bash -c \"" + script + "\"").c_str()), 0)
        << "openssl could not make the test certificates";
  }

  // curl's HTTP status for `url` ("000" when the connection or handshake failed).
  std::string Curl(const std::string& url, const std::string& extra = "") {
    return Shell("curl -s -o /dev/null -w '%{http_code}' --max-time 20 " + extra + " '" + url +
                 "'");
  }
  std::string Ca() const { return "--cacert " + (dir_ / "ca.pem").string(); }
  std::string ClientCert() const {
    return "--cert " + (dir_ / "client.pem").string() + " --key " + (dir_ / "client.key").string();
  }
  std::shared_ptr<grpc::ChannelCredentials> GrpcTls(bool with_client_cert) {
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = ReadAll(dir_ / "ca.pem");
    if (with_client_cert) {
      o.pem_private_key = ReadAll(dir_ / "client.key");
      o.pem_cert_chain = ReadAll(dir_ / "client.pem");
    }
    return grpc::SslCredentials(o);
  }
  grpc::StatusCode Live(inference::GRPCInferenceService::Stub* stub) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    inference::ServerLiveResponse r;
    return stub->ServerLive(&ctx, {}, &r).error_code();
  }
};

TEST_F(TlsTest, EveryPortServesTlsAndRefusesPlaintext) {
  StartServer(
      {"--tls-cert", (dir_ / "server.pem").string(), "--tls-key", (dir_ / "server.key").string()});
  const std::string port = std::to_string(server_->http_port);
  EXPECT_EQ(Curl("https://localhost:" + port + "/v2/health/ready", Ca()), "200");
  EXPECT_EQ(Curl("https://127.0.0.1:" + port + "/v2/health/ready", Ca()), "200");
  EXPECT_EQ(Curl("http://localhost:" + port + "/v2/health/ready"), "000");  // plaintext: no answer
  EXPECT_EQ(Curl("https://localhost:" + port + "/v2/health/ready"),
            "000");  // an unknown CA: refused by curl
  // A streamed reply over TLS.
  const std::string sse =
      Shell("curl -s --max-time 60 " + Ca() + " -X POST https://localhost:" + port +
            "/v2/models/ensemble/generate_stream -d '{\"text_input\": \"Once upon a time\", "
            "\"max_tokens\": 8}'");
  const auto events = testing::SseEvents(sse);
  ASSERT_GE(events.size(), 1u) << sse;
  EXPECT_EQ(events[0]["text_output"].get<std::string>().rfind("Once upon a time", 0), 0u) << sse;
  EXPECT_EQ(Curl("https://localhost:" + std::to_string(server_->metrics_port) + "/metrics", Ca()),
            "200");
  EXPECT_EQ(Curl("http://localhost:" + std::to_string(server_->metrics_port) + "/metrics"), "000");

  EXPECT_EQ(Live(Stub(GrpcTls(false)).get()), grpc::StatusCode::OK);
  EXPECT_EQ(Live(Stub().get()), grpc::StatusCode::UNAVAILABLE);  // plaintext client
}

TEST_F(TlsTest, MutualTlsNeedsAClientCertificate) {
  StartServer({"--tls-cert", (dir_ / "server.pem").string(), "--tls-key",
               (dir_ / "server.key").string(), "--tls-client-ca", (dir_ / "ca.pem").string()});
  const std::string url =
      "https://localhost:" + std::to_string(server_->http_port) + "/v2/health/ready";
  EXPECT_EQ(Curl(url, Ca()), "000");
  EXPECT_EQ(Curl(url, Ca() + " " + ClientCert()), "200");
  EXPECT_EQ(Live(Stub(GrpcTls(true)).get()), grpc::StatusCode::OK);
  EXPECT_EQ(Live(Stub(GrpcTls(false)).get()), grpc::StatusCode::UNAVAILABLE);
}

// inflight-client and inflight-bench over HTTPS and gRPC with TLS: the server's certificate
// checked against a CA file, a client certificate for mutual TLS, and clear errors for a
// plaintext client, an unknown CA and incomplete options.
TEST_F(TlsTest, TheProjectsToolsSpeakTls) {
  StartServer({"--tls-cert", (dir_ / "server.pem").string(), "--tls-key",
               (dir_ / "server.key").string(), "--tls-client-ca", (dir_ / "ca.pem").string()});
  const std::string bin = std::string(INFLIGHT_BINARY_DIR) + "/apps/";
  const std::string ca = " --tls-ca " + (dir_ / "ca.pem").string();
  const std::string mine = " --tls-cert " + (dir_ / "client.pem").string() + " --tls-key " +
                           (dir_ / "client.key").string();
  // 127.0.0.1, which the certificate names too: a gRPC client resolving "localhost" goes
  // through c-ares, whose 30 bytes LeakSanitizer reports at the tool's exit.
  const std::string http =
      " --url 127.0.0.1:" + std::to_string(server_->http_port) + " --text 'Once upon a time' -o 4";
  const std::string grpc = " -i grpc --url 127.0.0.1:" + std::to_string(server_->grpc_port) +
                           " --input-ids 1,450,471 -o 4";
  int code = 0;
  std::string out = Shell(bin + "inflight-client --tls" + ca + mine + http + " 2>&1", &code);
  EXPECT_EQ(code, 0) << out;
  EXPECT_FALSE(out.empty());
  out = Shell(bin + "inflight-client --tls" + ca + mine + grpc + " 2>&1", &code);
  EXPECT_EQ(code, 0) << out;
  out = Shell(bin + "inflight-bench --no-progress -i openai --url 127.0.0.1:" +
                  std::to_string(server_->http_port) + " --tls" + ca + mine + " --tokenizer " +
                  testing::SourceDir() + "/models/demo/inflight-demo-q8_0.gguf -n 4 --json - " +
                  "token-norm-dist --input-mean 20 --output-mean 8 2>/dev/null",
              &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_EQ(nlohmann::json::parse(out)["succeeded"], 4) << out;
  // Refused: plaintext, no client certificate, a CA that did not sign the server's.
  Shell(bin + "inflight-client" + http + " 2>&1", &code);
  EXPECT_NE(code, 0);
  Shell(bin + "inflight-client --tls" + ca + http + " 2>&1", &code);
  EXPECT_NE(code, 0) << "mutual TLS let a client without a certificate in";
  Shell(bin + "inflight-client --tls --tls-ca " + (dir_ / "client.pem").string() + mine + grpc +
            " 2>&1",
        &code);
  EXPECT_NE(code, 0) << "a server certificate no given CA signed was accepted";
  // Options checked before any connection.
  out = Shell(
      bin + "inflight-client --tls --tls-cert " + (dir_ / "client.pem").string() + http + " 2>&1",
      &code);
  EXPECT_NE(code, 0);
  EXPECT_NE(out.find("--tls-key"), std::string::npos) << out;
  out = Shell(bin + "inflight-bench --tls --tls-ca " + (dir_ / "nosuch.pem").string() +
                  " token-norm-dist 2>&1",
              &code);
  EXPECT_NE(code, 0);
  EXPECT_NE(out.find("nosuch.pem"), std::string::npos) << out;
}

TEST_F(TlsTest, BadCertificateFilesStopTheServerWithAMessage) {
  const std::string bin = std::string(INFLIGHT_BINARY_DIR) +
                          "/apps/inflight-server --model-repository " + (dir_ / "repo").string() +
                          " --http-port 0 --grpc-port 0 --metrics-port 0 ";
  int code = 0;
  const std::string out = Shell(bin + "--tls-cert " + (dir_ / "nosuch.pem").string() +
                                    " --tls-key " + (dir_ / "server.key").string() + " 2>&1",
                                &code);
  EXPECT_NE(code, 0);
  EXPECT_NE(out.find("TLS"), std::string::npos) << out;
  const std::string only_cert =
      Shell(bin + "--tls-cert " + (dir_ / "server.pem").string() + " 2>&1", &code);
  EXPECT_NE(code, 0);
  EXPECT_NE(only_cert.find("both a certificate and a private key"), std::string::npos) << only_cert;
}

TEST_F(SecurityTest, CacheSaltsKeepPrefixBlocksApart) {
  StartServer({});
  const std::string prompt = LongPrompt();
  EXPECT_EQ(CachedTokens(prompt, "", "tenant-a"), 0);
  const int64_t again = CachedTokens(prompt, "", "tenant-a");
  EXPECT_GE(again, 32) << "the same salt shares the prefix";
  EXPECT_EQ(CachedTokens(prompt, "", "tenant-b"), 0) << "another salt shares nothing";
  EXPECT_EQ(CachedTokens(prompt, "", ""), 0) << "the unsalted cache is apart too";
  EXPECT_EQ(CachedTokens(prompt, "", ""), again) << "and shares within itself";
  EXPECT_EQ(CachedTokens(prompt, "", "tenant-b"), again);

  // KServe's generate takes the same parameter: a generate with salt c fills the cache that an
  // OpenAI request with salt c then finds.
  const std::string other = LongPrompt(70);
  auto r =
      Http().Post("/v2/models/ensemble/generate",
                  json{{"text_input", other}, {"max_tokens", 2}, {"cache_salt", "tenant-c"}}.dump(),
                  "application/json");
  ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "");
  EXPECT_EQ(CachedTokens(other, "", "tenant-d"), 0);
  EXPECT_GE(CachedTokens(other, "", "tenant-c"), 32);
  // A salt that is not a string is refused, not ignored.
  r = Http().Post("/v2/models/ensemble/generate",
                  json{{"text_input", other}, {"max_tokens", 2}, {"cache_salt", 7}}.dump(),
                  "application/json");
  EXPECT_EQ(r->status, 400);
  // Nor is one past 1,024 bytes.
  r = Http().Post(
      "/v2/models/ensemble/generate",
      json{{"text_input", other}, {"max_tokens", 2}, {"cache_salt", std::string(1025, 's')}}.dump(),
      "application/json");
  EXPECT_EQ(r->status, 400);
  r = Http().Post(
      "/v1/completions",
      json{{"model", "ensemble"}, {"prompt", other}, {"cache_salt", std::string(1025, 's')}}.dump(),
      "application/json");
  EXPECT_EQ(r->status, 400);
  r = Http().Post("/v1/completions",
                  json{{"model", "ensemble"}, {"prompt", other}, {"cache_salt", 7}}.dump(),
                  "application/json");
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(json::parse(r->body)["error"]["param"], "cache_salt");
}

TEST_F(SecurityTest, PerKeySaltModeSeparatesTenants) {
  StartServer({"--api-key", "key-a", "--api-key", "key-b", "--cache-salt-per-key"});
  const std::string prompt = LongPrompt();
  EXPECT_EQ(CachedTokens(prompt, "key-a", ""), 0);
  EXPECT_GE(CachedTokens(prompt, "key-a", ""), 32);
  EXPECT_EQ(CachedTokens(prompt, "key-b", ""), 0) << "another key never shares, even with no salt";
  // A client salt cannot reach into another key's cache: it is under the key's own.
  EXPECT_EQ(CachedTokens(prompt, "key-b", "x"), 0);
  EXPECT_GE(CachedTokens(prompt, "key-b", ""), 32);
}

// A `stop` request reaches only its sender's requests: another key naming the same id gets
// its empty answer and stops nothing; the owner's stop ends the request.
TEST_F(SecurityTest, AStopRequestOnlyReachesItsOwnTenantsRequests) {
  StartServer({"--api-key", "key-a", "--api-key", "key-b"});
  const std::vector<int32_t> prompt = {1, 100, 200, 300, 400};
  constexpr int32_t kMaxTokens = 480;  // no end_id: the request runs to its length unless stopped
  auto stub = Stub();
  // Tokens key-a's streamed request "shared-id" produced, with `stopper` sending a stop for
  // that id after the first response.
  auto run = [&](const std::string& stopper) {
    grpc::ClientContext ctx;
    Authorize(&ctx, "key-a");
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    auto stream = stub->ModelStreamInfer(&ctx);
    EXPECT_TRUE(stream->Write(LlmRequest("tensorrt_llm", "shared-id", {prompt}, kMaxTokens, true)));
    inference::ModelStreamInferResponse r;
    EXPECT_TRUE(stream->Read(&r));
    EXPECT_TRUE(r.error_message().empty()) << r.error_message();
    int tokens = static_cast<int>(OutputInt32(r.infer_response(), "output_ids").size());
    {
      grpc::ClientContext stop_ctx;
      Authorize(&stop_ctx, stopper);
      auto stop_stream = stub->ModelStreamInfer(&stop_ctx);
      EXPECT_TRUE(stop_stream->Write(StopRequest("tensorrt_llm", "shared-id", prompt)));
      stop_stream->WritesDone();
      inference::ModelStreamInferResponse answer;
      int answers = 0;
      while (stop_stream->Read(&answer)) {
        EXPECT_TRUE(answer.error_message().empty()) << answer.error_message();
        EXPECT_EQ(answer.infer_response().outputs_size(), 0)
            << "the stop request is answered empty";
        ++answers;
      }
      EXPECT_TRUE(stop_stream->Finish().ok());
      EXPECT_EQ(answers, 1);
    }
    stream->WritesDone();
    while (stream->Read(&r)) {
      EXPECT_TRUE(r.error_message().empty()) << r.error_message();
      tokens += static_cast<int>(OutputInt32(r.infer_response(), "output_ids").size());
    }
    EXPECT_TRUE(stream->Finish().ok());
    return tokens;
  };
  EXPECT_EQ(run("key-b"), kMaxTokens) << "another tenant's stop ended the request";
  EXPECT_LT(run("key-a"), kMaxTokens) << "the owner's stop did not end the request";
}

TEST_F(SecurityTest, PerKeyConcurrencyLimitAnswers429WithRetryAfter) {
  StartServer({"--api-key", "key-a", "--api-key", "key-b", "--max-concurrent-per-key", "1"});
  // One long request of key-a holds its slot (many choices, run to max_tokens).
  SlotHolder holder(server_->http_port, "key-a");
  auto http = Http();
  const std::string small = R"({"model": "ensemble", "prompt": "Hi", "max_tokens": 2})";
  auto r = http.Post("/v1/completions", Bearer("key-a"), small, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429) << r->body;
  EXPECT_EQ(r->get_header_value("Retry-After"), "1");
  EXPECT_NE(json::parse(r->body)["error"]["message"].get<std::string>().find("concurrent"),
            std::string::npos);
  r = http.Post("/v2/models/ensemble/generate", Bearer("key-a"),
                R"({"text_input": "Hi", "max_tokens": 2})", "application/json");
  EXPECT_EQ(r->status, 429);
  EXPECT_EQ(r->get_header_value("Retry-After"), "1");
  {
    grpc::ClientContext ctx;
    Authorize(&ctx, "key-a");
    inference::ModelInferResponse resp;
    EXPECT_EQ(Stub()->ModelInfer(&ctx, PreprocessingRequest(), &resp).error_code(),
              grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  // Another key is not held back.
  EXPECT_EQ(http.Post("/v1/completions", Bearer("key-b"), small, "application/json")->status, 200);
  // The client goes away: its slot comes back.
  holder.Release();
  bool admitted = false;
  for (int i = 0; i < 300 && !admitted; ++i) {
    admitted =
        http.Post("/v1/completions", Bearer("key-a"), small, "application/json")->status == 200;
    if (!admitted) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(admitted);
}

TEST_F(SecurityTest, WithoutKeysLimitsApplyPerClientAddressOverBothProtocols) {
  StartServer({"--max-concurrent-per-key", "1"});
  SlotHolder holder(server_->http_port, "");
  // The same address over gRPC is the same tenant.
  grpc::ClientContext ctx;
  inference::ModelInferResponse resp;
  EXPECT_EQ(Stub()->ModelInfer(&ctx, PreprocessingRequest(), &resp).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(Http()
                .Post("/v2/models/ensemble/generate", R"({"text_input": "Hi", "max_tokens": 2})",
                      "application/json")
                ->status,
            429);
  holder.Release();
}

TEST_F(SecurityTest, PerKeyTokenRateAnswers429UntilTheBucketRefills) {
  StartServer(
      {"--api-key", "key-a", "--api-key", "key-b", "--max-tokens-per-minute-per-key", "120"});
  auto http = Http();
  // About 150 tokens (prompt + 140 generated) overdraw key-a's 120 per minute.
  auto r = http.Post(
      "/v1/completions", Bearer("key-a"),
      R"({"model": "ensemble", "prompt": "Once upon a time", "max_tokens": 140, "ignore_eos": true})",
      "application/json");
  ASSERT_EQ(r->status, 200) << r->body;
  r = http.Post("/v2/models/ensemble/generate", Bearer("key-a"),
                R"({"text_input": "Hi", "max_tokens": 2})", "application/json");
  EXPECT_EQ(r->status, 429);
  const int retry = std::stoi("0" + r->get_header_value("Retry-After"));
  EXPECT_GE(retry, 10) << "about 30 tokens over at 2 tokens/s";
  EXPECT_LE(retry, 60);
  EXPECT_EQ(http.Post("/v2/models/ensemble/generate", Bearer("key-b"),
                      R"({"text_input": "Hi", "max_tokens": 2})", "application/json")
                ->status,
            200);
}

TEST_F(SecurityTest, PerRequestLimitsAreFlags) {
  StartServer({"--max-n", "2", "--max-logprobs", "3", "--max-stop-words", "2",
               "--max-prompt-tokens", "24"});
  auto http = Http();
  auto openai = [&](json body) {
    body["model"] = "ensemble";
    if (!body.contains("prompt")) body["prompt"] = "Hi";
    auto r = http.Post("/v1/completions", body.dump(), "application/json");
    return std::make_pair(r->status, r->status == 400
                                         ? json::parse(r->body)["error"]["param"].get<std::string>()
                                         : "");
  };
  EXPECT_EQ(openai({{"n", 2}, {"max_tokens", 2}}).first, 200);
  EXPECT_EQ(openai({{"n", 3}}), std::make_pair(400, std::string("n")));
  EXPECT_EQ(openai({{"logprobs", 3}, {"max_tokens", 2}}).first, 200);
  EXPECT_EQ(openai({{"logprobs", 4}}), std::make_pair(400, std::string("logprobs")));
  EXPECT_EQ(openai({{"stop", {"a", "b", "c"}}}), std::make_pair(400, std::string("stop")));
  EXPECT_EQ(openai({{"prompt", LongPrompt(40)}}), std::make_pair(400, std::string("prompt")));
  // KServe: the LLM model checks the same limits.
  auto gen = [&](json body) {
    body["max_tokens"] = 2;
    return http.Post("/v2/models/ensemble/generate", body.dump(), "application/json")->status;
  };
  EXPECT_EQ(gen({{"text_input", "Hi"}, {"stop_words", {"a", "b"}}}), 200);
  EXPECT_EQ(gen({{"text_input", "Hi"}, {"stop_words", {"a", "b", "c"}}}), 400);
  EXPECT_EQ(gen({{"text_input", LongPrompt(40)}}), 400);
}

}  // namespace
}  // namespace inflight
