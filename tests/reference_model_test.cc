// The engine's logits against an independent naive reference written here: double precision,
// one position at a time, weights read straight from the GGUF tensors and dequantized by this
// file's own code (no engine kernels, no engine weight loader). Random-weight models of each
// architecture: llama with GQA, qwen2 (QKV bias), qwen3 (q/k norm), gpt2 (LayerNorm, fused
// QKV, learned positions, GELU).
//
// Error metric: max_i |engine_i - ref_i| / max_i |ref_i| over all logits of a 20-token prompt
// (relative to the logit scale; per-element relative error is meaningless near zero).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "base/fp16.h"
#include "base/thread_pool.h"
#include "engine/generate.h"
#include "format/gguf.h"
#include "kernels/quant_blocks.h"
#include "model/gguf_export.h"
#include "model/model.h"
#include "model/quant_mix.h"
#include "model/random_model.h"
#include "safetensors_writer.h"
#include "test_util.h"

namespace inflight {
namespace {

// ---- this file's own dequantization (ggml block layouts) ----
double HalfToDouble(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 31, mant = h & 1023;
  double v;
  if (exp == 0)
    v = std::ldexp(mant, -24);
  else if (exp == 31)
    v = mant ? NAN : INFINITY;
  else
    v = std::ldexp(1024 + mant, exp - 25);
  return sign ? -v : v;
}

std::vector<double> Dequantize(const GgufTensorInfo& t) {
  const int64_t n = t.num_elements();
  std::vector<double> out(n);
  const uint8_t* p = t.data;
  switch (t.ggml_type) {
    case 0:  // F32
      for (int64_t i = 0; i < n; ++i) {
        float f;
        std::memcpy(&f, p + 4 * i, 4);
        out[i] = f;
      }
      break;
    case 1:  // F16
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = HalfToDouble(h);
      }
      break;
    case 2:
    case 8:
      break;  // below
    default:  // the other block formats: kernels::DequantizeBlock, checked bit for bit against
              // the reference layout in quant_formats_test
      if (t.dtype && kernels::IsBlockFormat(*t.dtype)) {
        const int64_t bs = DTypeBlockSize(*t.dtype), bb = DTypeBlockBytes(*t.dtype);
        std::vector<float> f(bs);
        for (int64_t b = 0; b < n / bs; ++b) {
          kernels::DequantizeBlock(*t.dtype, p + b * bb, f.data());
          for (int64_t j = 0; j < bs; ++j) out[b * bs + j] = f[j];
        }
        return out;
      }
      ADD_FAILURE() << "type " << t.ggml_type;
      return out;
  }
  switch (t.ggml_type) {
    case 8:  // Q8_0: 2-byte scale + 32 int8
      for (int64_t b = 0; b < n / 32; ++b) {
        const uint8_t* blk = p + 34 * b;
        uint16_t h;
        std::memcpy(&h, blk, 2);
        const double d = HalfToDouble(h);
        for (int j = 0; j < 32; ++j) out[32 * b + j] = d * static_cast<int8_t>(blk[2 + j]);
      }
      break;
    case 2:  // Q4_0: 2-byte scale + 16 bytes; low nibbles are elements 0..15, high 16..31
      for (int64_t b = 0; b < n / 32; ++b) {
        const uint8_t* blk = p + 18 * b;
        uint16_t h;
        std::memcpy(&h, blk, 2);
        const double d = HalfToDouble(h);
        for (int j = 0; j < 16; ++j) {
          out[32 * b + j] = d * ((blk[2 + j] & 15) - 8);
          out[32 * b + j + 16] = d * ((blk[2 + j] >> 4) - 8);
        }
      }
      break;
    default:
      break;  // F32 / F16: done above
  }
  return out;
}

// ---- the naive reference model ----
struct RefModel {
  const GgufFile* gguf;
  std::string arch;
  int64_t hidden, layers, heads, kv_heads, head_dim, ffn, vocab;
  double eps, rope_base;

  bool quantize_activations =
      false;  // simulate the engine's Q8_0 activations for Q8_0/Q4_0 weights
  // Simulate the engine's int16 blocks for F16/BF16 matrices (weights and activations rounded
  // per 64-column block, kernels/kernels_internal.h).
  bool i16_blocks = false;

