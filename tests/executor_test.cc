// The in-flight batching executor on a real (tiny, random-weight) model: batch invariance
// under every scheduling configuration, no leaked KV blocks, cancellation, preemption, request
// features and refusals.
#include "engine/executor.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <random>
#include <thread>

#include "base/thread_pool.h"
#include "engine/generate.h"
#include "model/random_model.h"

namespace inflight {
namespace {

using std::chrono::milliseconds;

TokenizerSpec ByteVocab() {
  TokenizerSpec spec;
  spec.tokens = {"<unk>", "<s>", "</s>"};
  spec.types = {TokenType::kUnknown, TokenType::kControl, TokenType::kControl};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    spec.tokens.push_back(buf);
    spec.types.push_back(TokenType::kByte);
  }
  spec.scores.assign(spec.tokens.size(), 0.0f);
  spec.unk_id = 0, spec.bos_id = 1, spec.eos_id = 2;
  return spec;
}

class ExecutorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto config = PresetConfig(Architecture::kLlama, "tiny");
    ASSERT_TRUE(config.ok());
    RandomModelParams params;
    params.config = *config;
    params.dtype = DType::kQ8_0;
    params.seed = 11;
    path_ = (std::filesystem::temp_directory_path() / "inflight_executor_test.gguf").string();
    ASSERT_TRUE(WriteRandomGguf(params, ByteVocab(), path_).ok());
    auto m = Model::Load(path_);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(m).value().release();
    pool_ = new ThreadPool(2);
  }
  static void TearDownTestSuite() {
    delete model_;
    delete pool_;
    std::filesystem::remove(path_);
  }

  // Greedy ids of the request run alone on the single-sequence path (private cache).
  static std::vector<int32_t> Alone(const std::vector<int32_t>& prompt, int32_t max_tokens) {
    GenerateParams gp;
    gp.max_new_tokens = max_tokens;
    gp.sampling.temperature = 0;
    gp.stop_at_eos = false;
    auto r = Generate(*model_, prompt, gp, *pool_, nullptr);
    EXPECT_TRUE(r.ok());
    return r.ok() ? r->generated_ids : std::vector<int32_t>();
  }

  static std::unique_ptr<Executor> Make(ExecutorConfig c) {
    auto e = Executor::Create(*model_, c);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? std::move(e).value() : nullptr;
  }

  // Waits for every result of `id`; returns them in order.
  static std::vector<Result> Collect(Executor& e, RequestId id) {
    std::vector<Result> all;
    for (int i = 0; i < 6000; ++i) {
      for (Result& r : e.AwaitResponses(id, milliseconds(50))) all.push_back(std::move(r));
      if (!all.empty() && all.back().is_final) return all;
    }
    ADD_FAILURE() << "request " << id << " never finished";
    return all;
  }

  static void ExpectNoLeaks(const Executor& e) {
    for (int i = 0; i < 200 && e.num_unfinished_requests() > 0; ++i) std::this_thread::sleep_for(milliseconds(5));
    EXPECT_EQ(e.num_unfinished_requests(), 0);
    const BlockCounts c = e.KvBlockCounts();
    EXPECT_EQ(c.used, 0);
    EXPECT_EQ(c.free + c.cached, c.total);
  }

  static Model* model_;
  static ThreadPool* pool_;
  static std::string path_;
};

Model* ExecutorTest::model_ = nullptr;
ThreadPool* ExecutorTest::pool_ = nullptr;
std::string ExecutorTest::path_;

Request Greedy(std::vector<int32_t> prompt, int32_t max_tokens) {
  Request r;
  r.prompt_ids = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  return r;
}

TEST_F(ExecutorTest, SingleRequestEqualsGenerate) {
  ExecutorConfig c;
  c.max_tokens_in_paged_kv_cache = 4096;
  c.tokens_per_block = 16;
  auto e = Make(c);
  const std::vector<int32_t> prompt = {1, 72, 101, 108, 108, 111};
  auto id = e->Enqueue(Greedy(prompt, 12));
  ASSERT_TRUE(id.ok());
  std::vector<Result> rs = Collect(*e, *id);
  ASSERT_EQ(rs.size(), 1u);
  ASSERT_TRUE(rs[0].error.ok());
  EXPECT_EQ(rs[0].finish_reason, FinishReason::kLength);
  std::vector<int32_t> expected = prompt;
  for (int32_t t : Alone(prompt, 12)) expected.push_back(t);
  EXPECT_EQ(rs[0].output_token_ids, expected);  // prompt + generated (exclude_input_in_output off)
  ExpectNoLeaks(*e);
}

// ---- Batch invariance: 64 greedy requests, prompts of 1..600 tokens (half of them sharing
// prefixes), different max_tokens, random arrival times; every configuration must give each
// request exactly the ids it gets alone.

struct Workload {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int32_t> max_tokens;
  std::vector<int> arrival_gap_us;
};

