// Single-sequence generation on a private contiguous KV cache: the engine's simplest client,
// used by inflight-generate and by the numerics tests. (The batching executor runs many
// sequences over a shared paged cache.)
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "base/status.h"
#include "model/model.h"
#include "sampling/sampler.h"

namespace inflight {

class ThreadPool;

struct GenerateParams {
  int32_t max_new_tokens = 16;
  SamplingParams sampling;
  bool stop_at_eos = true;
  DType kv_dtype = DType::kF16;
  int32_t prefill_chunk_tokens = 512;  // prompt tokens per forward pass
};

struct GenerateResult {
  std::vector<int32_t> generated_ids;
  std::vector<SampledToken> tokens;  // with log-probs
  double prompt_seconds = 0;
  double decode_seconds = 0;  // from the first generated token to the last
  int32_t decode_steps = 0;
};

// Streams each sampled token to on_token (may be empty); returns INVALID_ARGUMENT for an
// empty or too long prompt.
StatusOr<GenerateResult> Generate(const Model& model, const std::vector<int32_t>& prompt_ids,
                                  const GenerateParams& params, ThreadPool& pool,
                                  const std::function<void(const SampledToken&)>& on_token);

// Teacher-forced logits: one forward pass over `ids`, logits of every position
// [ids.size(), vocab]. For numerics tests.
StatusOr<std::vector<float>> AllLogits(const Model& model, const std::vector<int32_t>& ids,
                                       DType kv_dtype, ThreadPool& pool);

}  // namespace inflight
