// The model control plane of the real server in explicit mode, as an anonymous client would
// attack it: model names that escape the repository, config overrides naming files anywhere
// on the machine, a failed reload taking a serving model down, failed names piling up in the
// index. Each attack worked on the server before the control plane was confined.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "grpc_service.grpc.pb.h"
#include "server_harness.h"
#include "test_util.h"

namespace inflight {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::ServerProcess;

class ControlPlaneTest : public ::testing::Test {
 protected:
  void SetUp() override {
    repo_ = fs::temp_directory_path() / ("inflight_control_repo_" + std::to_string(getpid()));
    fs::remove_all(repo_);
    const std::string cmd = std::string(INFLIGHT_BINARY_DIR) +
                            "/apps/inflight-server init-repo --model " + testing::SourceDir() +
                            "/models/demo/inflight-demo-q8_0.gguf --out " + repo_.string() +
                            " > /dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
    server_ = ServerProcess::Start({"--model-repository", repo_.string(), "--model-control-mode",
                                    "explicit", "--load-model", "*", "--exit-timeout-secs", "0"});
    ASSERT_NE(server_, nullptr);
  }
  void TearDown() override {
    if (server_ && HasFailure())
      std::fprintf(stderr, "--- server log ---\n%s\n", server_->log().c_str());
    server_.reset();
    fs::remove_all(repo_);
  }

  httplib::Client Http() {
    httplib::Client c("127.0.0.1", server_->http_port);
    c.set_read_timeout(60);
    return c;
  }

  std::map<std::string, std::string> Index() {
    std::map<std::string, std::string> states;
    auto r = Http().Post("/v2/repository/index", "", "application/json");
    for (const auto& m : json::parse(r->body)) states[m["name"]] = m.value("state", "");
    return states;
  }

  // The ensemble still answers (the model it runs is up).
  bool Serving() {
    auto r =
        Http().Post("/v2/models/ensemble/generate",
                    R"({"text_input": "Once upon a time", "max_tokens": 4})", "application/json");
    return r && r->status == 200;
  }

  // POST .../load of `model` with its own config, `gpt_model_path` replaced.
  httplib::Result LoadWithModelPath(const std::string& model, const std::string& path) {
    auto config = Http().Get(("/v2/models/" + model + "/config").c_str());
    EXPECT_TRUE(config && config->status == 200);
    json c = json::parse(config->body);
    c["parameters"]["gpt_model_path"]["string_value"] = path;
    json body = {{"parameters", {{"config", c.dump()}}}};
    return Http().Post(("/v2/repository/models/" + model + "/load").c_str(), body.dump(),
                       "application/json");
  }