  bool Has(const std::string& name) const { return gguf->FindTensor(name) != nullptr; }
  bool Quantized(const std::string& name) const {
    const GgufTensorInfo* t = gguf->FindTensor(name);
    return t != nullptr && t->dtype && IsQuantizedFileType(*t->dtype);
  }
  bool Float16(const std::string& name) const {
    const GgufTensorInfo* t = gguf->FindTensor(name);
    return t != nullptr && t->dtype && (*t->dtype == DType::kF16 || *t->dtype == DType::kBF16) &&
           t->num_elements() % 64 == 0;
  }
  std::vector<double> W(const std::string& name) const {
    const GgufTensorInfo* t = gguf->FindTensor(name);
    EXPECT_NE(t, nullptr) << name;
    return t ? Dequantize(*t) : std::vector<double>();
  }
};

// llama.cpp's Q8_0 rounding of activations: per 32-block d = amax / 127 (stored as F16),
// q = round(x / d).
std::vector<double> RoundToQ8Blocks(const std::vector<double>& x) {
  std::vector<double> y(x.size());
  for (size_t b = 0; b < x.size(); b += 32) {
    double amax = 0;
    for (size_t j = b; j < b + 32; ++j)
      amax = std::max(amax, std::abs(static_cast<double>(static_cast<float>(x[j]))));
    const float d = static_cast<float>(amax) / 127.0f;
    int e;
    const double m = std::frexp(static_cast<double>(d), &e);
    const double d16 =
        std::ldexp(std::nearbyint(std::ldexp(m, 11)), e - 11);  // 11 significant bits
    for (size_t j = b; j < b + 32; ++j) {
      const double q = d == 0 ? 0 : std::nearbyint(static_cast<float>(x[j]) * (1.0f / d));
      y[j] = q * d16;
    }
  }
  return y;
}

// y[r] = sum_c w[r * cols + c] * x[c]  (GGUF stores [rows][cols], cols contiguous)
// The engine's int16 blocks: per 64 values s = amax / 5791, q = round(x / s), in float.
std::vector<double> RoundToI16Blocks(const std::vector<double>& x) {
  std::vector<double> y(x.size());
  for (size_t b = 0; b + 64 <= x.size(); b += 64) {
    float amax = 0;
    for (size_t j = b; j < b + 64; ++j) amax = std::max(amax, std::abs(static_cast<float>(x[j])));
    const float s = amax / 5791.0f, inv = s != 0 ? 1.0f / s : 0.0f;
    for (size_t j = b; j < b + 64; ++j)
      y[j] = static_cast<double>(std::nearbyint(static_cast<float>(x[j]) * inv)) * s;
  }
  return y;
}

std::vector<double> MatVec(const std::vector<double>& w, const std::vector<double>& x,
                           int64_t rows) {
  const int64_t cols = static_cast<int64_t>(x.size());
  std::vector<double> y(rows, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0;
    for (int64_t c = 0; c < cols; ++c) s += w[r * cols + c] * x[c];
    y[r] = s;
  }
  return y;
}

std::vector<double> Linear(const RefModel& m, const std::string& name, const std::vector<double>& x,
                           int64_t rows) {
  if (m.i16_blocks && m.Float16(name) && x.size() % 64 == 0)
    return MatVec(RoundToI16Blocks(m.W(name)), RoundToI16Blocks(x), rows);
  return MatVec(m.W(name), m.quantize_activations && m.Quantized(name) ? RoundToQ8Blocks(x) : x,
                rows);
}

void AddInPlace(std::vector<double>& a, const std::vector<double>& b) {
  for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
}

std::vector<double> RmsNorm(const std::vector<double>& x, const std::vector<double>& w,
                            double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / x.size() + eps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * w[i];
  return y;
}

std::vector<double> LayerNorm(const std::vector<double>& x, const std::vector<double>& w,
                              const std::vector<double>& b, double eps) {
  double mean = 0;
  for (double v : x) mean += v;
  mean /= x.size();
  double var = 0;
  for (double v : x) var += (v - mean) * (v - mean);
  var /= x.size();
  const double inv = 1.0 / std::sqrt(var + eps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = (x[i] - mean) * inv * w[i] + b[i];
  return y;
}

// Rotates one head in place. llama (GGUF-permuted weights): pairs (2i, 2i+1); qwen (NeoX):
// pairs (i, i + d/2).
void Rope(double* head, int64_t d, int64_t pos, double base, bool adjacent) {
  for (int64_t i = 0; i < d / 2; ++i) {
    const double theta = pos * std::pow(base, -2.0 * i / d);
    const double c = std::cos(theta), s = std::sin(theta);
    const int64_t a = adjacent ? 2 * i : i, b = adjacent ? 2 * i + 1 : i + d / 2;
    const double x0 = head[a], x1 = head[b];
    head[a] = x0 * c - x1 * s;
    head[b] = x0 * s + x1 * c;
  }
}

// Logits [ids.size(), vocab] by recomputing every position from scratch with its own K/V list.
std::vector<double> ReferenceLogits(const RefModel& m, const std::vector<int32_t>& ids) {
  const bool gpt2 = m.arch == "gpt2";
  const int64_t q_dim = m.heads * m.head_dim, kv_dim = m.kv_heads * m.head_dim;
  const std::vector<double> emb = m.W("token_embd.weight");
  const std::vector<double> pos_emb = gpt2 ? m.W("position_embd.weight") : std::vector<double>();
  std::vector<std::vector<std::vector<double>>> keys(m.layers), values(m.layers);
  std::vector<double> logits;
  for (size_t t = 0; t < ids.size(); ++t) {
    std::vector<double> x(emb.begin() + ids[t] * m.hidden, emb.begin() + (ids[t] + 1) * m.hidden);
    if (gpt2)
      for (int64_t i = 0; i < m.hidden; ++i) x[i] += pos_emb[t * m.hidden + i];
    for (int64_t l = 0; l < m.layers; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      const std::vector<double> h =
          gpt2 ? LayerNorm(x, m.W(p + "attn_norm.weight"), m.W(p + "attn_norm.bias"), m.eps)
               : RmsNorm(x, m.W(p + "attn_norm.weight"), m.eps);
      std::vector<double> q, k, v;
      if (gpt2) {
        std::vector<double> qkv = Linear(m, p + "attn_qkv.weight", h, q_dim + 2 * kv_dim);
        AddInPlace(qkv, m.W(p + "attn_qkv.bias"));
        q.assign(qkv.begin(), qkv.begin() + q_dim);
        k.assign(qkv.begin() + q_dim, qkv.begin() + q_dim + kv_dim);
        v.assign(qkv.begin() + q_dim + kv_dim, qkv.end());
      } else {
        q = Linear(m, p + "attn_q.weight", h, q_dim);
        k = Linear(m, p + "attn_k.weight", h, kv_dim);
        v = Linear(m, p + "attn_v.weight", h, kv_dim);
        if (m.Has(p + "attn_q.bias")) {
          AddInPlace(q, m.W(p + "attn_q.bias"));
          AddInPlace(k, m.W(p + "attn_k.bias"));
          AddInPlace(v, m.W(p + "attn_v.bias"));
        }
        if (m.Has(p + "attn_q_norm.weight")) {
          const std::vector<double> qn = m.W(p + "attn_q_norm.weight"),
                                    kn = m.W(p + "attn_k_norm.weight");
          auto norm_heads = [&](std::vector<double>& a, int64_t n, const std::vector<double>& w) {
            for (int64_t hh = 0; hh < n; ++hh) {
              std::vector<double> head(a.begin() + hh * m.head_dim,
                                       a.begin() + (hh + 1) * m.head_dim);
              head = RmsNorm(head, w, m.eps);
              std::copy(head.begin(), head.end(), a.begin() + hh * m.head_dim);
            }
          };
          norm_heads(q, m.heads, qn);
          norm_heads(k, m.kv_heads, kn);
        }
        const bool adjacent = m.arch == "llama";
        for (int64_t hh = 0; hh < m.heads; ++hh)
          Rope(q.data() + hh * m.head_dim, m.head_dim, t, m.rope_base, adjacent);
        for (int64_t hh = 0; hh < m.kv_heads; ++hh)
          Rope(k.data() + hh * m.head_dim, m.head_dim, t, m.rope_base, adjacent);
      }
      keys[l].push_back(k);
      values[l].push_back(v);
      std::vector<double> attn(q_dim, 0.0);
      const int64_t group = m.heads / m.kv_heads;
      for (int64_t hh = 0; hh < m.heads; ++hh) {
        const int64_t kvh = hh / group;
        std::vector<double> scores(t + 1);
        double mx = -1e300;
        for (size_t s = 0; s <= t; ++s) {
          double dot = 0;
          for (int64_t i = 0; i < m.head_dim; ++i)
            dot += q[hh * m.head_dim + i] * keys[l][s][kvh * m.head_dim + i];
          scores[s] = dot / std::sqrt(static_cast<double>(m.head_dim));
          mx = std::max(mx, scores[s]);
        }
        double sum = 0;
        for (double& sc : scores) sum += (sc = std::exp(sc - mx));
        for (size_t s = 0; s <= t; ++s)
          for (int64_t i = 0; i < m.head_dim; ++i)
            attn[hh * m.head_dim + i] += scores[s] / sum * values[l][s][kvh * m.head_dim + i];
      }
      std::vector<double> o = Linear(m, p + "attn_output.weight", attn, m.hidden);
      if (gpt2) AddInPlace(o, m.W(p + "attn_output.bias"));
      AddInPlace(x, o);
      const std::vector<double> h2 =
          gpt2 ? LayerNorm(x, m.W(p + "ffn_norm.weight"), m.W(p + "ffn_norm.bias"), m.eps)
               : RmsNorm(x, m.W(p + "ffn_norm.weight"), m.eps);
      std::vector<double> up = Linear(m, p + "ffn_up.weight", h2, m.ffn);
      if (gpt2) {
        AddInPlace(up, m.W(p + "ffn_up.bias"));
        for (double& u : up)
          u = 0.5 * u * (1 + std::tanh(std::sqrt(2 / M_PI) * (u + 0.044715 * u * u * u)));
      } else {
        const std::vector<double> gate = Linear(m, p + "ffn_gate.weight", h2, m.ffn);
        for (int64_t i = 0; i < m.ffn; ++i) up[i] *= gate[i] / (1 + std::exp(-gate[i]));
      }
      std::vector<double> down = Linear(m, p + "ffn_down.weight", up, m.hidden);
      if (gpt2) AddInPlace(down, m.W(p + "ffn_down.bias"));
      AddInPlace(x, down);
    }
    const std::vector<double> xn =
        gpt2 ? LayerNorm(x, m.W("output_norm.weight"), m.W("output_norm.bias"), m.eps)
             : RmsNorm(x, m.W("output_norm.weight"), m.eps);
    const std::vector<double> row =
        Linear(m, m.Has("output.weight") ? "output.weight" : "token_embd.weight", xn, m.vocab);
    logits.insert(logits.end(), row.begin(), row.end());
  }
  return logits;
}

struct Case {
  const char* arch;
  DType dtype;
  const char* mix = nullptr;  // a QuantMix on a model whose rows are multiples of 256
};

// F32/F16 weights: the 1e-3 against the exact reference (measured ~1e-6).
// Q8_0/Q4_0 weights: reference and engine share the dequantized weights, but the engine also
// rounds each matmul input to 8-bit blocks (llama.cpp's Q8_0 activations). The bound is that
// rounding's own effect, measured by running the reference with and without it; the engine
// must stay within 1.5x of it (an exact match is not expected: inputs that sit on a rounding
// tie, e.g. Q4_0 embeddings at q * 127 / 8, round differently under float vs double).
class ReferenceModelTest : public ::testing::TestWithParam<Case> {};

// This process's resident pages of mapped files, in bytes (/proc/self/status RssFile).
int64_t ResidentFileBytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("RssFile:", 0) == 0) return std::stoll(line.substr(8)) * 1024;
  }
  return -1;
}

