// Architecture hyper-parameters, read from GGUF metadata, config.json or a llama2.c header.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "kernels/ops.h"

namespace inflight {

// A model family; model/families.h maps each to the file that reads and composes it.
enum class Architecture {
  kLlama,  // also Mistral and Mixtral (llama with experts)
  kQwen2,
  kQwen3,
  kGpt2,
  kQwen2Moe,
  kQwen3Moe,
  kGemma2,
  kGemma3,
  kPhi3,
  kGptOss,
};
const char* ArchitectureName(Architecture a);

// How router logits become expert weights.
enum class ExpertGating {
  kSoftmax,          // softmax over all experts, top-k of the probabilities
  kSigmoid,          // sigmoid of each logit, top-k
  kSoftmaxSelected,  // top-k of the logits, softmax over the k chosen (gpt-oss)
};

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
  float rope_attn_factor = 1.0f;         // cos and sin scale (LongRoPE's attention factor)
  // YaRN (gpt-oss): factor > 0 blends interpolated and extrapolated frequencies per dimension
  // (ramp between the beta_fast and beta_slow rotations over the original context) and scales
  // cos and sin by 1 + 0.1 ln(factor).
  float rope_yarn_factor = 0.0f;
  int32_t rope_original_context = 0;
  float rope_yarn_beta_fast = 32.0f, rope_yarn_beta_slow = 1.0f;
  bool tied_embeddings = false;

  // Sliding-window attention: a window layer's token sees the last `sliding_window` positions
  // (itself included). layer_window[i] is true for window layers (empty: none).
  int32_t sliding_window = 0;
  std::vector<uint8_t> layer_window;
  // Window layers' own RoPE base, unscaled (Gemma 3's local layers); 0: as the other layers.
  float rope_window_base = 0.0f;
  float attention_scale = 0.0f;      // q.k multiplier; 0: 1 / sqrt(head_dim)
  float attn_logit_softcap = 0.0f;   // Gemma 2: s = cap * tanh(s / cap); 0: none
  float final_logit_softcap = 0.0f;  // Gemma 2: the same on the output logits
  float embedding_scale = 1.0f;      // Gemma: token embeddings * sqrt(hidden)
  // A gated FFN's activation (gelu_ffn: GPT-2's ungated GELU instead).
  kernels::FfnActivation ffn_activation = kernels::FfnActivation::kSilu;

  // Mixture of experts (num_experts 0: dense FFN in every layer).
  int32_t num_experts = 0;
  int32_t experts_per_token = 0;
  int32_t expert_ffn_size = 0;
  ExpertGating expert_gating = ExpertGating::kSoftmax;
  bool normalize_expert_weights = false;  // divide the k weights by their sum
  int32_t shared_expert_ffn_size = 0;     // Qwen2-MoE: an always-on expert, sigmoid-gated

  bool is_window_layer(int layer) const {
    return !layer_window.empty() && layer_window[static_cast<size_t>(layer)] != 0;
  }

  int32_t q_dim() const { return num_heads * head_dim; }
  int32_t kv_dim() const { return num_kv_heads * head_dim; }
  // Checks the numbers are positive and consistent; names the bad field.
  Status Validate() const;
};

// Llama 3's RoPE frequency factors (rope_type "llama3").
std::vector<float> Llama3RopeFactors(float base, int rope_dim, float factor, float low_freq_factor,
                                     float high_freq_factor, int original_context);

}  // namespace inflight
