// AVX-512 VNNI matmul over the interleaved block-format records of kernels/packed_layout.h
// (Q4_1 ... IQ4_XS, MXFP4), one instantiation per format. Built with AVX-512 flags; only called
// after the CPU check in kernels.cc. Every (row, token) result follows the scalar twin's
// float operations exactly (kernels_scalar.cc, MatMulPackedScalar): lanes are rows, and a
// row's sums never meet another row's or token's, so results are bit-identical to the twin
// and independent of the batch.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/kernels_internal.h"
#include "kernels/packed_layout.h"
#include "kernels/row_groups_avx512.h"
#include "kernels/token_passes.h"

namespace inflight::kernels {
namespace {

inline __m512 HalfVector(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline __m512 U8Vector(const uint8_t* p) {
  return _mm512_cvtepi32_ps(
      _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
inline __m512 I8Vector(const uint8_t* p) {
  return _mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
// Passes are 6 tokens, with one group or two: two groups keep 16 unpacked weight vectors live,
// so some spill, yet passes of 6 measured faster than 2-5 (Q4_K 128 tokens: 1.06 / 1.10 /
// 1.18 / 1.21 TOPS at 2 / 4 / 5 / 6 on the 2-thread host of 2026-11-25). Pairs start at a
// full pass.
constexpr int kPassTokens = 6;
constexpr int kPackedPairTokens = kPassTokens;

inline __m512 Negate(__m512 v) { return _mm512_xor_ps(v, _mm512_set1_ps(-0.0f)); }

// Scales (s) and mins (o) of the 16 rows for block `blk` of a record: A for columns 0..15, B
// for 16..31 (equal when the format has one scale per 32 columns).
template <int kIdx>
inline void Scales(const uint8_t* rec, int blk, __m512* sa, __m512* sb, __m512* oa, __m512* ob) {
  constexpr const PackedLayout& L = kPackedLayouts[kIdx];
  *oa = *ob = _mm512_setzero_ps();
  if constexpr (L.header == PackedHeader::kE8) {
    // 2^(e - 128) by vscalefps: exact, subnormal for e < 2 as E8M0ToFp32Half.
    *sa = *sb = _mm512_scalef_ps(_mm512_set1_ps(1.0f),
                                 _mm512_sub_ps(U8Vector(rec), _mm512_set1_ps(128.0f)));
    return;
  }
  const __m512 d = HalfVector(rec);
  if constexpr (L.header == PackedHeader::kD) {
    *sa = *sb = d;
  } else if constexpr (L.header == PackedHeader::kDM) {
    *sa = *sb = d;
    *oa = *ob = Negate(HalfVector(rec + 32));
  } else if constexpr (L.header == PackedHeader::kK4) {
    *sa = *sb = _mm512_mul_ps(d, U8Vector(rec + 64 + 16 * blk));
    *oa = *ob = _mm512_mul_ps(HalfVector(rec + 32), U8Vector(rec + 192 + 16 * blk));
  } else if constexpr (L.header == PackedHeader::kK6) {
    *sa = _mm512_mul_ps(d, I8Vector(rec + 32 + 32 * blk));
    *sb = _mm512_mul_ps(d, I8Vector(rec + 48 + 32 * blk));
  } else if constexpr (L.header == PackedHeader::kK2) {
    const __m512 dmin = HalfVector(rec + 32);
    const __m512i low4 = _mm512_set1_epi32(15);
    for (int h = 0; h < 2; ++h) {
      const __m512i v = _mm512_cvtepu8_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + 64 + 32 * blk + 16 * h)));
      const __m512 s = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_and_si512(v, low4)));
      const __m512 o = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4)));
      if (h == 0)
        *sa = s, *oa = o;
      else
        *sb = s, *ob = o;
    }
  } else {  // kXS
    *sa = *sb = _mm512_mul_ps(d, I8Vector(rec + 32 + 16 * blk));
  }
}

