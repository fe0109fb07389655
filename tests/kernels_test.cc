// Every SIMD kernel against its scalar twin, over shapes with odd tails and every weight type.
#include "kernels/kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "base/fp16.h"
#include "base/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/interleave.h"
#include "kernels/quantize.h"

namespace inflight::kernels {
namespace {

std::vector<SimdLevel> Levels() {
  std::vector<SimdLevel> out;
  for (SimdLevel l : {SimdLevel::kScalar, SimdLevel::kAvx512}) {
    if (CpuSupports(l)) out.push_back(l);
  }
  return out;
}

// A test comparing the SIMD levels with their scalar twin compares the twin with itself on a
// CPU without AVX-512: it says so by skipping (at its start, or at its end when it also checks
// something of the twin alone) instead of passing.
#define SKIP_WITHOUT_SIMD()                                                                \
  if (!CpuSupports(SimdLevel::kAvx512))                                                    \
  GTEST_SKIP() << "no AVX-512 on this CPU: only the scalar twin runs, nothing to compare " \
                  "it with"

struct Weights {
  std::vector<uint8_t> bytes;
  TensorView view;
  std::vector<uint8_t> source_bytes;  // the Q8_0/Q4_0 source of an interleaved matrix
  TensorView source;
};

Weights MakeWeights(DType dtype, int64_t rows, int64_t cols, std::mt19937& rng) {
  if (dtype == DType::kQ8_0x16 || dtype == DType::kQ4_0x16 || dtype == DType::kF16x16 ||
      dtype == DType::kBF16x16) {
    const DType source = dtype == DType::kQ8_0x16   ? DType::kQ8_0
                         : dtype == DType::kQ4_0x16 ? DType::kQ4_0
                         : dtype == DType::kF16x16  ? DType::kF16
                                                    : DType::kBF16;
    Weights src = MakeWeights(source, rows, cols, rng);
    Weights w;
    w.source_bytes = std::move(src.bytes);
    w.source = TensorView{w.source_bytes.data(), src.view.dtype, rows, cols};
    w.bytes.resize(InterleavedBytes(w.source));
    w.view = Interleave(w.source, w.bytes.data());
    return w;  // F16 and BF16 both become int16 blocks (kI16x16)
  }
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> f(rows * cols);
  for (float& x : f) x = nd(rng);
  Weights w;
  w.bytes.resize(DTypeRowBytes(dtype, cols) * rows);
  for (int64_t r = 0; r < rows; ++r)
    QuantizeRow(dtype, f.data() + r * cols, cols, w.bytes.data() + r * DTypeRowBytes(dtype, cols));
  w.view = TensorView{w.bytes.data(), dtype, rows, cols};
  return w;
}

class MatMulTest : public ::testing::TestWithParam<DType> {};

TEST_P(MatMulTest, EveryLevelMatchesScalarTwin) {
  const DType dtype = GetParam();
  const bool quant = UsesQuantizedActivations(dtype);
  std::mt19937 rng(7);
  const bool panels = dtype == DType::kF16x16 || dtype == DType::kBF16x16;
  // F16 / BF16 become int16 blocks of 64 columns (other lengths keep the row layout).
  const std::vector<int64_t> col_sizes = quant ? std::vector<int64_t>{32, 64, 96, 160, 224, 544}
                                         : panels
                                             ? std::vector<int64_t>{64, 128, 192, 320, 1024}
                                             : std::vector<int64_t>{1, 7, 15, 16, 17, 33, 100, 257};
  for (int64_t cols : col_sizes) {
    for (int64_t rows : {1, 5, 19, 33, 77}) {
      for (int64_t tokens : {1, 2, 3, 4, 5, 7, 13}) {
        Weights w = MakeWeights(dtype, rows, cols, rng);
        std::normal_distribution<float> nd(0.0f, 1.0f);
        std::vector<float> x(tokens * cols);
        for (float& v : x) v = nd(rng);
        const KernelTable& ref = GetKernels(SimdLevel::kScalar);
        MatMulScratch ref_scratch;
        const QuantizedRows* ref_q =
            quant ? ref_scratch.Quantize(ref, x.data(), tokens, cols) : nullptr;
        std::vector<float> y_ref(tokens * rows);
        ref.matmul_rows(w.view, 0, rows, x.data(), ref_q, tokens, y_ref.data(), rows);
        for (SimdLevel level : Levels()) {
          const KernelTable& k = GetKernels(level);
          MatMulScratch scratch;
          const QuantizedRows* q = quant ? scratch.Quantize(k, x.data(), tokens, cols) : nullptr;
          std::vector<float> y(tokens * rows);
          k.matmul_rows(w.view, 0, rows, x.data(), q, tokens, y.data(), rows);
          // The int16 blocks follow their twin's operations exactly, with the activations
          // quantized by the kernel or once per matmul (MatMulScratch::ToI16).
          if (panels) {
            ASSERT_EQ(w.view.dtype, DType::kI16x16);
            ASSERT_EQ(y, y_ref) << SimdLevelName(level) << " cols " << cols;
            MatMulScratch is;
            std::vector<float> yi(tokens * rows);
            k.matmul_rows(w.view, 0, rows, x.data(), is.ToI16(k, x.data(), tokens, cols), tokens,
                          yi.data(), rows);
            ASSERT_EQ(yi, y_ref) << SimdLevelName(level) << " cols " << cols;
          }
          for (int64_t i = 0; i < tokens * rows; ++i) {
            // Sum of |terms| bounds the rounding error of any summation order.
            const double tol =
                1e-4 * std::sqrt(static_cast<double>(cols)) * (1 + std::fabs(y_ref[i])) +
                (quant ? 2e-2 * std::sqrt((double)cols) : 0);
            ASSERT_NEAR(y[i], y_ref[i], tol)
                << DTypeName(dtype) << " " << SimdLevelName(level) << " rows=" << rows
                << " cols=" << cols << " tokens=" << tokens << " i=" << i;
          }
          // Batch invariance: each token alone gives bit-identical results.
          for (int64_t t = 0; t < tokens; ++t) {
            MatMulScratch s1;
            const QuantizedRows* q1 =
                quant ? s1.Quantize(k, x.data() + t * cols, 1, cols) : nullptr;
            std::vector<float> y1(rows);
            k.matmul_rows(w.view, 0, rows, x.data() + t * cols, q1, 1, y1.data(), rows);
            for (int64_t r = 0; r < rows; ++r)
              ASSERT_EQ(y1[r], y[t * rows + r]) << "token " << t << " row " << r;
          }
        }
      }
    }
  }
  SKIP_WITHOUT_SIMD();
}

INSTANTIATE_TEST_SUITE_P(AllTypes, MatMulTest,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0,
                                           DType::kQ4_0, DType::kQ8_0x16, DType::kQ4_0x16,
                                           DType::kF16x16, DType::kBF16x16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

// A prompt's matmul runs in token chunks that fit L2 (and two 16-row groups per pass): each
// token's outputs equal the token computed alone, bit for bit, through MatMul and MatMulGroup
// on a pool, for prompts longer than one chunk (the last chunk partial) and rows that end in a
// partial group.
TEST(MatMulChunks, PromptEqualsEachTokenAlone) {
  std::mt19937 rng(11);
  ThreadPool pool(2);
  for (DType dt : {DType::kQ8_0x16, DType::kQ4_0x16, DType::kF16x16, DType::kBF16x16}) {
    for (int64_t cols : {2048, 5632}) {
      const int64_t rows = 83, tokens = 301;
      Weights w = MakeWeights(dt, rows, cols, rng), w2 = MakeWeights(dt, 40, cols, rng);
      std::normal_distribution<float> nd(0.0f, 1.0f);
      std::vector<float> x(tokens * cols);
      for (float& v : x) v = nd(rng);
      MatMulScratch scratch;
      std::vector<float> y(tokens * rows), y2(tokens * 40), yg(tokens * rows);
      MatMul(w.view, x.data(), tokens, y.data(), pool, scratch);
      const MatMulTarget targets[] = {{&w.view, yg.data()}, {&w2.view, y2.data()}};
      MatMulGroup(targets, 2, x.data(), tokens, pool, scratch);
      ASSERT_EQ(y, yg) << DTypeName(dt) << " cols " << cols;
      for (int64_t t = 0; t < tokens; t += 7) {
        std::vector<float> y1(rows), y21(40);
        MatMul(w.view, x.data() + t * cols, 1, y1.data(), pool, scratch);
        MatMul(w2.view, x.data() + t * cols, 1, y21.data(), pool, scratch);
        for (int64_t r = 0; r < rows; ++r)
          ASSERT_EQ(y1[r], y[t * rows + r]) << DTypeName(dt) << " token " << t << " row " << r;
        for (int64_t r = 0; r < 40; ++r)
          ASSERT_EQ(y21[r], y2[t * 40 + r]) << DTypeName(dt) << " token " << t << " row " << r;
      }
    }
  }
}

// The interleaved layout holds the same weights and computes the same products as its source.
TEST(Interleave, SameWeightsAndNearlySameProducts) {
  std::mt19937 rng(3);
  for (DType dt : {DType::kQ8_0x16, DType::kQ4_0x16, DType::kF16x16, DType::kBF16x16}) {
    for (int64_t rows : {3, 16, 40}) {
      const int64_t cols = 128, tokens = 9;
      Weights w = MakeWeights(dt, rows, cols, rng);
      std::vector<float> a(cols), b(cols);
      const bool panels = dt == DType::kF16x16 || dt == DType::kBF16x16;
      for (int64_t r = 0; r < rows; ++r) {
        DequantizeRow(w.view, r, a.data());
        DequantizeRow(w.source, r, b.data());
        // int16 blocks hold each weight within half a step (1/11582 of its block's largest).
        if (panels) {
          for (int64_t b0 = 0; b0 < cols; b0 += 64) {
            float amax = 0;
            for (int64_t c = b0; c < b0 + 64; ++c) amax = std::max(amax, std::fabs(b[c]));
            for (int64_t c = b0; c < b0 + 64; ++c)
              ASSERT_NEAR(a[c], b[c], amax / 11582 * 1.001f) << DTypeName(dt) << " row " << r;
          }
          continue;
        }
        ASSERT_EQ(a, b) << DTypeName(dt) << " row " << r;
      }
      std::normal_distribution<float> nd(0.0f, 1.0f);
      std::vector<float> x(tokens * cols);
      for (float& v : x) v = nd(rng);
      const KernelTable& k = ActiveKernels();
      MatMulScratch scratch;
      const QuantizedRows* q = scratch.Quantize(k, x.data(), tokens, cols);
      std::vector<float> y(tokens * rows), y_src(tokens * rows);
      k.matmul_rows(w.view, 0, rows, x.data(), q, tokens, y.data(), rows);
      k.matmul_rows(w.source, 0, rows, x.data(), q, tokens, y_src.data(), rows);
      for (size_t i = 0; i < y.size(); ++i) {
        // int16 blocks hold weights and activations within 1/11582 of their block's largest
        // magnitude (about 2^-13.5): the products within ~2^-12 of the sum of |products| over
        // a normal row (a loose bound, it checks the layout and scales, not the rounding).
        double mag = 0;
        if (panels) {
          const int64_t t = static_cast<int64_t>(i) / rows, r = static_cast<int64_t>(i) % rows;
          DequantizeRow(w.source, r, b.data());
          for (int64_t c = 0; c < cols; ++c) mag += std::fabs(x[t * cols + c] * b[c]);
        }
        ASSERT_NEAR(y[i], y_src[i], 1e-4f * (1 + std::fabs(y_src[i])) + mag / 1024)
            << DTypeName(dt);
      }
    }
  }
}

// Random K/V rows of `positions` tokens stored through WriteKv at the positions of a shuffled
// block table; `rows` keeps the values as stored (after rounding to the cache type).
struct PagedKv {
  PagedKv(DType dtype, int32_t kv_heads, int32_t hd, int32_t tpb, int32_t positions,
          std::mt19937& rng)
      : kv_dim(kv_heads * hd), blocks((positions + tpb - 1) / tpb + 3) {
    const int64_t elems = static_cast<int64_t>(blocks) * tpb * kv_dim;
    kbuf.assign(elems * 4, 0xff), vbuf.assign(elems * 4, 0xff);  // unwritten slots hold NaNs
    view = KvLayerView{kbuf.data(), vbuf.data(), dtype, tpb, kv_dim, hd};
    table.resize(blocks);
    for (int32_t i = 0; i < blocks; ++i) table[i] = i;
    std::shuffle(table.begin(), table.end(), rng);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    k.resize(static_cast<size_t>(positions) * kv_dim), v.resize(k.size());
    for (size_t i = 0; i < k.size(); ++i)
      k[i] = Round(dtype, nd(rng)), v[i] = Round(dtype, nd(rng));
    if (dtype == DType::kI8) {
      // The values an 8-bit cache holds: per token and head, max |x| / 127 as F16 the scale.
      for (std::vector<float>* x : {&k, &v}) {
        for (size_t at = 0; at < x->size(); at += hd) {
          float amax = 0;
          for (int32_t i = 0; i < hd; ++i) amax = std::max(amax, std::fabs((*x)[at + i]));
          const float scale = Fp16ToFp32(Fp32ToFp16(amax / 127));
          for (int32_t i = 0; i < hd; ++i) {
            (*x)[at + i] =
                scale * std::clamp(std::nearbyint((*x)[at + i] / scale), -127.0f, 127.0f);
          }
        }
      }
    }
    // In two chunks, as a prompt and its continuation would be written.
    const int32_t first = positions / 3;
    WriteKv(view, {table.data(), 0, first, 0}, k.data(), v.data());
    WriteKv(view, {table.data(), first, positions - first, 0},
            k.data() + static_cast<int64_t>(first) * kv_dim,
            v.data() + static_cast<int64_t>(first) * kv_dim);
  }
  static float Round(DType dtype, float x) {
    if (dtype == DType::kF16) return Fp16ToFp32(Fp32ToFp16(x));
    if (dtype == DType::kBF16) return Bf16ToFp32(Fp32ToBf16(x));
    return x;
  }
  int32_t kv_dim, blocks;
  std::vector<uint8_t> kbuf, vbuf;
  KvLayerView view;
  std::vector<int32_t> table;
  std::vector<float> k, v;
};

// The attention variants of one query head, as NaiveAttention takes them.
struct Variant {
  float softcap = 0.0f;
  int32_t window = 0;
  const float* sink = nullptr;  // this head's sink logit
};

// softmax(scale q . K_j) . V_j over j < len in double, from the rows as written; with a
// variant, over the window's positions only, scores soft-capped, a sink in the denominator;
// with `seen`, over the positions it marks only.
std::vector<double> NaiveAttention(const PagedKv& kv, int32_t head, int32_t hd, int32_t len,
                                   const float* q, float scale, const Variant& var = {},
                                   const std::vector<bool>* seen = nullptr) {
  const int32_t lo = var.window > 0 ? std::max(0, len - var.window) : 0;
  std::vector<double> scores(len, -INFINITY), out(hd, 0.0);
  double mx = var.sink != nullptr ? *var.sink : -INFINITY, sum = 0;
  for (int32_t j = lo; j < len; ++j) {
    if (seen != nullptr && !(*seen)[j]) continue;
    double s = 0;
    for (int32_t i = 0; i < hd; ++i)
      s += static_cast<double>(q[i]) * kv.k[static_cast<size_t>(j) * kv.kv_dim + head * hd + i];
    scores[j] = s * scale;
    if (var.softcap > 0) scores[j] = var.softcap * std::tanh(scores[j] / var.softcap);
    mx = std::max(mx, scores[j]);
  }
  if (var.sink != nullptr) sum = std::exp(*var.sink - mx);
  for (int32_t j = lo; j < len; ++j) sum += scores[j] = std::exp(scores[j] - mx);  // unseen: 0
  for (int32_t j = lo; j < len; ++j) {
    for (int32_t i = 0; i < hd; ++i)
      out[i] += scores[j] / sum * kv.v[static_cast<size_t>(j) * kv.kv_dim + head * hd + i];
  }
  return out;
}

// attend_rows arguments for `rows` query rows against K/V head `head` of `kv`.
AttendRowsArgs RowArgs(const PagedKv& kv, int32_t head, float scale, int32_t rows,
                       const int32_t* len, const float* const* q, float* const* out) {
  AttendRowsArgs a;
  a.block_table = kv.table.data(), a.kv_head = head, a.num_rows = rows;
  a.len = len, a.q = q, a.out = out, a.scale = scale;
  return a;
}

TEST(Attention, RowsMatchNaiveAttentionAndScalarTwinThroughShuffledBlockTables) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int32_t tpb : {8, 16, 32, 64}) {
      for (int32_t hd : {16, 40, 64, 128, 256}) {
        const int32_t kv_heads = 2, head = 1;
        const PagedKv kv(dt, kv_heads, hd, tpb, 300, rng);
        for (int32_t n : {1, 7, 16, 17, 100, 255, 300}) {
          for (int32_t rows : {1, 2, 3, 8, 13}) {
            // Rows of different causal lengths (a tile of tokens), as PagedAttention makes them.
            std::vector<int32_t> len(rows);
            for (int32_t r = 0; r < rows; ++r) len[r] = std::max(1, n - (rows - 1 - r) * 3);
            std::vector<float> q(rows * hd), want(rows * hd), got(rows * hd), one(hd);
            std::vector<float> scratch(AttendRowsScratchFloats(rows, hd, tpb));
            std::vector<const float*> q_rows(rows);
            std::vector<float*> want_rows(rows), got_rows(rows);
            for (int32_t r = 0; r < rows; ++r) {
              q_rows[r] = q.data() + r * hd;
              want_rows[r] = want.data() + r * hd;
              got_rows[r] = got.data() + r * hd;
            }
            for (float& v : q) v = nd(rng);
            const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
            GetKernels(SimdLevel::kScalar)
                .attend_rows(
                    kv.view,
                    RowArgs(kv, head, scale, rows, len.data(), q_rows.data(), want_rows.data()),
                    scratch.data());
            for (int32_t r = 0; r < rows; ++r) {
              const std::vector<double> ref =
                  NaiveAttention(kv, head, hd, len[r], q_rows[r], scale);
              for (int32_t i = 0; i < hd; ++i) {
                ASSERT_NEAR(want[r * hd + i], ref[i], 1e-5 * (1 + std::fabs(ref[i])))
                    << DTypeName(dt) << " tpb " << tpb << " hd " << hd << " len " << len[r];
              }
            }
            for (SimdLevel level : Levels()) {
              const KernelTable& k = GetKernels(level);
              k.attend_rows(
                  kv.view,
                  RowArgs(kv, head, scale, rows, len.data(), q_rows.data(), got_rows.data()),
                  scratch.data());
              for (int32_t i = 0; i < rows * hd; ++i) {
                ASSERT_NEAR(got[i], want[i], 1e-5f * (1 + std::fabs(want[i])))
                    << DTypeName(dt) << " tpb " << tpb << " hd " << hd << " n " << n << " rows "
                    << rows;
              }
              // A row's result does not depend on the rows it is computed with.
              for (int32_t r = 0; r < rows; ++r) {
                float* one_row = one.data();
                k.attend_rows(kv.view, RowArgs(kv, head, scale, 1, &len[r], &q_rows[r], &one_row),
                              scratch.data());
                for (int32_t i = 0; i < hd; ++i)
                  ASSERT_EQ(one[i], got[r * hd + i]) << "row " << r << " of " << rows;
              }
            }
          }
        }
      }
    }
  }
  SKIP_WITHOUT_SIMD();  // the naive comparison ran; the twin comparison was with itself
}

