// Compute kernels behind one dispatch table. Each SIMD level implements the same table; the
// scalar table is the reference twin every other level is tested against. The level is
// picked once at start (BestSimdLevel) and can be forced for tests.
//
// Batch invariance: every kernel computes each output row of each token with the same
// sequence of floating-point operations whatever the number of tokens in the call and
// whichever other tokens share it (token groups only share weight loads, never
// accumulators), so a request's result does not depend on its batch.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "tensor/tensor_view.h"

namespace inflight {
class ThreadPool;
}

namespace inflight::kernels {

enum class SimdLevel { kScalar = 0, kAvx512 = 1 };
const char* SimdLevelName(SimdLevel level);
// The best level this CPU runs (AVX-512 F/BW/VL/VNNI + F16C + FMA), or kScalar.
SimdLevel BestSimdLevel();
bool CpuSupports(SimdLevel level);

// Activations quantized to Q8_0 blocks the way llama.cpp does it (d = amax / 127 rounded to
// F16, q = round(x / d)), one row per token. [num_tokens, cols] for qs/qu,
// [num_tokens, cols / 32] for d/sum and [num_tokens, cols / 16] for sum16.
struct QuantizedRows {
  int8_t* qs = nullptr;      // q
  uint8_t* qu = nullptr;     // q + 128, for the unsigned operand of VNNI
  float* d = nullptr;        // block scale (already rounded through F16)
  int32_t* sum = nullptr;    // sum of q in the block
  int32_t* sum16 = nullptr;  // sums of q over each half block (16 columns)
  // The sums as floats (exact), so kernels broadcast them from memory instead of converting
  // and broadcasting from a general register once per 16-row group.
  float* fsum = nullptr;
  float* fsum16 = nullptr;
  int64_t cols = 0;
  // kI16x16 weights take int16 activations instead (quantize_rows_i16): q16 [num_tokens, cols],
  // d16 [num_tokens, cols / 64], made once per matmul (MatMulScratch::ToI16); the kernels make
  // them from x_f32 themselves when these are null.
  int16_t* q16 = nullptr;
  float* d16 = nullptr;
};

struct KvLayerView;  // kernels/attention.h

// The query rows of one attend_rows call. Row r sees positions j with
// max(0, len[r] - window) <= j < len[r] (all of j < len[r] when window is 0), scores them
// s_j = scale * q[r] . K_j, capped to softcap * tanh(s_j / softcap) when softcap > 0, and
// adds exp(sinks[r]) to the softmax denominator when sinks is set (a logit without a value).
struct AttendRowsArgs {
  const int32_t* block_table = nullptr;
  int32_t kv_head = 0;
  int32_t num_rows = 0;
  const int32_t* len = nullptr;     // [num_rows] causal lengths (position + 1)
  const float* const* q = nullptr;  // [num_rows] -> [head_dim]
  float* const* out = nullptr;      // [num_rows] -> [head_dim]
  float scale = 1.0f;
  float softcap = 0.0f;          // 0: no capping
  int32_t window = 0;            // 0: no sliding window
  const float* sinks = nullptr;  // [num_rows] sink logits (unscaled), or null: none
  // Tree attention (drafts verified as a tree): row r sees position tree_start + j, j < 64,
  // only if bit j of tree_bits[r] is set (the step's tokens on its own branch). null: causal.
  int32_t tree_start = 0;
  const uint64_t* tree_bits = nullptr;  // [num_rows]

