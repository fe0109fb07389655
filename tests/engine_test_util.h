// Helpers of the engine tests (executor_test, speculative_test): the tiny random model they
// run, the single-sequence reference output, and waiting for and auditing an executor.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "base/thread_pool.h"
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
