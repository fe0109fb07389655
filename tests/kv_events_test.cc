// KV cache events for routers, on the real server and the bundled demo model (prefix reuse on,
// a KV cache of 32 blocks so a load evicts): a router that starts from the kv_blocks listing
// and applies every event after it holds exactly the cache's own listing at the end of a
// randomized load with shared prefixes, and bad queries and models without a KV cache get
// clear errors.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "kv_events.grpc.pb.h"
#include "server_harness.h"
#include "test_util.h"

namespace inflight {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::ServerProcess;

class KvEventsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    repo_ = new fs::path(fs::temp_directory_path() /
                         ("inflight_kv_events_" + std::to_string(getpid())));
    fs::remove_all(*repo_);
    const std::string cmd =
        std::string(INFLIGHT_BINARY_DIR) + "/apps/inflight-server init-repo --model " +
        testing::SourceDir() + "/models/demo/inflight-demo-q8_0.gguf --out " + repo_->string() +
        " --enable-kv-cache-reuse true --kv-event-buffer-size 100000" + " > /dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
    // A cache of 1,024 tokens (32 blocks of 32): the load below evicts.
    const fs::path config = *repo_ / "tensorrt_llm" / "config.pbtxt";
    std::ifstream in(config);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string placeholder = "${max_tokens_in_paged_kv_cache}";
    const size_t at = text.find(placeholder);
    ASSERT_NE(at, std::string::npos);
    text.replace(at, placeholder.size(), "1024");
    std::ofstream(config) << text;
    server_ = ServerProcess::Start({"--model-repository", repo_->string()}).release();
  }

  static void TearDownTestSuite() { testing::EndSuite(server_, repo_); }

  void SetUp() override {
    if (!server_) GTEST_SKIP() << "the server did not start";
  }

  static httplib::Result Get(const std::string& path) {
    httplib::Client c("127.0.0.1", server_->http_port);
    c.set_read_timeout(60);
    return c.Get(path);
  }

  static inline ServerProcess* server_ = nullptr;
  static inline fs::path* repo_ = nullptr;
};

using BlockSet = std::map<std::string, std::pair<std::string, json>>;  // hash -> parent, tokens

TEST_F(KvEventsTest, ReplayingFromTheListingReproducesTheCacheUnderLoad) {
  auto listing = [] {
    auto r = Get("/v2/models/tensorrt_llm/kv_blocks");
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "");
    return json::parse(r->body);
  };
  auto to_set = [](const json& blocks) {
    BlockSet s;
    for (const json& b : blocks) s[b["block_hash"]] = {b["parent_hash"], b["tokens"]};
    return s;
  };
  const json start = listing();
  BlockSet router = to_set(start["blocks"]);
  uint64_t cursor = start["last_event_id"];
  int stored = 0, removed = 0;
  auto drain = [&] {
    for (;;) {
      auto r = Get("/v2/models/tensorrt_llm/kv_events?after=" + std::to_string(cursor) + "&max=50");
      ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "");
      const json page = json::parse(r->body);
      ASSERT_FALSE(page["gap"].get<bool>());
      for (const json& e : page["events"]) {
        ASSERT_EQ(e["event_id"].get<uint64_t>(), cursor + 1);
        cursor = e["event_id"];
        if (e["type"] == "stored") {
          router[e["block_hash"]] = {e["parent_hash"], e["tokens"]};
          ASSERT_EQ(e["tokens"].size(), 32u);
          ++stored;
        } else {
          ASSERT_EQ(router.erase(e["block_hash"].get<std::string>()), 1u);
          ++removed;
        }
      }
      if (page["events"].size() < 50) break;
    }
  };
  // 4 clients, 12 requests each: prompts of 2-8 sentences from a few shared openings.
  const std::vector<std::string> openings = {
      "Once upon a time there was a little girl named Lily who loved to play outside. ",
      "The big brown dog ran to the park to find his friend the cat and play all day. ",
      "Tom and Sue went to the store with their mom to buy apples, bread and some milk. "};
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&, c] {
      std::mt19937 rng(c);
      httplib::Client http("127.0.0.1", server_->http_port);
      http.set_read_timeout(60);
      for (int i = 0; i < 12; ++i) {
        std::string prompt;
        for (int k = 0, n = 2 + static_cast<int>(rng() % 7); k < n; ++k)
          prompt += openings[k == 0 ? rng() % 3 : (rng() % 3 + k) % 3];
        auto r =
            http.Post("/v2/models/ensemble/generate",
                      json{{"text_input", prompt}, {"max_tokens", 24}}.dump(), "application/json");
        EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "");
      }
    });
  }
  // The router reads while the load runs, then once more when it is over.
  for (int i = 0; i < 20; ++i) {
    drain();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (auto& t : clients) t.join();
  ASSERT_TRUE(testing::WaitLlmIdle(server_->metrics_port, "tensorrt_llm"));
  drain();
  const json end = listing();
  EXPECT_EQ(end["last_event_id"].get<uint64_t>(), cursor);
  EXPECT_EQ(router, to_set(end["blocks"]));
  EXPECT_GT(stored, 20);
  EXPECT_GT(removed, 0) << "the load evicted";
  std::printf("events: %d stored, %d removed; %zu blocks cached at the end\n", stored, removed,
              router.size());
}

