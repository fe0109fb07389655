// Batch invariance of the mixture-of-experts and sliding-window families (the llama.cpp-written
// files of ../shared/golden/arch): in every scheduling configuration, with prefix reuse,
// chunked context across the window edge and speculative decoding, each greedy request gets
// exactly the ids it gets alone, and no KV block leaks.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "base/thread_pool.h"
#include "engine/executor.h"
#include "engine/generate.h"
#include "engine_test_util.h"
#include "model/model.h"
#include "test_util.h"

namespace inflight {
namespace {

struct ArchCase {
  const char* file;  // in ../shared/golden/arch
  CapacityPolicy policy;
  bool chunked;
  bool reuse;
  bool speculative;
};

void PrintTo(const ArchCase& c, std::ostream* os) { *os << c.file; }

struct Workload {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int32_t> max_tokens;
};

// 16 requests, prompts of 1..300 tokens (beyond every window here: 32 and 64), half of them
// sharing 100- or 200-token prefixes; a repeated phrase gives prompt lookup something to find.
Workload MakeWorkload() {
  std::mt19937 rng(7);
  auto token = [&] { return static_cast<int32_t>(3 + rng() % 400); };
  std::vector<std::vector<int32_t>> prefixes;
  for (int len : {100, 200}) {
    std::vector<int32_t> p(len);
    for (auto& t : p) t = token();
    for (int i = 0; i < 24 && i + 48 < len; ++i) p[i + 48] = p[i];
    prefixes.push_back(p);
  }
  Workload w;
  for (int i = 0; i < 16; ++i) {
    const int len = i == 0 ? 1 : i == 1 ? 300 : 1 + static_cast<int>(rng() % 300);
    std::vector<int32_t> p;
    if (i % 2 == 0 && len > 100) {
      const auto& pre = prefixes[rng() % prefixes.size()];
      p.assign(pre.begin(), pre.begin() + std::min<size_t>(pre.size(), len));
    }
    while (static_cast<int>(p.size()) < len) p.push_back(token());
    w.prompts.push_back(p);
    w.max_tokens.push_back(4 + static_cast<int32_t>(rng() % 24));
  }
  return w;
}

class ArchInvarianceTest : public ::testing::TestWithParam<ArchCase> {};

TEST_P(ArchInvarianceTest, EveryRequestGetsItsAloneOutput) {
  const ArchCase ac = GetParam();
  const std::string path = testing::SharedDir() + "/golden/arch/" + ac.file + ".gguf";
  REQUIRE_SHARED_FILE(path);
  auto loaded = Model::Load(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  const Model& model = **loaded;
  ThreadPool pool(2);
  const Workload w = MakeWorkload();

  ExecutorConfig c;
  c.policy = ac.policy;
  c.enable_chunked_context = ac.chunked;
  c.enable_kv_cache_reuse = ac.reuse;
  c.tokens_per_block = 16;
  c.max_batch_size = 8;
  c.max_num_tokens = ac.chunked ? 48 : 320;
  c.max_tokens_in_paged_kv_cache = ac.policy == CapacityPolicy::kMaxUtilization ? 1024 : 8192;
  if (ac.speculative) {
    c.speculative_mode = SpeculativeMode::kPromptLookup;
    c.adaptive_draft_length = false;
  }
  auto created = Executor::Create(model, c);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  Executor& e = **created;
  std::vector<RequestId> ids;
  for (size_t i = 0; i < w.prompts.size(); ++i) {
    Request r;
    r.prompt_ids = w.prompts[i];
    r.max_tokens = w.max_tokens[i];
    r.sampling.temperature = 0;
    r.exclude_input_in_output = true;
    auto id = e.Enqueue(std::move(r));
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    ids.push_back(*id);
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    std::vector<Result> rs = testing::CollectResults(e, ids[i]);
    ASSERT_FALSE(rs.empty());
    ASSERT_TRUE(rs.back().error.ok()) << rs.back().error.ToString();
    EXPECT_EQ(rs.back().output_token_ids,
              testing::GreedyAlone(model, pool, w.prompts[i], w.max_tokens[i]))
        << "request " << i << " (prompt " << w.prompts[i].size() << " tokens)";
  }
  testing::ExpectNoKvLeaks(e);
}

// A sliding-window model's KV use stays bounded by its window while a long sequence decodes
// (measured in blocks of the window group), and its output equals the one-table path's.
TEST(WindowKvGroup, LongDecodeHoldsOnlyTheWindowAndKeepsItsOutput) {
  const std::string path = testing::SharedDir() + "/golden/arch/gemma3-f16.gguf";
  REQUIRE_SHARED_FILE(path);
  auto loaded = Model::Load(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  const Model& model = **loaded;
  ASSERT_EQ(model.config().sliding_window, 64);
  ThreadPool pool(2);
  ExecutorConfig c;
  c.tokens_per_block = 16;
  c.max_batch_size = 4;
  c.max_num_tokens = 64;  // the prompt runs in chunks across the window edge
  c.enable_chunked_context = true;
  c.max_tokens_in_paged_kv_cache = 4096;
  auto created = Executor::Create(model, c);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  Executor& e = **created;
  ASSERT_GT(e.WindowKvBlockCounts().total, 0) << "gemma3's window layers have their own group";
  std::mt19937 rng(11);
  std::vector<int32_t> prompt(200);
  for (auto& t : prompt) t = static_cast<int32_t>(3 + rng() % 400);
  Request r;
  r.prompt_ids = prompt;
  r.max_tokens = 300;
  r.sampling.temperature = 0;
  r.exclude_input_in_output = true;
  auto id = e.Enqueue(std::move(r));
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  std::vector<Result> rs = testing::CollectResults(e, *id);
  ASSERT_FALSE(rs.empty());
  ASSERT_TRUE(rs.back().error.ok()) << rs.back().error.ToString();
  EXPECT_EQ(rs.back().output_token_ids, testing::GreedyAlone(model, pool, prompt, 300));
  int32_t most_window = 0, most_full = 0, steps = 0;
  for (const IterationStats& s : e.GetLatestIterationStats()) {
    most_window = std::max(most_window, s.window_kv_blocks_used);
    most_full = std::max(most_full, s.kv_blocks_used);
    ++steps;
    EXPECT_EQ(s.kv_window, 64);
  }
  ASSERT_GT(steps, 300);
  // After each step the sequence holds the blocks of its last 63 positions: at most
  // ceil(63 / 16) + 1 = 5, while the full-attention layer's table grows to ceil(499 / 16).
  EXPECT_LE(most_window, 5);
  EXPECT_GE(most_full, 31);
  testing::ExpectNoKvLeaks(e);
}

std::vector<ArchCase> Cases() {
  std::vector<ArchCase> v;
  // gpt-oss with MXFP4 experts: MoE, windows of 32, sinks. gemma3: windows of 64, two RoPE
  // tables. qwen3moe: 16 experts top-4.
  for (const char* file : {"gpt-oss-mxfp4_moe", "gemma3-f16", "qwen3moe-f16"}) {
    v.push_back({file, CapacityPolicy::kGuaranteedNoEvict, false, false, false});
    v.push_back({file, CapacityPolicy::kGuaranteedNoEvict, true, true, false});
    v.push_back({file, CapacityPolicy::kMaxUtilization, true, true, false});
    v.push_back({file, CapacityPolicy::kGuaranteedNoEvict, false, true, true});
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Families, ArchInvarianceTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<ArchCase>& info) {
                           const ArchCase& c = info.param;
                           std::string n = c.file;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n +
                                  (c.policy == CapacityPolicy::kGuaranteedNoEvict ? "_NoEvict"
                                                                                  : "_MaxUtil") +
                                  (c.chunked ? "_Chunked" : "_Whole") +
                                  (c.reuse ? "_Reuse" : "_NoReuse") +
                                  (c.speculative ? "_PromptLookup" : "");
                         });

}  // namespace
}  // namespace inflight
