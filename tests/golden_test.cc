// The engine against llama.cpp's outputs on the golden GGUF models in ../shared/golden:
// prompt tokenization, teacher-forced argmax and top-5 probabilities, free-running greedy ids.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/thread_pool.h"
#include "engine/generate.h"
#include "model/model.h"
#include "test_util.h"

namespace inflight {
namespace {

struct GoldenCase {
  const char* json;
  const char* gguf;  // qwen2-f32.json is checked on the F16 file computed in F32 (exact upcast)
  DType kv_dtype;
  double margin_gate;
  double prob_tol;
  // Free-running greedy ids must equal the reference up to the first step whose margin is
  // below this (0: not checked).
  double free_running_gate;
  // Mixture-of-experts files: steps (of all prompts') whose top-5 probabilities may miss
  // prob_tol, by at most kMoeOutlierTol, where near-tied router logits pick another expert in
  // llama.cpp (golden/arch/README.md); argmax is checked at those steps all the same.
  int prob_outlier_steps = 0;
};

constexpr double kMoeOutlierTol = 0.3;

const GoldenCase kCases[] = {
    {"llama-gqa-f32", "llama-gqa-f32", DType::kF32, 0.1, 2e-3, 0.1},
    {"llama-gqa-f16", "llama-gqa-f16", DType::kF16, 0.1, 5e-2, 0.1},
    {"llama-gqa-q8_0", "llama-gqa-q8_0", DType::kF16, 1.0, 0.3, 0},
    {"llama-gqa-q4_0", "llama-gqa-q4_0", DType::kF16, 1.0, 0.3, 0},
    {"qwen2-f16", "qwen2-f16", DType::kF16, 0.1, 5e-2, 0.1},
    {"qwen2-f32", "qwen2-f16", DType::kF32, 0.1, 2e-3, 0.1},
    {"gpt2-f32", "gpt2-f32", DType::kF32, 0.1, 2e-3, 0.1},
    {"gpt2-f16", "gpt2-f16", DType::kF16, 0.1, 5e-2, 0.1},
    // llama.cpp's quantizer's mixes (K-quants, IQ4_XS, Q4_0 with a Q6_K output): its README's
    // rule for quantized files, argmax where the margin exceeds 1.0 nats, probabilities to 0.25.
    {"llama-k-q4_k_m", "llama-k-q4_k_m", DType::kF16, 1.0, 0.25, 1.0},
    {"llama-k-q5_k_m", "llama-k-q5_k_m", DType::kF16, 1.0, 0.25, 1.0},
    {"llama-k-q2_k", "llama-k-q2_k", DType::kF16, 1.0, 0.25, 1.0},
    {"llama-k-q4_0", "llama-k-q4_0", DType::kF16, 1.0, 0.25, 1.0},
    {"llama-k-iq4_xs", "llama-k-iq4_xs", DType::kF16, 1.0, 0.25, 1.0},
    // golden/arch: mixture-of-experts and windowed families (random weights, llama.cpp's
    // outputs; its README: margins 0.1 for F16, 1.0 for quantized files, and a looser
    // probability tolerance for MoE files, where near-tied router logits move probabilities).
    {"arch/qwen3moe-f16", "arch/qwen3moe-f16", DType::kF16, 0.1, 5e-2, 0.1, 3},
    {"arch/llama-moe-f16", "arch/llama-moe-f16", DType::kF16, 0.1, 5e-2, 0.1, 3},
    {"arch/gemma3-f16", "arch/gemma3-f16", DType::kF16, 0.1, 5e-2, 0.1},
    {"arch/gemma2-f16", "arch/gemma2-f16", DType::kF16, 0.1, 5e-2, 0.1},
    {"arch/gpt-oss-f16", "arch/gpt-oss-f16", DType::kF16, 0.1, 5e-2, 0.1, 3},
    {"arch/gpt-oss-mxfp4_moe", "arch/gpt-oss-mxfp4_moe", DType::kF16, 1.0, 0.25, 1.0, 3},
    {"arch/phi3-longrope-f16", "arch/phi3-longrope-f16", DType::kF16, 0.1, 5e-2, 0.1},
};

void PrintTo(const GoldenCase& c, std::ostream* os) { *os << c.json; }

class GoldenTest : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(GoldenTest, MatchesReference) {
  const GoldenCase& gc = GetParam();
  const std::string dir = testing::SharedDir() + "/golden/";
  REQUIRE_SHARED_FILE(dir + gc.json + ".json");
  REQUIRE_SHARED_FILE(dir + gc.gguf + ".gguf");
  std::ifstream in(dir + gc.json + ".json");
  const nlohmann::json golden = nlohmann::json::parse(in);
  // A case checked on another file's weights computed in F32 (qwen2-f32 on the F16 file) asks
  // for F16 matrices in exact F32 arithmetic (ModelLoadOptions::exact_f16).
  ModelLoadOptions options;
  options.exact_f16 = std::string(gc.json) != gc.gguf;
  auto model_or = Model::Load(dir + gc.gguf + ".gguf", options);
  ASSERT_TRUE(model_or.ok()) << model_or.status().ToString();
  const Model& model = **model_or;
  ASSERT_NE(model.tokenizer(), nullptr);
  ThreadPool pool(2);
  const int32_t vocab = model.config().vocab_size;
  int checked_argmax = 0, prob_outliers = 0;
  for (const auto& p : golden["prompts"]) {
    SCOPED_TRACE(p["name"].get<std::string>());
    const std::vector<int32_t> prompt = p["prompt_ids"];
    const std::vector<int32_t> ref = p["generated_ids"];
    const std::vector<double> margin = p["top1_top2_margin_logprob"];
    // 1. Tokenization.
    EXPECT_EQ(model.tokenizer()->Encode(p["text"].get<std::string>()), prompt);
    // 2. Teacher forced over prompt + reference ids.
    std::vector<int32_t> ids = prompt;
    ids.insert(ids.end(), ref.begin(), ref.end() - 1);
    auto logits = AllLogits(model, ids, gc.kv_dtype, pool);
    ASSERT_TRUE(logits.ok()) << logits.status().ToString();
    for (size_t k = 0; k < ref.size(); ++k) {
      const float* row = logits->data() + (prompt.size() - 1 + k) * vocab;
      int32_t best = 0;
      float mx = row[0];
      for (int32_t i = 1; i < vocab; ++i) {
        if (row[i] > mx) mx = row[i], best = i;
      }
      if (margin[k] > gc.margin_gate) {
        EXPECT_EQ(best, ref[k]) << "step " << k << " margin " << margin[k];
        ++checked_argmax;
      }
      double sum = 0;
      for (int32_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(row[i] - mx));
      double worst = 0;
      for (const auto& e : p["top5"][k]) {
        const double prob = std::exp(static_cast<double>(row[e[0].get<int32_t>()] - mx)) / sum;
        worst = std::max(worst, std::abs(prob - e[1].get<double>()));
        if (gc.prob_outlier_steps == 0) {
          EXPECT_NEAR(prob, e[1].get<double>(), gc.prob_tol) << "step " << k << " token " << e[0];
        } else {
          EXPECT_NEAR(prob, e[1].get<double>(), kMoeOutlierTol)
              << "step " << k << " token " << e[0];
        }
      }
      if (worst > gc.prob_tol) ++prob_outliers;
    }
    // 3. Free-running greedy up to the first near-tie.
    if (gc.free_running_gate > 0) {
      GenerateParams gp;
      gp.max_new_tokens = static_cast<int32_t>(ref.size());
      gp.sampling.temperature = 0;
      gp.stop_at_eos = false;
      gp.kv_dtype = gc.kv_dtype;
      auto gen = Generate(model, prompt, gp, pool, nullptr);
      ASSERT_TRUE(gen.ok()) << gen.status().ToString();
      for (size_t k = 0; k < ref.size() && margin[k] > gc.free_running_gate; ++k) {
        ASSERT_EQ(gen->generated_ids[k], ref[k]) << "free-running step " << k;
      }
    }
  }
  EXPECT_GT(checked_argmax, 50);  // the gate must leave real checks
  EXPECT_LE(prob_outliers, gc.prob_outlier_steps)
      << "steps whose probabilities miss the tolerance " << gc.prob_tol;
}

INSTANTIATE_TEST_SUITE_P(Golden, GoldenTest, ::testing::ValuesIn(kCases), [](const auto& info) {
  std::string n = info.param.json;
  for (char& c : n)
    if (c == '-' || c == '/') c = '_';
  return n;
});

// 8-bit K/V (kv_cache_dtype int8) on the golden files, against the F16 cache and llama.cpp:
// - free-running greedy ids equal the F16 run's up to its first step whose margin (top-1
//   minus top-2 log-probability, from the F16 run's own logits) is under 1.0 nats;
// - teacher forced over every prompt and the reference continuation, the argmax agrees with
//   the F16 cache's at >= 99% of the positions the F16 cache decides by >= 1.0 nats (and
//   the agreement over all positions is reported: these random-weight models nearly tie
//   often, where any rounding of K/V flips the argmax; a BF16 cache flips 0.2-5% too);
// - llama.cpp's argmax where its margin exceeds 1.0 nats, the rule the quantized files meet.
// The windowed, soft-capped and sink families run their variants on the 8-bit tiles.
// gemma2 is below that bar and held to what it measures: its random weights give attention
// scores past its soft-cap of 50 (golden/arch/README.md), so attention is nearly an argmax
// over positions and K's 8-bit rounding picks another position at 4% of the decided steps
// (a BF16 cache: 0.2%).
struct Int8KvCase {
  const char* name;
  double min_decided_agreement;  // percent
  int max_reference_misses;
};
void PrintTo(const Int8KvCase& c, std::ostream* os) { *os << c.name; }

class GoldenInt8KvTest : public ::testing::TestWithParam<Int8KvCase> {};

TEST_P(GoldenInt8KvTest, FollowsTheF16Cache) {
  const std::string dir = testing::SharedDir() + "/golden/";
  const std::string name = GetParam().name;
  REQUIRE_SHARED_FILE(dir + name + ".json");
  REQUIRE_SHARED_FILE(dir + name + ".gguf");
  std::ifstream in(dir + name + ".json");
  const nlohmann::json golden = nlohmann::json::parse(in);
  auto model_or = Model::Load(dir + name + ".gguf");
  ASSERT_TRUE(model_or.ok()) << model_or.status().ToString();
  const Model& model = **model_or;
  ThreadPool pool(2);
  const int32_t vocab = model.config().vocab_size;
  auto argmax = [&](const float* row) {
    return static_cast<int32_t>(std::max_element(row, row + vocab) - row);
  };
  auto margin = [&](const float* row) {  // logit gap = log-probability gap
    std::vector<float> top(row, row + vocab);
    std::partial_sort(top.begin(), top.begin() + 2, top.end(), std::greater<float>());
    return top[0] - top[1];
  };
  int64_t positions = 0, agree = 0, decided = 0, decided_agree = 0, free_checked = 0,
          ref_checked = 0, ref_misses = 0;
  for (const auto& p : golden["prompts"]) {
    SCOPED_TRACE(p["name"].get<std::string>());
    const std::vector<int32_t> prompt = p["prompt_ids"];
    const std::vector<int32_t> ref = p["generated_ids"];
    const std::vector<double> ref_margin = p["top1_top2_margin_logprob"];
    std::vector<int32_t> ids = prompt;
    ids.insert(ids.end(), ref.begin(), ref.end() - 1);
    auto f16 = AllLogits(model, ids, DType::kF16, pool);
    auto i8 = AllLogits(model, ids, DType::kI8, pool);
    ASSERT_TRUE(f16.ok() && i8.ok());
    for (size_t t = 0; t < ids.size(); ++t) {
      const float* a = f16->data() + t * vocab;
      const bool same = argmax(a) == argmax(i8->data() + t * vocab);
      ++positions, agree += same;
      if (margin(a) >= 1.0f) ++decided, decided_agree += same;
    }
    for (size_t k = 0; k < ref.size(); ++k) {
      if (ref_margin[k] <= 1.0) continue;
      ref_misses += argmax(i8->data() + (prompt.size() - 1 + k) * vocab) != ref[k];
      ++ref_checked;
    }
    GenerateParams gp;
    gp.max_new_tokens = static_cast<int32_t>(ref.size());
    gp.sampling.temperature = 0;
    gp.stop_at_eos = false;
    gp.kv_dtype = DType::kF16;
    auto want = Generate(model, prompt, gp, pool, nullptr);
    gp.kv_dtype = DType::kI8;
    auto got = Generate(model, prompt, gp, pool, nullptr);
    ASSERT_TRUE(want.ok() && got.ok());
    std::vector<int32_t> run = prompt;
    run.insert(run.end(), want->generated_ids.begin(), want->generated_ids.end());
    auto run_logits = AllLogits(model, run, DType::kF16, pool);
    ASSERT_TRUE(run_logits.ok());
    for (size_t k = 0; k < want->generated_ids.size(); ++k) {
      if (margin(run_logits->data() + (prompt.size() - 1 + k) * vocab) < 1.0f) break;
      ASSERT_EQ(got->generated_ids[k], want->generated_ids[k]) << "free-running step " << k;
      ++free_checked;
    }
  }
  std::printf(
      "%s: int8 K/V, teacher-forced argmax as the F16 cache's at %lld / %lld decided positions "
      "(%.2f%%), %lld / %lld of all (%.2f%%); %lld free-running steps; llama.cpp's argmax at "
      "%lld / %lld reference steps\n",
      name.c_str(), static_cast<long long>(decided_agree), static_cast<long long>(decided),
      100.0 * decided_agree / decided, static_cast<long long>(agree),
      static_cast<long long>(positions), 100.0 * agree / positions,
      static_cast<long long>(free_checked), static_cast<long long>(ref_checked - ref_misses),
      static_cast<long long>(ref_checked));
  EXPECT_GE(100.0 * decided_agree, GetParam().min_decided_agreement * decided);
  EXPECT_GT(decided, positions / 3);  // the gate leaves many positions checked
  EXPECT_GT(ref_checked, 50);
  EXPECT_LE(ref_misses, GetParam().max_reference_misses)
      << "steps where llama.cpp's choice by more than 1.0 nats is not the int8 run's";
}

INSTANTIATE_TEST_SUITE_P(
    Golden, GoldenInt8KvTest,
    ::testing::Values(Int8KvCase{"llama-gqa-f16", 99, 0}, Int8KvCase{"qwen2-f16", 99, 0},
                      Int8KvCase{"gpt2-f16", 99, 0}, Int8KvCase{"llama-k-q4_k_m", 99, 0},
                      Int8KvCase{"arch/gemma3-f16", 99, 0}, Int8KvCase{"arch/gemma2-f16", 95, 6},
                      Int8KvCase{"arch/gpt-oss-f16", 99, 0}, Int8KvCase{"arch/qwen3moe-f16", 99, 0},
                      Int8KvCase{"arch/phi3-longrope-f16", 99, 0}),
    [](const auto& info) {
      std::string n = info.param.name;
      for (char& c : n)
        if (c == '-' || c == '/') c = '_';
      return n;
    });

}  // namespace
}  // namespace inflight