// Weights copied into the interleaved layouts at load do not also stay resident as file
// pages (a model counted twice in RSS before), and the model still computes the same logits
// after its file pages were dropped (they fault back in if anything reads them).
TEST(ModelLoad, CopiedWeightsDoNotKeepTheirFilePagesResident) {
  auto arch = ArchitectureFromName("llama");
  ASSERT_TRUE(arch.ok());
  auto config = PresetConfig(*arch, "small");
  ASSERT_TRUE(config.ok());
  RandomModelParams params;
  params.config = *config;
  params.dtype = DType::kQ8_0;
  params.seed = 3;
  const std::string path =
      (std::filesystem::temp_directory_path() / "inflight_rss_small_q8_0.gguf").string();
  ASSERT_TRUE(WriteRandomGguf(params, testing::ByteFallbackVocab({"\u2581the"}), path).ok());
  const int64_t file_bytes = static_cast<int64_t>(std::filesystem::file_size(path));
  ASSERT_GT(file_bytes, 16 << 20);
  const int64_t before = ResidentFileBytes();
  ASSERT_GE(before, 0) << "no RssFile in /proc/self/status";
  auto model = Model::Load(path);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const int64_t after = ResidentFileBytes();
  EXPECT_LT(after - before, file_bytes / 5)
      << "file " << file_bytes << " bytes, resident before " << before << ", after " << after;
  ThreadPool pool(2);
  const std::vector<int32_t> ids = {1, 5, 9, 2};
  auto first = AllLogits(**model, ids, DType::kF32, pool);
  auto second = AllLogits(**model, ids, DType::kF32, pool);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(*first, *second);
  std::filesystem::remove(path);
}

