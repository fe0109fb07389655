#include "kernels/kernels.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "base/check.h"
#include "base/fp16.h"
#include "base/thread_pool.h"
#include "kernels/kernels_internal.h"
#include "kernels/packed_layout.h"
#include "kernels/quant_blocks.h"

namespace inflight::kernels {
namespace {

std::atomic<int> g_active_level{-1};

}  // namespace

const char* SimdLevelName(SimdLevel level) {
  return level == SimdLevel::kAvx512 ? "avx512" : "scalar";
}

bool CpuSupports(SimdLevel level) {
  if (level == SimdLevel::kScalar) return true;
#if defined(__x86_64__)
  __builtin_cpu_init();
  // Every AVX-512 CPU also has F16C and FMA (clang 14 cannot query "f16c"; the fuzz
  // targets are built with it).
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
#if !defined(__clang__)
         __builtin_cpu_supports("f16c") &&
#endif
         __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

SimdLevel BestSimdLevel() {
  if (const char* env = std::getenv("INFLIGHT_SIMD"); env && std::strcmp(env, "scalar") == 0) {
    return SimdLevel::kScalar;
  }
  return CpuSupports(SimdLevel::kAvx512) ? SimdLevel::kAvx512 : SimdLevel::kScalar;
}

const KernelTable& GetKernels(SimdLevel level) {
  INFLIGHT_CHECK(CpuSupports(level));
  if (level == SimdLevel::kAvx512) return Avx512KernelTable();
  return ScalarKernelTable();
}

const KernelTable& ActiveKernels() {
  int level = g_active_level.load(std::memory_order_relaxed);
  if (level < 0) {
    level = static_cast<int>(BestSimdLevel());
    g_active_level.store(level, std::memory_order_relaxed);
  }
  return GetKernels(static_cast<SimdLevel>(level));
}

bool SetActiveSimdLevel(SimdLevel level) {
  if (!CpuSupports(level)) return false;
  g_active_level.store(static_cast<int>(level));
  return true;
}

MatMulScratch::~MatMulScratch() {
  std::free(qs_);
  std::free(qu_);
  std::free(d_);
  std::free(sum_);
  std::free(sum16_);
  std::free(fsum_);
  std::free(fsum16_);
  std::free(q16_);
  std::free(d16_);
}

void MatMulScratch::ReserveI16(int64_t num_tokens, int64_t cols) {
  const int64_t need = num_tokens * cols;
  if (need > i16_capacity_) {
    std::free(q16_);
    std::free(d16_);
    q16_ = static_cast<int16_t*>(
        std::aligned_alloc(64, static_cast<size_t>((need * 2 + 63) / 64 * 64)));
    d16_ = static_cast<float*>(
        std::aligned_alloc(64, static_cast<size_t>((need / kI16Block * 4 + 64) / 64 * 64)));
    INFLIGHT_CHECK(q16_ != nullptr && d16_ != nullptr);
    i16_capacity_ = need;
  }
  rows_ = QuantizedRows{};
  rows_.cols = cols;
  rows_.q16 = q16_;
  rows_.d16 = d16_;
}

QuantizedRows* MatMulScratch::ToI16(const KernelTable& k, const float* x, int64_t num_tokens,
                                    int64_t cols, ThreadPool* pool) {
  ReserveI16(num_tokens, cols);
  auto rows = [&](int64_t t0, int64_t t1) {
    k.quantize_rows_i16(x + t0 * cols, t1 - t0, cols, q16_ + t0 * cols,
                        d16_ + t0 * (cols / kI16Block));
  };
  if (pool != nullptr && num_tokens >= 8)
    pool->ParallelFor(num_tokens, 1, rows);
  else
    rows(0, num_tokens);
  return &rows_;
}

MatMulScratch& MatMulScratch::Gathered() {
  if (!gathered_) gathered_ = std::make_unique<MatMulScratch>();
  return *gathered_;
}

QuantizedRows* MatMulScratch::GatherRows(const QuantizedRows& src, const int32_t* index, int64_t n,
                                         ThreadPool* pool) {
  const int64_t cols = src.cols, nb = cols / kQBlock, nd = cols / kI16Block;
  std::function<void(int64_t, int64_t)> rows;  // (its captures outlive the branches below)
  if (src.q16 != nullptr) {
    ReserveI16(n, cols);
    rows = [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t s = index[r];
        std::memcpy(q16_ + r * cols, src.q16 + s * cols, cols * sizeof(int16_t));
        std::memcpy(d16_ + r * nd, src.d16 + s * nd, nd * sizeof(float));
      }
    };
  } else {
    Reserve(n, cols);
    rows_ = QuantizedRows{qs_, qu_, d_, sum_, sum16_, fsum_, fsum16_, cols};
    rows = [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t s = index[r];
        std::memcpy(qs_ + r * cols, src.qs + s * cols, cols);
        std::memcpy(qu_ + r * cols, src.qu + s * cols, cols);
        std::memcpy(d_ + r * nb, src.d + s * nb, nb * sizeof(float));
        std::memcpy(sum_ + r * nb, src.sum + s * nb, nb * sizeof(int32_t));
        std::memcpy(sum16_ + 2 * r * nb, src.sum16 + 2 * s * nb, 2 * nb * sizeof(int32_t));
        std::memcpy(fsum_ + r * nb, src.fsum + s * nb, nb * sizeof(float));
        std::memcpy(fsum16_ + 2 * r * nb, src.fsum16 + 2 * s * nb, 2 * nb * sizeof(float));
      }
    };
  }
  if (pool != nullptr && n >= 64)
    pool->ParallelFor(n, 16, rows);
  else
    rows(0, n);
  return &rows_;
}

