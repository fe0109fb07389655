// The GGUF block formats beyond Q8_0/Q4_0 (Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K..Q6_K, IQ4_XS):
// dequantization against a second implementation written in the reference's own loop order
// (ggml's dequantize_row_*), random blocks with extreme and zero scales; the interleaved
// records against the native blocks; the VNNI kernel against its scalar twin bit for bit;
// our quantizer's error; corrupt scales refused. MXFP4 (gpt-oss experts) has its own tests at
// the end: its scale is an exponent byte, not an F16 field.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "base/fp16.h"
#include "base/thread_pool.h"
#include "format/gguf.h"
#include "kernels/interleave.h"
#include "kernels/kernels.h"
#include "kernels/quant_blocks.h"
#include "kernels/quantize.h"
#include "test_util.h"

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

// ---- MXFP4 (ggml type 39) ----
// ggml's MXFP4 written out again from the format's definition, sharing no code with
// quant_blocks: a nibble is an E2M1 number (sign bit 3, exponent bits 1-2, mantissa bit 0),
// which ggml stores doubled as an integer (kvalues_mxfp4; so both zeros are +0), and the scale
// is half the E8M0 value 2^(e - 127), computed for every byte, 255 included (2^127; NaN in the
// OCP spec).
int RefMxfp4Doubled(int nibble) {
  const int exp = (nibble >> 1) & 3, mant = nibble & 1;
  const int mag = exp == 0 ? mant : (2 + mant) << (exp - 1);
  return nibble & 8 ? -mag : mag;
}
float RefE8M0Half(int e) { return std::ldexp(1.0f, e - 128); }

void RefMxfp4Block(const uint8_t* b, float* y) {
  const float d = RefE8M0Half(b[0]);
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(RefMxfp4Doubled(b[1 + j] & 15)) * d;
    y[j + 16] = static_cast<float>(RefMxfp4Doubled(b[1 + j] >> 4)) * d;
  }
}

// ggml's quantize_row_mxfp4_ref for one block (the exponent clamped where ggml's conversion is
// undefined).
void RefQuantizeMxfp4(const float* x, uint8_t* b) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  int e = 0;
  if (amax > 0.0f)
    e = static_cast<int>(std::clamp(std::floor(std::log2(amax)) + 125, 0.0f, 254.0f));
  const float d = RefE8M0Half(e);
  auto nearest = [&](float v) {
    int best = 0;
    for (int i = 1; i < 16; ++i) {
      if (std::fabs(RefMxfp4Doubled(i) * d - v) < std::fabs(RefMxfp4Doubled(best) * d - v))
        best = i;
    }
    return best;
  };
  b[0] = static_cast<uint8_t>(e);
  for (int j = 0; j < 16; ++j)
    b[1 + j] = static_cast<uint8_t>(nearest(x[j]) | nearest(x[j + 16]) << 4);
}

// Blocks covering every (exponent, nibble) pair of interest, then random bytes.
std::vector<uint8_t> Mxfp4TestBlocks(std::mt19937& rng, int num_random) {
  std::vector<uint8_t> out;
  for (int e : {0, 1, 2, 3, 100, 126, 127, 128, 129, 200, 252, 253, 254, 255}) {
    uint8_t b[17] = {static_cast<uint8_t>(e)};
    for (int j = 0; j < 16; ++j) b[1 + j] = static_cast<uint8_t>(j | (15 - j) << 4);
    out.insert(out.end(), b, b + 17);
  }
  for (int i = 0; i < 17 * num_random; ++i) out.push_back(static_cast<uint8_t>(rng()));
  return out;
}