  // The first position row r sees.
  int32_t FirstSeen(int32_t r) const {
    return window > 0 ? (len[r] > window ? len[r] - window : 0) : 0;
  }
  // Whether row r's tree hides position p (a step token off its branch).
  bool Hidden(int32_t r, int32_t p) const {
    return tree_bits != nullptr && p >= tree_start && p - tree_start < 64 &&
           ((tree_bits[r] >> (p - tree_start)) & 1u) == 0;
  }
  // Scores s[0, n) of positions p0.. that row r's tree hides become -inf (after soft-capping:
  // the cap would make them finite again).
  void MaskTree(int32_t r, float* s, int32_t p0, int32_t n) const {
    if (tree_bits == nullptr) return;
    for (int32_t p = std::max(p0, tree_start); p < std::min(p0 + n, tree_start + 64); ++p)
      if (Hidden(r, p)) s[p - p0] = -INFINITY;
  }
};

struct KernelTable {
  SimdLevel level;
  // x: [num_tokens, cols] -> out (buffers sized by the caller, cols % 32 == 0).
  void (*quantize_rows_q8)(const float* x, int64_t num_tokens, int64_t cols, QuantizedRows* out);
  // y[t, r] = dot(W[r, :], x[t, :]) for r in [row_begin, row_end); y row stride y_stride.
  // F32/F16/BF16 weights (and their x16 panels) use x_f32, quantized ones x_q8 (see
  // UsesQuantizedActivations).
  void (*matmul_rows)(const TensorView& w, int64_t row_begin, int64_t row_end, const float* x_f32,
                      const QuantizedRows* x_q8, int64_t num_tokens, float* y, int64_t y_stride);
  float (*dot_f32)(const float* a, const float* b, int64_t n);
  float (*dot_f32_f16)(const float* a, const uint16_t* b, int64_t n);
  // y += a * x
  void (*axpy_f32)(float* y, float a, const float* x, int64_t n);
  void (*axpy_f16)(float* y, float a, const uint16_t* x, int64_t n);
  // sum_i exp(x[i] - max), with max >= every x[i] (log-softmax normalisers).
  float (*sum_exp)(const float* x, int64_t n, float max);
  // Query rows against one K/V head (AttendRowsArgs): out[r] = softmax(s_r) . V over the
  // positions row r sees, reached through the block table (head `kv_head`'s tiles, see
  // attention.h). The rows are the query heads sharing the K/V head, for one token or a few
  // consecutive tokens of a sequence (causal lengths); K/V is read once for all of them.
  // Each row's result is the same whatever rows share the call. Blocks no row sees (behind
  // every row's window) are never read, nor are their block-table entries.
  // scratch: AttendRowsScratchFloats(num_rows, head_dim, tokens_per_block) floats.
  void (*attend_rows)(const KvLayerView& kv, const AttendRowsArgs& args, float* scratch);
  // gate[i] = silu(gate[i]) * up[i]
  void (*silu_mul)(float* gate, const float* up, int64_t n);
  // out[i] = x[i] as IEEE half, rounded to nearest even (the K/V store).
  void (*f32_to_f16)(const float* x, uint16_t* out, int64_t n);
  // x: [num_tokens, cols] (cols % 64 == 0) -> int16 blocks of 64 (kernels_internal.h):
  // d[t, b] = amax / 5791, q = round(x / d); q [num_tokens, cols], d [num_tokens, cols / 64].
  void (*quantize_rows_i16)(const float* x, int64_t num_tokens, int64_t cols, int16_t* q, float* d);
  // The first index of the largest value (NaNs never win, except at index 0), n >= 1.
  int64_t (*argmax)(const float* x, int64_t n);
};

const KernelTable& GetKernels(SimdLevel level);
// The table of the active level (BestSimdLevel unless SetActiveSimdLevel was called).
const KernelTable& ActiveKernels();
// For tests and benchmarks; returns false if the CPU cannot run `level`.
bool SetActiveSimdLevel(SimdLevel level);

// Whether a weight of this type takes quantized activations (every quantized type; the block
// formats beyond Q8_0/Q4_0 are multiplied only in their interleaved layouts).
inline bool UsesQuantizedActivations(DType t) {
  if (t == DType::kF16x16 || t == DType::kBF16x16 || t == DType::kI16x16) return false;
  return IsQuantizedFileType(t) ||
         static_cast<uint32_t>(t) >= static_cast<uint32_t>(DType::kQ8_0x16);
}

// Scratch for MatMul: the quantized copy of the activations. Sized on first use and reused.
class MatMulScratch {
 public:
  QuantizedRows* Quantize(const KernelTable& k, const float* x, int64_t num_tokens, int64_t cols,
                          ThreadPool* pool = nullptr);
  // The activations as int16 blocks (QuantizedRows::q16 / d16 only), for kI16x16 weights.
  QuantizedRows* ToI16(const KernelTable& k, const float* x, int64_t num_tokens, int64_t cols,
                       ThreadPool* pool = nullptr);
  // Rows index[0..n) of `src` (converted rows of another scratch), copied in that order into
  // this scratch's buffers: a token's converted row once per expert that takes it, without
  // converting it again.
  QuantizedRows* GatherRows(const QuantizedRows& src, const int32_t* index, int64_t n,
                            ThreadPool* pool = nullptr);
  // A second scratch for GatherRows' output (the first keeps the source rows).
  MatMulScratch& Gathered();
  // x's rows index[0..n) in that order, as floats (formats without converted activations).
  const float* GatherFloatRows(const float* x, int64_t cols, const int32_t* index, int64_t n);