const float* MatMulScratch::GatherFloatRows(const float* x, int64_t cols, const int32_t* index,
                                            int64_t n) {
  if (gathered_f32_.size() < static_cast<size_t>(n * cols))
    gathered_f32_.resize(static_cast<size_t>(n * cols));
  for (int64_t r = 0; r < n; ++r)
    std::memcpy(gathered_f32_.data() + r * cols, x + index[r] * cols, cols * sizeof(float));
  return gathered_f32_.data();
}

void MatMulScratch::Reserve(int64_t num_tokens, int64_t cols) {
  const int64_t need = num_tokens * cols;
  if (need <= capacity_elems_) return;
  std::free(qs_);
  std::free(qu_);
  std::free(d_);
  std::free(sum_);
  std::free(sum16_);
  std::free(fsum_);
  std::free(fsum16_);
  const size_t bytes = static_cast<size_t>((need + 63) / 64 * 64);
  qs_ = static_cast<int8_t*>(std::aligned_alloc(64, bytes));
  qu_ = static_cast<uint8_t*>(std::aligned_alloc(64, bytes));
  const size_t nblocks = static_cast<size_t>(need / kQBlock + 16);
  d_ = static_cast<float*>(std::aligned_alloc(64, (nblocks * 4 + 63) / 64 * 64));
  sum_ = static_cast<int32_t*>(std::aligned_alloc(64, (nblocks * 4 + 63) / 64 * 64));
  sum16_ = static_cast<int32_t*>(std::aligned_alloc(64, (nblocks * 8 + 63) / 64 * 64));
  fsum_ = static_cast<float*>(std::aligned_alloc(64, (nblocks * 4 + 63) / 64 * 64));
  fsum16_ = static_cast<float*>(std::aligned_alloc(64, (nblocks * 8 + 63) / 64 * 64));
  INFLIGHT_CHECK(qs_ && qu_ && d_ && sum_ && sum16_ && fsum_ && fsum16_);
  capacity_elems_ = need;
}

