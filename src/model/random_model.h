// Writes GGUF models with random weights of a real architecture and a real tokenizer, for
// tests and benchmarks (no model hub is reachable here).
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "model/model_config.h"
#include "tensor/dtype.h"
#include "tokenizer/tokenizer.h"

namespace inflight {

struct RandomModelParams {
  ModelConfig config;         // vocab_size is taken from the tokenizer when 0
  DType dtype = DType::kF16;  // 2-D weights; norms and biases stay F32
  std::string mix;            // when set: a QuantMix name (model/quant_mix.h) instead of dtype
  uint64_t seed = 1;
  float embedding_std = 0.5f;  // projections use 2 / sqrt(fan_in) so outputs depend on context
  bool tied_embeddings = true;
  // Scales every block's output projections (attention output, FFN down). Near 0 the next
  // token mostly follows from the current one (a near-bigram model that context changes now
  // and then): a model whose text a speculator can predict, for speculative decoding
  // benchmarks, at the full cost of the real shapes.
  float block_output_scale = 1.0f;
};

// Architecture presets: "tiny" (a few MB), "small" (~25M params), "tinyllama-1.1b".
StatusOr<ModelConfig> PresetConfig(Architecture arch, const std::string& preset);
StatusOr<Architecture> ArchitectureFromName(const std::string& name);
// Loads a tokenizer spec from tokenizer.model (SentencePiece) or tokenizer.json (HF).
StatusOr<TokenizerSpec> LoadTokenizerSpecFile(const std::string& path);

Status WriteRandomGguf(const RandomModelParams& params, const TokenizerSpec& tokenizer,
                       const std::string& path);

}  // namespace inflight
