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

// Architecture presets: "tiny" (a few MB), "small" (~25M params), "tinyllama-1.1b"; and the
// real mixture-of-experts shapes "qwen3-30b-a3b" (arch qwen3moe: 48 layers, 128 experts top 8,
// vocab 151,936) and "gpt-oss-20b" (arch gpt-oss: 24 layers, 32 experts top 4, sinks, biases,
// window 128 on even layers, YaRN x32, vocab 201,088, untied output). Benchmarks may cut
// num_layers of these to fit memory (layer_window follows num_layers when it is written).
StatusOr<ModelConfig> PresetConfig(Architecture arch, const std::string& preset);
StatusOr<Architecture> ArchitectureFromName(const std::string& name);
// Loads a tokenizer spec from tokenizer.model (SentencePiece) or tokenizer.json (HF).
StatusOr<TokenizerSpec> LoadTokenizerSpecFile(const std::string& path);

// Appends "[PAD<id>]" tokens (unused) up to vocab_size tokens, as released GGUFs pad their
// vocabulary to the embedding's rows (Qwen's 151,936); nothing when it is already that long.
void PadVocabulary(TokenizerSpec* spec, int32_t vocab_size);

// config.vocab_size 0: the tokenizer's; larger than the tokenizer: the tokenizer is padded
// (PadVocabulary). Matrices are quantized on all cores; the random draws are sequential, so
// a seed writes the same file on any machine.
Status WriteRandomGguf(const RandomModelParams& params, const TokenizerSpec& tokenizer,
                       const std::string& path);

}  // namespace inflight