QuantizedRows* MatMulScratch::Quantize(const KernelTable& k, const float* x, int64_t num_tokens,
                                       int64_t cols, ThreadPool* pool) {
  Reserve(num_tokens, cols);
  rows_ = QuantizedRows{qs_, qu_, d_, sum_, sum16_, fsum_, fsum16_, cols};
  auto rows = [&](int64_t t0, int64_t t1) {
    const int64_t nb = cols / kQBlock;
    QuantizedRows part{qs_ + t0 * cols,      qu_ + t0 * cols, d_ + t0 * nb,          sum_ + t0 * nb,
                       sum16_ + 2 * t0 * nb, fsum_ + t0 * nb, fsum16_ + 2 * t0 * nb, cols};
    k.quantize_rows_q8(x + t0 * cols, t1 - t0, cols, &part);
    for (int64_t i = 0; i < (t1 - t0) * nb; ++i) part.fsum[i] = static_cast<float>(part.sum[i]);
    for (int64_t i = 0; i < 2 * (t1 - t0) * nb; ++i)
      part.fsum16[i] = static_cast<float>(part.sum16[i]);
  };
  // Rows are independent: split them over the pool when there are enough.
  if (pool != nullptr && num_tokens >= 8)
    pool->ParallelFor(num_tokens, 1, rows);
  else
    rows(0, num_tokens);
  return &rows_;
}

namespace {

// Tokens per pass of a thread over its rows when the activations are int8: a pass's
// activations (cols bytes a token) stay within ~256 KB of L2 while the thread's weights
// stream past them, instead of every 16-row group sweeping a prompt's whole activations
// from L3 (a 512-token prompt holds 1-3 MB of them). A multiple of the kernels' 6-token
// pass. Each (row, token) result is computed alone, so the split changes no bit.
int64_t TokenChunk(int64_t cols) {
  constexpr int64_t kL2Share = 256 * 1024;
  return std::clamp<int64_t>(kL2Share / std::max<int64_t>(cols, 1) / 6 * 6, 24, 132);
}

// matmul_rows over tokens [0, num_tokens) in chunks of `chunk` (all at once when chunk is 0).
void MatMulRowsChunked(const KernelTable& k, const TensorView& w, int64_t begin, int64_t end,
                       const float* x, const QuantizedRows* xq, int64_t num_tokens, float* y,
                       int64_t chunk) {
  // x may be null when xq holds the activations (gathered rows have no float twin).
  if (xq == nullptr || xq->q16 != nullptr || chunk == 0 || num_tokens <= chunk) {
    k.matmul_rows(w, begin, end, x, xq, num_tokens, y, w.rows);
    return;
  }
  const int64_t nb = xq->cols / kQBlock;
  for (int64_t t0 = 0; t0 < num_tokens; t0 += chunk) {
    const QuantizedRows part{xq->qs + t0 * xq->cols,   xq->qu + t0 * xq->cols,
                             xq->d + t0 * nb,          xq->sum + t0 * nb,
                             xq->sum16 + 2 * t0 * nb,  xq->fsum + t0 * nb,
                             xq->fsum16 + 2 * t0 * nb, xq->cols};
    k.matmul_rows(w, begin, end, x ? x + t0 * w.cols : nullptr, &part,
                  std::min(chunk, num_tokens - t0), y + t0 * w.rows, w.rows);
  }
}

}  // namespace

void MatMul(const TensorView& w, const float* x, int64_t num_tokens, float* y, ThreadPool& pool,
            MatMulScratch& scratch) {
  const KernelTable& k = ActiveKernels();
  const QuantizedRows* xq = nullptr;
  if (UsesQuantizedActivations(w.dtype)) xq = scratch.Quantize(k, x, num_tokens, w.cols, &pool);
  if (w.dtype == DType::kI16x16) xq = scratch.ToI16(k, x, num_tokens, w.cols, &pool);
  const int64_t chunk = TokenChunk(w.cols);
  // Rows are split in multiples of 16 so each thread streams whole cache lines of output.
  pool.ParallelFor(w.rows, 16, [&](int64_t begin, int64_t end) {
    MatMulRowsChunked(k, w, begin, end, x, xq, num_tokens, y, chunk);
  });
}

