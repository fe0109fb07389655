// The GGUF block formats beyond Q8_0/Q4_0 (Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K..Q6_K, IQ4_XS):
// dequantization against a second implementation written in the reference's own loop order
// (ggml's dequantize_row_*), random blocks with extreme and zero scales; the interleaved
// records against the native blocks; the VNNI kernel against its scalar twin bit for bit;
// our quantizer's error; corrupt scales refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "base/fp16.h"
#include "kernels/interleave.h"
#include "kernels/kernels.h"
#include "kernels/quant_blocks.h"
#include "kernels/quantize.h"

namespace inflight::kernels {
namespace {

const DType kFormats[] = {DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kIQ4_NL, DType::kQ2_K,
                          DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K,   DType::kIQ4_XS};

std::vector<SimdLevel> Levels() {
  std::vector<SimdLevel> out;
  for (SimdLevel l : {SimdLevel::kScalar, SimdLevel::kAvx512}) {
    if (CpuSupports(l)) out.push_back(l);
  }
  return out;
}

uint16_t U16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
float H(const uint8_t* p) { return Fp16ToFp32(U16(p)); }

// ---- The reference layouts, in ggml's loop order (ggml-quants.c, dequantize_row_*) ----

void RefQ4_1(const uint8_t* b, float* y) {
  const float d = H(b), m = H(b + 2);
  for (int j = 0; j < 16; ++j) {
    y[j] = (b[4 + j] & 0x0F) * d + m;
    y[j + 16] = (b[4 + j] >> 4) * d + m;
  }
}

void RefQ5(const uint8_t* b, float* y, bool has_min) {
  const float d = H(b), m = has_min ? H(b + 2) : 0.0f;
  const uint8_t* p = b + (has_min ? 4 : 2);
  uint32_t qh;
  std::memcpy(&qh, p, 4);
  for (int j = 0; j < 16; ++j) {
    const uint8_t xh_0 = ((qh >> (j + 0)) << 4) & 0x10;
    const uint8_t xh_1 = ((qh >> (j + 12))) & 0x10;
    const int x0 = (p[4 + j] & 0x0F) | xh_0, x1 = (p[4 + j] >> 4) | xh_1;
    if (has_min) {
      y[j] = x0 * d + m;
      y[j + 16] = x1 * d + m;
    } else {
      y[j] = (x0 - 16) * d;
      y[j + 16] = (x1 - 16) * d;
    }
  }
}

void RefIq4Nl(const uint8_t* b, float* y) {
  const float d = H(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * kIq4Values[b[2 + j] & 0xf];
    y[j + 16] = d * kIq4Values[b[2 + j] >> 4];
  }
}

void RefQ2_K(const uint8_t* b, float* y) {
  const float d = H(b + 80), min = H(b + 82);
  const uint8_t* q = b + 16;
  int is = 0;
  for (int n = 0; n < 256; n += 128) {
    int shift = 0;
    for (int j = 0; j < 4; ++j) {
      uint8_t sc = b[is++];
      float dl = d * (sc & 0xF), ml = min * (sc >> 4);
      for (int l = 0; l < 16; ++l) *y++ = dl * ((int8_t)((q[l] >> shift) & 3)) - ml;
      sc = b[is++];
      dl = d * (sc & 0xF), ml = min * (sc >> 4);
      for (int l = 0; l < 16; ++l) *y++ = dl * ((int8_t)((q[l + 16] >> shift) & 3)) - ml;
      shift += 2;
    }
    q += 32;
  }
}

void RefQ3_K(const uint8_t* b, float* y) {
  const uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
  uint32_t aux[4];
  std::memcpy(aux, b + 96, 12);
  const uint32_t tmp = aux[2];
  aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
  aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
  aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
  aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
  const auto* scales = reinterpret_cast<const int8_t*>(aux);
  const float d_all = H(b + 108);
  const uint8_t* q = b + 32;
  const uint8_t* hm = b;
  uint8_t m = 1;
  int is = 0;
  for (int n = 0; n < 256; n += 128) {
    int shift = 0;
    for (int j = 0; j < 4; ++j) {
      float dl = d_all * (scales[is++] - 32);
      for (int l = 0; l < 16; ++l)
        *y++ = dl * ((int8_t)((q[l + 0] >> shift) & 3) - ((hm[l + 0] & m) ? 0 : 4));
      dl = d_all * (scales[is++] - 32);
      for (int l = 0; l < 16; ++l)
        *y++ = dl * ((int8_t)((q[l + 16] >> shift) & 3) - ((hm[l + 16] & m) ? 0 : 4));
      shift += 2;
      m <<= 1;
    }
    q += 32;
  }
}

void ScaleMinK4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
  }
}