TEST(Attention, PagedAttentionMatchesNaiveAttentionForMixedSequences) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  ThreadPool pool(3);
  for (int32_t heads : {4, 8, 32, 64}) {
    const AttentionShape shape{heads, 4, 64, 0.125f};
    const PagedKv a(DType::kF16, 4, 64, 32, 530, rng), b(DType::kF16, 4, 64, 32, 77, rng);
    // Sequence a: a 40-token chunk ending at 530; b: one decode token at position 76.
    const std::vector<AttentionSeq> seqs = {{a.table.data(), 490, 40, 0},
                                            {b.table.data(), 76, 1, 40}};
    std::vector<float> q(41 * heads * 64), out(q.size());
    for (float& x : q) x = nd(rng);
    std::vector<float> scratch(AttentionScratchFloats(shape, pool.num_threads(), 32));
    // Both sequences live in their own pools: run them one at a time.
    for (int s = 0; s < 2; ++s) {
      const PagedKv& kv = s == 0 ? a : b;
      PagedAttention(kv.view, shape, &seqs[s], 1, q.data(), out.data(), pool, scratch.data());
      for (int32_t t = 0; t < seqs[s].num_tokens; ++t) {
        const int64_t row = seqs[s].row_offset + t;
        for (int32_t h = 0; h < heads; ++h) {
          const float* qr = q.data() + (row * heads + h) * 64;
          const std::vector<double> ref =
              NaiveAttention(kv, h / (heads / 4), 64, seqs[s].start_pos + t + 1, qr, 0.125f);
          for (int32_t i = 0; i < 64; ++i) {
            ASSERT_NEAR(out[(row * heads + h) * 64 + i], ref[i], 1e-5 * (1 + std::fabs(ref[i])))
                << "heads " << heads << " t " << t;
          }
        }
      }
    }
  }
}