TEST(Mxfp4, DequantizationEqualsGgmlDefinitionBitForBit) {
  EXPECT_EQ(DTypeFromGgmlId(39), DType::kMXFP4);
  EXPECT_EQ(GgmlTypeName(39), "mxfp4");
  EXPECT_EQ(DTypeFromName("MXFP4"), DType::kMXFP4);
  EXPECT_EQ(DTypeBlockSize(DType::kMXFP4), 32);
  EXPECT_EQ(DTypeBlockBytes(DType::kMXFP4), 17);
  EXPECT_TRUE(IsQuantizedFileType(DType::kMXFP4));
  EXPECT_TRUE(UsesQuantizedActivations(DType::kMXFP4));
  EXPECT_TRUE(UsesQuantizedActivations(DType::kMXFP4x16));
  for (int n = 0; n < 16; ++n) EXPECT_EQ(kMxfp4Values[n], RefMxfp4Doubled(n)) << n;
  // Spot values: e = 127 is a scale of 1/2, so the table's 12 is 6.0, the E2M1 maximum.
  uint8_t blk[17] = {127, 0x87, 0x21};
  float y[32];
  DequantizeBlock(DType::kMXFP4, blk, y);
  EXPECT_EQ(y[0], 6.0f);   // low nibble 7
  EXPECT_EQ(y[16], 0.0f);  // high nibble 8: +0, not -0
  EXPECT_FALSE(std::signbit(y[16]));
  EXPECT_EQ(y[1], 0.5f);
  EXPECT_EQ(y[17], 1.0f);
  blk[0] = 0;  // 2^-128, a subnormal scale
  DequantizeBlock(DType::kMXFP4, blk, y);
  EXPECT_EQ(y[1], std::ldexp(1.0f, -128));
  blk[0] = 255;  // 2^127 in ggml: 1 stays finite, 2 and more overflow
  DequantizeBlock(DType::kMXFP4, blk, y);
  EXPECT_EQ(y[1], std::ldexp(1.0f, 127));
  EXPECT_EQ(y[17], INFINITY);

  std::mt19937 rng(39);
  const std::vector<uint8_t> blocks = Mxfp4TestBlocks(rng, 300);
  const int64_t n = static_cast<int64_t>(blocks.size()) / 17;
  std::vector<float> got(32 * n);
  DequantizeRow(TensorView{blocks.data(), DType::kMXFP4, 1, 32 * n}, 0, got.data());
  for (int64_t i = 0; i < n; ++i) {
    float want[32];
    RefMxfp4Block(blocks.data() + 17 * i, want);
    for (int j = 0; j < 32; ++j) {
      ASSERT_TRUE(SameBits(got[32 * i + j], want[j]))
          << "block " << i << " (e " << int{blocks[17 * i]} << ") weight " << j << ": "
          << got[32 * i + j] << " vs " << want[j];
    }
    UnpackedBlock b;
    uint8_t repacked[17];
    UnpackBlock(DType::kMXFP4, blocks.data() + 17 * i, &b);
    PackBlock(DType::kMXFP4, b, repacked);
    ASSERT_EQ(0, std::memcmp(repacked, blocks.data() + 17 * i, 17)) << "block " << i;
  }
  // Exponent 255 (NaN in the OCP spec) is what ggml_validate_row_data refuses.
  std::vector<uint8_t> ok(17 * 20, 0x12), bad = ok;
  EXPECT_EQ(FirstNonFiniteBlock(DType::kMXFP4, ok.data(), 20), -1);
  bad[17 * 13] = 255;
  EXPECT_EQ(FirstNonFiniteBlock(DType::kMXFP4, bad.data(), 20), 13);
}

