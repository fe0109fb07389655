#include "model/model_config.h"

#include <cmath>

namespace inflight {

const char* ArchitectureName(Architecture a) {
  switch (a) {
    case Architecture::kLlama:
      return "llama";
    case Architecture::kQwen2:
      return "qwen2";
    case Architecture::kQwen3:
      return "qwen3";
    case Architecture::kGpt2:
      return "gpt2";
    case Architecture::kQwen2Moe:
      return "qwen2moe";
    case Architecture::kQwen3Moe:
      return "qwen3moe";
    case Architecture::kGemma2:
      return "gemma2";
    case Architecture::kGemma3:
      return "gemma3";
    case Architecture::kPhi3:
      return "phi3";
    case Architecture::kGptOss:
      return "gpt-oss";
  }
  return "?";
}

Status ModelConfig::Validate() const {
  auto positive = [](const char* name, int64_t v) -> Status {
    if (v <= 0)
      return InvalidArgumentError(std::string(name) + " must be positive, got " +
                                  std::to_string(v));
    return OkStatus();
  };
  RETURN_IF_ERROR(positive("vocab_size", vocab_size));
  RETURN_IF_ERROR(positive("hidden_size", hidden_size));
  RETURN_IF_ERROR(positive("num_layers", num_layers));
  RETURN_IF_ERROR(positive("num_heads", num_heads));
  RETURN_IF_ERROR(positive("num_kv_heads", num_kv_heads));
  RETURN_IF_ERROR(positive("head_dim", head_dim));
  RETURN_IF_ERROR(positive("ffn_size", ffn_size));
  RETURN_IF_ERROR(positive("context_length", context_length));
  if (num_heads % num_kv_heads != 0) {
    return InvalidArgumentError("num_heads " + std::to_string(num_heads) +
                                " is not a multiple of num_kv_heads " +
                                std::to_string(num_kv_heads));
  }
  if (!learned_positions) {
    if (rope_dim <= 0 || rope_dim > head_dim || rope_dim % 2 != 0) {
      return InvalidArgumentError("rope dimension " + std::to_string(rope_dim) +
                                  " is invalid for head_dim " + std::to_string(head_dim));
    }
    if (!rope_freq_factors.empty() && static_cast<int>(rope_freq_factors.size()) != rope_dim / 2) {
      return InvalidArgumentError("rope frequency factors: expected " +
                                  std::to_string(rope_dim / 2));
    }
    // A zero, negative or non-finite base or factor turns every angle into NaN or inf.
    auto finite_positive = [](float v) { return std::isfinite(v) && v > 0; };
    if (!finite_positive(rope_base)) {
      return InvalidArgumentError("rope frequency base " + std::to_string(rope_base) +
                                  " must be positive and finite");
    }
    if (!finite_positive(rope_linear_scale))
      return InvalidArgumentError("rope linear scale must be positive and finite");
    for (float f : rope_freq_factors) {
      if (!finite_positive(f))
        return InvalidArgumentError("a rope frequency factor is not positive and finite");
    }
    if (rope_yarn_factor > 0 &&
        (!std::isfinite(rope_yarn_beta_fast) || !std::isfinite(rope_yarn_beta_slow))) {
      return InvalidArgumentError("the YaRN betas must be finite");
    }
  }
  if (num_experts < 0 || num_experts > 1024) {
    return InvalidArgumentError("expert count " + std::to_string(num_experts) +
                                " is out of range (0..1024)");
  }
  if (num_experts > 0) {
    if (experts_per_token < 1 || experts_per_token > num_experts) {
      return InvalidArgumentError("experts used per token " + std::to_string(experts_per_token) +
                                  " must be between 1 and the expert count " +
                                  std::to_string(num_experts));
    }
    RETURN_IF_ERROR(positive("expert_feed_forward_length", expert_ffn_size));
  }
  if (shared_expert_ffn_size < 0) return InvalidArgumentError("shared expert size is negative");
  if (sliding_window < 0) return InvalidArgumentError("sliding window is negative");
  if (sliding_window > context_length) {
    return InvalidArgumentError("sliding window " + std::to_string(sliding_window) +
                                " is larger than the context length " +
                                std::to_string(context_length));
  }
  if (!layer_window.empty() && static_cast<int32_t>(layer_window.size()) != num_layers) {
    return InvalidArgumentError("the sliding-window layer pattern has " +
                                std::to_string(layer_window.size()) + " entries for " +
                                std::to_string(num_layers) + " layers");
  }
  for (float v : {rope_attn_factor, rope_yarn_factor, rope_window_base, attention_scale,
                  attn_logit_softcap, final_logit_softcap, embedding_scale}) {
    if (!std::isfinite(v) || v < 0)
      return InvalidArgumentError("a scale or soft-cap is negative or not finite");
  }
  if (rope_yarn_factor > 0 && rope_original_context <= 0)
    return InvalidArgumentError("YaRN needs the original context length");
  if (!(norm_eps > 0) || !std::isfinite(norm_eps))
    return InvalidArgumentError("norm epsilon must be positive");
  if (num_layers > 1024 || hidden_size > (1 << 20) || vocab_size > (1 << 24) ||
      context_length > (1 << 24)) {
    return InvalidArgumentError("model dimensions are implausibly large");
  }
  return OkStatus();
}

std::vector<float> Llama3RopeFactors(float base, int rope_dim, float factor, float low_freq_factor,
                                     float high_freq_factor, int original_context) {
  std::vector<float> out(rope_dim / 2);
  const double low_wavelen = original_context / low_freq_factor;
  const double high_wavelen = original_context / high_freq_factor;
  for (int i = 0; i < rope_dim / 2; ++i) {
    const double freq = std::pow(base, -2.0 * i / rope_dim);
    const double wavelen = 2 * M_PI / freq;
    if (wavelen < high_wavelen) {
      out[i] = 1.0f;
    } else if (wavelen > low_wavelen) {
      out[i] = factor;
    } else {
      const double smooth =
          (original_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
      // freq' = (1 - smooth) * freq / factor + smooth * freq  ->  divisor = freq / freq'
      out[i] = static_cast<float>(1.0 / ((1 - smooth) / factor + smooth));
    }
  }
  return out;
}

}  // namespace inflight