// The attention variants under test: each alone and all three together.
struct VariantCase {
  float softcap;
  int32_t window;
  bool sinks;
};
constexpr VariantCase kVariantCases[] = {{0, 1, false},    {0, 13, false},   {0, 40, false},
                                         {0, 128, false},  {2.5f, 0, false}, {0, 0, true},
                                         {2.5f, 13, true}, {2.5f, 100, true}};

AttentionShape VariantShape(int32_t heads, int32_t kv_heads, int32_t hd, const VariantCase& c,
                            const std::vector<float>& sinks) {
  AttentionShape shape{heads, kv_heads, hd, 1.0f / std::sqrt(static_cast<float>(hd))};
  shape.softcap = c.softcap, shape.window = c.window;
  shape.sinks = c.sinks ? sinks.data() : nullptr;
  return shape;
}

// Sink logits around the scores' range; head 1's outweighs every position.
std::vector<float> RandomSinks(int32_t heads, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<float> sinks(heads);
  for (float& x : sinks) x = nd(rng);
  sinks[1] = 6.0f;
  return sinks;
}

// NaiveAttention of every head of every new token of `seqs` (all reading kv's positions).
std::vector<double> NaiveRows(const PagedKv& kv, const AttentionShape& shape,
                              const std::vector<AttentionSeq>& seqs, const float* q) {
  const int32_t heads = shape.num_heads, hd = shape.head_dim;
  int64_t rows = 0;
  for (const AttentionSeq& seq : seqs) rows = std::max(rows, seq.row_offset + seq.num_tokens);
  std::vector<double> ref(rows * heads * hd);
  for (const AttentionSeq& seq : seqs) {
    for (int32_t t = 0; t < seq.num_tokens; ++t) {
      for (int32_t h = 0; h < heads; ++h) {
        const int64_t at = ((seq.row_offset + t) * heads + h) * hd;
        const Variant var{shape.softcap, shape.window, shape.sinks ? shape.sinks + h : nullptr};
        const std::vector<double> one =
            NaiveAttention(kv, h / (heads / shape.num_kv_heads), hd, seq.start_pos + t + 1, q + at,
                           shape.scale, var);
        std::copy(one.begin(), one.end(), ref.begin() + at);
      }
    }
  }
  return ref;
}