  fs::path repo_;
  std::unique_ptr<ServerProcess> server_;
};

TEST_F(ControlPlaneTest, NamesThatLeaveTheRepositoryAreRefused) {
  auto stub = inference::GRPCInferenceService::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(server_->grpc_port), grpc::InsecureChannelCredentials()));
  for (const std::string& name : std::vector<std::string>{
           "../../../../proc", "..", ".", "a/b", std::string("ens\0emble", 8), "tab\tname", ""}) {
    grpc::ClientContext ctx;
    inference::RepositoryModelLoadRequest req;
    req.set_model_name(name);
    inference::RepositoryModelLoadResponse resp;
    const grpc::Status s = stub->RepositoryModelLoad(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << name << ": " << s.error_message();
    grpc::ClientContext unload_ctx;
    inference::RepositoryModelUnloadRequest unload;
    unload.set_model_name(name);
    inference::RepositoryModelUnloadResponse unload_resp;
    EXPECT_FALSE(stub->RepositoryModelUnload(&unload_ctx, unload, &unload_resp).ok()) << name;
  }
  // Over HTTP a ".." segment is a name too.
  auto r = Http().Post("/v2/repository/models/../load", "", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  for (const auto& [name, state] : Index()) {
    EXPECT_TRUE(name.find("..") == std::string::npos && name.find('/') == std::string::npos)
        << name;
  }
  EXPECT_TRUE(Serving());
}

TEST_F(ControlPlaneTest, ConfigOverridesCannotNameFilesOutsideTheRepository) {
  // A link inside the repository that points out of it is outside too.
  std::error_code ec;
  fs::create_directory_symlink("/etc", repo_ / "tensorrt_llm" / "etc_link", ec);
  std::vector<std::string> messages;
  for (const std::string path :
       {"/etc/shadow", "/etc/no-such-file-here", "../../../../../etc/passwd", "etc_link/passwd",
        "/proc/self/environ"}) {
    auto r = LoadWithModelPath("tensorrt_llm", path);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << path << ": " << r->body;
    const std::string message = json::parse(r->body)["error"];
    // Nothing tells whether the file exists or what it holds.
    EXPECT_EQ(message.find("/etc"), std::string::npos) << message;
    EXPECT_EQ(message.find("GGUF"), std::string::npos) << message;
    EXPECT_EQ(message.find("exist"), std::string::npos) << message;
    messages.push_back(message);
  }
  for (const std::string& m : messages) EXPECT_EQ(m, messages.front());
  // The failed loads left the serving model up.
  EXPECT_EQ(Index()["tensorrt_llm"], "READY");
  EXPECT_TRUE(Serving());
}

TEST_F(ControlPlaneTest, AFailedReloadKeepsTheServingVersion) {
  // A model path inside the repository that does not load (no such file; not a GGUF file).
  std::ofstream(repo_ / "weights" / "junk.gguf") << "not a model";
  for (const std::string path : {"../weights/missing.gguf", "../weights/junk.gguf"}) {
    auto r = LoadWithModelPath("tensorrt_llm", path);
    ASSERT_TRUE(r);
    EXPECT_NE(r->status, 200) << path;
    EXPECT_EQ(Index()["tensorrt_llm"], "READY") << path;
    EXPECT_TRUE(Serving()) << path;
  }
  // A good reload swaps in the new version and still serves.
  auto r = Http().Post("/v2/repository/models/tensorrt_llm/load", "", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_TRUE(Serving());
}

// A reload cancelled the old version's running requests once the exit timeout had passed
// since the swap: on a loaded machine the soak saw streams cut mid-answer. The old version now
// serves them to their end, however long that takes past the exit timeout (here 0).
TEST_F(ControlPlaneTest, AReloadLetsTheOldVersionFinishItsRequests) {
  std::atomic<bool> first{false};
  std::string body;
  std::chrono::steady_clock::time_point ended;
  std::thread reader([&] {
    httplib::Client c = Http();
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = json{{"model", "ensemble"},
                    {"prompt", "Once upon a time"},
                    {"max_tokens", 400},
                    {"n", 16},
                    {"ignore_eos", true},
                    {"stream", true},
                    {"stream_options", {{"include_usage", true}}}}
                   .dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      body.append(data, n);
      first = true;
      std::this_thread::sleep_for(std::chrono::microseconds(300));  // a reader, not a sink
      return true;
    };
    c.send(req);
    ended = std::chrono::steady_clock::now();
  });
  while (!first) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  auto r = Http().Post("/v2/repository/models/tensorrt_llm/load", "", "application/json");
  const auto reloaded = std::chrono::steady_clock::now();
  reader.join();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  // The stream outlived the exit timeout after the swap, or the test proves nothing.
  EXPECT_GT(std::chrono::duration<double>(ended - reloaded).count(), 0.2)
      << "the request ended too soon to test the drain";
  EXPECT_EQ(body.find("\"error\""), std::string::npos) << body.substr(body.size() - 400);
  EXPECT_NE(body.find("data: [DONE]"), std::string::npos);
  EXPECT_NE(body.find("\"completion_tokens\":6400"), std::string::npos)
      << body.substr(body.size() - 400);
  EXPECT_TRUE(Serving());
  EXPECT_EQ(Index()["tensorrt_llm"], "READY");
}

TEST_F(ControlPlaneTest, FailedNamesDoNotPileUpInTheIndex) {
  const size_t before = Index().size();
  for (int i = 0; i < 20; ++i) {
    // A config override for a name with no folder, and an ensemble naming steps that do not exist.
    const std::string name = "ghost" + std::to_string(i);
    json config = {{"name", name}, {"backend", "tensorrtllm"}};
    auto r =
        Http().Post(("/v2/repository/models/" + name + "/load").c_str(),
                    json{{"parameters", {{"config", config.dump()}}}}.dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_NE(r->status, 200);
    json ensemble = {
        {"name", "ensemble"},
        {"platform", "ensemble"},
        {"ensemble_scheduling",
         {{"step", {{{"model_name", "phantom" + std::to_string(i)}, {"model_version", -1}}}}}}};
    r = Http().Post("/v2/repository/models/ensemble/load",
                    json{{"parameters", {{"config", ensemble.dump()}}}}.dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_NE(r->status, 200);
  }
  const auto index = Index();
  EXPECT_EQ(index.size(), before);
  for (const auto& [name, state] : index)
    EXPECT_TRUE(name.rfind("ghost", 0) != 0 && name.rfind("phantom", 0) != 0) << name;
  // The ensemble whose bad reload failed still serves.
  EXPECT_EQ(index.at("ensemble"), "READY");
  EXPECT_TRUE(Serving());
}

// A failed load named the absolute path of the file inside the repository to the caller (the
// config endpoint hides paths), and a truncated model file answered 500 where every other bad
// file answered 400.
TEST_F(ControlPlaneTest, LoadErrorsNameRepositoryPathsRelativelyAndAre400) {
  std::ofstream(repo_ / "weights" / "junk.gguf") << "not a model";
  {
    // The first 4 KiB of a real model: the file ends inside its metadata.
    std::ifstream in(testing::SourceDir() + "/models/demo/inflight-demo-q8_0.gguf",
                     std::ios::binary);
    std::string head(4096, '\0');
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    std::ofstream(repo_ / "weights" / "truncated.gguf", std::ios::binary) << head;
  }
  const std::string absolute = fs::weakly_canonical(repo_).string();
  for (const std::string path :
       {"config.pbtxt", "../weights/junk.gguf", "../weights/truncated.gguf"}) {
    SCOPED_TRACE(path);
    auto r = LoadWithModelPath("tensorrt_llm", path);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << r->body;
    const std::string message = json::parse(r->body)["error"];
    EXPECT_EQ(message.find(repo_.string()), std::string::npos) << message;
    EXPECT_EQ(message.find(absolute), std::string::npos) << message;
    const std::string file = fs::path(path).filename().string();
    EXPECT_NE(message.find(file), std::string::npos) << "the file is still named: " << message;
  }
  // The server's own log keeps the full path.
  EXPECT_NE(server_->log().find(absolute), std::string::npos);
  EXPECT_TRUE(Serving());
}

// gRPC answered OK to a load with Triton's override files (and ignored them) where HTTP
// answered 501: both now refuse it the same way.
TEST_F(ControlPlaneTest, OverrideFilesGetTheSameAnswerOverHttpAndGrpc) {
  auto config = Http().Get("/v2/models/tensorrt_llm/config");
  ASSERT_TRUE(config && config->status == 200);
  auto r = Http().Post(
      "/v2/repository/models/tensorrt_llm/load",
      json{{"parameters", {{"config", config->body}, {"file:1/model.gguf", "AAAA"}}}}.dump(),
      "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 501) << r->body;
  const std::string http_message = json::parse(r->body)["error"];

  auto stub = inference::GRPCInferenceService::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(server_->grpc_port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  inference::RepositoryModelLoadRequest req;
  req.set_model_name("tensorrt_llm");
  (*req.mutable_parameters())["config"].set_string_param(config->body);
  (*req.mutable_parameters())["file:1/model.gguf"].set_bytes_param("\0\0\0");
  inference::RepositoryModelLoadResponse resp;
  const grpc::Status s = stub->RepositoryModelLoad(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNIMPLEMENTED) << s.error_message();
  EXPECT_EQ(s.error_message(), http_message);
  EXPECT_TRUE(Serving());
}

}  // namespace
}  // namespace inflight