TEST(Mxfp4, QuantizerIsGgmlsAndRoundTrips) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t n = 32 * 512;
  std::vector<float> x(n), y(n);
  for (int64_t i = 0; i < n; ++i) {
    // Magnitudes from 2^-140 (below ggml's range) to 2^120, some blocks all zero, and ties.
    const int block = static_cast<int>(i / 32);
    const int scale = block % 7 == 0 ? -140 + block % 3 : (block * 37) % 200 - 80;
    x[i] = block % 11 == 3 ? 0.0f : std::ldexp(nd(rng), scale);
    if (block % 13 == 5) x[i] = std::ldexp(static_cast<float>(rng() % 25) * 0.5f, scale);
  }
  std::vector<uint8_t> q(DTypeRowBytes(DType::kMXFP4, n)), want(q.size());
  QuantizeRow(DType::kMXFP4, x.data(), n, q.data());
  for (int64_t b = 0; b < n / 32; ++b) RefQuantizeMxfp4(x.data() + 32 * b, want.data() + 17 * b);
  for (size_t i = 0; i < q.size(); ++i) ASSERT_EQ(q[i], want[i]) << "byte " << i;

  // Normal weights: relative RMS error of a 3-bit float with a power-of-two scale.
  for (float& v : x) v = nd(rng);
  QuantizeRow(DType::kMXFP4, x.data(), n, q.data());
  const TensorView view{q.data(), DType::kMXFP4, 1, n};
  DequantizeRow(view, 0, y.data());
  double err = 0, ref = 0;
  for (int64_t i = 0; i < n; ++i) err += (x[i] - y[i]) * (x[i] - y[i]), ref += x[i] * x[i];
  EXPECT_LT(std::sqrt(err / ref), 0.2);
  // Dequantized values are representable: quantizing them again gives them back exactly.
  std::vector<float> z(n);
  std::vector<uint8_t> q2(q.size());
  QuantizeRow(DType::kMXFP4, y.data(), n, q2.data());
  DequantizeRow(TensorView{q2.data(), DType::kMXFP4, 1, n}, 0, z.data());
  for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(SameBits(y[i], z[i])) << i;
}

// MXFP4 matrix of random normal weights, rows x cols, quantized by QuantizeRow.
std::vector<uint8_t> RandomMxfp4(int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> f(cols);
  const int64_t row_bytes = DTypeRowBytes(DType::kMXFP4, cols);
  std::vector<uint8_t> out(rows * row_bytes);
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : f) v = nd(rng) * 0.05f;
    QuantizeRow(DType::kMXFP4, f.data(), cols, out.data() + r * row_bytes);
  }
  return out;
}

// The interleaved matmul on every level: bit-identical to the scalar twin, each token alone
// equal to its row of the batch, kernels::MatMul (row split, token chunks) equal too; and the
// twin against the F32 products of the dequantized weights with the quantized activations
// (tight) and with the activations themselves (within the 8-bit rounding of x).
TEST(Mxfp4, MatMulEqualsDequantizedProductOnEveryLevel) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  ThreadPool pool(2);
  // 1120 columns: 35 blocks, more than one 32-block column tile of the AVX-512 kernel.
  for (int64_t cols : {32, 160, 1120}) {
    for (int64_t rows : {1, 17, 40}) {
      const std::vector<uint8_t> native = RandomMxfp4(rows, cols, rng);
      const TensorView src{native.data(), DType::kMXFP4, rows, cols};
      ASSERT_TRUE(CanInterleave(src));
      std::vector<uint8_t> packed(InterleavedBytes(src));
      ASSERT_EQ(static_cast<int64_t>(packed.size()), (rows + 15) / 16 * 16 * (cols / 32) * 17);
      const TensorView w = Interleave(src, packed.data());
      ASSERT_EQ(w.dtype, DType::kMXFP4x16);
      std::vector<float> deq(rows * cols);
      for (int64_t r = 0; r < rows; ++r) DequantizeRow(src, r, deq.data() + r * cols);
      for (int64_t tokens : {1, 3, 16, 17, 64}) {
        std::vector<float> x(tokens * cols);
        for (float& v : x) v = nd(rng);
        const KernelTable& ref = GetKernels(SimdLevel::kScalar);
        MatMulScratch ref_scratch;
        const QuantizedRows* xq = ref_scratch.Quantize(ref, x.data(), tokens, cols);
        std::vector<float> want(tokens * rows);
        ref.matmul_rows(w, 0, rows, x.data(), xq, tokens, want.data(), rows);
        for (int64_t t = 0; t < tokens; ++t) {
          for (int64_t r = 0; r < rows; ++r) {
            double dot_q = 0, dot = 0, mag = 0, x_err = 0;
            for (int64_t c = 0; c < cols; ++c) {
              const float d = xq->d[(t * cols + c) / kQBlock], wv = deq[r * cols + c];
              dot_q += static_cast<double>(wv) * d * xq->qs[t * cols + c];
              dot += static_cast<double>(wv) * x[t * cols + c];
              mag += std::fabs(static_cast<double>(wv) * x[t * cols + c]);
              x_err += std::fabs(wv) * 0.6 * d;  // |x - q d| <= d / 2 + 127 |d - f16(d)|
            }
            const float got = want[t * rows + r];
            ASSERT_NEAR(got, dot_q, 1e-5 * mag + 1e-7) << "row " << r << " token " << t;
            ASSERT_NEAR(got, dot, x_err + 1e-5 * mag + 1e-7) << "row " << r << " token " << t;
          }
        }
        for (SimdLevel level : Levels()) {
          const KernelTable& k = GetKernels(level);
          MatMulScratch scratch;
          const QuantizedRows* q = scratch.Quantize(k, x.data(), tokens, cols);
          std::vector<float> got(tokens * rows), one(rows);
          k.matmul_rows(w, 0, rows, x.data(), q, tokens, got.data(), rows);
          for (int64_t i = 0; i < tokens * rows; ++i) {
            ASSERT_TRUE(SameBits(got[i], want[i]))
                << SimdLevelName(level) << " cols " << cols << " rows " << rows << " tokens "
                << tokens << " i " << i << ": " << got[i] << " vs " << want[i];
          }
          for (int64_t t = 0; t < tokens; ++t) {
            MatMulScratch one_scratch;
            const QuantizedRows* q1 = one_scratch.Quantize(k, x.data() + t * cols, 1, cols);
            k.matmul_rows(w, 0, rows, x.data() + t * cols, q1, 1, one.data(), rows);
            for (int64_t r = 0; r < rows; ++r)
              ASSERT_TRUE(SameBits(one[r], got[t * rows + r])) << "token " << t << " row " << r;
          }
          if (level == BestSimdLevel()) {
            std::vector<float> via(tokens * rows);
            MatMulScratch mm_scratch;
            MatMul(w, x.data(), tokens, via.data(), pool, mm_scratch);
            for (int64_t i = 0; i < tokens * rows; ++i) ASSERT_TRUE(SameBits(via[i], got[i])) << i;
          }
        }
      }
    }
  }
  if (!CpuSupports(SimdLevel::kAvx512))
    GTEST_SKIP() << "no AVX-512 on this CPU: only the scalar twin runs, nothing to compare it with";
}