void MatMulGroup(const MatMulTarget* targets, int num_targets, const float* x, int64_t num_tokens,
                 ThreadPool& pool, MatMulScratch& scratch) {
  constexpr int kMaxTargets = 8;
  INFLIGHT_CHECK(num_targets > 0 && num_targets <= kMaxTargets);
  const KernelTable& k = ActiveKernels();
  const bool quantized = UsesQuantizedActivations(targets[0].w->dtype);
  // Row offsets of each matrix in the concatenation, each padded to a multiple of 16 so a
  // 16-row grain never straddles two matrices.
  constexpr int64_t kGrain = 16;
  int64_t first[kMaxTargets + 1] = {0};
  for (int i = 0; i < num_targets; ++i) {
    const TensorView& w = *targets[i].w;
    INFLIGHT_CHECK(w.cols == targets[0].w->cols);
    if (UsesQuantizedActivations(w.dtype) != quantized) {
      // Mixed activation formats (e.g. a GGUF with F16 V and Q8_0 Q/K): one pass per matrix.
      for (int j = 0; j < num_targets; ++j)
        MatMul(*targets[j].w, x, num_tokens, targets[j].y, pool, scratch);
      return;
    }
    first[i + 1] = first[i] + (w.rows + kGrain - 1) / kGrain * kGrain;
  }
  // int16 blocks take int16 activations (every kI16x16 matrix of the group has x's columns).
  bool i16 = false;
  for (int i = 0; i < num_targets; ++i) i16 |= targets[i].w->dtype == DType::kI16x16;
  const QuantizedRows* xq = quantized
                                ? scratch.Quantize(k, x, num_tokens, targets[0].w->cols, &pool)
                            : i16 ? scratch.ToI16(k, x, num_tokens, targets[0].w->cols, &pool)
                                  : nullptr;
  pool.ParallelFor(first[num_targets], kGrain, [&](int64_t begin, int64_t end) {
    for (int i = 0; i < num_targets; ++i) {
      const int64_t b = std::max(begin, first[i]), e = std::min(end, first[i + 1]);
      if (b >= e) continue;
      const TensorView& w = *targets[i].w;
      const int64_t rb = b - first[i], re = std::min(e - first[i], w.rows);
      if (rb < re)
        MatMulRowsChunked(k, w, rb, re, x, xq, num_tokens, targets[i].y, TokenChunk(w.cols));
    }
  });
}