// The 8 operand vectors of one block payload (vector p: columns 4p..4p+3 of the 16 rows).
template <int kIdx>
inline void Unpack(const uint8_t* payload, __m512i* u) {
  constexpr const PackedLayout& L = kPackedLayouts[kIdx];
  if constexpr (L.nib_at >= 0) {
    const __m512i low4 = _mm512_set1_epi8(15);
    for (int q = 0; q < 4; ++q) {
      const __m512i v = _mm512_loadu_si512(payload + L.nib_at + 64 * q);
      u[q] = _mm512_and_si512(v, low4);
      u[q + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
    }
  }
  if constexpr (L.crumb_at >= 0) {
    const __m512i mask = _mm512_set1_epi8(static_cast<char>(3 << L.crumb_shift));
    for (int c = 0; c < 2; ++c) {
      const __m512i v = _mm512_loadu_si512(payload + L.crumb_at + 64 * c);
      for (int q = 0; q < 4; ++q) {
        // Field q (bits 2q, 2q+1) moved to bit crumb_shift; 16-bit shifts only pull bits across
        // bytes into positions the mask clears.
        const int shift = L.crumb_shift - 2 * q;
        __m512i f = v;
        if (shift > 0)
          f = _mm512_slli_epi16(v, shift);
        else if (shift < 0)
          f = _mm512_srli_epi16(v, -shift);
        f = _mm512_and_si512(f, mask);
        u[4 * c + q] = L.nib_at >= 0 ? _mm512_or_si512(u[4 * c + q], f) : f;
      }
    }
  }
  if constexpr (L.bit_at >= 0) {
    const __m512i bit = _mm512_set1_epi8(static_cast<char>(1 << L.bit_shift));
    for (int p = 0; p < 8; ++p) {
      uint64_t m;
      std::memcpy(&m, payload + L.bit_at + 8 * p, 8);
      u[p] = _mm512_mask_add_epi8(u[p], _cvtu64_mask64(m), u[p], bit);
    }
  }
  if constexpr (L.lut != nullptr) {
    const __m512i table =
        _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(L.lut)));
    for (int p = 0; p < 8; ++p) u[p] = _mm512_shuffle_epi8(table, u[p]);
  }
}

inline __m512i Broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// Blocks [b0, b1) of G consecutive 16-row groups (G = 1 or 2) for tokens t0..t0+NT-1: each
// activation broadcast feeds G groups, each unpacked weight vector NT tokens. acc starts from
// `partial` ([token][G * 16] floats; zero at b0 == 0) and is left there. `pf_phase`/`pf_period`:
// pull block b + 32 (the next tile) into L2 when b % pf_period == pf_phase.
template <int kIdx, int G, int NT>
inline void PackedTile(const uint8_t* group, int64_t group_bytes, int64_t b0, int64_t b1,
                       const QuantizedRows& x, int64_t t0, float* partial, int pf_phase,
                       int pf_period) {
  constexpr const PackedLayout& L = kPackedLayouts[kIdx];
  constexpr int64_t kRecord = L.record_bytes();
  constexpr int kPer = L.blocks_per_record;
  constexpr int64_t kBytesPerBlock = kRecord / kPer;
  constexpr int64_t kAhead = 32;  // blocks: one column tile ahead
  const int64_t cols = x.cols, nb = cols / kQBlock;
  __m512 acc[G][NT];
  for (int g = 0; g < G; ++g) {
    for (int k = 0; k < NT; ++k)
      acc[g][k] = b0 == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(partial + 16 * (G * k + g));
  }
  for (int64_t b = b0; b < b1; ++b) {
    const int blk = static_cast<int>(b % kPer);
    __m512 sa[G], sb[G], oa[G], ob[G];
    __m512i u[G][8];
    for (int g = 0; g < G; ++g) {
      const uint8_t* rec = group + g * group_bytes + b / kPer * kRecord;
      if (b % pf_period == pf_phase) {
        const uint8_t* ahead = group + g * group_bytes + (b + kAhead) * kBytesPerBlock;
        for (int64_t off = 0; off < kBytesPerBlock; off += 64)
          _mm_prefetch(reinterpret_cast<const char*>(ahead + off), _MM_HINT_T1);
      }
      Scales<kIdx>(rec, blk, &sa[g], &sb[g], &oa[g], &ob[g]);
      Unpack<kIdx>(rec + L.header_bytes + blk * L.block_bytes, u[g]);
    }
    for (int k = 0; k < NT; ++k) {
      const int64_t tb = (t0 + k) * nb + b;
      const int8_t* xs = x.qs + (t0 + k) * cols + b * kQBlock;
      // The dots start at minus the zero-point correction (the same int32 as subtracting it).
      __m512i start_a = _mm512_setzero_si512(), start_b = _mm512_setzero_si512();
      if constexpr (L.offset != 0 && L.sub16) {
        start_a = _mm512_set1_epi32(-L.offset * x.sum16[2 * tb]);
        start_b = _mm512_set1_epi32(-L.offset * x.sum16[2 * tb + 1]);
      } else if constexpr (L.offset != 0) {
        start_a = _mm512_set1_epi32(-L.offset * x.sum[tb]);
      }
      __m512i da[G], db[G];
      for (int g = 0; g < G; ++g) da[g] = start_a, db[g] = start_b;
      for (int p = 0; p < 4; ++p) {
        const __m512i xa = Broadcast4(xs + 4 * p), xb = Broadcast4(xs + 16 + 4 * p);
        for (int g = 0; g < G; ++g) {
          da[g] = _mm512_dpbusd_epi32(da[g], u[g][p], xa);
          db[g] = _mm512_dpbusd_epi32(db[g], u[g][p + 4], xb);
        }
      }
      const __m512 dx = _mm512_set1_ps(x.d[tb]);
      for (int g = 0; g < G; ++g) {
        __m512 v;
        if constexpr (L.sub16) {
          v = _mm512_mul_ps(_mm512_cvtepi32_ps(da[g]), sa[g]);
          v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(db[g]), sb[g], v);
          if constexpr (L.has_min) {
            v = _mm512_fnmadd_ps(oa[g], _mm512_set1_ps(x.fsum16[2 * tb]), v);
            v = _mm512_fnmadd_ps(ob[g], _mm512_set1_ps(x.fsum16[2 * tb + 1]), v);
          }
        } else {
          v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(da[g], db[g])), sa[g]);
          if constexpr (L.has_min) v = _mm512_fnmadd_ps(oa[g], _mm512_set1_ps(x.fsum[tb]), v);
        }
        acc[g][k] = _mm512_fmadd_ps(v, dx, acc[g][k]);
      }
    }
  }
  for (int g = 0; g < G; ++g) {
    for (int k = 0; k < NT; ++k) _mm512_storeu_ps(partial + 16 * (G * k + g), acc[g][k]);
  }
}

