// Mixture-of-experts families against a naive reference written here (double precision, one
// position at a time, straight from the tensors a tiny F32 model is written from): routing
// (softmax then top-k, renormalized or not; gpt-oss's top-k of the biased logits then a softmax
// over the k), the experts (3-D tensors sliced per expert, biases, SiLU or the clamped
// SwiGLU-OAI), Qwen2-MoE's sigmoid-gated shared expert, attention sinks and sliding windows.
// Then Hugging Face folders (Qwen3-MoE, Qwen2-MoE, Mixtral: one 2-D tensor per expert) against
// the same reference and against the GGUF written from the same weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "base/thread_pool.h"
#include "engine/generate.h"
#include "model/model.h"
#include "safetensors_writer.h"
#include "tiny_gguf.h"

namespace inflight {
namespace {

using testing::MakeTinyModel;
using testing::TinyGguf;
using testing::TinySpec;

enum class Gating { kSoftmax, kSoftmaxSelected };

// What the reference computes beyond the tensors present.
struct RefSpec {
  TinySpec s;
  bool adjacent_rope = false;  // llama GGUF: q/k rows permuted for pairs (2i, 2i+1)
  Gating gating = Gating::kSoftmax;
  bool normalize = false;  // divide the k weights by their sum
  bool swiglu_oai = false;
  std::vector<bool> window_layer;  // empty: none
};

using Vec = std::vector<double>;

// y = W[offset .. offset + rows * cols) x, W row-major [rows, cols].
Vec MatVec(const std::vector<float>& w, int64_t offset, int64_t rows, const Vec& x) {
  const int64_t cols = static_cast<int64_t>(x.size());
  Vec y(rows, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0;
    for (int64_t c = 0; c < cols; ++c) sum += static_cast<double>(w[offset + r * cols + c]) * x[c];
    y[r] = sum;
  }
  return y;
}

void Add(Vec& a, const std::vector<float>& b, int64_t offset = 0) {
  for (size_t i = 0; i < a.size(); ++i) a[i] += b[offset + i];
}

Vec RmsNorm(const Vec& x, const std::vector<float>& w) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + 1e-5);
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * w[i];
  return y;
}

void Rope(double* head, int64_t d, int64_t pos, double base, bool adjacent) {
  for (int64_t i = 0; i < d / 2; ++i) {
    const double theta = static_cast<double>(pos) * std::pow(base, -2.0 * i / d);
    const double c = std::cos(theta), s = std::sin(theta);
    const int64_t a = adjacent ? 2 * i : i, b = adjacent ? 2 * i + 1 : i + d / 2;
    const double x0 = head[a], x1 = head[b];
    head[a] = x0 * c - x1 * s;
    head[b] = x0 * s + x1 * c;
  }
}

double Silu(double g) { return g / (1 + std::exp(-g)); }

// gate, up -> activation (both F32 formulas of the engine, in double).
double Activation(const RefSpec& r, double g, double u) {
  if (!r.swiglu_oai) return Silu(g) * u;
  const double gc = std::min(g, 7.0), uc = std::clamp(u, -7.0, 7.0);
  return gc / (1 + std::exp(-1.702 * gc)) * (uc + 1);
}