// The streamed form: a router subscribed from the listing sees the same events.
TEST_F(KvEventsTest, TheStreamCarriesEveryEventAfterTheListing) {
  auto r = Get("/v2/models/tensorrt_llm/kv_blocks");
  ASSERT_TRUE(r && r->status == 200);
  const json start = json::parse(r->body);
  std::mutex mu;
  BlockSet router;
  for (const json& b : start["blocks"]) router[b["block_hash"]] = {b["parent_hash"], b["tokens"]};
  uint64_t cursor = start["last_event_id"];
  std::atomic<uint64_t> wanted{UINT64_MAX};
  std::atomic<bool> bad{false};
  std::thread subscriber([&] {
    httplib::Client c("127.0.0.1", server_->http_port);
    c.set_read_timeout(60);
    std::string buffer;
    c.Get("/v2/models/tensorrt_llm/kv_events?stream=true&after=" + std::to_string(cursor),
          [&](const char* data, size_t n) {
            buffer.append(data, n);
            for (size_t end; (end = buffer.find("\n\n")) != std::string::npos;) {
              const std::string event = buffer.substr(0, end);
              buffer.erase(0, end + 2);
              if (event.rfind("data: ", 0) != 0) continue;
              const json page = json::parse(event.substr(6), nullptr, false);
              std::lock_guard<std::mutex> lock(mu);
              if (page.is_discarded() || page.value("gap", true)) bad = true;
              for (const json& e : page.value("events", json::array())) {
                if (e["event_id"].get<uint64_t>() != cursor + 1) bad = true;
                cursor = e["event_id"];
                if (e["type"] == "stored") {
                  router[e["block_hash"]] = {e["parent_hash"], e["tokens"]};
                } else {
                  router.erase(e["block_hash"].get<std::string>());
                }
              }
            }
            std::lock_guard<std::mutex> lock(mu);
            return !bad && cursor < wanted.load();
          });
  });
  httplib::Client http("127.0.0.1", server_->http_port);
  http.set_read_timeout(60);
  for (int i = 0; i < 16; ++i) {
    std::string prompt;
    for (int k = 0; k <= i % 6; ++k)
      prompt += "The cat number " + std::to_string(i * 7 + k) + " sat on a mat and looked around. ";
    auto g = http.Post("/v2/models/ensemble/generate",
                       json{{"text_input", prompt}, {"max_tokens", 16}}.dump(), "application/json");
    ASSERT_TRUE(g && g->status == 200);
  }
  ASSERT_TRUE(testing::WaitLlmIdle(server_->metrics_port, "tensorrt_llm"));
  auto end = Get("/v2/models/tensorrt_llm/kv_blocks");
  ASSERT_TRUE(end && end->status == 200);
  const json last = json::parse(end->body);
  wanted = last["last_event_id"].get<uint64_t>();
  ASSERT_GT(wanted.load(), start["last_event_id"].get<uint64_t>());
  subscriber.join();  // it stops once it has read up to `wanted`
  EXPECT_FALSE(bad);
  BlockSet cache;
  for (const json& b : last["blocks"]) cache[b["block_hash"]] = {b["parent_hash"], b["tokens"]};
  EXPECT_EQ(cursor, wanted.load());
  EXPECT_EQ(router, cache);
  // A stream for a model without events is an answer, not a stream.
  auto off = Get("/v2/models/preprocessing/kv_events?stream=true");
  ASSERT_TRUE(off);
  EXPECT_EQ(off->status, 400);
}

