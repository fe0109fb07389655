// Architecture hyper-parameters, read from GGUF metadata, config.json or a llama2.c header.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "kernels/ops.h"

namespace inflight {

enum class Architecture { kLlama, kQwen2, kQwen3, kGpt2 };
const char* ArchitectureName(Architecture a);

struct ModelConfig {
  Architecture arch = Architecture::kLlama;
  int32_t vocab_size = 0;
  int32_t hidden_size = 0;  // n_embd
  int32_t num_layers = 0;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t ffn_size = 0;
  int32_t context_length = 2048;
  float norm_eps = 1e-5f;
  bool layer_norm = false;  // GPT-2: LayerNorm with bias; else RMSNorm
  bool gelu_ffn = false;    // GPT-2: down(gelu(up x)); else SwiGLU
  bool learned_positions = false;
  float rope_base = 10000.0f;
  int32_t rope_dim = 0;  // rotated dims per head (== head_dim usually)
  kernels::RopeStyle rope_style = kernels::RopeStyle::kAdjacentPairs;
  float rope_linear_scale = 1.0f;
  std::vector<float> rope_freq_factors;  // Llama 3 scaling: rope_dim / 2 divisors, or empty
  bool tied_embeddings = false;

  int32_t q_dim() const { return num_heads * head_dim; }
  int32_t kv_dim() const { return num_kv_heads * head_dim; }
  // Checks the numbers are positive and consistent; names the bad field.
  Status Validate() const;
};

// Llama 3's RoPE frequency factors (rope_type "llama3").
std::vector<float> Llama3RopeFactors(float base, int rope_dim, float factor, float low_freq_factor,
                                     float high_freq_factor, int original_context);

}  // namespace inflight