void RefQ45_K(const uint8_t* b, float* y, bool q5) {
  const float d = H(b), min = H(b + 2);
  const uint8_t* ql = b + (q5 ? 48 : 16);
  const uint8_t* qh = b + 16;
  int is = 0;
  uint8_t u1 = 1, u2 = 2;
  for (int j = 0; j < 256; j += 64) {
    uint8_t sc, m;
    ScaleMinK4(is + 0, b + 4, &sc, &m);
    const float d1 = d * sc, m1 = min * m;
    ScaleMinK4(is + 1, b + 4, &sc, &m);
    const float d2 = d * sc, m2 = min * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (q5 && (qh[l] & u1) ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (q5 && (qh[l] & u2) ? 16 : 0)) - m2;
    ql += 32;
    is += 2;
    u1 <<= 2;
    u2 <<= 2;
  }
}

void RefQ6_K(const uint8_t* b, float* y) {
  const float d = H(b + 208);
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  for (int n = 0; n < 256; n += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int8_t q1 = (int8_t)((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int8_t q2 = (int8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int8_t q3 = (int8_t)((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int8_t q4 = (int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l + 0] = d * sc[is + 0] * q1;
      y[l + 32] = d * sc[is + 2] * q2;
      y[l + 64] = d * sc[is + 4] * q3;
      y[l + 96] = d * sc[is + 6] * q4;
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

void RefIq4Xs(const uint8_t* b, float* y) {
  const float d = H(b);
  const uint16_t scales_h = U16(b + 2);
  const uint8_t* qs = b + 8;
  for (int ib = 0; ib < 8; ++ib) {
    const int ls = ((b[4 + ib / 2] >> 4 * (ib % 2)) & 0xf) | (((scales_h >> 2 * ib) & 3) << 4);
    const float dl = d * (ls - 32);
    for (int j = 0; j < 16; ++j) {
      y[j + 0] = dl * kIq4Values[qs[j] & 0xf];
      y[j + 16] = dl * kIq4Values[qs[j] >> 4];
    }
    y += 32;
    qs += 16;
  }
}

void ReferenceDequantize(DType t, const uint8_t* b, float* y) {
  switch (t) {
    case DType::kQ4_1:
      return RefQ4_1(b, y);
    case DType::kQ5_0:
      return RefQ5(b, y, false);
    case DType::kQ5_1:
      return RefQ5(b, y, true);
    case DType::kIQ4_NL:
      return RefIq4Nl(b, y);
    case DType::kQ2_K:
      return RefQ2_K(b, y);
    case DType::kQ3_K:
      return RefQ3_K(b, y);
    case DType::kQ4_K:
      return RefQ45_K(b, y, false);
    case DType::kQ5_K:
      return RefQ45_K(b, y, true);
    case DType::kQ6_K:
      return RefQ6_K(b, y);
    case DType::kIQ4_XS:
      return RefIq4Xs(b, y);
    default:
      FAIL();
  }
}

// Byte offsets of a block's F16 fields (so random blocks can carry chosen scales).
std::vector<int> HalfFields(DType t) {
  switch (t) {
    case DType::kQ4_1:
    case DType::kQ5_1:
    case DType::kQ4_K:
    case DType::kQ5_K:
      return {0, 2};
    case DType::kQ2_K:
      return {80, 82};
    case DType::kQ3_K:
      return {108};
    case DType::kQ6_K:
      return {208};
    default:
      return {0};
  }
}

// Random blocks: random bits everywhere, then the F16 fields set to a finite value drawn from
// normal ones, the extremes (largest, smallest normal and subnormal, zero, negative zero), and
// some blocks all zero.
std::vector<uint8_t> RandomBlocks(DType t, int n, std::mt19937& rng) {
  const int64_t bytes = DTypeBlockBytes(t);
  std::vector<uint8_t> out(n * bytes);
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng());
  const uint16_t extremes[] = {0x7bff, 0xfbff, 0x0400, 0x0001, 0x8001, 0x0000, 0x8000, 0x3c00};
  for (int i = 0; i < n; ++i) {
    uint8_t* blk = out.data() + i * bytes;
    if (i % 17 == 5) {
      std::memset(blk, 0, bytes);
      continue;
    }
    for (int f : HalfFields(t)) {
      const uint16_t h =
          i % 3 == 0 ? extremes[rng() % 8]
                     : Fp32ToFp16(std::ldexp(std::uniform_real_distribution<float>(-1, 1)(rng),
                                             -(int)(rng() % 12)));
      std::memcpy(blk + f, &h, 2);
    }
  }
  return out;
}

bool SameBits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

class BlockFormatTest : public ::testing::TestWithParam<DType> {};

TEST_P(BlockFormatTest, DequantizationEqualsReferenceLayoutBitForBit) {
  const DType t = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(t) * 31 + 1);
  const int n = 400;
  const int64_t bs = DTypeBlockSize(t), bytes = DTypeBlockBytes(t);
  const std::vector<uint8_t> blocks = RandomBlocks(t, n, rng);
  std::vector<float> want(bs), got(bs);
  for (int i = 0; i < n; ++i) {
    ReferenceDequantize(t, blocks.data() + i * bytes, want.data());
    DequantizeBlock(t, blocks.data() + i * bytes, got.data());
    for (int64_t j = 0; j < bs; ++j) {
      ASSERT_TRUE(SameBits(got[j], want[j])) << DTypeName(t) << " block " << i << " weight " << j
                                             << ": " << got[j] << " vs " << want[j];
    }
  }
  // Unpacking and packing again gives the same bytes.
  std::vector<uint8_t> repacked(bytes);
  for (int i = 0; i < n; ++i) {
    UnpackedBlock b;
    UnpackBlock(t, blocks.data() + i * bytes, &b);
    PackBlock(t, b, repacked.data());
    ASSERT_EQ(0, std::memcmp(repacked.data(), blocks.data() + i * bytes, bytes)) << "block " << i;
  }
}

TEST_P(BlockFormatTest, InterleavedRecordsHoldTheSameWeights) {
  const DType t = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(t) * 7 + 3);
  const int64_t bs = DTypeBlockSize(t);
  for (int64_t rows : {1, 15, 16, 19, 33}) {
    for (int64_t nblocks : {1, 2, 5}) {
      const int64_t cols = bs * nblocks;
      std::vector<uint8_t> src = RandomBlocks(t, static_cast<int>(rows * nblocks), rng);
      const TensorView native{src.data(), t, rows, cols};
      ASSERT_TRUE(CanInterleave(native));
      std::vector<uint8_t> packed(InterleavedBytes(native));
      const TensorView view = Interleave(native, packed.data());
      ASSERT_TRUE(view.interleaved());
      std::vector<float> a(cols), b(cols);
      for (int64_t r = 0; r < rows; ++r) {
        DequantizeRow(native, r, a.data());
        DequantizeRow(view, r, b.data());
        for (int64_t c = 0; c < cols; ++c)
          ASSERT_TRUE(SameBits(a[c], b[c]))
              << "row " << r << " col " << c << ": " << a[c] << " vs " << b[c];
      }
    }
  }
}

// Normal weights through our quantizer: relative RMS error within the format's bound, zeros
// exactly zero, and a row with an outlier still finite.
TEST_P(BlockFormatTest, QuantizerErrorWithinFormatBound) {
  const DType t = GetParam();
  const std::map<DType, double> kBound = {
      {DType::kQ2_K, 0.45},   {DType::kQ3_K, 0.25},  {DType::kQ4_K, 0.12}, {DType::kQ5_K, 0.06},
      {DType::kQ6_K, 0.03},   {DType::kQ4_1, 0.12},  {DType::kQ5_0, 0.06}, {DType::kQ5_1, 0.06},
      {DType::kIQ4_NL, 0.12}, {DType::kIQ4_XS, 0.12}};
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t n = 4096;
  std::vector<float> x(n), y(n);
  for (float& v : x) v = nd(rng);
  std::vector<uint8_t> q(DTypeRowBytes(t, n));
  QuantizeRow(t, x.data(), n, q.data());
  const TensorView view{q.data(), t, 1, n};
  DequantizeRow(view, 0, y.data());
  double err = 0, ref = 0;
  for (int64_t i = 0; i < n; ++i) err += (x[i] - y[i]) * (x[i] - y[i]), ref += x[i] * x[i];
  const double rel = std::sqrt(err / ref);
  EXPECT_LT(rel, kBound.at(t)) << DTypeName(t);
  std::printf("%-7s relative RMS error %.4f\n", DTypeName(t), rel);
  std::fill(x.begin(), x.end(), 0.0f);
  QuantizeRow(t, x.data(), n, q.data());
  DequantizeRow(view, 0, y.data());
  for (float v : y) ASSERT_EQ(v, 0.0f);
  x[7] = 1e4f;
  QuantizeRow(t, x.data(), n, q.data());
  DequantizeRow(view, 0, y.data());
  for (float v : y) ASSERT_TRUE(std::isfinite(v));
}

// Every SIMD level equals the scalar twin bit for bit, over odd row counts, several tokens
// and column counts; each token alone gives the same bits (batch invariance); and the twin is
// the dot product of the dequantized weights with the quantized activations.
TEST_P(BlockFormatTest, MatMulEqualsScalarTwinBitForBit) {
  const DType t = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(t) + 77);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t bs = DTypeBlockSize(t);
  for (int64_t cols : {bs, 2 * bs, 5 * bs}) {
    for (int64_t rows : {1, 17, 40}) {
      std::vector<float> wf(rows * cols);
      for (float& v : wf) v = nd(rng);
      std::vector<uint8_t> native(DTypeRowBytes(t, cols) * rows);
      for (int64_t r = 0; r < rows; ++r)
        QuantizeRow(t, wf.data() + r * cols, cols, native.data() + r * DTypeRowBytes(t, cols));
      const TensorView src{native.data(), t, rows, cols};
      std::vector<uint8_t> packed(InterleavedBytes(src));
      const TensorView w = Interleave(src, packed.data());
      std::vector<float> deq(rows * cols);
      for (int64_t r = 0; r < rows; ++r) DequantizeRow(src, r, deq.data() + r * cols);
      for (int64_t tokens : {1, 3, 6, 7, 13}) {
        std::vector<float> x(tokens * cols);
        for (float& v : x) v = nd(rng);
        const KernelTable& ref = GetKernels(SimdLevel::kScalar);
        MatMulScratch ref_scratch;
        const QuantizedRows* xq = ref_scratch.Quantize(ref, x.data(), tokens, cols);
        std::vector<float> want(tokens * rows);
        ref.matmul_rows(w, 0, rows, x.data(), xq, tokens, want.data(), rows);
        for (int64_t tk = 0; tk < tokens; ++tk) {
          for (int64_t r = 0; r < rows; ++r) {
            double dot = 0, mag = 0;
            for (int64_t c = 0; c < cols; ++c) {
              const double xv =
                  static_cast<double>(xq->d[(tk * cols + c) / kQBlock]) * xq->qs[tk * cols + c];
              dot += deq[r * cols + c] * xv;
              mag += std::fabs(deq[r * cols + c] * xv);
            }
            ASSERT_NEAR(want[tk * rows + r], dot, 1e-5 * mag + 1e-6)
                << "twin vs dequantized dot, row " << r;
          }
        }
        for (SimdLevel level : Levels()) {
          const KernelTable& k = GetKernels(level);
          MatMulScratch scratch;
          const QuantizedRows* q = scratch.Quantize(k, x.data(), tokens, cols);
          std::vector<float> got(tokens * rows);
          k.matmul_rows(w, 0, rows, x.data(), q, tokens, got.data(), rows);
          for (int64_t i = 0; i < tokens * rows; ++i) {
            ASSERT_TRUE(SameBits(got[i], want[i]))
                << DTypeName(t) << " " << SimdLevelName(level) << " cols " << cols << " rows "
                << rows << " tokens " << tokens << " i " << i << ": " << got[i] << " vs "
                << want[i];
          }
          for (int64_t tk = 0; tk < tokens; ++tk) {
            MatMulScratch one_scratch;
            const QuantizedRows* q1 = one_scratch.Quantize(k, x.data() + tk * cols, 1, cols);
            std::vector<float> one(rows);
            k.matmul_rows(w, 0, rows, x.data() + tk * cols, q1, 1, one.data(), rows);
            for (int64_t r = 0; r < rows; ++r)
              ASSERT_TRUE(SameBits(one[r], got[tk * rows + r])) << "token " << tk << " row " << r;
          }
        }
      }
    }
  }
  // Without AVX-512 the loop above compared the twin with itself.
  if (!CpuSupports(SimdLevel::kAvx512))
    GTEST_SKIP() << "no AVX-512 on this CPU: only the scalar twin runs, nothing to compare it with";
}

TEST_P(BlockFormatTest, NonFiniteScalesAreFound) {
  const DType t = GetParam();
  std::mt19937 rng(5);
  std::vector<uint8_t> blocks = RandomBlocks(t, 20, rng);
  EXPECT_EQ(FirstNonFiniteBlock(t, blocks.data(), 20), -1);
  for (int f : HalfFields(t)) {
    std::vector<uint8_t> bad = blocks;
    const uint16_t nan = 0x7e00, inf = 0xfc00;
    std::memcpy(bad.data() + 13 * DTypeBlockBytes(t) + f, f == HalfFields(t)[0] ? &nan : &inf, 2);
    EXPECT_EQ(FirstNonFiniteBlock(t, bad.data(), 20), 13) << "field at byte " << f;
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, BlockFormatTest, ::testing::ValuesIn(kFormats),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

TEST(BlockFormats, NamesAndGgmlIds) {
  for (DType t : kFormats) {
    EXPECT_EQ(DTypeFromGgmlId(static_cast<uint32_t>(t)), t);
    EXPECT_EQ(DTypeFromName(DTypeName(t)), t);
    EXPECT_TRUE(IsQuantizedFileType(t));
  }
  EXPECT_EQ(DTypeFromName("Q4_K"), DType::kQ4_K);
  EXPECT_FALSE(DTypeFromGgmlId(16).has_value());  // iq2_xxs: not supported, named in errors
  EXPECT_EQ(GgmlTypeName(16), "iq2_xxs");
}

}  // namespace
}  // namespace inflight::kernels