TEST_F(KvEventsTest, BadQueriesAndModelsWithoutACacheGetClearErrors) {
  struct Bad {
    std::string path;
    int status;
    std::string words;
  };
  for (const Bad& b :
       std::vector<Bad>{{"/v2/models/tensorrt_llm/kv_events?after=x", 400, "non-negative integers"},
                        {"/v2/models/tensorrt_llm/kv_events?max=-1", 400, "non-negative integers"},
                        {"/v2/models/preprocessing/kv_events", 400, "no KV cache"},
                        {"/v2/models/nope/kv_blocks", 404, ""}}) {
    auto r = Get(b.path);
    ASSERT_TRUE(r) << b.path;
    EXPECT_EQ(r->status, b.status) << b.path << " -> " << r->body;
    EXPECT_NE(r->body.find(b.words), std::string::npos) << r->body;
  }
  httplib::Client c("127.0.0.1", server_->http_port);
  auto post = c.Post("/v2/models/tensorrt_llm/kv_events", "", "application/json");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 405);
}

// The gRPC form (inflight.KvCacheEvents): the listing and a page are the HTTP ones, a
// following stream carries the events a new prompt stores, and errors are statuses.
TEST_F(KvEventsTest, TheSameEventsOverGrpc) {
  auto stub = inflight::KvCacheEvents::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(server_->grpc_port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext blocks_ctx;
  inflight::KvBlocksRequest blocks_req;
  blocks_req.set_model_name("tensorrt_llm");
  inflight::KvBlocksResponse blocks;
  ASSERT_TRUE(stub->Blocks(&blocks_ctx, blocks_req, &blocks).ok());
  auto http = Get("/v2/models/tensorrt_llm/kv_blocks");
  ASSERT_TRUE(http && http->status == 200);
  const json listing = json::parse(http->body);
  EXPECT_EQ(blocks.last_event_id(), listing["last_event_id"].get<uint64_t>());
  EXPECT_EQ(static_cast<size_t>(blocks.blocks_size()), listing["blocks"].size());
  // One page without follow: the HTTP page's ids.
  {
    grpc::ClientContext ctx;
    inflight::KvEventsRequest req;
    req.set_model_name("tensorrt_llm");
    req.set_max_events(5);
    auto reader = stub->Events(&ctx, req);
    inflight::KvEventsResponse page;
    ASSERT_TRUE(reader->Read(&page));
    EXPECT_FALSE(reader->Read(&page)) << "one response";
    ASSERT_TRUE(reader->Finish().ok());
    auto h = Get("/v2/models/tensorrt_llm/kv_events?after=0&max=5");
    ASSERT_TRUE(h && h->status == 200);
    const json hp = json::parse(h->body);
    ASSERT_EQ(static_cast<size_t>(page.events_size()), hp["events"].size());
    for (int i = 0; i < page.events_size(); ++i)
      EXPECT_EQ(page.events(i).event_id(), hp["events"][i]["event_id"].get<uint64_t>());
  }
  // Following from the listing: a new prompt's blocks arrive as stored events.
  grpc::ClientContext ctx;
  inflight::KvEventsRequest req;
  req.set_model_name("tensorrt_llm");
  req.set_after_id(blocks.last_event_id());
  req.set_follow(true);
  auto reader = stub->Events(&ctx, req);
  std::atomic<int> stored{0};
  std::atomic<uint64_t> last{blocks.last_event_id()};
  std::thread follower([&] {
    inflight::KvEventsResponse r;
    while (reader->Read(&r)) {
      for (const auto& e : r.events()) {
        if (e.event_id() <= last.load())
          ADD_FAILURE() << "event " << e.event_id() << " out of order";
        last = e.event_id();
        stored += e.type() == inflight::KvEvent::STORED;
      }
      if (stored.load() > 0) ctx.TryCancel();
    }
  });
  std::string prompt = "A brand new story about a purple elephant";
  for (int i = 0; i < 12; ++i) prompt += " who liked to sing songs by the river";
  httplib::Client c("127.0.0.1", server_->http_port);
  c.set_read_timeout(60);
  auto g = c.Post("/v2/models/ensemble/generate",
                  json{{"text_input", prompt}, {"max_tokens", 4}}.dump(), "application/json");
  ASSERT_TRUE(g && g->status == 200);
  follower.join();
  EXPECT_GT(stored.load(), 0);
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  // Errors: an unknown model, a model without a KV cache.
  for (const auto& [model, code] : std::vector<std::pair<std::string, grpc::StatusCode>>{
           {"nosuch", grpc::StatusCode::NOT_FOUND},
           {"preprocessing", grpc::StatusCode::UNIMPLEMENTED}}) {
    grpc::ClientContext ectx;
    inflight::KvEventsRequest ereq;
    ereq.set_model_name(model);
    auto er = stub->Events(&ectx, ereq);
    inflight::KvEventsResponse r;
    EXPECT_FALSE(er->Read(&r));
    EXPECT_EQ(er->Finish().error_code(), code) << model;
  }
}

// gRPC's bounds: max_events past its limit is INVALID_ARGUMENT, and at most kMaxStreams
// following streams are open at once (the next one is RESOURCE_EXHAUSTED until one closes).
TEST_F(KvEventsTest, GrpcStreamsAreBounded) {
  auto stub = inflight::KvCacheEvents::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(server_->grpc_port), grpc::InsecureChannelCredentials()));
  {
    grpc::ClientContext ctx;
    inflight::KvEventsRequest req;
    req.set_model_name("tensorrt_llm");
    req.set_max_events(100001);
    auto reader = stub->Events(&ctx, req);
    inflight::KvEventsResponse r;
    EXPECT_FALSE(reader->Read(&r));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  // A prompt's blocks make events; streams from event 0 then answer a first page at once,
  // so each is open once read.
  httplib::Client c("127.0.0.1", server_->http_port);
  c.set_read_timeout(60);
  std::string prompt = "The streams are bounded:";
  for (int i = 0; i < 8; ++i) prompt += " a long enough prompt fills whole blocks of the cache";
  auto g = c.Post("/v2/models/ensemble/generate",
                  json{{"text_input", prompt}, {"max_tokens", 2}}.dump(), "application/json");
  ASSERT_TRUE(g && g->status == 200);
  constexpr size_t kStreams = 64;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<inflight::KvEventsResponse>>> readers;
  auto open = [&] {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    inflight::KvEventsRequest req;
    req.set_model_name("tensorrt_llm");
    req.set_follow(true);
    req.set_max_events(1);
    readers.push_back(stub->Events(contexts.back().get(), req));
    inflight::KvEventsResponse r;
    return readers.back()->Read(&r);
  };
  for (size_t i = 0; i < kStreams; ++i) ASSERT_TRUE(open()) << "stream " << i;
  EXPECT_FALSE(open()) << "one stream past the bound";
  EXPECT_EQ(readers.back()->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  readers.pop_back(), contexts.pop_back();
  contexts.front()->TryCancel();
  EXPECT_EQ(readers.front()->Finish().error_code(), grpc::StatusCode::CANCELLED);
  // The closed stream's place is free again (the service drops it as it sees the cancel).
  bool reopened = false;
  for (int i = 0; i < 100 && !reopened; ++i) {
    reopened = open();
    if (!reopened) {
      readers.back()->Finish();
      readers.pop_back(), contexts.pop_back();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  EXPECT_TRUE(reopened);
  for (size_t i = 1; i < contexts.size(); ++i) {
    contexts[i]->TryCancel();
    readers[i]->Finish();
  }
}

}  // namespace
}  // namespace inflight