// The mixture of experts of one token's normed input h.
Vec Experts(const TinyGguf& m, const RefSpec& r, const std::string& p, const Vec& h) {
  const TinySpec& s = r.s;
  const int64_t H = s.hidden, E = s.experts, K = s.experts_used, F = s.expert_ffn;
  Vec logits = MatVec(m.W(p + "ffn_gate_inp.weight"), 0, E, h);
  if (m.Has(p + "ffn_gate_inp.bias")) Add(logits, m.W(p + "ffn_gate_inp.bias"));
  Vec score = logits;
  if (r.gating == Gating::kSoftmax) {
    const double mx = *std::max_element(score.begin(), score.end());
    double sum = 0;
    for (double& v : score) sum += (v = std::exp(v - mx));
    for (double& v : score) v /= sum;
  }
  std::vector<int64_t> order(E);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return score[a] > score[b]; });
  order.resize(K);
  Vec weight(K);
  for (int64_t k = 0; k < K; ++k) weight[k] = score[order[k]];
  if (r.gating == Gating::kSoftmaxSelected) {
    const double mx = *std::max_element(weight.begin(), weight.end());
    double sum = 0;
    for (double& v : weight) sum += (v = std::exp(v - mx));
    for (double& v : weight) v /= sum;
  }
  if (r.normalize) {
    const double sum = std::accumulate(weight.begin(), weight.end(), 0.0);
    for (double& v : weight) v /= sum;
  }
  Vec out(H, 0.0);
  const bool biases = m.Has(p + "ffn_gate_exps.bias");
  for (int64_t k = 0; k < K; ++k) {
    const int64_t e = order[k];
    Vec g = MatVec(m.W(p + "ffn_gate_exps.weight"), e * F * H, F, h);
    Vec u = MatVec(m.W(p + "ffn_up_exps.weight"), e * F * H, F, h);
    if (biases) {
      Add(g, m.W(p + "ffn_gate_exps.bias"), e * F);
      Add(u, m.W(p + "ffn_up_exps.bias"), e * F);
    }
    for (int64_t i = 0; i < F; ++i) g[i] = Activation(r, g[i], u[i]);
    Vec d = MatVec(m.W(p + "ffn_down_exps.weight"), e * H * F, H, g);
    if (biases) Add(d, m.W(p + "ffn_down_exps.bias"), e * H);
    for (int64_t j = 0; j < H; ++j) out[j] += weight[k] * d[j];
  }
  if (m.Has(p + "ffn_up_shexp.weight")) {
    const int64_t S = s.shared_ffn;
    Vec g = MatVec(m.W(p + "ffn_gate_shexp.weight"), 0, S, h);
    const Vec u = MatVec(m.W(p + "ffn_up_shexp.weight"), 0, S, h);
    for (int64_t i = 0; i < S; ++i) g[i] = Silu(g[i]) * u[i];
    const Vec d = MatVec(m.W(p + "ffn_down_shexp.weight"), 0, H, g);
    double gate = 1.0;
    if (m.Has(p + "ffn_gate_inp_shexp.weight")) {
      const Vec dot = MatVec(m.W(p + "ffn_gate_inp_shexp.weight"), 0, 1, h);
      gate = 1.0 / (1.0 + std::exp(-dot[0]));
    }
    for (int64_t j = 0; j < H; ++j) out[j] += gate * d[j];
  }
  return out;
}

// Logits [ids.size(), vocab], every position recomputed from its own K/V lists.
std::vector<double> ReferenceLogits(const TinyGguf& m, const RefSpec& r,
                                    const std::vector<int32_t>& ids) {
  const TinySpec& s = r.s;
  const int64_t H = s.hidden, D = s.head_dim, Q = s.heads * D, KV = s.kv_heads * D;
  std::vector<std::vector<Vec>> keys(s.layers), values(s.layers);
  std::vector<double> logits;
  for (size_t t = 0; t < ids.size(); ++t) {
    const std::vector<float>& emb = m.W("token_embd.weight");
    Vec x(emb.begin() + ids[t] * H, emb.begin() + (ids[t] + 1) * H);
    for (int64_t l = 0; l < s.layers; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      const Vec h = RmsNorm(x, m.W(p + "attn_norm.weight"));
      Vec q = MatVec(m.W(p + "attn_q.weight"), 0, Q, h);
      Vec k = MatVec(m.W(p + "attn_k.weight"), 0, KV, h);
      Vec v = MatVec(m.W(p + "attn_v.weight"), 0, KV, h);
      if (m.Has(p + "attn_q.bias")) {
        Add(q, m.W(p + "attn_q.bias"));
        Add(k, m.W(p + "attn_k.bias"));
        Add(v, m.W(p + "attn_v.bias"));
      }
      for (auto [a, n, norm] : {std::tuple{&q, s.heads, "attn_q_norm.weight"},
                                std::tuple{&k, s.kv_heads, "attn_k_norm.weight"}}) {
        for (int64_t hh = 0; hh < n; ++hh) {
          double* head = a->data() + hh * D;
          if (m.Has(p + norm)) {
            const Vec normed = RmsNorm(Vec(head, head + D), m.W(p + norm));
            std::copy(normed.begin(), normed.end(), head);
          }
          Rope(head, D, static_cast<int64_t>(t), s.rope_base, r.adjacent_rope);
        }
      }
      keys[l].push_back(k);
      values[l].push_back(v);
      const bool window = !r.window_layer.empty() && r.window_layer[l];
      Vec attn(Q, 0.0);
      for (int64_t hh = 0; hh < s.heads; ++hh) {
        const int64_t kvh = hh / (s.heads / s.kv_heads);
        std::vector<double> score(t + 1, -INFINITY);
        double mx = s.sinks ? m.W(p + "attn_sinks.weight")[hh] : -INFINITY;
        for (size_t j = 0; j <= t; ++j) {
          if (window && static_cast<int64_t>(t - j) >= s.sliding_window) continue;
          double dot = 0;
          for (int64_t i = 0; i < D; ++i) dot += q[hh * D + i] * keys[l][j][kvh * D + i];
          score[j] = dot / std::sqrt(static_cast<double>(D));
          mx = std::max(mx, score[j]);
        }
        double sum = s.sinks ? std::exp(m.W(p + "attn_sinks.weight")[hh] - mx) : 0.0;
        for (double& sc : score) sum += (sc = std::exp(sc - mx));
        for (size_t j = 0; j <= t; ++j)
          for (int64_t i = 0; i < D; ++i)
            attn[hh * D + i] += score[j] / sum * values[l][j][kvh * D + i];
      }
      Vec o = MatVec(m.W(p + "attn_output.weight"), 0, H, attn);
      if (m.Has(p + "attn_output.bias")) Add(o, m.W(p + "attn_output.bias"));
      for (int64_t i = 0; i < H; ++i) x[i] += o[i];
      const Vec h2 = RmsNorm(x, m.W(p + (s.ffn_norm_as_post_attention ? "post_attention_norm.weight"
                                                                      : "ffn_norm.weight")));
      const Vec f = Experts(m, r, p, h2);
      for (int64_t i = 0; i < H; ++i) x[i] += f[i];
    }
    const Vec row = MatVec(m.W("output.weight"), 0, s.vocab, RmsNorm(x, m.W("output_norm.weight")));
    logits.insert(logits.end(), row.begin(), row.end());
  }
  return logits;
}