// PagedAttention with each SIMD level's table against NaiveAttention: a prompt chunk across
// blocks and decode rows late and early in a sequence, GQA (4 query heads per K/V head).
TEST(Attention, WindowSoftcapAndSinksMatchNaiveAttention) {
  std::mt19937 rng(29);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  ThreadPool pool(2);
  const int32_t heads = 8, kv_heads = 2;
  const std::vector<float> sinks = RandomSinks(heads, rng);
  struct Config {
    DType dtype;
    int32_t tokens_per_block, head_dim;
  };
  for (const auto [dt, tpb, hd] : {Config{DType::kF16, 8, 64}, Config{DType::kF32, 16, 256},
                                   Config{DType::kBF16, 32, 128}, Config{DType::kF16, 16, 40}}) {
    const PagedKv kv(dt, kv_heads, hd, tpb, 200, rng);
    const std::vector<AttentionSeq> seqs = {
        {kv.table.data(), 179, 21, 0}, {kv.table.data(), 150, 1, 21}, {kv.table.data(), 5, 1, 22}};
    std::vector<float> q(23 * heads * hd), out(q.size());
    for (float& x : q) x = nd(rng);
    for (const VariantCase& c : kVariantCases) {
      const AttentionShape shape = VariantShape(heads, kv_heads, hd, c, sinks);
      const std::vector<double> ref = NaiveRows(kv, shape, seqs, q.data());
      std::vector<float> scratch(AttentionScratchFloats(shape, pool.num_threads(), tpb));
      for (SimdLevel level : Levels()) {
        SetActiveSimdLevel(level);
        PagedAttention(kv.view, shape, seqs.data(), 3, q.data(), out.data(), pool, scratch.data());
        for (size_t i = 0; i < out.size(); ++i) {
          ASSERT_NEAR(out[i], ref[i], 1e-5 * (1 + std::fabs(ref[i])))
              << SimdLevelName(level) << " " << DTypeName(dt) << " tpb " << tpb << " hd " << hd
              << " softcap " << c.softcap << " window " << c.window << " sinks " << c.sinks
              << " row " << i / (heads * hd) << " head " << i / hd % heads;
        }
      }
      SetActiveSimdLevel(BestSimdLevel());
    }
  }
}

// Tree attention (drafts verified as a tree): each tree token's rows equal the naive attention
// over the positions before the tree and its own branch, and the same branch run alone (its
// tokens at consecutive positions, causally) — within rounding masked in place, bit for bit
// with scratch blocks — for F32, F16 and 8-bit caches, with soft-capping and sinks, trees
// inside one span and across a span's end, at every SIMD level.
TEST(Attention, TreeAttentionEqualsEachBranchRunAlone) {
  std::mt19937 rng(53);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  ThreadPool pool(2);
  const int32_t heads = 8, kv_heads = 2, hd = 64, tree = 14;
  const std::vector<float> sinks = RandomSinks(heads, rng);
  // A random tree in topological order: parent[t] < t; bits[t]: t's ancestors and itself.
  std::vector<int32_t> parent(tree, -1);
  std::vector<uint64_t> bits(tree);
  for (int32_t t = 0; t < tree; ++t) {
    if (t > 0) parent[t] = static_cast<int32_t>(rng() % t);
    bits[t] = (t > 0 ? bits[parent[t]] : 0) | (uint64_t{1} << t);
  }
  for (DType dt : {DType::kF32, DType::kF16, DType::kI8}) {
    for (int32_t tpb : {16, 32}) {
      for (int32_t context : {120, 150}) {  // the tree across a 128-position span's end, or not
        // Positions past the tree only make room: their blocks are the exact pass's scratch.
        const int32_t scratch_blocks = TreeScratchBlocks(context, tree, bits.data(), tpb);
        const PagedKv kv(dt, kv_heads, hd, tpb, context + tree + scratch_blocks * tpb, rng);
        const std::vector<int32_t> scratch_ids(
            kv.table.begin() + (context + tree + tpb - 1) / tpb,
            kv.table.begin() + (context + tree + tpb - 1) / tpb + scratch_blocks);
        std::vector<float> q(tree * heads * hd), out(q.size()), exact(q.size()), alone(heads * hd);
        for (float& x : q) x = nd(rng);
        const double tolerance = dt == DType::kI8 ? 0.05 : 1e-5;
        for (const VariantCase& c :
             {VariantCase{0, 0, false}, VariantCase{2.5f, 0, false}, VariantCase{0, 0, true}}) {
          const AttentionShape shape = VariantShape(heads, kv_heads, hd, c, sinks);
          std::vector<float> scratch(AttentionScratchFloats(shape, pool.num_threads(), tpb));
          const AttentionSeq seq{kv.table.data(), context, tree, 0, bits.data()};
          const AttentionSeq exact_seq{kv.table.data(), context,           tree, 0,
                                       bits.data(),     scratch_ids.data()};
          for (SimdLevel level : Levels()) {
            SetActiveSimdLevel(level);
            PagedAttention(kv.view, shape, &seq, 1, q.data(), out.data(), pool, scratch.data());
            PagedAttention(kv.view, shape, &exact_seq, 1, q.data(), exact.data(), pool,
                           scratch.data());
            for (int32_t t = 0; t < tree; ++t) {
              SCOPED_TRACE(std::string(SimdLevelName(level)) + " " + DTypeName(dt) + " tpb " +
                           std::to_string(tpb) + " context " + std::to_string(context) +
                           " softcap " + std::to_string(c.softcap) + " sinks " +
                           std::to_string(c.sinks) + " token " + std::to_string(t));
              // The branch: the context, then t's ancestors and t.
              std::vector<bool> seen(context + tree, false);
              std::vector<int32_t> branch;
              for (int32_t j = 0; j < context; ++j) seen[j] = true;
              for (int32_t j = 0; j < tree; ++j) {
                if ((bits[t] >> j) & 1u) seen[context + j] = true, branch.push_back(j);
              }
              // Alone: a cache holding the context and the branch at consecutive positions
              // (the values the tree's cache holds, written again: 8-bit rows round the same).
              PagedKv lone(dt, kv_heads, hd, tpb, context + tree, rng);
              const int32_t n = context + static_cast<int32_t>(branch.size());
              std::vector<float> k(kv.k.begin(), kv.k.begin() + context * kv.kv_dim),
                  v(kv.v.begin(), kv.v.begin() + context * kv.kv_dim);
              for (int32_t j : branch) {
                const size_t at = static_cast<size_t>(context + j) * kv.kv_dim;
                k.insert(k.end(), kv.k.begin() + at, kv.k.begin() + at + kv.kv_dim);
                v.insert(v.end(), kv.v.begin() + at, kv.v.begin() + at + kv.kv_dim);
              }
              WriteKv(lone.view, {lone.table.data(), 0, n, 0}, k.data(), v.data());
              const AttentionSeq last{lone.table.data(), n - 1, 1, 0};
              PagedAttention(lone.view, shape, &last, 1, q.data() + t * heads * hd, alone.data(),
                             pool, scratch.data());
              for (int32_t i = 0; i < heads * hd; ++i) {
                ASSERT_EQ(exact[t * heads * hd + i], alone[i])
                    << "with scratch blocks: the branch alone bit for bit";
              }
              for (int32_t h = 0; h < heads; ++h) {
                const float* row = out.data() + (t * heads + h) * hd;
                const Variant var{shape.softcap, 0, shape.sinks ? shape.sinks + h : nullptr};
                const std::vector<double> ref =
                    NaiveAttention(kv, h / (heads / kv_heads), hd, context + tree,
                                   q.data() + (t * heads + h) * hd, shape.scale, var, &seen);
                for (int32_t i = 0; i < hd; ++i) {
                  ASSERT_NEAR(row[i], ref[i], tolerance * (1 + std::fabs(ref[i]))) << "head " << h;
                  ASSERT_NEAR(row[i], alone[h * hd + i],
                              (dt == DType::kI8 ? 0.02 : 1e-5) * (1 + std::fabs(ref[i])))
                      << "head " << h << " against the branch alone";
                }
              }
            }
          }
          SetActiveSimdLevel(BestSimdLevel());
        }
      }
    }
  }
}

