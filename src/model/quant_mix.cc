#include "model/quant_mix.h"

#include <cstdlib>

namespace inflight {
namespace {

// llama-quantize's use_more_bits: the first and last eighth of the layers and every third one.
bool MoreBits(int layer, int n) {
  return layer < n / 8 || layer >= 7 * n / 8 || (layer - n / 8) % 3 == 2;
}

int LayerOf(const std::string& tensor) {
  if (tensor.rfind("blk.", 0) != 0) return -1;
  return std::atoi(tensor.c_str() + 4);
}

bool EndsWith(const std::string& s, const char* suffix) {
  const std::string x(suffix);
  return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
}

// The 32-block type llama-quantize uses when a row is not a multiple of 256.
DType Fallback(DType t) {
  switch (t) {
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kIQ4_XS:
      return DType::kIQ4_NL;
    case DType::kQ4_K:
      return DType::kQ5_0;
    case DType::kQ5_K:
      return DType::kQ5_1;
    case DType::kQ6_K:
      return DType::kQ8_0;
    default:
      return DType::kF16;
  }
}

}  // namespace

std::optional<uint32_t> QuantMix::LlamaFileType() const {
  // llama.h's LLAMA_FTYPE_*: plain K-quant types map to their "_S" (mostly that type) value.
  static const std::pair<const char*, uint32_t> kTypes[] = {
      {"f32", 0},     {"f16", 1},       {"q4_0", 2},    {"q4_0_mix", 2}, {"q4_1", 3},
      {"q8_0", 7},    {"q5_0", 8},      {"q5_1", 9},    {"q2_k", 10},    {"q2_k_mix", 10},
      {"q3_k", 11},   {"q3_k_m", 12},   {"q4_k", 14},   {"q4_k_m", 15},  {"q5_k", 16},
      {"q5_k_m", 17}, {"q6_k", 18},     {"iq4_nl", 25}, {"iq4_xs", 30},  {"iq4_xs_mix", 30},
      {"bf16", 32},   {"mxfp4_moe", 38}};
  for (const auto& [name, value] : kTypes)
    if (name_ == name) return value;
  return std::nullopt;
}

QuantMix QuantMix::Uniform(DType type) {
  QuantMix m;
  m.name_ = DTypeName(type);
  m.base_ = m.output_ = type;
  return m;
}

const char* QuantMix::Names() {
  return "a weight type (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, "
         "q6_k, iq4_nl, "
         "iq4_xs, mxfp4) or a llama-quantize mix (q4_k_m, q5_k_m, q3_k_m, q2_k_mix, q4_0_mix, "
         "iq4_xs_mix, mxfp4_moe)";
}

StatusOr<QuantMix> QuantMix::FromName(const std::string& name) {
  struct Mix {
    const char* name;
    DType base;
  };
  static const Mix kMixes[] = {{"q4_k_m", DType::kQ4_K},   {"q5_k_m", DType::kQ5_K},
                               {"q3_k_m", DType::kQ3_K},   {"q2_k_mix", DType::kQ2_K},
                               {"q4_0_mix", DType::kQ4_0}, {"iq4_xs_mix", DType::kIQ4_XS}};
  if (name == "mxfp4_moe") {
    // llama-quantize's MXFP4_MOE: 3-D expert tensors MXFP4, every other matrix Q8_0 (the
    // output and token embedding included); routers, norms and biases stay F32.
    QuantMix m;
    m.name_ = name;
    m.base_ = m.output_ = DType::kQ8_0;
    m.experts_ = DType::kMXFP4;
    m.mix_ = true;
    return m;
  }
  for (const Mix& mix : kMixes) {
    if (name == mix.name) {
      QuantMix m;
      m.name_ = name;
      m.base_ = mix.base;
      m.output_ = DType::kQ6_K;
      m.mix_ = true;
      return m;
    }
  }
  if (auto t = DTypeFromName(name)) return Uniform(*t);
  return InvalidArgumentError("unknown weight type '" + name + "': expected " + Names());
}

DType QuantMix::TypeFor(const std::string& tensor, int64_t cols, int num_layers,
                        bool tied_output) const {
  DType t = base_;
  if (mix_) {
    const int layer = LayerOf(tensor);
    // llama-quantize's categories go by substring: "ffn_down" is also ffn_down_exps (a layer's
    // experts, placed by the layer in their name) and ffn_down_shexp.
    const bool v = EndsWith(tensor, "attn_v.weight");
    const bool down = tensor.find("ffn_down") != std::string::npos;
    const bool out = EndsWith(tensor, "attn_output.weight");
    if (experts_ != DType::kF32) {
      if (tensor.find("_exps.") != std::string::npos) t = experts_;
    } else if (tensor == "output.weight" || (tied_output && tensor == "token_embd.weight")) {
      t = output_;
    } else if (base_ == DType::kQ4_K || base_ == DType::kQ5_K) {
      if ((v || down) && MoreBits(layer, num_layers)) t = DType::kQ6_K;
    } else if (base_ == DType::kQ3_K) {
      if (v) t = layer < 2 ? DType::kQ5_K : DType::kQ4_K;
      if (down) t = layer < num_layers / 16 ? DType::kQ5_K : DType::kQ4_K;
      if (out) t = DType::kQ4_K;
    } else if (base_ == DType::kQ2_K) {
      if (v) t = DType::kQ4_K;
      if (down || out) t = DType::kQ3_K;
    } else if (base_ == DType::kIQ4_XS) {
      if (v) t = DType::kQ5_K;
    }
  }
  while (cols % DTypeBlockSize(t) != 0) t = Fallback(t);
  return t;
}

}  // namespace inflight