std::vector<int32_t> Prompt(int64_t vocab) {
  std::vector<int32_t> ids;
  for (int i = 0; i < 20; ++i) ids.push_back(static_cast<int32_t>((i * 37 + 11) % vocab));
  return ids;
}

// max |got - want| / max |want| (the logit scale).
double RelativeError(const std::vector<float>& got, const std::vector<double>& want) {
  EXPECT_EQ(got.size(), want.size());
  double max_abs = 0, max_diff = 0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    max_abs = std::max(max_abs, std::abs(want[i]));
    max_diff = std::max(max_diff, std::abs(want[i] - got[i]));
  }
  EXPECT_GT(max_abs, 1.0) << "degenerate logits";
  return max_diff / max_abs;
}

std::string Temp(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("inflight_moe_" + name)).string();
}

// The engine's logits of the prompt on the model at `path` (GGUF file or HF folder).
std::vector<float> EngineLogits(const std::string& path, const std::vector<int32_t>& ids,
                                const ModelConfig** config = nullptr) {
  static std::vector<std::unique_ptr<Model>> keep;  // the config pointer stays valid
  auto model = Model::Load(path);
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  if (!model.ok()) return {};
  ThreadPool pool(2);
  auto got = AllLogits(**model, ids, DType::kF32, pool);
  EXPECT_TRUE(got.ok()) << got.status().ToString();
  if (config) *config = &(*model)->config();
  keep.push_back(std::move(model).value());
  return got.ok() ? *got : std::vector<float>{};
}

struct MoeCase {
  const char* name;
  RefSpec ref;
};
void PrintTo(const MoeCase& c, std::ostream* os) { *os << c.name; }

RefSpec Qwen2Moe(bool shared_gate) {
  RefSpec r;
  r.s.arch = "qwen2moe";
  r.s.qkv_bias = true;
  r.s.shared_ffn = 24;
  r.s.shared_gate = shared_gate;
  return r;
}
RefSpec Qwen3Moe() {
  RefSpec r;
  r.s.arch = "qwen3moe";
  r.s.qk_norm = true;
  r.s.rope_base = 1e6f;
  r.normalize = true;
  return r;
}
RefSpec Mixtral() {
  RefSpec r;
  r.s.arch = "llama";
  r.normalize = true;
  r.adjacent_rope = true;
  return r;
}
RefSpec GptOss() {
  RefSpec r;
  r.s.arch = "gpt-oss";
  r.s.qkv_bias = r.s.out_bias = r.s.sinks = r.s.expert_biases = true;
  r.s.ffn_norm_as_post_attention = true;
  r.s.sliding_window = 6;  // shorter than the prompt: window layers see part of it
  r.s.experts_used = 3;
  r.gating = Gating::kSoftmaxSelected;
  r.swiglu_oai = true;
  r.window_layer = {true, false};  // every other layer, from the first
  return r;
}