// With windows a prompt tile's rows start and end at different blocks: each row's result is
// bit for bit the same alone, in its tile (attend_rows) and beside other sequences
// (PagedAttention).
TEST(Attention, VariantRowsAreTheSameAloneAndInABatch) {
  std::mt19937 rng(31);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  ThreadPool pool(2);
  const int32_t heads = 8, kv_heads = 2, hd = 64, tpb = 16;
  const std::vector<float> sinks = RandomSinks(heads, rng);
  const PagedKv kv(DType::kF16, kv_heads, hd, tpb, 300, rng);
  const std::vector<int32_t> len = {300, 290, 251, 203, 180, 64, 17, 3};
  const int32_t rows = static_cast<int32_t>(len.size());
  const std::vector<float> row_sinks = RandomSinks(rows, rng);
  std::vector<float> q(rows * hd), got(rows * hd), one(hd);
  for (float& x : q) x = nd(rng);
  std::vector<const float*> q_rows(rows);
  std::vector<float*> got_rows(rows);
  for (int32_t r = 0; r < rows; ++r)
    q_rows[r] = q.data() + r * hd, got_rows[r] = got.data() + r * hd;
  std::vector<float> scratch(AttendRowsScratchFloats(rows, hd, tpb));
  for (const VariantCase& c : kVariantCases) {
    for (SimdLevel level : Levels()) {
      AttendRowsArgs args =
          RowArgs(kv, 1, 0.125f, rows, len.data(), q_rows.data(), got_rows.data());
      args.softcap = c.softcap;
      args.window = c.window;
      args.sinks = c.sinks ? row_sinks.data() : nullptr;
      GetKernels(level).attend_rows(kv.view, args, scratch.data());
      for (int32_t r = 0; r < rows; ++r) {
        AttendRowsArgs alone = args;
        float* one_row = one.data();
        alone.num_rows = 1, alone.len = &len[r], alone.q = &q_rows[r], alone.out = &one_row;
        alone.sinks = c.sinks ? &row_sinks[r] : nullptr;
        GetKernels(level).attend_rows(kv.view, alone, scratch.data());
        for (int32_t i = 0; i < hd; ++i)
          ASSERT_EQ(one[i], got[r * hd + i])
              << SimdLevelName(level) << " row " << r << " window " << c.window;
      }
    }
  }
  // A prompt chunk alone and beside two decode rows (other block tables into the same pool).
  const std::vector<AttentionSeq> batch = {{kv.table.data() + 2, 20, 1, 0},
                                           {kv.table.data(), 179, 21, 1},
                                           {kv.table.data() + 1, 250, 1, 22}};
  std::vector<float> qs(23 * heads * hd), together(qs.size()), alone(qs.size());
  for (float& x : qs) x = nd(rng);
  for (const VariantCase& c : kVariantCases) {
    const AttentionShape shape = VariantShape(heads, kv_heads, hd, c, sinks);
    std::vector<float> paged_scratch(AttentionScratchFloats(shape, pool.num_threads(), tpb));
    for (SimdLevel level : Levels()) {
      SetActiveSimdLevel(level);
      PagedAttention(kv.view, shape, batch.data(), 3, qs.data(), together.data(), pool,
                     paged_scratch.data());
      PagedAttention(kv.view, shape, &batch[1], 1, qs.data(), alone.data(), pool,
                     paged_scratch.data());
      for (int64_t i = 1 * heads * hd; i < 22 * heads * hd; ++i)
        ASSERT_EQ(alone[i], together[i]) << SimdLevelName(level) << " window " << c.window;
    }
    SetActiveSimdLevel(BestSimdLevel());
  }
}