void MatMulSegments(const MatMulSegment* segments, int num_segments, const float* x, int64_t x_rows,
                    ThreadPool& pool, MatMulScratch& scratch, const int32_t* x_index,
                    int64_t num_indexed) {
  if (num_segments == 0) return;
  const TensorView& w0 = *segments[0].w;
  const bool quantized = UsesQuantizedActivations(w0.dtype);
  const bool i16 = w0.dtype == DType::kI16x16;
  const int64_t seen_rows = x_index != nullptr ? num_indexed : x_rows;  // the segments' row space
  bool mixed = false;
  for (int i = 0; i < num_segments; ++i) {
    const TensorView& w = *segments[i].w;
    INFLIGHT_CHECK(w.cols == w0.cols && segments[i].x_row >= 0 &&
                   segments[i].x_row + segments[i].num_rows <= seen_rows);
    mixed |= UsesQuantizedActivations(w.dtype) != quantized || (w.dtype == DType::kI16x16) != i16;
  }
  if (x_index != nullptr) {
    for (int64_t r = 0; r < num_indexed; ++r)
      INFLIGHT_CHECK(x_index[r] >= 0 && x_index[r] < x_rows);
    if (mixed || (!quantized && !i16)) {
      // Float activations: gather the float rows themselves.
      x = scratch.GatherFloatRows(x, w0.cols, x_index, num_indexed);
      x_rows = num_indexed;
      x_index = nullptr;
    }
  }
  if (mixed) {
    // Mixed activation formats: one pass per matrix.
    for (int j = 0; j < num_segments; ++j) {
      const MatMulSegment& g = segments[j];
      if (g.num_rows > 0) MatMul(*g.w, x + g.x_row * w0.cols, g.num_rows, g.y, pool, scratch);
    }
    return;
  }
  const KernelTable& k = ActiveKernels();
  const int64_t cols = w0.cols;
  const QuantizedRows* xq = quantized ? scratch.Quantize(k, x, x_rows, cols, &pool)
                            : i16     ? scratch.ToI16(k, x, x_rows, cols, &pool)
                                      : nullptr;
  if (x_index != nullptr) {
    xq = scratch.Gathered().GatherRows(*xq, x_index, num_indexed, &pool);
    x = nullptr;  // the gathered rows exist only converted
  }
  // Work items of about equal cost (rows x tokens), each a whole number of 16-row groups.
  struct Item {
    int segment;
    int64_t row_begin, row_end;
  };
  thread_local std::vector<Item> reused;  // the caller's (workers read it through `items`)
  std::vector<Item>& items = reused;
  items.clear();
  int64_t total = 0;
  for (int i = 0; i < num_segments; ++i) total += segments[i].w->rows * segments[i].num_rows;
  const int64_t target = std::max<int64_t>(1, total / (16 * std::max(1, pool.num_threads())));
  for (int i = 0; i < num_segments; ++i) {
    const MatMulSegment& g = segments[i];
    if (g.num_rows == 0) continue;
    const int64_t rows = std::max<int64_t>(16, (target / g.num_rows + 15) / 16 * 16);
    for (int64_t r = 0; r < g.w->rows; r += rows)
      items.push_back({i, r, std::min(g.w->rows, r + rows)});
  }
  const int64_t chunk = TokenChunk(cols);
  pool.ParallelFor(static_cast<int64_t>(items.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t it = begin; it < end; ++it) {
      const Item& item = items[it];
      const MatMulSegment& g = segments[item.segment];
      QuantizedRows part;
      const QuantizedRows* gq = nullptr;
      if (xq != nullptr) {
        part = *xq;
        const int64_t t0 = g.x_row;
        if (xq->q16 != nullptr) {
          part.q16 = xq->q16 + t0 * cols;
          part.d16 = xq->d16 + t0 * (cols / kI16Block);
        } else {
          const int64_t nb = cols / kQBlock;
          part.qs = xq->qs + t0 * cols, part.qu = xq->qu + t0 * cols;
          part.d = xq->d + t0 * nb, part.sum = xq->sum + t0 * nb;
          part.sum16 = xq->sum16 + 2 * t0 * nb, part.fsum = xq->fsum + t0 * nb;
          part.fsum16 = xq->fsum16 + 2 * t0 * nb;
        }
        gq = &part;
      }
      MatMulRowsChunked(k, *g.w, item.row_begin, item.row_end,
                        x != nullptr ? x + g.x_row * cols : nullptr, gq, g.num_rows, g.y, chunk);
    }
  });
}