TEST_P(ReferenceModelTest, LogitsOf20TokenPromptMatchNaiveReference) {
  const Case c = GetParam();
  auto arch = ArchitectureFromName(c.arch);
  ASSERT_TRUE(arch.ok());
  auto config = PresetConfig(*arch, "tiny");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  RandomModelParams params;
  params.config = *config;
  params.dtype = c.dtype;
  if (c.mix) {
    // K-quant super-blocks need rows of 256: hidden 256, ffn 512 (the tiny preset has 64).
    params.config.hidden_size = 256, params.config.ffn_size = 512, params.config.num_heads = 8;
    params.config.head_dim = params.config.rope_dim = 32;
    if (*arch == Architecture::kGpt2) params.config.num_kv_heads = params.config.num_heads;
    params.mix = c.mix;
  }
  params.seed = 7;
  params.tied_embeddings = std::string(c.arch) != "qwen2";  // one untied model
  const std::string path =
      (std::filesystem::temp_directory_path() / ("inflight_ref_" + std::string(c.arch) + "_" +
                                                 (c.mix ? c.mix : DTypeName(c.dtype)) + ".gguf"))
          .string();
  ASSERT_TRUE(WriteRandomGguf(params,
                              testing::ByteFallbackVocab(
                                  {"\u2581the", "\u2581a", "\u2581of", "\u2581and", "\u2581to"}),
                              path)
                  .ok());

  auto model = Model::Load(path);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto gguf = GgufFile::Open(path);
  ASSERT_TRUE(gguf.ok());
  const ModelConfig& mc = (*model)->config();
  RefModel ref{gguf->get(),   c.arch,          mc.hidden_size, mc.num_layers,
               mc.num_heads,  mc.num_kv_heads, mc.head_dim,    mc.ffn_size,
               mc.vocab_size, mc.norm_eps,     mc.rope_base};
  ASSERT_EQ(mc.num_kv_heads < mc.num_heads, std::string(c.arch) != "gpt2");  // GQA where it exists

  std::vector<int32_t> ids;
  for (int i = 0; i < 20; ++i) ids.push_back((i * 37 + 11) % mc.vocab_size);
  ThreadPool pool(2);
  auto got = AllLogits(**model, ids, DType::kF32, pool);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  auto relative_error = [&](const auto& have, const std::vector<double>& want) {
    EXPECT_EQ(have.size(), want.size());
    double max_abs = 0, max_diff = 0;
    for (size_t i = 0; i < want.size() && i < have.size(); ++i) {
      max_abs = std::max(max_abs, std::abs(want[i]));
      max_diff = std::max(max_diff, std::abs(want[i] - have[i]));
    }
    EXPECT_GT(max_abs, 1.0);  // logits are not degenerate
    return max_diff / max_abs;
  };
  const bool quantized = c.mix != nullptr || c.dtype == DType::kQ8_0 || c.dtype == DType::kQ4_0;
  const bool f16 = !quantized && (c.dtype == DType::kF16 || c.dtype == DType::kBF16);
  const std::vector<double> exact = ReferenceLogits(ref, ids);
  const double err = relative_error(*got, exact);
  if (f16) {
    // F16 matrices run on int16 blocks (kernels/kernels_internal.h): the bound is the error of
    // the reference with the same rounding, as for the quantized files' activations below.
    ref.i16_blocks = true;
    const double bound = relative_error(ReferenceLogits(ref, ids), exact);
    EXPECT_LT(err, 1.5 * bound + 1e-3) << c.arch << " f16";
    EXPECT_LT(err, 1e-2) << c.arch << " f16";
    std::printf("%s f16: rel err %.2e, int16 block rounding bound %.2e\n", c.arch, err, bound);
  } else if (!quantized) {
    EXPECT_LT(err, 1e-3) << c.arch << " " << DTypeName(c.dtype);
    std::printf("%s %s: rel err %.2e\n", c.arch, DTypeName(c.dtype), err);
  } else {
    ref.quantize_activations = true;
    const double bound = relative_error(ReferenceLogits(ref, ids), exact);
    const std::string name = c.mix ? c.mix : DTypeName(c.dtype);
    EXPECT_LT(err, 1.5 * bound + 1e-3) << c.arch << " " << name;
    EXPECT_LT(err, 0.1) << c.arch << " " << name;
    std::printf("%s %s: rel err %.2e, Q8_0 activation rounding bound %.2e\n", c.arch, name.c_str(),
                err, bound);
  }
  std::filesystem::remove(path);
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return std::string(info.param.arch) + "_" +
         (info.param.mix ? info.param.mix : DTypeName(info.param.dtype));
}