// 8-bit K/V (kv_cache_dtype int8): the kernels against NaiveAttention over the values the cache
// holds (the test's own quantization of the written rows), so what remains is the kernels'
// 8-bit query and probabilities; every variant, GQA rows of a prompt tile and decode rows,
// blocks of 16 to 64 positions. The AVX-512 kernel follows the scalar twin's integer model,
// and a row's result is bit for bit the same alone and beside other rows.
TEST(Attention, Int8KvMatchesNaiveAttentionOfWhatTheCacheHolds) {
  std::mt19937 rng(41);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  ThreadPool pool(2);
  const int32_t heads = 8, kv_heads = 2;
  const std::vector<float> sinks = RandomSinks(heads, rng);
  double worst = 0, worst_twin = 0;
  for (int32_t tpb : {16, 32, 64}) {
    for (int32_t hd : {64, 80, 128}) {
      const PagedKv kv(DType::kI8, kv_heads, hd, tpb, 700, rng);
      const std::vector<AttentionSeq> seqs = {{kv.table.data(), 679, 21, 0},
                                              {kv.table.data(), 150, 1, 21},
                                              {kv.table.data(), 5, 1, 22}};
      std::vector<float> q(23 * heads * hd), out(q.size()), twin(q.size());
      for (float& x : q) x = nd(rng);
      for (const VariantCase& c : kVariantCases) {
        const AttentionShape shape = VariantShape(heads, kv_heads, hd, c, sinks);
        const std::vector<double> ref = NaiveRows(kv, shape, seqs, q.data());
        std::vector<float> scratch(AttentionScratchFloats(shape, pool.num_threads(), tpb));
        SetActiveSimdLevel(SimdLevel::kScalar);
        PagedAttention(kv.view, shape, seqs.data(), 3, q.data(), twin.data(), pool, scratch.data());
        for (SimdLevel level : Levels()) {
          SetActiveSimdLevel(level);
          PagedAttention(kv.view, shape, seqs.data(), 3, q.data(), out.data(), pool,
                         scratch.data());
          for (size_t i = 0; i < out.size(); ++i) {
            // Outputs are averages of values of magnitude ~1: 8-bit queries and
            // probabilities move them by a few hundredths at most.
            worst = std::max(worst, std::fabs(out[i] - ref[i]));
            ASSERT_NEAR(out[i], ref[i], 0.05)
                << SimdLevelName(level) << " tpb " << tpb << " hd " << hd << " softcap "
                << c.softcap << " window " << c.window << " sinks " << c.sinks << " row "
                << i / (heads * hd) << " head " << i / hd % heads;
            worst_twin = std::max(worst_twin, static_cast<double>(std::fabs(out[i] - twin[i])));
            ASSERT_NEAR(out[i], twin[i], 0.01) << SimdLevelName(level) << " tpb " << tpb;
          }
        }
        SetActiveSimdLevel(BestSimdLevel());
      }
      // Rows alone and together (a prompt tile of 8 rows with different lengths).
      const std::vector<int32_t> len = {700, 690, 651, 603, 380, 64, 17, 3};
      const int32_t rows = static_cast<int32_t>(len.size());
      std::vector<float> got(rows * hd), one(hd);
      std::vector<const float*> q_rows(rows);
      std::vector<float*> got_rows(rows);
      for (int32_t r = 0; r < rows; ++r)
        q_rows[r] = q.data() + r * hd, got_rows[r] = got.data() + r * hd;
      std::vector<float> scratch(AttendRowsScratchFloats(rows, hd, tpb));
      for (SimdLevel level : Levels()) {
        const AttendRowsArgs args =
            RowArgs(kv, 1, 0.125f, rows, len.data(), q_rows.data(), got_rows.data());
        GetKernels(level).attend_rows(kv.view, args, scratch.data());
        for (int32_t r = 0; r < rows; ++r) {
          AttendRowsArgs alone = args;
          float* one_row = one.data();
          alone.num_rows = 1, alone.len = &len[r], alone.q = &q_rows[r], alone.out = &one_row;
          GetKernels(level).attend_rows(kv.view, alone, scratch.data());
          for (int32_t i = 0; i < hd; ++i)
            ASSERT_EQ(one[i], got[r * hd + i]) << SimdLevelName(level) << " row " << r;
        }
      }
    }
  }
  std::printf("int8 K/V: largest difference from the naive attention %.4f, from the twin %.5f\n",
              worst, worst_twin);
}

// The 8-bit kernels round per (row, 128-position span), so a row's result is the same bit for
// bit whatever the block size: a sequence cached in 16-position blocks by the executor and in
// 32-position blocks by a single-sequence run gives the same logits.
TEST(Attention, Int8ResultsDoNotDependOnTheBlockSize) {
  std::mt19937 rng(43);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int32_t hd = 16, kv_heads = 2, positions = 300;
  std::vector<float> k(static_cast<size_t>(positions) * kv_heads * hd), v(k.size());
  for (float& x : k) x = nd(rng);
  for (float& x : v) x = nd(rng);
  const std::vector<int32_t> len = {300, 299, 298, 297, 200, 130, 129, 128, 127, 17, 16, 1};
  const int32_t rows = static_cast<int32_t>(len.size());
  std::vector<float> q(rows * hd);
  for (float& x : q) x = 3 * nd(rng);
  std::vector<const float*> q_rows(rows);
  for (int32_t r = 0; r < rows; ++r) q_rows[r] = q.data() + r * hd;
  for (SimdLevel level : Levels()) {
    std::vector<std::vector<float>> outs;
    for (int32_t tpb : {16, 32, 64}) {
      const int32_t blocks = (positions + tpb - 1) / tpb;
      std::vector<uint8_t> kb(blocks * KvLayerView::KvTileBytes(DType::kI8, tpb, hd) * kv_heads),
          vb(kb.size());
      const KvLayerView view{kb.data(), vb.data(), DType::kI8, tpb, kv_heads * hd, hd};
      std::vector<int32_t> table(blocks);
      std::iota(table.begin(), table.end(), 0);
      WriteKv(view, {table.data(), 0, positions, 0}, k.data(), v.data());
      std::vector<float> out(rows * hd);
      std::vector<float*> out_rows(rows);
      for (int32_t r = 0; r < rows; ++r) out_rows[r] = out.data() + r * hd;
      std::vector<float> scratch(AttendRowsScratchFloats(rows, hd, tpb));
      AttendRowsArgs a;
      a.block_table = table.data(), a.kv_head = 1, a.num_rows = rows;
      a.len = len.data(), a.q = q_rows.data(), a.out = out_rows.data(), a.scale = 0.25f;
      GetKernels(level).attend_rows(view, a, scratch.data());
      outs.push_back(out);
    }
    for (size_t t = 1; t < outs.size(); ++t) {
      for (int32_t i = 0; i < rows * hd; ++i)
        ASSERT_EQ(outs[t][i], outs[0][i]) << SimdLevelName(level) << " row " << i / hd << " (len "
                                          << len[i / hd] << ") block size #" << t;
    }
  }
}

// Blocks wholly before every row's window go back to the pool while the sequence runs: their
// table entries may be stale. Pointing them at a block of NaNs must not change the result,
// nor pointing them far outside the cache (a read would fault).
TEST(Attention, BlocksBehindEveryWindowAreNeverRead) {
  std::mt19937 rng(37);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  ThreadPool pool(2);
  const int32_t heads = 8, kv_heads = 2, hd = 64;
  const std::vector<float> sinks = RandomSinks(heads, rng);
  for (int32_t tpb : {8, 16, 32}) {
    const PagedKv kv(DType::kF16, kv_heads, hd, tpb, 300, rng);
    const int32_t nan_block = kv.table.back();  // never written: every slot a NaN
    for (int32_t window : {1, 44, 60}) {
      // A prompt chunk at positions 290..299 and a decode row at 299: no row sees a position
      // before 291 - window.
      const int32_t stale_blocks = (291 - window) / tpb;
      std::vector<int32_t> nan_table = kv.table, bad_table = kv.table;
      for (int32_t b = 0; b < stale_blocks; ++b) nan_table[b] = nan_block, bad_table[b] = 1 << 28;
      AttentionShape shape = VariantShape(heads, kv_heads, hd, {2.5f, window, true}, sinks);
      std::vector<float> q(11 * heads * hd), out(q.size()), out_bad(q.size());
      for (float& x : q) x = nd(rng);
      const std::vector<double> ref = NaiveRows(
          kv, shape, {{kv.table.data(), 290, 10, 0}, {kv.table.data(), 299, 1, 10}}, q.data());
      std::vector<float> scratch(AttentionScratchFloats(shape, pool.num_threads(), tpb));
      for (SimdLevel level : Levels()) {
        SetActiveSimdLevel(level);
        const std::vector<AttentionSeq> nan_seqs = {{nan_table.data(), 290, 10, 0},
                                                    {nan_table.data(), 299, 1, 10}};
        const std::vector<AttentionSeq> bad_seqs = {{bad_table.data(), 290, 10, 0},
                                                    {bad_table.data(), 299, 1, 10}};
        PagedAttention(kv.view, shape, nan_seqs.data(), 2, q.data(), out.data(), pool,
                       scratch.data());
        PagedAttention(kv.view, shape, bad_seqs.data(), 2, q.data(), out_bad.data(), pool,
                       scratch.data());
        for (size_t i = 0; i < out.size(); ++i) {
          ASSERT_TRUE(std::isfinite(out[i])) << SimdLevelName(level) << " tpb " << tpb;
          ASSERT_NEAR(out[i], ref[i], 1e-5 * (1 + std::fabs(ref[i])))
              << SimdLevelName(level) << " tpb " << tpb << " window " << window;
          ASSERT_EQ(out_bad[i], out[i]);
        }
      }
      SetActiveSimdLevel(BestSimdLevel());
    }
  }
}