class MoeReferenceTest : public ::testing::TestWithParam<MoeCase> {};

TEST_P(MoeReferenceTest, LogitsMatchTheNaiveReference) {
  const MoeCase& c = GetParam();
  const TinyGguf m = MakeTinyModel(c.ref.s);
  const std::string path = Temp(std::string(c.name) + ".gguf");
  ASSERT_TRUE(m.Write(path).ok());
  const std::vector<int32_t> ids = Prompt(c.ref.s.vocab);
  const ModelConfig* config = nullptr;
  const std::vector<float> got = EngineLogits(path, ids, &config);
  std::filesystem::remove(path);
  ASSERT_NE(config, nullptr);
  EXPECT_EQ(config->num_experts, c.ref.s.experts);
  EXPECT_EQ(config->normalize_expert_weights, c.ref.normalize);
  const double err = RelativeError(got, ReferenceLogits(m, c.ref, ids));
  EXPECT_LT(err, 1e-4) << c.name;
  std::printf("%s: rel err %.2e\n", c.name, err);
}

INSTANTIATE_TEST_SUITE_P(Families, MoeReferenceTest,
                         ::testing::Values(MoeCase{"qwen2moe_shared", Qwen2Moe(true)},
                                           MoeCase{"qwen2moe_ungated_shared", Qwen2Moe(false)},
                                           MoeCase{"qwen3moe", Qwen3Moe()},
                                           MoeCase{"mixtral", Mixtral()},
                                           MoeCase{"gpt_oss", GptOss()}),
                         [](const ::testing::TestParamInfo<MoeCase>& info) {
                           return std::string(info.param.name);
                         });

// ---- Hugging Face folders ----

// The HF tensors of a tiny model's GGUF tensors: [rows, cols] as ggml's {cols, rows}, the 3-D
// experts split into one tensor per expert, names by family (Mixtral: block_sparse_moe with
// w1/w3/w2; Qwen-MoE: mlp.gate, mlp.experts.E.*_proj, mlp.shared_expert*).
std::vector<testing::HfTensor> ToHf(const TinyGguf& m, bool mixtral) {
  static const std::map<std::string, std::string> kNames = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},
      {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},
      {"attn_output.weight", "self_attn.o_proj.weight"},
      {"attn_q.bias", "self_attn.q_proj.bias"},
      {"attn_k.bias", "self_attn.k_proj.bias"},
      {"attn_v.bias", "self_attn.v_proj.bias"},
      {"attn_q_norm.weight", "self_attn.q_norm.weight"},
      {"attn_k_norm.weight", "self_attn.k_norm.weight"},
      {"ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight"},
      {"ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight"},
      {"ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight"},
      {"ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight"}};
  std::vector<testing::HfTensor> out;
  for (const auto& [name, t] : m.tensors) {
    std::vector<int64_t> shape(t.dims.rbegin(), t.dims.rend());  // row-major
    if (name == "token_embd.weight") {
      out.push_back({"model.embed_tokens.weight", shape, t.values});
      continue;
    }
    if (name == "output_norm.weight" || name == "output.weight") {
      out.push_back(
          {name == "output.weight" ? "lm_head.weight" : "model.norm.weight", shape, t.values});
      continue;
    }
    const size_t dot = name.find('.', 4);
    const std::string layer = "model.layers." + name.substr(4, dot - 4) + ".";
    const std::string rest = name.substr(dot + 1);
    if (auto it = kNames.find(rest); it != kNames.end()) {
      out.push_back(
          {layer + it->second,
           rest == "ffn_gate_inp_shexp.weight" ? std::vector<int64_t>{1, t.dims[0]} : shape,
           t.values});
      continue;
    }
    if (rest == "ffn_gate_inp.weight") {
      out.push_back({layer + (mixtral ? "block_sparse_moe.gate.weight" : "mlp.gate.weight"), shape,
                     t.values});
      continue;
    }
    bool expert = false;
    for (const std::string kind : {"gate", "up", "down"}) {
      if (rest != "ffn_" + kind + "_exps.weight") continue;
      expert = true;
      const int64_t cols = t.dims[0], rows = t.dims[1], n = rows * cols;
      for (int64_t e = 0; e < t.dims[2]; ++e) {
        const std::string w = kind == "gate" ? "w1" : kind == "up" ? "w3" : "w2";
        const std::string hf =
            mixtral ? "block_sparse_moe.experts." + std::to_string(e) + "." + w + ".weight"
                    : "mlp.experts." + std::to_string(e) + "." + kind + "_proj.weight";
        out.push_back(
            {layer + hf,
             {rows, cols},
             std::vector<float>(t.values.begin() + e * n, t.values.begin() + (e + 1) * n)});
      }
    }
    EXPECT_TRUE(expert) << "no HF name for " << name;
  }
  return out;
}