void DequantizeRow(const TensorView& w, int64_t row, float* out) {
  if (const PackedLayout* l = FindPackedLayout(w.dtype); l && l->packed == w.dtype) {
    const int64_t sb_cols = int64_t{kQBlock} * l->blocks_per_record, nsb = w.cols / sb_cols;
    const int lane = static_cast<int>(row % kInterleaveRows);
    const uint8_t* group =
        static_cast<const uint8_t*>(w.data) + row / kInterleaveRows * nsb * l->record_bytes();
    for (int64_t sb = 0; sb < nsb; ++sb) {
      const uint8_t* rec = group + sb * l->record_bytes();
      for (int blk = 0; blk < l->blocks_per_record; ++blk) {
        const uint8_t* payload = rec + l->header_bytes + blk * l->block_bytes;
        for (int c = 0; c < kQBlock; ++c) {
          float s, o;
          PackedScales(*l, rec, blk, c / 16, lane, &s, &o);
          const int u = PackedQuant(*l, payload, lane, c);
          out[sb * sb_cols + blk * kQBlock + c] = s * static_cast<float>(u - l->offset) - o;
        }
      }
    }
    return;
  }
  if (w.dtype == DType::kI16x16) {
    const int64_t nb = w.cols / kI16Block, lane = row % kInterleaveRows;
    const uint8_t* group =
        static_cast<const uint8_t*>(w.data) + row / kInterleaveRows * nb * kI16RecordBytes;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* rec = group + b * kI16RecordBytes;
      float s;
      std::memcpy(&s, rec + 4 * lane, 4);
      for (int c = 0; c < kI16Block; ++c) {
        int16_t q;
        std::memcpy(&q, rec + I16WeightOffset(static_cast<int>(lane), c), 2);
        out[b * kI16Block + c] = s * static_cast<float>(q);
      }
    }
    return;
  }
  if (IsBlockFormat(w.dtype)) {
    const int64_t bs = DTypeBlockSize(w.dtype), bb = DTypeBlockBytes(w.dtype);
    for (int64_t b = 0; b < w.cols / bs; ++b)
      DequantizeBlock(w.dtype, w.row(row) + b * bb, out + b * bs);
    return;
  }
  if (w.interleaved()) {
    const bool q8 = w.dtype == DType::kQ8_0x16;
    const int64_t nb = w.cols / kQBlock, g = row / kInterleaveRows, j = row % kInterleaveRows;
    const int64_t block_bytes = kInterleaveRows * (q8 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0));
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = static_cast<const uint8_t*>(w.data) + (g * nb + b) * block_bytes;
      uint16_t d16;
      std::memcpy(&d16, blk + 2 * j, 2);
      const float d = Fp16ToFp32(d16);
      const uint8_t* data = blk + 2 * kInterleaveRows;
      for (int q = 0; q < (q8 ? 8 : 4); ++q) {
        const uint8_t* wb = data + (q * kInterleaveRows + j) * 4;
        for (int i = 0; i < 4; ++i) {
          if (q8) {
            out[b * kQBlock + 4 * q + i] = d * (wb[i] - 128);
          } else {
            out[b * kQBlock + 4 * q + i] = d * ((wb[i] & 15) - 8);
            out[b * kQBlock + 16 + 4 * q + i] = d * ((wb[i] >> 4) - 8);
          }
        }
      }
    }
    return;
  }
  const uint8_t* p = w.row(row);
  switch (w.dtype) {
    case DType::kF32:
      std::memcpy(out, p, w.cols * 4);
      break;
    case DType::kF16: {
      const auto* h = reinterpret_cast<const uint16_t*>(p);
      for (int64_t i = 0; i < w.cols; ++i) out[i] = Fp16ToFp32(h[i]);
      break;
    }
    case DType::kBF16: {
      const auto* h = reinterpret_cast<const uint16_t*>(p);
      for (int64_t i = 0; i < w.cols; ++i) out[i] = Bf16ToFp32(h[i]);
      break;
    }
    case DType::kQ8_0: {
      const auto* b = reinterpret_cast<const BlockQ8_0*>(p);
      for (int64_t i = 0; i < w.cols / kQBlock; ++i) {
        const float d = Fp16ToFp32(b[i].d);
        for (int j = 0; j < kQBlock; ++j) out[i * kQBlock + j] = d * b[i].qs[j];
      }
      break;
    }
    case DType::kQ4_0: {
      const auto* b = reinterpret_cast<const BlockQ4_0*>(p);
      for (int64_t i = 0; i < w.cols / kQBlock; ++i) {
        const float d = Fp16ToFp32(b[i].d);
        for (int j = 0; j < kQBlock / 2; ++j) {
          out[i * kQBlock + j] = d * ((b[i].qs[j] & 15) - 8);
          out[i * kQBlock + j + 16] = d * ((b[i].qs[j] >> 4) - 8);
        }
      }
      break;
    }
    default:
      INFLIGHT_CHECK(false);
  }
}

}  // namespace inflight::kernels
