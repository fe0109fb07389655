// Per-request token sampling: penalties, temperature, top-k, top-p, min-p, a seeded RNG,
// and log-probabilities. Engine-thread only (one Sampler per sequence).
#pragma once

#include <cstdint>
#include <random>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/status.h"

namespace inflight {

struct SamplingParams {
  float temperature = 1.0f;         // 0 = greedy
  int32_t top_k = 0;                // 0 = off
  float top_p = 1.0f;               // 1 = off
  float min_p = 0.0f;               // 0 = off
  float repetition_penalty = 1.0f;  // over prompt and output; 1 = off
  float presence_penalty = 0.0f;    // over output
  float frequency_penalty = 0.0f;   // over output
  uint64_t seed = 0;
  int32_t num_top_logprobs = 0;  // top-N log-probs returned per token
  // Added to the logits before penalties (OpenAI logit_bias, TensorRT-LLM embedding_bias);
  // ids must be below the vocabulary size (checked by whoever knows it).
  std::vector<std::pair<int32_t, float>> logit_bias;
  // False: SampledToken::logprob is left 0 (saves a pass over the vocabulary per token).
  bool compute_logprobs = true;

  bool greedy() const { return temperature <= 0.0f || top_k == 1; }
  // INVALID_ARGUMENT naming the field for out-of-range values.
  Status Validate() const;
};

struct SampledToken {
  int32_t id = -1;
  float logprob = 0.0f;  // log-softmax of the penalised logits, before temperature
  std::vector<std::pair<int32_t, float>> top_logprobs;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  // Tokens the repetition penalty sees besides the output.
  void AddPromptTokens(const int32_t* ids, int64_t n);
  // Picks a token from logits[vocab] (modified in place) and records it as output.
  SampledToken Sample(float* logits, int32_t vocab) { return SampleWithDraft(logits, vocab, -1); }
  // Speculative decoding: the same pick, verifying a draft token that was proposed with
  // certainty (prompt lookup, a greedy draft model, a client's draft). Greedy: the argmax (the
  // draft is accepted when it equals it). Sampling: rejection sampling, the draft kept with
  // probability p(draft) and otherwise a token drawn from p without the draft, so the token has
  // exactly the distribution Sample gives. The draft is accepted when the result equals it.
  // draft_probs ([vocab], the distribution the draft was drawn from; null: with certainty):
  // speculative sampling proper, the draft kept with probability min(1, p / q) and otherwise
  // a token drawn from max(0, p - q) renormalised, which again gives exactly p.
  SampledToken SampleWithDraft(float* logits, int32_t vocab, int32_t draft,
                               const float* draft_probs = nullptr);
  // Logit bias and penalties, as Sample applies them before choosing (beam search scores the
  // processed logits itself).
  void ApplyPenaltiesTo(float* logits, int32_t vocab) const { ApplyPenalties(logits, vocab); }
  // Replaces the output the penalties see (a beam that took over another beam's tokens).
  void SetOutputTokens(const int32_t* ids, int64_t n);
  // Whether Sample writes to the logits (penalties); when not, the caller need not copy them.
  bool modifies_logits() const {
    return params_.repetition_penalty != 1.0f || params_.presence_penalty != 0.0f ||
           params_.frequency_penalty != 0.0f || !params_.logit_bias.empty();
  }

 private:
  void ApplyPenalties(float* logits, int32_t vocab) const;
  int32_t Draw(const float* logits, int32_t vocab, int32_t draft, const float* draft_probs);

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::unordered_map<int32_t, int32_t> prompt_counts_;
  std::unordered_map<int32_t, int32_t> output_counts_;
  std::vector<std::pair<float, int32_t>> candidates_;  // reused
};

// The k most likely tokens of log_softmax(logits / temperature), best first (lower id first on
// ties); banned (-inf) tokens are never among them.
void TopLogProbs(const float* logits, int32_t vocab, float temperature, int32_t k,
                 std::vector<std::pair<int32_t, float>>* out);

// Index of the largest value (lowest index on ties).
int32_t ArgMax(const float* x, int32_t n);

}  // namespace inflight