TEST(VectorKernels, SiluMulMatchesScalar) {
  SKIP_WITHOUT_SIMD();
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  for (int64_t n : {1, 15, 16, 17, 1408}) {
    std::vector<float> gate(n), up(n);
    for (int64_t i = 0; i < n; ++i) gate[i] = nd(rng), up[i] = nd(rng);
    gate[0] = n > 1 ? -100.0f : 100.0f;  // far tails: exp(-|g|) underflows, no inf / nan
    std::vector<float> want = gate;
    GetKernels(SimdLevel::kScalar).silu_mul(want.data(), up.data(), n);
    for (SimdLevel level : Levels()) {
      std::vector<float> got = gate;
      GetKernels(level).silu_mul(got.data(), up.data(), n);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_NEAR(got[i], want[i], 2e-6f * (1 + std::fabs(want[i]))) << i;
    }
  }
}

// The K/V store's conversion must equal the scalar rounding bit for bit (the cache content
// decides greedy outputs): random values over the whole range, ties, subnormals, overflow.
TEST(VectorKernels, F32ToF16IsExactlyScalarRounding) {
  SKIP_WITHOUT_SIMD();
  std::mt19937 rng(19);
  std::vector<float> x;
  for (int i = 0; i < 100000; ++i)
    x.push_back(std::ldexp(std::uniform_real_distribution<float>(-1, 1)(rng),
                           static_cast<int>(rng() % 60) - 40));
  for (float v : {0.0f, -0.0f, 65504.0f, 65520.0f, 1e9f, -1e9f, 5.96e-8f, 2.98e-8f,
                  1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity()}) {
    x.push_back(v);
  }
  std::vector<uint16_t> want(x.size());
  GetKernels(SimdLevel::kScalar).f32_to_f16(x.data(), want.data(), static_cast<int64_t>(x.size()));
  for (SimdLevel level : Levels()) {
    std::vector<uint16_t> got(x.size(), 0xdead);
    GetKernels(level).f32_to_f16(x.data(), got.data(), static_cast<int64_t>(x.size()));
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(got[i], want[i]) << x[i];
  }
}

// The activations' int16 blocks (kI16x16 weights) equal the scalar twin's bit for bit: ties
// of the rounding, blocks of zeros, tiny and huge magnitudes.
TEST(QuantizeActivations, Int16BlocksMatchScalarTwin) {
  SKIP_WITHOUT_SIMD();
  std::mt19937 rng(29);
  const int64_t cols = 64 * 9, tokens = 40;
  std::vector<float> x(tokens * cols);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = std::ldexp(std::uniform_real_distribution<float>(-1, 1)(rng),
                      static_cast<int>(rng() % 60) - 30);
  }
  for (int64_t c = 0; c < 64; ++c) x[c] = 0.0f;                             // an all-zero block
  for (int64_t c = 64; c < 128; ++c) x[c] = (c % 2 ? 0.5f : -1.5f) / 5791;  // ties at scale 1
  // Non-finite blocks get a NaN scale and zero quants (their outputs are NaN, as in F32); a
  // block too small to invert gets zero quants, never ones past the int32 bound.
  x[cols + 3] = std::numeric_limits<float>::quiet_NaN();
  x[cols + 64 + 5] = -std::numeric_limits<float>::infinity();
  for (int64_t c = 128; c < 192; ++c) x[cols + c] = 1e-39f * static_cast<float>(c % 3);
  std::vector<int16_t> qa(x.size()), qb(x.size(), 7);
  std::vector<float> da(x.size() / 64), db(x.size() / 64, 7);
  GetKernels(SimdLevel::kScalar).quantize_rows_i16(x.data(), tokens, cols, qa.data(), da.data());
  for (SimdLevel level : Levels()) {
    GetKernels(level).quantize_rows_i16(x.data(), tokens, cols, qb.data(), db.data());
    ASSERT_EQ(qa, qb) << SimdLevelName(level);
    ASSERT_EQ(std::memcmp(da.data(), db.data(), da.size() * sizeof(float)), 0)
        << SimdLevelName(level);  // bit for bit, NaN scales included
  }
  for (int16_t q : qa) ASSERT_LE(std::abs(q), 5792);  // the int32 bound of a block's dot
  const int64_t nb = cols / 64;
  EXPECT_TRUE(std::isnan(da[nb]));
  EXPECT_TRUE(std::isnan(da[nb + 1]));
  EXPECT_FALSE(std::isnan(da[nb + 2]));
}

TEST(VectorKernels, ArgMaxIsTheScalarFirstMaximum) {
  SKIP_WITHOUT_SIMD();
  std::mt19937 rng(23);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN(),
              inf = std::numeric_limits<float>::infinity();
  std::vector<std::vector<float>> cases = {
      {1.0f}, {nan, 5.0f}, {2.0f, nan, 3.0f}, {-inf, -inf, -inf}, {1.0f, 3.0f, 3.0f}};
  for (int64_t n : {15, 16, 17, 32000}) {
    std::vector<float> x(n);
    for (float& v : x) v = std::round(nd(rng) * 4) / 4;  // coarse values: many ties
    cases.push_back(x);
    x[n / 2] = nan;
    cases.push_back(x);
  }
  for (const auto& x : cases) {
    const int64_t want =
        GetKernels(SimdLevel::kScalar).argmax(x.data(), static_cast<int64_t>(x.size()));
    for (SimdLevel level : Levels())
      EXPECT_EQ(GetKernels(level).argmax(x.data(), static_cast<int64_t>(x.size())), want)
          << x.size();
  }
}

TEST(VectorKernels, SumExpMatchesScalar) {
  SKIP_WITHOUT_SIMD();
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (int64_t n : {1, 15, 16, 17, 1000, 32000}) {
    std::vector<float> x(n);
    for (float& v : x) v = nd(rng);
    const float mx = *std::max_element(x.begin(), x.end());
    const float want = GetKernels(SimdLevel::kScalar).sum_exp(x.data(), n, mx);
    for (SimdLevel level : Levels())
      EXPECT_NEAR(GetKernels(level).sum_exp(x.data(), n, mx), want, 1e-5f * want) << n;
  }
}

TEST(QuantizeActivations, MatchesScalarTwin) {
  SKIP_WITHOUT_SIMD();
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  const int64_t cols = 256, tokens = 3;
  std::vector<float> x(tokens * cols);
  for (float& v : x) v = nd(rng);
  MatMulScratch a, b;
  const QuantizedRows* qa = a.Quantize(GetKernels(SimdLevel::kScalar), x.data(), tokens, cols);
  for (SimdLevel level : Levels()) {
    const QuantizedRows* qb = b.Quantize(GetKernels(level), x.data(), tokens, cols);
    for (int64_t i = 0; i < tokens * cols; ++i) {
      ASSERT_LE(std::abs(qa->qs[i] - qb->qs[i]), 1) << i;  // round-half ties may differ by one
      ASSERT_EQ(static_cast<uint8_t>(qb->qs[i] + 128), qb->qu[i]);
    }
    for (int64_t i = 0; i < tokens * cols / 32; ++i) ASSERT_FLOAT_EQ(qa->d[i], qb->d[i]);
  }
}

