// Tiny random models of the families, as named F32 tensors and GGUF metadata that a test can
// edit (drop a tensor, change a key) before writing the file; the tensors also feed the naive
// references and the Hugging Face folders written from the same weights.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "base/status.h"
#include "format/gguf.h"

namespace inflight::testing {

struct TinyTensor {
  std::vector<int64_t> dims;  // ggml order: dims[0] contiguous
  std::vector<float> values;
};

// A family's shape: which optional parts a tiny model has.
struct TinySpec {
  std::string arch = "qwen2moe";  // general.architecture
  int64_t hidden = 32, layers = 2, heads = 4, kv_heads = 2, head_dim = 8, ffn = 48, vocab = 96;
  int64_t experts = 8, experts_used = 2, expert_ffn = 16;
  int64_t shared_ffn = 0;                   // Qwen2-MoE's shared expert (0: none)
  bool shared_gate = true;                  // with ffn_gate_inp_shexp
  bool qkv_bias = false;                    // q/k/v biases (Qwen2)
  bool out_bias = false;                    // attn_output bias (gpt-oss)
  bool qk_norm = false;                     // Qwen3
  bool sinks = false;                       // gpt-oss
  bool expert_biases = false;               // gpt-oss: router and expert biases
  bool ffn_norm_as_post_attention = false;  // gpt-oss names its pre-FFN norm so
  int64_t sliding_window = 0;
  int64_t context = 256;
  float rope_base = 10000.0f;
  uint32_t seed = 1;
};

class TinyGguf {
 public:
  std::string arch;
  std::map<std::string, TinyTensor> tensors;
  // key -> how to write it (a later set replaces an earlier one; erase to leave a key out).
  std::map<std::string, std::function<void(GgufWriter&)>> meta;

  void U32(const std::string& key, uint32_t v) {
    const std::string k = arch + "." + key;
    meta[k] = [k, v](GgufWriter& w) { w.SetU32(k, v); };
  }
  void F32(const std::string& key, float v) {
    const std::string k = arch + "." + key;
    meta[k] = [k, v](GgufWriter& w) { w.SetF32(k, v); };
  }
  void I32Array(const std::string& key, std::vector<int32_t> v) {
    const std::string k = arch + "." + key;
    meta[k] = [k, v](GgufWriter& w) { w.SetI32Array(k, v); };
  }
  void String(const std::string& full_key, const std::string& v) {
    meta[full_key] = [full_key, v](GgufWriter& w) { w.SetString(full_key, v); };
  }
  void Erase(const std::string& key) { meta.erase(arch + "." + key); }

  // A tensor of normal(mean, stddev) values.
  void Random(const std::string& name, std::vector<int64_t> dims, float stddev, float mean = 0) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    TinyTensor t{std::move(dims), std::vector<float>(n)};
    std::normal_distribution<float> normal(mean, stddev);
    for (float& v : t.values) v = normal(rng_);
    tensors[name] = std::move(t);
  }
  const std::vector<float>& W(const std::string& name) const { return tensors.at(name).values; }
  bool Has(const std::string& name) const { return tensors.count(name) != 0; }

  Status Write(const std::string& path) const {
    GgufWriter w;
    for (const auto& [key, set] : meta) set(w);
    for (const auto& [name, t] : tensors) {
      std::vector<uint8_t> bytes(t.values.size() * sizeof(float));
      std::memcpy(bytes.data(), t.values.data(), bytes.size());
      RETURN_IF_ERROR(w.AddTensor(name, DType::kF32, t.dims, std::move(bytes)));
    }
    return w.WriteFile(path);
  }

  explicit TinyGguf(uint32_t seed) : rng_(seed) {}

 private:
  std::mt19937 rng_;
};