INSTANTIATE_TEST_SUITE_P(AllArchitectures, ReferenceModelTest,
                         ::testing::Values(Case{"llama", DType::kF32}, Case{"llama", DType::kF16},
                                           Case{"llama", DType::kQ8_0}, Case{"llama", DType::kQ4_0},
                                           Case{"qwen2", DType::kF32}, Case{"qwen2", DType::kF16},
                                           Case{"qwen2", DType::kQ8_0}, Case{"qwen2", DType::kQ4_0},
                                           Case{"qwen3", DType::kF32}, Case{"qwen3", DType::kF16},
                                           Case{"qwen3", DType::kQ8_0}, Case{"qwen3", DType::kQ4_0},
                                           Case{"gpt2", DType::kF32}, Case{"gpt2", DType::kF16},
                                           Case{"gpt2", DType::kQ8_0}, Case{"gpt2", DType::kQ4_0}),
                         CaseName);

// Every block format, alone and in llama-quantize's mixes, through the same comparison.
INSTANTIATE_TEST_SUITE_P(
    BlockFormats, ReferenceModelTest,
    ::testing::Values(Case{"llama", DType::kF16, "q4_k_m"}, Case{"llama", DType::kF16, "q5_k_m"},
                      Case{"llama", DType::kF16, "q3_k_m"}, Case{"llama", DType::kF16, "q2_k_mix"},
                      Case{"llama", DType::kF16, "q4_0_mix"},
                      Case{"llama", DType::kF16, "iq4_xs_mix"}, Case{"llama", DType::kF16, "q6_k"},
                      Case{"llama", DType::kF16, "q4_1"}, Case{"llama", DType::kF16, "q5_0"},
                      Case{"llama", DType::kF16, "q5_1"}, Case{"llama", DType::kF16, "iq4_nl"},
                      Case{"qwen2", DType::kF16, "q4_k_m"}, Case{"qwen3", DType::kF16, "q5_k_m"},
                      Case{"gpt2", DType::kF16, "q4_k_m"}),
    CaseName);

