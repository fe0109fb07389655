// Helpers of the engine tests (executor_test, speculative_test): the tiny random model they
// run, the single-sequence reference output, and waiting for and auditing an executor.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/thread_pool.h"
#include "chi_square.h"
#include "engine/executor.h"
#include "engine/generate.h"
#include "model/random_model.h"
#include "test_util.h"

namespace inflight::testing {

// Writes the "tiny" random Llama (Q8_0, byte-fallback vocabulary) to a file of this process
// (ctest runs a suite's tests as parallel processes, and rewriting a file another process has
// mapped kills it with SIGBUS) and returns its path.
inline std::string WriteTinyModel(const std::string& stem, uint64_t seed = 11) {
  auto config = PresetConfig(Architecture::kLlama, "tiny");
  EXPECT_TRUE(config.ok());
  RandomModelParams params;
  params.config = *config;
  params.dtype = DType::kQ8_0;
  params.seed = seed;
  const std::string path =
      (std::filesystem::temp_directory_path() / (stem + "_" + std::to_string(getpid()) + ".gguf"))
          .string();
  EXPECT_TRUE(WriteRandomGguf(params, ByteFallbackVocab(), path).ok());
  return path;
}

// Greedy ids of `prompt` run alone on the single-sequence path (private cache).
inline std::vector<int32_t> GreedyAlone(const Model& model, ThreadPool& pool,
                                        const std::vector<int32_t>& prompt, int32_t max_tokens,
                                        DType kv_dtype = DType::kF16) {
  GenerateParams gp;
  gp.kv_dtype = kv_dtype;
  gp.max_new_tokens = max_tokens;
  gp.sampling.temperature = 0;
  gp.stop_at_eos = false;
  auto r = Generate(model, prompt, gp, pool, nullptr);
  EXPECT_TRUE(r.ok());
  return r.ok() ? r->generated_ids : std::vector<int32_t>();
}

// Waits for every result of `id`; returns them in order.
inline std::vector<Result> CollectResults(Executor& e, RequestId id) {
  std::vector<Result> all;
  for (int i = 0; i < 6000; ++i) {
    for (Result& r : e.AwaitResponses(id, std::chrono::milliseconds(50)))
      all.push_back(std::move(r));
    if (!all.empty() && all.back().is_final) return all;
  }
  ADD_FAILURE() << "request " << id << " never finished";
  return all;
}

// A request's output stream whose reader holds the engine back: set `stream` as the request's
// output; the request pauses while any result Take() returned is unreleased (its credit's
// bound is one byte), so a test acts between two of its steps however fast the engine is (a
// tiny model decodes hundreds of tokens while a loaded machine deschedules the test thread).
struct HeldStream {
  std::shared_ptr<OutputCredit> credit = std::make_shared<OutputCredit>(/*pause_bytes=*/1);
  std::shared_ptr<OutputStream> stream = MakeStream(credit);
  int64_t held = 0;

  // The results queued now, or after waiting up to `timeout` for one; they stay charged.
  std::vector<Result> Take(std::chrono::milliseconds timeout = std::chrono::milliseconds(50)) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    std::vector<Result> got = stream->Take(/*keep_credit=*/true);
    while (got.empty() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      got = stream->Take(/*keep_credit=*/true);
    }
    for (const Result& r : got) held += static_cast<int64_t>(OutputStream::ResultBytes(r));
    return got;
  }
  // Lets the request go on.
  void Release() {
    credit->Release(held);
    held = 0;
  }

 private:
  static std::shared_ptr<OutputStream> MakeStream(const std::shared_ptr<OutputCredit>& c) {
    auto s = std::make_shared<OutputStream>();
    s->SetCredit(c);
    return s;
  }
};

// A near-bigram tiny model (block outputs scaled by `scale`: its next token mostly follows
// from the current one), whose text pools, Jacobi guesses and heads can predict, written to
// `path` (kept: the caller removes it).
inline std::unique_ptr<Model> NearBigramModel(const std::string& path, float scale) {
  auto config = PresetConfig(Architecture::kLlama, "tiny");
  EXPECT_TRUE(config.ok());
  RandomModelParams params;
  params.config = *config;
  params.dtype = DType::kQ8_0;
  params.seed = 777;
  params.block_output_scale = scale;
  EXPECT_TRUE(WriteRandomGguf(params, ByteFallbackVocab(), path).ok());
  auto m = Model::Load(path);
  EXPECT_TRUE(m.ok());
  return m.ok() ? std::move(m).value() : nullptr;
}