TEST(VectorKernels, DotAndAxpyMatchScalar) {
  SKIP_WITHOUT_SIMD();
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t n : {1, 3, 16, 17, 31, 64, 100, 128}) {
    std::vector<float> a(n), b(n), y0(n), y1(n);
    std::vector<uint16_t> h(n);
    for (int64_t i = 0; i < n; ++i) {
      a[i] = nd(rng);
      b[i] = nd(rng);
      h[i] = Fp32ToFp16(nd(rng));
      y0[i] = y1[i] = nd(rng);
    }
    const KernelTable& ref = GetKernels(SimdLevel::kScalar);
    for (SimdLevel level : Levels()) {
      const KernelTable& k = GetKernels(level);
      EXPECT_NEAR(k.dot_f32(a.data(), b.data(), n), ref.dot_f32(a.data(), b.data(), n), 1e-4 * n);
      EXPECT_NEAR(k.dot_f32_f16(a.data(), h.data(), n), ref.dot_f32_f16(a.data(), h.data(), n),
                  1e-4 * n);
      std::vector<float> ya = y0, yb = y0;
      k.axpy_f16(ya.data(), 0.7f, h.data(), n);
      ref.axpy_f16(yb.data(), 0.7f, h.data(), n);
      for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(ya[i], yb[i], 1e-5);
      ya = y0, yb = y0;
      k.axpy_f32(ya.data(), -1.3f, a.data(), n);
      ref.axpy_f32(yb.data(), -1.3f, a.data(), n);
      for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(ya[i], yb[i], 1e-5);
    }
  }
}

TEST(MatMul, ThreadedEqualsSingleThreaded) {
  std::mt19937 rng(11);
  Weights w = MakeWeights(DType::kQ8_0, 77, 128, rng);
  std::vector<float> x(5 * 128);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (float& v : x) v = nd(rng);
  ThreadPool one(1), two(2);
  MatMulScratch s1, s2;
  std::vector<float> y1(5 * 77), y2(5 * 77);
  MatMul(w.view, x.data(), 5, y1.data(), one, s1);
  MatMul(w.view, x.data(), 5, y2.data(), two, s2);
  EXPECT_EQ(y1, y2);
}

// A group (one quantization, one pass over the rows of all matrices) gives every output
// exactly what MatMul gives it alone: same types, odd row counts, and mixed activation formats.
TEST(MatMulGroup, EqualsOneMatMulPerMatrix) {
  std::mt19937 rng(13);
  const int64_t cols = 128;
  const std::vector<std::vector<std::pair<DType, int64_t>>> groups = {
      {{DType::kQ8_0x16, 64}, {DType::kQ8_0x16, 32}, {DType::kQ8_0x16, 32}},
      {{DType::kQ4_0x16, 50}, {DType::kQ4_0x16, 77}},
      {{DType::kQ8_0, 40}, {DType::kF16, 24}, {DType::kQ8_0x16, 33}},
      {{DType::kF32, 19}, {DType::kBF16, 5}}};
  for (int64_t tokens : {1, 5, 16}) {
    std::vector<float> x(tokens * cols);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (float& v : x) v = nd(rng);
    for (const auto& spec : groups) {
      std::vector<Weights> ws;
      for (const auto& [dtype, rows] : spec) ws.push_back(MakeWeights(dtype, rows, cols, rng));
      ThreadPool two(2);
      MatMulScratch grouped_scratch, alone_scratch;
      std::vector<std::vector<float>> grouped(ws.size()), alone(ws.size());
      std::vector<MatMulTarget> targets;
      for (size_t i = 0; i < ws.size(); ++i) {
        grouped[i].assign(tokens * ws[i].view.rows, -1.0f);
        alone[i].assign(tokens * ws[i].view.rows, -2.0f);
        targets.push_back({&ws[i].view, grouped[i].data()});
      }
      MatMulGroup(targets.data(), static_cast<int>(targets.size()), x.data(), tokens, two,
                  grouped_scratch);
      for (size_t i = 0; i < ws.size(); ++i) {
        MatMul(ws[i].view, x.data(), tokens, alone[i].data(), two, alone_scratch);
        EXPECT_EQ(grouped[i], alone[i])
            << "matrix " << i << " of " << ws.size() << ", tokens " << tokens;
      }
    }
  }
}

// A mixture of experts' input: each token's row once per expert that takes it. Gathering the
// converted rows (x_index) gives every output bit of copying the float rows and converting
// every copy.
TEST(MatMulSegments, GatheredRowsEqualCopiedRows) {
  std::mt19937 rng(17);
  const int64_t cols = 256, tokens = 9, experts = 5, per_token = 2;
  auto packed = [&](DType source) {
    Weights src = MakeWeights(source, 48, cols, rng);
    Weights w;
    w.source_bytes = std::move(src.bytes);
    w.source = TensorView{w.source_bytes.data(), source, 48, cols};
    w.bytes.resize(InterleavedBytes(w.source));
    w.view = Interleave(w.source, w.bytes.data());
    return w;
  };
  for (DType dt : {DType::kQ8_0x16, DType::kF16x16, DType::kQ4_K, DType::kMXFP4, DType::kF32}) {
    std::vector<Weights> ws;
    for (int e = 0; e < experts; ++e)
      ws.push_back(dt == DType::kQ4_K || dt == DType::kMXFP4 ? packed(dt)
                                                             : MakeWeights(dt, 48, cols, rng));
    std::vector<float> x(tokens * cols);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (float& v : x) v = nd(rng);
    // Rows grouped by expert: token t's slot k goes to expert (t + 2k) % experts.
    std::vector<int32_t> index;
    std::vector<std::pair<int64_t, int64_t>> range(experts);
    for (int e = 0; e < experts; ++e) {
      range[e].first = static_cast<int64_t>(index.size());
      for (int32_t t = 0; t < tokens; ++t) {
        for (int k = 0; k < per_token; ++k)
          if ((t + 2 * k) % experts == e) index.push_back(t);
      }
      range[e].second = static_cast<int64_t>(index.size()) - range[e].first;
    }
    const int64_t rows = static_cast<int64_t>(index.size());
    std::vector<float> copied(rows * cols);
    for (int64_t r = 0; r < rows; ++r)
      std::copy(x.begin() + index[r] * cols, x.begin() + (index[r] + 1) * cols,
                copied.begin() + r * cols);
    std::vector<float> gathered_out(rows * 48, -1.0f), copied_out(rows * 48, -2.0f);
    std::vector<MatMulSegment> gathered_segments, copied_segments;
    for (int e = 0; e < experts; ++e) {
      gathered_segments.push_back({&ws[e].view, range[e].first, range[e].second,
                                   gathered_out.data() + range[e].first * 48});
      copied_segments.push_back(
          {&ws[e].view, range[e].first, range[e].second, copied_out.data() + range[e].first * 48});
    }
    ThreadPool two(2);
    MatMulScratch a, b;
    MatMulSegments(gathered_segments.data(), experts, x.data(), tokens, two, a, index.data(), rows);
    MatMulSegments(copied_segments.data(), experts, copied.data(), rows, two, b);
    EXPECT_EQ(gathered_out, copied_out) << DTypeName(dt);
  }
}

TEST(Fp16, RoundTripAndRounding) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = Fp16ToFp32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(Fp32ToFp16(f), h) << h;
  }
  EXPECT_EQ(Fp32ToFp16(65520.0f), 0x7c00);  // rounds up to infinity
  EXPECT_EQ(Fp32ToBf16(1.0f), 0x3f80);
}

}  // namespace
}  // namespace inflight::kernels