// A 3-D expert tensor [experts, rows, cols] as the loader will slice it: expert x's 2-D view
// starts rows * row_bytes bytes after expert x - 1's (17-byte blocks: odd offsets). Row views
// read the right bytes, and each expert's interleaved copy holds its weights and multiplies
// like a matrix of its own.
TEST(Mxfp4, ExpertViewsOf3DTensorInterleave) {
  std::mt19937 rng(3);
  const int64_t experts = 3, rows = 20, cols = 96;
  const std::vector<uint8_t> all = RandomMxfp4(experts * rows, cols, rng);
  const int64_t row_bytes = DTypeRowBytes(DType::kMXFP4, cols);
  ASSERT_EQ(row_bytes, 51);
  std::vector<float> x(cols);
  for (float& v : x) v = std::uniform_real_distribution<float>(-1, 1)(rng);
  for (int64_t e = 0; e < experts; ++e) {
    const TensorView view{all.data() + e * rows * row_bytes, DType::kMXFP4, rows, cols};
    const std::vector<uint8_t> own(all.begin() + e * rows * row_bytes,
                                   all.begin() + (e + 1) * rows * row_bytes);
    const TensorView alone{own.data(), DType::kMXFP4, rows, cols};
    std::vector<uint8_t> p1(InterleavedBytes(view)), p2(InterleavedBytes(alone));
    const TensorView w1 = Interleave(view, p1.data()), w2 = Interleave(alone, p2.data());
    ASSERT_EQ(p1, p2) << "expert " << e;
    std::vector<float> a(cols), b(cols), want(cols);
    for (int64_t r = 0; r < rows; ++r) {
      DequantizeRow(view, r, a.data());
      DequantizeRow(w1, r, b.data());
      for (int64_t blk = 0; blk < cols / 32; ++blk)
        RefMxfp4Block(all.data() + (e * rows + r) * row_bytes + 17 * blk, want.data() + 32 * blk);
      for (int64_t c = 0; c < cols; ++c) {
        ASSERT_TRUE(SameBits(a[c], want[c])) << "expert " << e << " row " << r << " col " << c;
        ASSERT_TRUE(SameBits(b[c], want[c])) << "expert " << e << " row " << r << " col " << c;
      }
    }
    const KernelTable& k = ActiveKernels();
    MatMulScratch scratch;
    const QuantizedRows* q = scratch.Quantize(k, x.data(), 1, cols);
    std::vector<float> y1(rows), y2(rows);
    k.matmul_rows(w1, 0, rows, x.data(), q, 1, y1.data(), rows);
    k.matmul_rows(w2, 0, rows, x.data(), q, 1, y2.data(), rows);
    for (int64_t r = 0; r < rows; ++r) ASSERT_TRUE(SameBits(y1[r], y2[r])) << r;
  }
}