// A small cache under max_utilization with chunked prompts and prefix reuse, 16 sequences, a
// tree of drafts every step (adaptive choice off: timing-free): the tree-drafting tests' setup.
inline ExecutorConfig TreeDraftingConfig(SpeculativeMode mode) {
  ExecutorConfig c;
  c.num_threads = 1;
  c.policy = CapacityPolicy::kMaxUtilization;
  c.enable_chunked_context = true;
  c.enable_kv_cache_reuse = true;
  c.tokens_per_block = 16;
  c.max_batch_size = 16;
  c.max_num_tokens = 128;
  c.max_tokens_in_paged_kv_cache = 2400;
  c.speculative_mode = mode;
  c.adaptive_draft_length = false;
  return c;
}

// Samples the second to fourth tokens of `draws` seeded requests (temperature 3, top-k 3:
// a few dozen outcomes) for a chi-square test; adds the drafts verified and accepted.
inline std::map<std::pair<int32_t, int32_t>, int> SampleTokensTwoToFour(
    Executor& e, const std::vector<int32_t>& prompt, int draws, int seed_base, int64_t* drafts,
    int64_t* accepted) {
  std::map<std::pair<int32_t, int32_t>, int> counts;
  std::vector<RequestId> ids;
  for (int i = 0; i < draws; ++i) {
    Request r;
    r.prompt_ids = prompt;
    r.max_tokens = 4;
    r.exclude_input_in_output = true;
    r.sampling.temperature = 3.0f;
    r.sampling.top_k = 3;
    r.sampling.seed = static_cast<uint64_t>(seed_base + i);
    auto id = e.Enqueue(std::move(r));
    EXPECT_TRUE(id.ok());
    if (id.ok()) ids.push_back(*id);
  }
  for (RequestId id : ids) {
    std::vector<Result> rs = CollectResults(e, id);
    if (rs.empty()) continue;
    const auto& t = rs.back().output_token_ids;
    EXPECT_EQ(t.size(), 4u);
    *drafts += rs.back().stats.num_draft_tokens;
    *accepted += rs.back().stats.num_accepted_draft_tokens;
    if (t.size() == 4) counts[{t[1], t[2] * 100003 + t[3]}]++;
  }
  return counts;
}

// Seeded samples through `speculating` keep the distribution of `plain`: the second to fourth
// tokens of 1500 requests each (chi-square at 99.9%), with the guesses holding often enough
// for the test to mean anything (more than min_accepted of them).
inline void ExpectSamplingKept(Executor& plain, Executor& speculating,
                               const std::vector<int32_t>& prompt, int min_accepted = 375) {
  const int draws = 1500;
  int64_t drafts = 0, accepted = 0;
  const auto without = SampleTokensTwoToFour(plain, prompt, draws, 1000, &drafts, &accepted);
  drafts = accepted = 0;
  const auto with = SampleTokensTwoToFour(speculating, prompt, draws, 900000, &drafts, &accepted);
  const auto [chi2, df] = ChiSquareTwoSample(without, with);
  ASSERT_GE(df, 3);
  const double critical = ChiSquareCritical999(df);
  std::printf(
      "chi2 %.1f over %d degrees of freedom (99.9%% critical %.1f); drafts %lld, "
      "accepted %lld\n",
      chi2, df, critical, static_cast<long long>(drafts), static_cast<long long>(accepted));
  EXPECT_LT(chi2, critical);
  EXPECT_GT(accepted, min_accepted) << "the guesses must hold often for the test to mean anything";
  EXPECT_LT(accepted, drafts);
}

// Nothing unfinished, no KV block (nor draft-model block) held.
inline void ExpectNoKvLeaks(const Executor& e) {
  // The counts are a snapshot the engine thread refreshes after each loop: poll briefly.
  for (int i = 0; i < 200 && (e.num_unfinished_requests() > 0 || e.KvBlockCounts().used > 0 ||
                              e.WindowKvBlockCounts().used > 0);
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(e.num_unfinished_requests(), 0);
  const BlockCounts c = e.KvBlockCounts();
  EXPECT_EQ(c.used, 0);
  EXPECT_EQ(c.free + c.cached, c.total);
  const BlockCounts w = e.WindowKvBlockCounts();
  EXPECT_EQ(w.used, 0) << "window group blocks";
  EXPECT_EQ(w.free + w.cached, w.total) << "window group blocks";
  const BlockCounts d = e.DraftKvBlockCounts();
  EXPECT_EQ(d.used, 0) << "draft model blocks";
  EXPECT_EQ(d.free, d.total);
}

}  // namespace inflight::testing