// MXFP4 (nibbles through a table, one power-of-two scale per 32 columns) in the shape of the Q4_0
// kernel (kernels_avx512.cc, InterleavedGroup): one 64-byte quad of nibbles unpacked at a time
// and consumed at once, one dot chain per (group, token). PackedTile unpacks a block's 8 vectors
// per group first (16 live vectors at G = 2, some spilled) and keeps two chains per token: this
// shape measured ~7% faster for MXFP4 at 512 tokens (2880 x 2880, one thread). The int32 dot
// equals PackedTile's and the float operations are the same, so the results are too.
template <int kIdx, int G, int NT>
inline void NibbleLutTile(const uint8_t* group, int64_t group_bytes, int64_t b0, int64_t b1,
                          const QuantizedRows& x, int64_t t0, float* partial, int pf_phase,
                          int pf_period) {
  constexpr const PackedLayout& L = kPackedLayouts[kIdx];
  static_assert(L.blocks_per_record == 1 && L.nib_at == 0 && L.crumb_at < 0 && L.bit_at < 0 &&
                L.lut != nullptr && !L.sub16 && !L.has_min);
  constexpr int64_t kRecord = L.record_bytes();
  constexpr int64_t kAhead = 32;  // blocks: one column tile ahead
  const int64_t cols = x.cols, nb = cols / kQBlock;
  const __m512i low4 = _mm512_set1_epi8(15);
  const __m512i table =
      _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(L.lut)));
  __m512 acc[G][NT];
  for (int g = 0; g < G; ++g) {
    for (int k = 0; k < NT; ++k)
      acc[g][k] = b0 == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(partial + 16 * (G * k + g));
  }
  for (int64_t b = b0; b < b1; ++b) {
    const uint8_t* rec[G];
    __m512 s[G], unused;
    for (int g = 0; g < G; ++g) {
      rec[g] = group + g * group_bytes + b * kRecord;
      if (b % pf_period == pf_phase) {
        for (int64_t off = 0; off < kRecord; off += 64)
          _mm_prefetch(reinterpret_cast<const char*>(rec[g] + kAhead * kRecord + off), _MM_HINT_T1);
      }
      Scales<kIdx>(rec[g], 0, &s[g], &unused, &unused, &unused);
    }
    // Each dot starts at minus the zero-point correction, as in PackedTile.
    __m512i dot[G][NT];
    for (int k = 0; k < NT; ++k) {
      const __m512i start = _mm512_set1_epi32(-L.offset * x.sum[(t0 + k) * nb + b]);
      for (int g = 0; g < G; ++g) dot[g][k] = start;
    }
    for (int q = 0; q < 4; ++q) {
      __m512i lo[G], hi[G];
      for (int g = 0; g < G; ++g) {
        const __m512i v = _mm512_loadu_si512(rec[g] + L.header_bytes + 64 * q);
        lo[g] = _mm512_shuffle_epi8(table, _mm512_and_si512(v, low4));
        hi[g] = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(v, 4), low4));
      }
      for (int k = 0; k < NT; ++k) {
        const int8_t* xs = x.qs + (t0 + k) * cols + b * kQBlock;
        const __m512i xlo = Broadcast4(xs + 4 * q), xhi = Broadcast4(xs + 16 + 4 * q);
        for (int g = 0; g < G; ++g) {
          dot[g][k] = _mm512_dpbusd_epi32(dot[g][k], lo[g], xlo);
          dot[g][k] = _mm512_dpbusd_epi32(dot[g][k], hi[g], xhi);
        }
      }
    }
    for (int k = 0; k < NT; ++k) {
      const __m512 dx = _mm512_set1_ps(x.d[(t0 + k) * nb + b]);
      for (int g = 0; g < G; ++g) {
        const __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(dot[g][k]), s[g]);
        acc[g][k] = _mm512_fmadd_ps(v, dx, acc[g][k]);
      }
    }
  }
  for (int g = 0; g < G; ++g) {
    for (int k = 0; k < NT; ++k) _mm512_storeu_ps(partial + 16 * (G * k + g), acc[g][k]);
  }
}