// The golden gpt-oss file llama-quantize made (MXFP4_MOE, from gpt-oss-f16.gguf): its 12
// expert tensors read through the GGUF reader, a few rows of every expert dequantized against
// this file's own decoding of the raw bytes, and interleaved per expert; then our quantizer
// run on the F16 file's experts reproduces llama-quantize's bytes exactly.
TEST(Mxfp4, GoldenGptOssExpertTensors) {
  const std::string dir = testing::SharedDir() + "/golden/arch/";
  REQUIRE_SHARED_FILE(dir + "gpt-oss-mxfp4_moe.gguf");
  auto mx = GgufFile::Open(dir + "gpt-oss-mxfp4_moe.gguf");
  ASSERT_TRUE(mx.ok()) << mx.status().ToString();
  auto f16 = GgufFile::Open(dir + "gpt-oss-f16.gguf");
  int found = 0;
  for (const GgufTensorInfo& t : (*mx)->tensors()) {
    if (t.ggml_type != 39) continue;
    ++found;
    ASSERT_EQ(t.dtype, DType::kMXFP4) << t.name;
    ASSERT_EQ(t.dims.size(), 3u) << t.name;
    const int64_t cols = t.dims[0], rows = t.dims[1], experts = t.dims[2];
    const int64_t row_bytes = DTypeRowBytes(DType::kMXFP4, cols);
    ASSERT_EQ(t.num_bytes, static_cast<uint64_t>(experts * rows * row_bytes)) << t.name;
    std::vector<float> got(cols), want(cols);
    for (int64_t e = 0; e < experts; ++e) {
      const TensorView view{t.data + e * rows * row_bytes, DType::kMXFP4, rows, cols};
      std::vector<uint8_t> packed(InterleavedBytes(view));
      const TensorView w = Interleave(view, packed.data());
      for (int64_t r : {int64_t{0}, (e * 7) % rows, rows - 1}) {
        const uint8_t* raw = t.data + (e * rows + r) * row_bytes;
        for (int64_t b = 0; b < cols / 32; ++b) RefMxfp4Block(raw + 17 * b, want.data() + 32 * b);
        for (const TensorView& v : {view, w}) {
          DequantizeRow(v, r, got.data());
          for (int64_t c = 0; c < cols; ++c)
            ASSERT_TRUE(SameBits(got[c], want[c])) << t.name << " expert " << e << " row " << r;
        }
      }
    }
    ASSERT_EQ(FirstNonFiniteBlock(DType::kMXFP4, t.data, experts * rows * cols / 32), -1);
    if (!f16.ok()) continue;
    const GgufTensorInfo* source = (*f16)->FindTensor(t.name);
    ASSERT_NE(source, nullptr) << t.name;
    ASSERT_EQ(source->dtype, DType::kF16);
    const int64_t n = source->num_elements();
    std::vector<float> values(n);
    DequantizeRow(TensorView{source->data, DType::kF16, 1, n}, 0, values.data());
    std::vector<uint8_t> ours(DTypeRowBytes(DType::kMXFP4, n));
    QuantizeRow(DType::kMXFP4, values.data(), n, ours.data());
    ASSERT_EQ(0, std::memcmp(ours.data(), t.data, ours.size())) << t.name;
  }
  EXPECT_EQ(found, 12);
  ASSERT_TRUE(f16.ok()) << f16.status().ToString();
}

}  // namespace
}  // namespace inflight::kernels