// Rows of a [heads * d, cols] projection from HF's rotate-half order to the interleaved order
// llama GGUF files hold (the converter's permute): row h*d + j*d/2 + i -> h*d + 2i + j.
std::vector<float> PermuteForAdjacentRope(const std::vector<float>& w, int64_t heads, int64_t d,
                                          int64_t cols) {
  std::vector<float> out(w.size());
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t i = 0; i < d / 2; ++i)
        std::copy_n(w.begin() + (h * d + j * d / 2 + i) * cols, cols,
                    out.begin() + (h * d + 2 * i + j) * cols);
  return out;
}

struct HfCase {
  const char* model_type;
  RefSpec ref;
};
void PrintTo(const HfCase& c, std::ostream* os) { *os << c.model_type; }

nlohmann::json HfConfig(const HfCase& c) {
  const TinySpec& s = c.ref.s;
  const std::string type = c.model_type;
  nlohmann::json j = {{"model_type", type},
                      {"hidden_size", s.hidden},
                      {"num_hidden_layers", s.layers},
                      {"num_attention_heads", s.heads},
                      {"num_key_value_heads", s.kv_heads},
                      {"head_dim", s.head_dim},
                      {"vocab_size", s.vocab},
                      {"rms_norm_eps", 1e-5},
                      {"rope_theta", s.rope_base},
                      {"max_position_embeddings", s.context},
                      {"tie_word_embeddings", false},
                      {"num_experts_per_tok", s.experts_used}};
  if (type == "mixtral") {
    j["architectures"] = {"MixtralForCausalLM"};
    j["num_local_experts"] = s.experts;
    j["intermediate_size"] = s.expert_ffn;
    j["sliding_window"] = nullptr;
  } else {
    j["architectures"] = {type == "qwen3_moe" ? "Qwen3MoeForCausalLM" : "Qwen2MoeForCausalLM"};
    j["num_experts"] = s.experts;
    j["intermediate_size"] = s.ffn;
    j["moe_intermediate_size"] = s.expert_ffn;
    j["norm_topk_prob"] = c.ref.normalize;
    j["decoder_sparse_step"] = 1;
    j["mlp_only_layers"] = nlohmann::json::array();
    if (s.shared_ffn > 0) j["shared_expert_intermediate_size"] = s.shared_ffn;
  }
  return j;
}

class HfMoeTest : public ::testing::TestWithParam<HfCase> {};

// The folder runs the naive reference's numbers, and the same numbers as the GGUF written from
// the same weights (Mixtral's GGUF with q/k permuted for llama's interleaved RoPE).
TEST_P(HfMoeTest, FolderMatchesReferenceAndGguf) {
  const HfCase& c = GetParam();
  RefSpec ref = c.ref;
  const bool mixtral = std::string(c.model_type) == "mixtral";
  TinyGguf m = MakeTinyModel(ref.s);
  const std::string dir = Temp(c.model_type);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << HfConfig(c).dump(2);
  testing::WriteSafetensors(dir + "/model.safetensors", ToHf(m, mixtral));
  const std::vector<int32_t> ids = Prompt(ref.s.vocab);
  const ModelConfig* config = nullptr;
  const std::vector<float> hf = EngineLogits(dir, ids, &config);
  ASSERT_NE(config, nullptr);
  EXPECT_EQ(config->num_experts, ref.s.experts);
  EXPECT_EQ(config->experts_per_token, ref.s.experts_used);
  EXPECT_EQ(config->expert_ffn_size, ref.s.expert_ffn);
  const std::vector<double> want = ReferenceLogits(m, ref, ids);  // HF order: rotate-half
  const double err = RelativeError(hf, want);
  EXPECT_LT(err, 1e-4) << "HF folder vs reference";

  if (mixtral) {
    const int64_t D = ref.s.head_dim, H = ref.s.hidden;
    for (int64_t l = 0; l < ref.s.layers; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      auto& q = m.tensors[p + "attn_q.weight"].values;
      q = PermuteForAdjacentRope(q, ref.s.heads, D, H);
      auto& k = m.tensors[p + "attn_k.weight"].values;
      k = PermuteForAdjacentRope(k, ref.s.kv_heads, D, H);
    }
  }
  const std::string path = dir + "/same-weights.gguf";
  ASSERT_TRUE(m.Write(path).ok());
  const std::vector<float> gguf = EngineLogits(path, ids);
  ASSERT_EQ(gguf.size(), hf.size());
  double max_abs = 0, max_diff = 0;
  for (size_t i = 0; i < hf.size(); ++i) {
    max_abs = std::max(max_abs, std::abs(static_cast<double>(gguf[i])));
    max_diff = std::max(max_diff, std::abs(static_cast<double>(gguf[i]) - hf[i]));
  }
  EXPECT_LT(max_diff / max_abs, 1e-5) << "HF folder vs GGUF of the same weights";
  std::printf("%s: HF vs reference %.2e, vs GGUF %.2e\n", c.model_type, err, max_diff / max_abs);
  std::filesystem::remove_all(dir);
}