// ---- Hugging Face folders: config.json + safetensors (sharded or not), F32/BF16/F16 ----
// The engine runs the folder directly (rotate-half RoPE, Conv1D transposes, HF names); the
// naive reference runs the GGUF that `inflight-model convert` writes from it (interleaved
// RoPE for llama). Agreement checks the HF loader and the converter against each other and
// against the reference.

using testing::HfTensor;
using testing::WriteSafetensors;

struct HfCase {
  const char* arch;
  const char* dtype;
  bool sharded;
  bool tied;
};

class HuggingFaceFolderTest : public ::testing::TestWithParam<HfCase> {};

TEST_P(HuggingFaceFolderTest, EngineOnFolderMatchesReferenceOnConvertedGguf) {
  const HfCase hc = GetParam();
  const bool gpt2 = std::string(hc.arch) == "gpt2";
  const std::string tokenizer =
      testing::SharedDir() + (gpt2 ? "/models/tokenizers/gpt2-hf/tokenizer.json"
                                   : "/models/tokenizers/llama2-sentencepiece/tokenizer.model");
  REQUIRE_SHARED_FILE(tokenizer);
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("inflight_hf_" + std::string(hc.arch));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(tokenizer, dir / std::filesystem::path(tokenizer).filename());

  const int64_t H = 64, L = 2, NH = 4, NKV = gpt2 ? 4 : 2, D = H / NH, F = gpt2 ? 256 : 192;
  const int64_t V = gpt2 ? 50257 : 32000;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0, 1);
  std::vector<HfTensor> ts;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float stddev,
                 float mean = 0) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    HfTensor t{name, shape, std::vector<float>(n)};
    for (float& v : t.values) v = mean + stddev * normal(rng);
    ts.push_back(std::move(t));
  };
  nlohmann::json config;
  if (gpt2) {
    config = {{"model_type", "gpt2"},
              {"n_embd", H},
              {"n_layer", L},
              {"n_head", NH},
              {"n_positions", 128},
              {"vocab_size", V},
              {"layer_norm_epsilon", 1e-5}};
    add("wte.weight", {V, H}, 0.5f);
    add("wpe.weight", {128, H}, 0.1f);
    for (int l = 0; l < L; ++l) {
      const std::string p = "h." + std::to_string(l) + ".";
      add(p + "ln_1.weight", {H}, 0.1f, 1), add(p + "ln_1.bias", {H}, 0.02f);
      add(p + "attn.c_attn.weight", {H, 3 * H}, 0.25f),
          add(p + "attn.c_attn.bias", {3 * H}, 0.02f);  // Conv1D [in, out]
      add(p + "attn.c_proj.weight", {H, H}, 0.25f), add(p + "attn.c_proj.bias", {H}, 0.02f);
      add(p + "ln_2.weight", {H}, 0.1f, 1), add(p + "ln_2.bias", {H}, 0.02f);
      add(p + "mlp.c_fc.weight", {H, F}, 0.25f), add(p + "mlp.c_fc.bias", {F}, 0.02f);
      add(p + "mlp.c_proj.weight", {F, H}, 0.12f), add(p + "mlp.c_proj.bias", {H}, 0.02f);
    }
    add("ln_f.weight", {H}, 0.1f, 1), add("ln_f.bias", {H}, 0.02f);
  } else {
    const bool qwen = std::string(hc.arch) == "qwen2";
    config = {{"model_type", hc.arch},
              {"hidden_size", H},
              {"num_hidden_layers", L},
              {"num_attention_heads", NH},
              {"num_key_value_heads", NKV},
              {"intermediate_size", F},
              {"vocab_size", V},
              {"rms_norm_eps", 1e-5},
              {"rope_theta", qwen ? 1000000.0 : 10000.0},
              {"max_position_embeddings", 256},
              {"tie_word_embeddings", hc.tied}};
    add("model.embed_tokens.weight", {V, H}, 0.5f);
    for (int l = 0; l < L; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      add(p + "input_layernorm.weight", {H}, 0.1f, 1);
      add(p + "self_attn.q_proj.weight", {NH * D, H}, 0.25f);
      add(p + "self_attn.k_proj.weight", {NKV * D, H}, 0.25f);
      add(p + "self_attn.v_proj.weight", {NKV * D, H}, 0.25f);
      if (qwen) {
        add(p + "self_attn.q_proj.bias", {NH * D}, 0.1f);
        add(p + "self_attn.k_proj.bias", {NKV * D}, 0.1f);
        add(p + "self_attn.v_proj.bias", {NKV * D}, 0.1f);
      }
      add(p + "self_attn.o_proj.weight", {H, NH * D}, 0.25f);
      add(p + "post_attention_layernorm.weight", {H}, 0.1f, 1);
      add(p + "mlp.gate_proj.weight", {F, H}, 0.25f);
      add(p + "mlp.up_proj.weight", {F, H}, 0.25f);
      add(p + "mlp.down_proj.weight", {H, F}, 0.14f);
    }
    add("model.norm.weight", {H}, 0.1f, 1);
    if (!hc.tied) add("lm_head.weight", {V, H}, 0.5f);
  }
  std::ofstream(dir / "config.json") << config.dump(2);
  if (hc.sharded) {
    const size_t half = ts.size() / 2;
    WriteSafetensors((dir / "model-00001-of-00002.safetensors").string(),
                     {ts.begin(), ts.begin() + half}, hc.dtype);
    WriteSafetensors((dir / "model-00002-of-00002.safetensors").string(),
                     {ts.begin() + half, ts.end()}, hc.dtype);
    nlohmann::json index = {{"metadata", nlohmann::json::object()},
                            {"weight_map", nlohmann::json::object()}};
    for (size_t i = 0; i < ts.size(); ++i)
      index["weight_map"][ts[i].name] =
          i < half ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
    std::ofstream(dir / "model.safetensors.index.json") << index.dump(2);
  } else {
    WriteSafetensors((dir / "model.safetensors").string(), ts, hc.dtype);
  }

  // The loader is under test, not the F16 arithmetic: F16/BF16 matrices in exact F32.
  ModelLoadOptions exact;
  exact.exact_f16 = true;
  auto hf = Model::Load(dir.string(), exact);
  ASSERT_TRUE(hf.ok()) << hf.status().ToString();
  ASSERT_NE((*hf)->tokenizer(), nullptr);
  const std::string gguf_path = (dir / "converted.gguf").string();
  ASSERT_TRUE(ExportGguf(**hf, QuantMix::Uniform(DType::kF32), gguf_path).ok());
  auto converted = Model::Load(gguf_path);
  ASSERT_TRUE(converted.ok()) << converted.status().ToString();
  EXPECT_EQ((*converted)->tokenizer()->Encode("Hello world"),
            (*hf)->tokenizer()->Encode("Hello world"));
  auto gguf = GgufFile::Open(gguf_path);
  ASSERT_TRUE(gguf.ok());
  const ModelConfig& mc = (*hf)->config();
  RefModel ref{gguf->get(),   hc.arch,         mc.hidden_size, mc.num_layers,
               mc.num_heads,  mc.num_kv_heads, mc.head_dim,    mc.ffn_size,
               mc.vocab_size, mc.norm_eps,     mc.rope_base};

  std::vector<int32_t> ids;
  for (int i = 0; i < 20; ++i) ids.push_back((i * 7919 + 13) % mc.vocab_size);
  ThreadPool pool(2);
  auto got = AllLogits(**hf, ids, DType::kF32, pool);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  auto got_converted = AllLogits(**converted, ids, DType::kF32, pool);
  ASSERT_TRUE(got_converted.ok());
  const std::vector<double> want = ReferenceLogits(ref, ids);
  double max_abs = 0, max_diff = 0, max_diff_converted = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    max_abs = std::max(max_abs, std::abs(want[i]));
    max_diff = std::max(max_diff, std::abs(want[i] - (*got)[i]));
    max_diff_converted = std::max(max_diff_converted, std::abs(want[i] - (*got_converted)[i]));
  }
  ASSERT_GT(max_abs, 1.0);
  EXPECT_LT(max_diff / max_abs, 1e-3) << "HF folder vs reference";
  EXPECT_LT(max_diff_converted / max_abs, 1e-3) << "converted GGUF vs reference";

  // Quantized conversion stays within Q8_0's error of the F32 one.
  const std::string q8_path = (dir / "converted-q8_0.gguf").string();
  ASSERT_TRUE(ExportGguf(**hf, QuantMix::Uniform(DType::kQ8_0), q8_path).ok());
  auto q8 = Model::Load(q8_path);
  ASSERT_TRUE(q8.ok());
  {
    // general.file_type is llama.cpp's uint32 LLAMA_FTYPE (7 = MOSTLY_Q8_0): llama.cpp refuses a
    // file whose key has another type.
    auto q8_file = GgufFile::Open(q8_path);
    ASSERT_TRUE(q8_file.ok());
    const GgufValue* file_type = (*q8_file)->Find("general.file_type");
    ASSERT_NE(file_type, nullptr);
    EXPECT_EQ(file_type->type, GgufType::kU32);
    EXPECT_EQ(file_type->i, 7);
  }
  EXPECT_EQ((*q8)->weights().layers[0].w_up.dtype, DType::kQ8_0x16);  // interleaved at load
  auto got_q8 = AllLogits(**q8, ids, DType::kF32, pool);
  ASSERT_TRUE(got_q8.ok());
  double max_diff_q8 = 0;
  for (size_t i = 0; i < want.size(); ++i)
    max_diff_q8 = std::max(max_diff_q8, std::abs(want[i] - (*got_q8)[i]));
  EXPECT_LT(max_diff_q8 / max_abs, 0.1);
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Architectures, HuggingFaceFolderTest,
                         ::testing::Values(HfCase{"llama", "F32", true, false},
                                           HfCase{"qwen2", "BF16", false, true},
                                           HfCase{"gpt2", "F16", false, true}),
                         [](const ::testing::TestParamInfo<HfCase>& info) {
                           return std::string(info.param.arch);
                         });

}  // namespace
}  // namespace inflight