// A whole random model of `s` (the metadata llama.cpp's converters write for it).
inline TinyGguf MakeTinyModel(const TinySpec& s) {
  TinyGguf m(s.seed);
  m.arch = s.arch;
  m.String("general.architecture", s.arch);
  m.U32("embedding_length", static_cast<uint32_t>(s.hidden));
  m.U32("block_count", static_cast<uint32_t>(s.layers));
  m.U32("feed_forward_length", static_cast<uint32_t>(s.ffn));
  m.U32("attention.head_count", static_cast<uint32_t>(s.heads));
  m.U32("attention.head_count_kv", static_cast<uint32_t>(s.kv_heads));
  m.U32("attention.key_length", static_cast<uint32_t>(s.head_dim));
  m.U32("attention.value_length", static_cast<uint32_t>(s.head_dim));
  m.U32("context_length", static_cast<uint32_t>(s.context));
  m.F32("rope.freq_base", s.rope_base);
  m.F32("attention.layer_norm_rms_epsilon", 1e-5f);
  if (s.experts > 0) {
    m.U32("expert_count", static_cast<uint32_t>(s.experts));
    m.U32("expert_used_count", static_cast<uint32_t>(s.experts_used));
    m.U32("expert_feed_forward_length", static_cast<uint32_t>(s.expert_ffn));
  }
  if (s.shared_ffn > 0)
    m.U32("expert_shared_feed_forward_length", static_cast<uint32_t>(s.shared_ffn));
  if (s.sliding_window > 0)
    m.U32("attention.sliding_window", static_cast<uint32_t>(s.sliding_window));

  const int64_t H = s.hidden, Q = s.heads * s.head_dim, KV = s.kv_heads * s.head_dim;
  const int64_t E = s.experts, FE = s.expert_ffn, F = s.ffn, S = s.shared_ffn;
  // Projections of 1 / sqrt(fan_in): activations stay O(1) through the layers.
  auto proj = [](int64_t fan_in) { return 1.0f / std::sqrt(static_cast<float>(fan_in)); };
  m.Random("token_embd.weight", {H, s.vocab}, 1.0f);
  m.Random("output_norm.weight", {H}, 0.1f, 1.0f);
  m.Random("output.weight", {H, s.vocab}, 2.0f * proj(H));
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    m.Random(p + "attn_norm.weight", {H}, 0.1f, 1.0f);
    m.Random(p + (s.ffn_norm_as_post_attention ? "post_attention_norm.weight" : "ffn_norm.weight"),
             {H}, 0.1f, 1.0f);
    m.Random(p + "attn_q.weight", {H, Q}, 2.0f * proj(H));
    m.Random(p + "attn_k.weight", {H, KV}, 2.0f * proj(H));
    m.Random(p + "attn_v.weight", {H, KV}, proj(H));
    m.Random(p + "attn_output.weight", {Q, H}, proj(Q));
    if (s.qkv_bias) {
      m.Random(p + "attn_q.bias", {Q}, 0.2f);
      m.Random(p + "attn_k.bias", {KV}, 0.2f);
      m.Random(p + "attn_v.bias", {KV}, 0.2f);
    }
    if (s.out_bias) m.Random(p + "attn_output.bias", {H}, 0.1f);
    if (s.qk_norm) {
      m.Random(p + "attn_q_norm.weight", {s.head_dim}, 0.1f, 1.0f);
      m.Random(p + "attn_k_norm.weight", {s.head_dim}, 0.1f, 1.0f);
    }
    if (s.sinks) m.Random(p + "attn_sinks.weight", {s.heads}, 1.0f);
    if (E == 0) {
      m.Random(p + "ffn_gate.weight", {H, F}, proj(H));
      m.Random(p + "ffn_up.weight", {H, F}, proj(H));
      m.Random(p + "ffn_down.weight", {F, H}, proj(F));
      continue;
    }
    // Router logits of a few units: routing depends on the token, with few near-ties.
    m.Random(p + "ffn_gate_inp.weight", {H, E}, 3.0f * proj(H));
    m.Random(p + "ffn_gate_exps.weight", {H, FE, E}, 2.0f * proj(H));
    m.Random(p + "ffn_up_exps.weight", {H, FE, E}, 2.0f * proj(H));
    m.Random(p + "ffn_down_exps.weight", {FE, H, E}, proj(FE));
    if (s.expert_biases) {
      m.Random(p + "ffn_gate_inp.bias", {E}, 0.5f);
      m.Random(p + "ffn_gate_exps.bias", {FE, E}, 0.2f);
      m.Random(p + "ffn_up_exps.bias", {FE, E}, 0.2f);
      m.Random(p + "ffn_down_exps.bias", {H, E}, 0.1f);
    }
    if (S > 0) {
      if (s.shared_gate) m.Random(p + "ffn_gate_inp_shexp.weight", {H}, proj(H));
      m.Random(p + "ffn_gate_shexp.weight", {H, S}, 2.0f * proj(H));
      m.Random(p + "ffn_up_shexp.weight", {H, S}, 2.0f * proj(H));
      m.Random(p + "ffn_down_shexp.weight", {S, H}, proj(S));
    }
  }
  return m;
}

}  // namespace inflight::testing