RefSpec HfQwen3Moe() {
  RefSpec r = Qwen3Moe();
  r.s.ffn = 40;  // the dense intermediate_size differs from the experts'
  return r;
}
RefSpec HfMixtral() {
  RefSpec r = Mixtral();
  r.adjacent_rope = false;  // the reference runs the folder's (HF) weights
  return r;
}

INSTANTIATE_TEST_SUITE_P(Folders, HfMoeTest,
                         ::testing::Values(HfCase{"qwen3_moe", HfQwen3Moe()},
                                           HfCase{"qwen2_moe", Qwen2Moe(true)},
                                           HfCase{"mixtral", HfMixtral()}),
                         [](const ::testing::TestParamInfo<HfCase>& info) {
                           return std::string(info.param.model_type);
                         });

// Expert tensors that disagree with config.json are refused with their names.
TEST(HfMoe, ExpertCountDisagreeingWithTheFolderIsRefused) {
  const HfCase c{"qwen3_moe", HfQwen3Moe()};
  const TinyGguf m = MakeTinyModel(c.ref.s);
  const std::string dir = Temp("bad_experts");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  testing::WriteSafetensors(dir + "/model.safetensors", ToHf(m, false));
  nlohmann::json config = HfConfig(c);
  config["num_experts"] = c.ref.s.experts + 1;
  std::ofstream(dir + "/config.json") << config.dump();
  auto more = Model::Load(dir);
  ASSERT_FALSE(more.ok());
  EXPECT_NE(more.status().message().find(
                "tensor 'blk.0.ffn_gate_inp.weight' has shape [32, 8] (ggml order), expected "
                "[32, 9]"),
            std::string::npos)
      << more.status().ToString();
  // 7 experts in config.json and the router, 8 expert tensors.
  TinyGguf seven = m;
  for (int64_t l = 0; l < c.ref.s.layers; ++l) {
    testing::TinyTensor& router =
        seven.tensors["blk." + std::to_string(l) + ".ffn_gate_inp.weight"];
    router.dims[1] = c.ref.s.experts - 1;
    router.values.resize(router.values.size() / c.ref.s.experts * (c.ref.s.experts - 1));
  }
  testing::WriteSafetensors(dir + "/model.safetensors", ToHf(seven, false));
  config["num_experts"] = c.ref.s.experts - 1;
  std::ofstream(dir + "/config.json") << config.dump();
  auto fewer = Model::Load(dir);
  ASSERT_FALSE(fewer.ok());
  EXPECT_NE(fewer.status().message().find("blk.0.ffn_gate.7.weight' is beyond the 7 experts"),
            std::string::npos)
      << fewer.status().ToString();
  config["num_experts"] = c.ref.s.experts;
  std::ofstream(dir + "/config.json") << config.dump();
  std::filesystem::remove(dir + "/model.safetensors");
  std::vector<testing::HfTensor> ts = ToHf(m, false);
  ts.erase(std::remove_if(ts.begin(), ts.end(),
                          [](const testing::HfTensor& t) {
                            return t.name == "model.layers.1.mlp.experts.3.up_proj.weight";
                          }),
           ts.end());
  testing::WriteSafetensors(dir + "/model.safetensors", ts);
  auto missing = Model::Load(dir);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("model.layers.1.mlp.experts.3.up_proj.weight"),
            std::string::npos)
      << missing.status().ToString();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace inflight
