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

}  // namespace
}  // namespace inflight
