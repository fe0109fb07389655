// The KV cache's tiers on the real server and the bundled demo model: the 8-bit cache
// (init-repo --kv-cache-dtype int8) holds about twice the blocks of the F16 one in the same
// memory and serves the same requests; a bad kv_cache_dtype is refused at load naming the
// parameter; the disk tier serves a prompt again after a restart, and its directory must lie
// inside the repository.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "server_harness.h"
#include "test_util.h"

namespace inflight {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::ServerProcess;

// A model repository for the demo model made by init-repo with `flags`.
fs::path InitRepo(const std::string& name, const std::string& flags) {
  const fs::path repo =
      fs::temp_directory_path() / ("inflight_kv_tiers_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(repo);
  const std::string cmd = std::string(INFLIGHT_BINARY_DIR) +
                          "/apps/inflight-server init-repo --model " + testing::SourceDir() +
                          "/models/demo/inflight-demo-q8_0.gguf --out " + repo.string() + " " +
                          flags + " > /dev/null";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  return repo;
}

double MaxBlocks(const ServerProcess& s) {
  for (int i = 0; i < 100; ++i) {
    const double max = testing::MetricValue(
        testing::MetricsText(s.metrics_port), "nv_trt_llm_kv_cache_block_metrics",
        {{"model", "tensorrt_llm"}, {"kv_cache_block_type", "max"}});
    if (max > 0) return max;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return -1;
}

std::string Generate(const ServerProcess& s, const std::string& text) {
  httplib::Client c("127.0.0.1", s.http_port);
  c.set_read_timeout(60);
  auto r = c.Post("/v2/models/ensemble/generate",
                  json{{"text_input", text}, {"max_tokens", 24}, {"temperature", 0}}.dump(),
                  "application/json");
  EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
  return r && r->status == 200 ? json::parse(r->body).value("text_output", "") : "";
}

// Replaces `from` by `to` in the tensorrt_llm config of `repo`.
void EditConfig(const fs::path& repo, const std::string& from, const std::string& to) {
  const fs::path config = repo / "tensorrt_llm" / "config.pbtxt";
  std::ifstream in(config);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = text.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  text.replace(at, from.size(), to);
  std::ofstream(config) << text;
}

// The answer to loading tensorrt_llm of `repo` on a server in explicit mode.
httplib::Result LoadAnswer(const fs::path& repo) {
  auto s = ServerProcess::Start(
      {"--model-repository", repo.string(), "--model-control-mode", "explicit"});
  EXPECT_NE(s, nullptr);
  httplib::Client c("127.0.0.1", s ? s->http_port : 1);
  c.set_read_timeout(60);
  return c.Post("/v2/repository/models/tensorrt_llm/load", "", "application/json");
}

TEST(KvTiersTest, Int8CacheHoldsTwiceTheBlocksAndServes) {
  // The same share of memory for both, small enough that the bytes bound the cache (the demo
  // model's blocks are tiny: a larger share is capped at twice a full batch of contexts).
  const fs::path f16_repo = InitRepo("f16", "--kv-cache-free-mem-fraction 0.01");
  const fs::path i8_repo =
      InitRepo("int8", "--kv-cache-free-mem-fraction 0.01 --kv-cache-dtype int8");
  for (const fs::path& repo : {f16_repo, i8_repo})
    EditConfig(repo, "string_value: \"0.010000\"", "string_value: \"0.0002\"");
  double blocks[2] = {0, 0};
  std::string text[2];
  const std::string prompt = "Once upon a time there was a little dog who";
  for (int t = 0; t < 2; ++t) {
    auto s = ServerProcess::Start({"--model-repository", (t == 0 ? f16_repo : i8_repo).string()});
    ASSERT_NE(s, nullptr);
    blocks[t] = MaxBlocks(*s);
    text[t] = Generate(*s, prompt);
    EXPECT_FALSE(text[t].empty());
    if (t == 1) {
      EXPECT_EQ(Generate(*s, prompt), text[1]) << "greedy output is deterministic";
      httplib::Client c("127.0.0.1", s->http_port);
      auto config = c.Get("/v2/models/tensorrt_llm/config");
      ASSERT_TRUE(config && config->status == 200);
      EXPECT_EQ(json::parse(config->body)["parameters"]["kv_cache_dtype"]["string_value"], "int8");
    }
  }
  std::printf(
      "KV blocks in 0.02%% of free memory: F16 %.0f, int8 %.0f (%.2fx); greedy text F16 '%s', "
      "int8 '%s'\n",
      blocks[0], blocks[1], blocks[1] / blocks[0], text[0].c_str(), text[1].c_str());
  // F16 K/V take 2 bytes per value, int8 1 byte and a 2-byte scale per head of head_dim values.
  EXPECT_GT(blocks[1], 1.8 * blocks[0]);
  EXPECT_LT(blocks[1], 2.1 * blocks[0]);
  fs::remove_all(f16_repo);
  fs::remove_all(i8_repo);
}

TEST(KvTiersTest, ABadKvCacheDtypeIsRefusedNamingTheParameter) {
  const fs::path repo = InitRepo("bad", "");
  EditConfig(repo, "string_value: \"f16\"", "string_value: \"int4\"");
  const httplib::Result r = LoadAnswer(repo);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_NE(r->body.find("kv_cache_dtype"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("int4"), std::string::npos) << r->body;
  fs::remove_all(repo);
}

// The disk tier across a restart: the first server writes the prompt's blocks behind, the
// second (same repository, nothing in memory) reads them back, with the same greedy text.
TEST(KvTiersTest, TheDiskTierServesAPromptAgainAfterARestart) {
  const fs::path repo =
      InitRepo("disk", "--kv-cache-disk-path kv_disk --kv-cache-disk-bytes 200000000");
  std::string prompt = "Once upon a time";
  for (int i = 0; i < 40; ++i) prompt += " the little dog ran to the big tree";
  std::string first;
  double disk_reused = -1, hits = -1;
  for (int run = 0; run < 2; ++run) {
    auto s = ServerProcess::Start({"--model-repository", repo.string()});
    ASSERT_NE(s, nullptr);
    const std::string text = Generate(*s, prompt);
    EXPECT_FALSE(text.empty());
    if (run == 0) {
      first = text;
      continue;
    }
    EXPECT_EQ(text, first);
    for (int i = 0; i < 100 && disk_reused <= 0; ++i) {
      const std::string m = testing::MetricsText(s->metrics_port);
      disk_reused = testing::MetricValue(m, "inflight_kv_cache_reused_blocks_total",
                                         {{"model", "tensorrt_llm"}, {"tier", "disk"}});
      hits = testing::MetricValue(m, "inflight_kv_cache_disk_tier",
                                  {{"model", "tensorrt_llm"}, {"value", "hits"}});
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  std::printf("after the restart: %.0f blocks from disk (disk hits %.0f)\n", disk_reused, hits);
  EXPECT_GT(disk_reused, 10);
  EXPECT_EQ(disk_reused, hits);
  EXPECT_GT(std::distance(fs::recursive_directory_iterator(repo / "tensorrt_llm" / "kv_disk"),
                          fs::recursive_directory_iterator()),
            10);
  fs::remove_all(repo);
}

// The disk tier's directory is written by the server: it must lie inside the repository (or
// an allowed model path), as every path a config names.
TEST(KvTiersTest, ADiskTierOutsideTheRepositoryIsRefused) {
  const fs::path outside =
      fs::temp_directory_path() / ("inflight_outside_" + std::to_string(getpid()));
  const fs::path repo = InitRepo(
      "outside", "--kv-cache-disk-path " + outside.string() + " --kv-cache-disk-bytes 1000000");
  const httplib::Result r = LoadAnswer(repo);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_NE(r->body.find("kv_cache_disk_path"), std::string::npos) << r->body;
  EXPECT_FALSE(fs::exists(outside)) << "nothing is created outside the repository";
  fs::remove_all(repo);
}

}  // namespace
}  // namespace inflight