template <int kIdx>
void MatMulPacked(const TensorView& w, int64_t row_begin, int64_t row_end, const QuantizedRows& x,
                  int64_t num_tokens, float* y, int64_t y_stride) {
  constexpr const PackedLayout& L = kPackedLayouts[kIdx];
  // Column tiles of 32 blocks keep a group's tile and the tokens' activations in L1 across the
  // token passes (a multiple of every format's super-block).
  constexpr int64_t kTileBlocks = 32;
  const int64_t nb = w.cols / kQBlock, nsb = nb / L.blocks_per_record,
                group_bytes = nsb * L.record_bytes();
  const auto* base = static_cast<const uint8_t*>(w.data);
  ForRowGroups(row_begin, row_end, nb, kTileBlocks, num_tokens, kPackedPairTokens, y, y_stride,
               [&]<int G>(int64_t first_group, int64_t b0, int64_t b1, float* partial) {
                 const uint8_t* group = base + first_group * group_bytes;
                 ForTokenPasses<kPassTokens>(
                     num_tokens, [&]<int N>(int64_t t, int pf_phase, int pf_period) {
                       if constexpr (L.header == PackedHeader::kE8) {
                         NibbleLutTile<kIdx, G, N>(group, group_bytes, b0, b1, x, t,
                                                   partial + 16 * G * t, pf_phase, pf_period);
                       } else {
                         PackedTile<kIdx, G, N>(group, group_bytes, b0, b1, x, t,
                                                partial + 16 * G * t, pf_phase, pf_period);
                       }
                     });
               });
}

using PackedFn = void (*)(const TensorView&, int64_t, int64_t, const QuantizedRows&, int64_t,
                          float*, int64_t);

template <size_t... I>
constexpr auto MakePackedTable(std::index_sequence<I...>) {
  return std::array<PackedFn, sizeof...(I)>{&MatMulPacked<static_cast<int>(I)>...};
}

constexpr size_t kNumLayouts = sizeof(kPackedLayouts) / sizeof(kPackedLayouts[0]);
constexpr auto kPackedFns = MakePackedTable(std::make_index_sequence<kNumLayouts>{});

}  // namespace

void MatMulPackedAvx512(const PackedLayout& l, const TensorView& w, int64_t row_begin,
                        int64_t row_end, const QuantizedRows& x, int64_t num_tokens, float* y,
                        int64_t y_stride) {
  kPackedFns[&l - kPackedLayouts](w, row_begin, row_end, x, num_tokens, y, y_stride);
}

}  // namespace inflight::kernels