Workload MakeWorkload(uint32_t seed, int n) {
  std::mt19937 rng(seed);
  auto token = [&] { return static_cast<int32_t>(3 + rng() % 256); };
  std::vector<std::vector<int32_t>> prefixes;
  for (int len : {100, 200, 300}) {
    std::vector<int32_t> p(len);
    for (auto& t : p) t = token();
    prefixes.push_back(p);
  }
  Workload w;
  for (int i = 0; i < n; ++i) {
    const int len = i == 0 ? 1 : i == 1 ? 600 : 1 + static_cast<int>(rng() % 600);
    std::vector<int32_t> p;
    if (i % 2 == 0 && len > 100) {
      const auto& pre = prefixes[rng() % prefixes.size()];
      p.assign(pre.begin(), pre.begin() + std::min<size_t>(pre.size(), len));
    }
    while (static_cast<int>(p.size()) < len) p.push_back(token());
    w.prompts.push_back(p);
    w.max_tokens.push_back(1 + static_cast<int32_t>(rng() % 40));
    w.arrival_gap_us.push_back(static_cast<int>(rng() % 3000));
  }
  return w;
}

struct InvarianceCase {
  CapacityPolicy policy;
  bool chunked;
  bool reuse;
  BatchingStrategy batching;
};

class BatchInvarianceTest : public ExecutorTest, public ::testing::WithParamInterface<InvarianceCase> {
 protected:
  static const Workload& Load() {
    static const Workload w = MakeWorkload(2024, 64);
    return w;
  }
  static const std::vector<std::vector<int32_t>>& Expected() {
    static const std::vector<std::vector<int32_t>> e = [] {
      std::vector<std::vector<int32_t>> out;
      for (size_t i = 0; i < Load().prompts.size(); ++i) out.push_back(Alone(Load().prompts[i], Load().max_tokens[i]));
      return out;
    }();
    return e;
  }
};

TEST_P(BatchInvarianceTest, EveryRequestGetsItsAloneOutput) {
  const InvarianceCase ic = GetParam();
  const Workload& w = Load();
  const auto& expected = Expected();
  ExecutorConfig c;
  c.policy = ic.policy;
  c.enable_chunked_context = ic.chunked;
  c.enable_kv_cache_reuse = ic.reuse;
  c.batching = ic.batching;
  c.tokens_per_block = 16;
  c.max_batch_size = 16;
  c.max_num_tokens = ic.chunked ? 128 : 640;
  // max_utilization gets a cache far too small for the load, so it must pause and resume.
  c.max_tokens_in_paged_kv_cache = ic.policy == CapacityPolicy::kMaxUtilization ? 1600 : 8192;
  auto e = Make(c);
  std::vector<RequestId> ids(w.prompts.size());
  std::thread submitter([&] {
    for (size_t i = 0; i < w.prompts.size(); ++i) {
      std::this_thread::sleep_for(std::chrono::microseconds(w.arrival_gap_us[i]));
      Request r = Greedy(w.prompts[i], w.max_tokens[i]);
      r.exclude_input_in_output = true;
      auto id = e->Enqueue(std::move(r));
      ASSERT_TRUE(id.ok()) << id.status().ToString();
      ids[i] = *id;
    }
  });
  submitter.join();
  int32_t peak_scheduled = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    std::vector<Result> rs = Collect(*e, ids[i]);
    ASSERT_FALSE(rs.empty());
    ASSERT_TRUE(rs.back().error.ok()) << rs.back().error.ToString();
    EXPECT_EQ(rs.back().output_token_ids, expected[i]) << "request " << i << " (prompt " << w.prompts[i].size()
                                                       << " tokens, max_tokens " << w.max_tokens[i] << ")";
    EXPECT_EQ(rs.back().finish_reason, FinishReason::kLength);
  }
  int64_t paused = 0, reused = 0;
  for (const IterationStats& s : e->GetLatestIterationStats()) {
    peak_scheduled = std::max(peak_scheduled, s.num_scheduled_context + s.num_scheduled_generation);
    paused = std::max(paused, s.num_paused_total);
    reused += s.kv_blocks_reused;
  }
  EXPECT_GT(peak_scheduled, 1) << "requests never ran together";
  if (ic.policy == CapacityPolicy::kGuaranteedNoEvict) EXPECT_EQ(paused, 0);
  if (ic.policy == CapacityPolicy::kMaxUtilization && ic.batching == BatchingStrategy::kInflight) EXPECT_GT(paused, 0);
  if (ic.reuse) EXPECT_GT(reused, 0);
  std::printf("peak batch %d, pauses %lld, reused blocks %lld\n", peak_scheduled, static_cast<long long>(paused),
              static_cast<long long>(reused));
  ExpectNoLeaks(*e);
}

std::vector<InvarianceCase> AllCases() {
  std::vector<InvarianceCase> v;
  for (CapacityPolicy p : {CapacityPolicy::kGuaranteedNoEvict, CapacityPolicy::kMaxUtilization})
    for (bool chunked : {false, true})
      for (bool reuse : {false, true})
        for (BatchingStrategy b : {BatchingStrategy::kInflight, BatchingStrategy::kStatic}) v.push_back({p, chunked, reuse, b});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Configurations, BatchInvarianceTest, ::testing::ValuesIn(AllCases()),
                         [](const ::testing::TestParamInfo<InvarianceCase>& info) {
                           const InvarianceCase& c = info.param;
                           return std::string(c.policy == CapacityPolicy::kGuaranteedNoEvict ? "NoEvict" : "MaxUtil") +
                                  (c.chunked ? "_Chunked" : "_Whole") + (c.reuse ? "_Reuse" : "_NoReuse") +
                                  (c.batching == BatchingStrategy::kInflight ? "_Inflight" : "_Static");
                         });

}  // namespace
}  // namespace inflight