 private:
  void Reserve(int64_t num_tokens, int64_t cols);
  // int16 buffers for num_tokens rows; rows_ then points at them (q16 / d16 only).
  void ReserveI16(int64_t num_tokens, int64_t cols);
  int64_t capacity_elems_ = 0;
  int8_t* qs_ = nullptr;
  uint8_t* qu_ = nullptr;
  float* d_ = nullptr;
  int32_t* sum_ = nullptr;
  int32_t* sum16_ = nullptr;
  float* fsum_ = nullptr;
  float* fsum16_ = nullptr;
  int16_t* q16_ = nullptr;
  float* d16_ = nullptr;
  int64_t i16_capacity_ = 0;
  QuantizedRows rows_;
  std::unique_ptr<MatMulScratch> gathered_;
  std::vector<float> gathered_f32_;

 public:
  MatMulScratch() = default;
  ~MatMulScratch();
  MatMulScratch(const MatMulScratch&) = delete;
  MatMulScratch& operator=(const MatMulScratch&) = delete;
};

// y[num_tokens, w.rows] = x[num_tokens, w.cols] @ W^T, split over rows on the pool.
void MatMul(const TensorView& w, const float* x, int64_t num_tokens, float* y, ThreadPool& pool,
            MatMulScratch& scratch);

// One weight matrix of a MatMulGroup and where its product goes.
struct MatMulTarget {
  const TensorView* w;
  float* y;  // [num_tokens, w->rows]
};

// Several products of the same input (Q/K/V, gate/up): the input is quantized once and all
// matrices' rows are split over the pool in one pass, so a decode step pays one quantization
// and one synchronisation instead of one per matrix. Every matrix must have x's column count
// (at most 8 matrices). Each output row is computed exactly as MatMul computes it.
void MatMulGroup(const MatMulTarget* targets, int num_targets, const float* x, int64_t num_tokens,
                 ThreadPool& pool, MatMulScratch& scratch);

// One matrix of a MatMulSegments call, applied to its own rows of the shared input.
struct MatMulSegment {
  const TensorView* w;
  int64_t x_row = 0;     // first row of x
  int64_t num_rows = 0;  // rows of x (tokens)
  float* y = nullptr;    // [num_rows, w->rows]
};

// Many matrices, each over its own range of x's rows (a mixture of experts: every chosen
// expert's gate and up over the rows routed to it): x [x_rows, cols] is converted once, and
// the rows of all matrices are split over the pool in one pass, in pieces of about equal
// work, instead of one pass (and one synchronisation) per matrix. Each output row is computed
// exactly as MatMul computes it.
// x_index: the segments' rows are then rows of a gathered input of num_indexed rows, row r
// being x's row x_index[r] (each token once per expert it chose): x's rows are converted once
// and the converted rows gathered, instead of copying and converting every copy.
void MatMulSegments(const MatMulSegment* segments, int num_segments, const float* x, int64_t x_rows,
                    ThreadPool& pool, MatMulScratch& scratch, const int32_t* x_index = nullptr,
                    int64_t num_indexed = 0);

// Dequantize one row of any weight type to F32 (embedding lookup, tests).
void DequantizeRow(const TensorView& w, int64_t row, float* out);

}  // namespace inflight::kernels
