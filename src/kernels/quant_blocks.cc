#include "kernels/quant_blocks.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "base/fp16.h"

namespace inflight::kernels {
namespace {

uint16_t Load16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
void Store16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }
uint32_t Load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
void Store32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }

// 32 quants of 4 bits: q[j] in the low nibble of qs[j], q[j + 16] in the high nibble.
void UnpackNibbles32(const uint8_t* qs, uint8_t* q) {
  for (int j = 0; j < 16; ++j) {
    q[j] = qs[j] & 15;
    q[j + 16] = qs[j] >> 4;
  }
}
void PackNibbles32(const uint8_t* q, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>((q[j] & 15) | ((q[j + 16] & 15) << 4));
}

// Q4_K / Q5_K: 8 scales and 8 mins of 6 bits in 12 bytes (ggml's get_scale_min_k4).
void UnpackScalesK4(const uint8_t* s, UnpackedBlock* out) {
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      out->sc[j] = static_cast<int8_t>(s[j] & 63);
      out->m[j] = s[j + 4] & 63;
    } else {
      out->sc[j] = static_cast<int8_t>((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4));
      out->m[j] = static_cast<uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
  }
}
void PackScalesK4(const UnpackedBlock& in, uint8_t* s) {
  std::memset(s, 0, 12);
  for (int j = 0; j < 8; ++j) {
    const uint8_t sc = static_cast<uint8_t>(in.sc[j]) & 63, m = in.m[j] & 63;
    if (j < 4) {
      s[j] |= sc;
      s[j + 4] |= m;
    } else {
      s[j + 4] |= static_cast<uint8_t>((sc & 15) | ((m & 15) << 4));
      s[j - 4] |= static_cast<uint8_t>((sc >> 4) << 6);
      s[j] |= static_cast<uint8_t>((m >> 4) << 6);
    }
  }
}

// Q3_K: 16 scales of 6 bits in 12 bytes; scale s has its low 4 bits in byte s (s < 8) or the
// high nibble of byte s - 8, and its high 2 bits in byte 8 + s % 4 at bit 2 * (s / 4).
void UnpackScalesQ3(const uint8_t* raw, int8_t* sc) {
  for (int s = 0; s < 16; ++s) {
    const int lo = s < 8 ? raw[s] & 15 : raw[s - 8] >> 4;
    const int hi = (raw[8 + s % 4] >> (2 * (s / 4))) & 3;
    sc[s] = static_cast<int8_t>((lo | (hi << 4)) - 32);
  }
}
void PackScalesQ3(const int8_t* sc, uint8_t* raw) {
  std::memset(raw, 0, 12);
  for (int s = 0; s < 16; ++s) {
    const int v = (sc[s] + 32) & 63;
    if (s < 8)
      raw[s] |= static_cast<uint8_t>(v & 15);
    else
      raw[s - 8] |= static_cast<uint8_t>((v & 15) << 4);
    raw[8 + s % 4] |= static_cast<uint8_t>((v >> 4) << (2 * (s / 4)));
  }
}

// Byte and shift of weight i's 2-bit field in Q2_K/Q3_K qs[64]: 128-weight halves, each of
// 32 bytes read four times with shifts 0, 2, 4, 6; weights 16..31 of a 32 from bytes 16..31.
inline int CrumbByte(int i) { return 32 * (i / 128) + 16 * ((i % 32) / 16) + i % 16; }
inline int CrumbShift(int i) { return 2 * ((i % 128) / 32); }

// Q6_K: byte of weight i's low 4 bits in ql[128] (and whether it is the high nibble), byte and
// shift of its high 2 bits in qh[64].
inline int Q6LowByte(int i) { return 64 * (i / 128) + 32 * ((i % 128) / 32 % 2) + i % 32; }
inline bool Q6LowIsHigh(int i) { return (i % 128) / 64 == 1; }
inline int Q6HighByte(int i) { return 32 * (i / 128) + i % 32; }
inline int Q6HighShift(int i) { return 2 * ((i % 128) / 32); }

float Half(uint16_t h) { return Fp16ToFp32(h); }

}  // namespace

bool IsBlockFormat(DType t) {
  switch (t) {
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kIQ4_NL:
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kIQ4_XS:
    case DType::kMXFP4:
      return true;
    default:
      return false;
  }
}

void UnpackBlock(DType t, const uint8_t* s, UnpackedBlock* out) {
  *out = UnpackedBlock{};
  switch (t) {
    case DType::kQ4_1:  // d, m, qs[16]
      out->d = Load16(s);
      out->dmin = Load16(s + 2);
      UnpackNibbles32(s + 4, out->q);
      return;
    case DType::kQ5_0:
    case DType::kQ5_1: {  // d, [m], qh[4], qs[16]
      const int at = t == DType::kQ5_1 ? 4 : 2;
      out->d = Load16(s);
      if (t == DType::kQ5_1) out->dmin = Load16(s + 2);
      const uint32_t qh = Load32(s + at);
      UnpackNibbles32(s + at + 4, out->q);
      for (int j = 0; j < 32; ++j) out->q[j] |= static_cast<uint8_t>(((qh >> j) & 1) << 4);
      return;
    }
    case DType::kIQ4_NL:  // d, qs[16]
      out->d = Load16(s);
      UnpackNibbles32(s + 2, out->q);
      return;
    case DType::kMXFP4:  // e, qs[16]
      out->e = s[0];
      UnpackNibbles32(s + 1, out->q);
      return;
    case DType::kQ2_K: {  // scales[16], qs[64], d, dmin
      for (int j = 0; j < 16; ++j) {
        out->sc[j] = static_cast<int8_t>(s[j] & 15);
        out->m[j] = s[j] >> 4;
      }
      for (int i = 0; i < 256; ++i) out->q[i] = (s[16 + CrumbByte(i)] >> CrumbShift(i)) & 3;
      out->d = Load16(s + 80);
      out->dmin = Load16(s + 82);
      return;
    }
    case DType::kQ3_K: {  // hmask[32], qs[64], scales[12], d
      for (int i = 0; i < 256; ++i) {
        const int low = (s[32 + CrumbByte(i)] >> CrumbShift(i)) & 3;
        const int high = (s[i % 32] >> (i / 32)) & 1;
        out->q[i] = static_cast<uint8_t>(low | (high << 2));
      }
      UnpackScalesQ3(s + 96, out->sc);
      out->d = Load16(s + 108);
      return;
    }
    case DType::kQ4_K:
    case DType::kQ5_K: {  // d, dmin, scales[12], [qh[32]], qs[128]
      out->d = Load16(s);
      out->dmin = Load16(s + 2);
      UnpackScalesK4(s + 4, out);
      const bool q5 = t == DType::kQ5_K;
      const uint8_t* qs = s + (q5 ? 48 : 16);
      for (int i = 0; i < 256; ++i) {
        const uint8_t byte = qs[32 * (i / 64) + i % 32];
        out->q[i] = (i % 64) < 32 ? byte & 15 : byte >> 4;
        if (q5) out->q[i] |= static_cast<uint8_t>(((s[16 + i % 32] >> (i / 32)) & 1) << 4);
      }
      return;
    }
    case DType::kQ6_K: {  // ql[128], qh[64], scales[16], d
      for (int i = 0; i < 256; ++i) {
        const uint8_t low = s[Q6LowByte(i)];
        const int lo4 = Q6LowIsHigh(i) ? low >> 4 : low & 15;
        const int hi2 = (s[128 + Q6HighByte(i)] >> Q6HighShift(i)) & 3;
        out->q[i] = static_cast<uint8_t>(lo4 | (hi2 << 4));
      }
      std::memcpy(out->sc, s + 192, 16);
      out->d = Load16(s + 208);
      return;
    }
    case DType::kIQ4_XS: {  // d, scales_h, scales_l[4], qs[128]
      out->d = Load16(s);
      const uint16_t scales_h = Load16(s + 2);
      for (int ib = 0; ib < 8; ++ib) {
        const int ls =
            ((s[4 + ib / 2] >> (4 * (ib % 2))) & 15) | (((scales_h >> (2 * ib)) & 3) << 4);
        out->sc[ib] = static_cast<int8_t>(ls - 32);
        UnpackNibbles32(s + 8 + 16 * ib, out->q + 32 * ib);
      }
      return;
    }
    default:
      INFLIGHT_CHECK(false);
  }
}

void PackBlock(DType t, const UnpackedBlock& in, uint8_t* s) {
  std::memset(s, 0, DTypeBlockBytes(t));
  switch (t) {
    case DType::kQ4_1:
      Store16(s, in.d);
      Store16(s + 2, in.dmin);
      PackNibbles32(in.q, s + 4);
      return;
    case DType::kQ5_0:
    case DType::kQ5_1: {
      const int at = t == DType::kQ5_1 ? 4 : 2;
      Store16(s, in.d);
      if (t == DType::kQ5_1) Store16(s + 2, in.dmin);
      uint32_t qh = 0;
      for (int j = 0; j < 32; ++j) qh |= static_cast<uint32_t>((in.q[j] >> 4) & 1) << j;
      Store32(s + at, qh);
      PackNibbles32(in.q, s + at + 4);
      return;
    }
    case DType::kIQ4_NL:
      Store16(s, in.d);
      PackNibbles32(in.q, s + 2);
      return;
    case DType::kMXFP4:
      s[0] = in.e;
      PackNibbles32(in.q, s + 1);
      return;
    case DType::kQ2_K:
      for (int j = 0; j < 16; ++j)
        s[j] = static_cast<uint8_t>((in.sc[j] & 15) | ((in.m[j] & 15) << 4));
      for (int i = 0; i < 256; ++i)
        s[16 + CrumbByte(i)] |= static_cast<uint8_t>((in.q[i] & 3) << CrumbShift(i));
      Store16(s + 80, in.d);
      Store16(s + 82, in.dmin);
      return;
    case DType::kQ3_K:
      for (int i = 0; i < 256; ++i) {
        s[32 + CrumbByte(i)] |= static_cast<uint8_t>((in.q[i] & 3) << CrumbShift(i));
        s[i % 32] |= static_cast<uint8_t>(((in.q[i] >> 2) & 1) << (i / 32));
      }
      PackScalesQ3(in.sc, s + 96);
      Store16(s + 108, in.d);
      return;
    case DType::kQ4_K:
    case DType::kQ5_K: {
      Store16(s, in.d);
      Store16(s + 2, in.dmin);
      PackScalesK4(in, s + 4);
      const bool q5 = t == DType::kQ5_K;
      uint8_t* qs = s + (q5 ? 48 : 16);
      for (int i = 0; i < 256; ++i) {
        const int nib = in.q[i] & 15;
        qs[32 * (i / 64) + i % 32] |= static_cast<uint8_t>((i % 64) < 32 ? nib : nib << 4);
        if (q5) s[16 + i % 32] |= static_cast<uint8_t>(((in.q[i] >> 4) & 1) << (i / 32));
      }
      return;
    }
    case DType::kQ6_K:
      for (int i = 0; i < 256; ++i) {
        const int lo4 = in.q[i] & 15;
        s[Q6LowByte(i)] |= static_cast<uint8_t>(Q6LowIsHigh(i) ? lo4 << 4 : lo4);
        s[128 + Q6HighByte(i)] |= static_cast<uint8_t>(((in.q[i] >> 4) & 3) << Q6HighShift(i));
      }
      std::memcpy(s + 192, in.sc, 16);
      Store16(s + 208, in.d);
      return;
    case DType::kIQ4_XS: {
      Store16(s, in.d);
      uint16_t scales_h = 0;
      for (int ib = 0; ib < 8; ++ib) {
        const int ls = (in.sc[ib] + 32) & 63;
        s[4 + ib / 2] |= static_cast<uint8_t>((ls & 15) << (4 * (ib % 2)));
        scales_h |= static_cast<uint16_t>((ls >> 4) << (2 * ib));
        PackNibbles32(in.q + 32 * ib, s + 8 + 16 * ib);
      }
      Store16(s + 2, scales_h);
      return;
    }
    default:
      INFLIGHT_CHECK(false);
  }
}

// Written from the format definitions with the reference's operation order: products are
// rounded before the min is subtracted (no fused multiply-add: this file is compiled in ISO
// C++ mode, where GCC does not contract), and scales are d * integer in float.
void DequantizeBlock(DType t, const uint8_t* s, float* y) {
  UnpackedBlock b;
  UnpackBlock(t, s, &b);
  const float d = Half(b.d);
  switch (t) {
    case DType::kQ4_1:
    case DType::kQ5_1: {
      const float m = Half(b.dmin);
      for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(b.q[j]) * d + m;
      return;
    }
    case DType::kQ5_0:
      for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(b.q[j] - 16) * d;
      return;
    case DType::kIQ4_NL:
      for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(kIq4Values[b.q[j]]);
      return;
    case DType::kMXFP4: {
      const float e = E8M0ToFp32Half(b.e);
      for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(kMxfp4Values[b.q[j]]) * e;
      return;
    }
    case DType::kQ2_K: {
      const float dmin = Half(b.dmin);
      for (int i = 0; i < 256; ++i) {
        const float dl = d * static_cast<float>(b.sc[i / 16]),
                    ml = dmin * static_cast<float>(b.m[i / 16]);
        y[i] = dl * static_cast<float>(b.q[i]) - ml;
      }
      return;
    }
    case DType::kQ3_K:
      for (int i = 0; i < 256; ++i)
        y[i] = d * static_cast<float>(b.sc[i / 16]) * static_cast<float>(b.q[i] - 4);
      return;
    case DType::kQ4_K:
    case DType::kQ5_K: {
      const float dmin = Half(b.dmin);
      for (int i = 0; i < 256; ++i) {
        const float d1 = d * static_cast<float>(b.sc[i / 32]),
                    m1 = dmin * static_cast<float>(b.m[i / 32]);
        y[i] = d1 * static_cast<float>(b.q[i]) - m1;
      }
      return;
    }
    case DType::kQ6_K:
      for (int i = 0; i < 256; ++i)
        y[i] = d * static_cast<float>(b.sc[i / 16]) * static_cast<float>(b.q[i] - 32);
      return;
    case DType::kIQ4_XS:
      for (int i = 0; i < 256; ++i) {
        const float dl = d * static_cast<float>(b.sc[i / 32]);
        y[i] = dl * static_cast<float>(kIq4Values[b.q[i]]);
      }
      return;
    default:
      INFLIGHT_CHECK(false);
  }
}

int64_t FirstNonFiniteBlock(DType t, const uint8_t* data, int64_t num_blocks) {
  if (t == DType::kMXFP4) {
    for (int64_t b = 0; b < num_blocks; ++b) {
      if (data[b * DTypeBlockBytes(t)] == 0xff) return b;
    }
    return -1;
  }
  // Byte offsets of the F16 fields in each block (ggml-common.h).
  int at[2] = {0, -1};
  switch (t) {
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ5_0:
    case DType::kIQ4_NL:
    case DType::kIQ4_XS:
      break;
    case DType::kQ4_1:
    case DType::kQ5_1:
    case DType::kQ4_K:
    case DType::kQ5_K:
      at[1] = 2;
      break;
    case DType::kQ2_K:
      at[0] = 80, at[1] = 82;
      break;
    case DType::kQ3_K:
      at[0] = 108;
      break;
    case DType::kQ6_K:
      at[0] = 208;
      break;
    default:
      return -1;
  }
  const int64_t bytes = DTypeBlockBytes(t);
  for (int64_t b = 0; b < num_blocks; ++b) {
    for (int f : at) {
      if (f >= 0 && (Load16(data + b * bytes + f) & 0x7c00) == 0x7c00) return b;
    }
  }
  return -1;
}

namespace {

// Affine quantization of one sub-block to 0..nmax: returns the scale and the (non-negative)
// amount subtracted, as float; the min is clamped to <= 0 as the K-quants require.
void AffineRange(const float* x, int n, int nmax, float* scale, float* min_out) {
  float lo = x[0], hi = x[0];
  for (int i = 1; i < n; ++i) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
  lo = std::min(lo, 0.0f);
  *scale = (hi - lo) / static_cast<float>(nmax);
  *min_out = -lo;
}

// The value of largest magnitude, with its sign.
float SignedMax(const float* x, int n) {
  float amax = 0, max = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), max = x[i];
  }
  return max;
}

int ClampRound(float v, int lo, int hi) {
  const float r = std::nearbyint(v);
  if (!(r >= static_cast<float>(lo))) return lo;  // NaN -> lo
  if (r > static_cast<float>(hi)) return hi;
  return static_cast<int>(r);
}

int NearestIq4(float v) {
  int best = 0;
  float err = std::fabs(v - kIq4Values[0]);
  for (int k = 1; k < 16; ++k) {
    const float e = std::fabs(v - kIq4Values[k]);
    if (e < err) err = e, best = k;
  }
  return best;
}

// IQ4 quants of n weights at scale d (value d * kIq4Values[q]); returns the squared error.
float QuantizeIq4(const float* x, int n, float d, uint8_t* q) {
  const float id = d != 0 ? 1.0f / d : 0.0f;
  float err = 0;
  for (int i = 0; i < n; ++i) {
    q[i] = static_cast<uint8_t>(NearestIq4(x[i] * id));
    const float e = x[i] - d * kIq4Values[q[i]];
    err += e * e;
  }
  return err;
}

// The IQ4 scale of a 32-weight block: the value of largest magnitude onto -127 (the table's
// end), then a few nearby scales; the one with the least squared error.
float BestIq4Scale(const float* x) {
  const float base = SignedMax(x, 32) / -127.0f;
  float best = base, best_err = INFINITY;
  uint8_t q[32];
  for (int k = -4; k <= 4; ++k) {
    const float d = base * (1.0f + 0.03f * static_cast<float>(k));
    const float err = QuantizeIq4(x, 32, d, q);
    if (err < best_err) best_err = err, best = d;
  }
  return best;
}

// ggml's best_index_mxfp4: the first table entry nearest to x at scale d, the distance
// computed as |value * d - x| in float.
uint8_t NearestMxfp4(float x, float d) {
  int best = 0;
  float best_err = std::fabs(static_cast<float>(kMxfp4Values[0]) * d - x);
  for (int i = 1; i < 16; ++i) {
    const float err = std::fabs(static_cast<float>(kMxfp4Values[i]) * d - x);
    if (err < best_err) best = i, best_err = err;
  }
  return static_cast<uint8_t>(best);
}

// ggml's quantize_row_mxfp4_ref for one block: e = floor(log2(amax)) - 2 + 127, which puts
// amax at 8 to 16 times the scale 2^(e - 128) (the table ends at 12: the top of that range
// saturates), then every weight to its nearest value.
// Where ggml converts an out-of-range float to uint8_t (undefined: amax below 2^-125, or
// infinite) the exponent is clamped to 0..254.
void QuantizeMxfp4(const float* x, UnpackedBlock* b) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) {
    if (amax < std::fabs(x[j])) amax = std::fabs(x[j]);
  }
  if (amax > 0.0f) {
    const float e = std::floor(std::log2(amax)) - 2 + 127;
    b->e = static_cast<uint8_t>(e < 0.0f ? 0.0f : e > 254.0f ? 254.0f : e);
  }
  const float d = E8M0ToFp32Half(b->e);
  for (int j = 0; j < 32; ++j) b->q[j] = NearestMxfp4(x[j], d);
}

// K-quant style: per sub-block affine ranges, integer sub-scales and sub-mins of `bits` bits
// against F16 super-scales, then quants re-rounded to 0..nmax against the final values.
void QuantizeAffineK(const float* x, int sub, int nmax, int scale_max, UnpackedBlock* b) {
  const int nsub = 256 / sub;
  float scales[16], mins[16], max_scale = 0, max_min = 0;
  for (int j = 0; j < nsub; ++j) {
    AffineRange(x + j * sub, sub, nmax, &scales[j], &mins[j]);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  b->d = Fp32ToFp16(max_scale / static_cast<float>(scale_max));
  b->dmin = Fp32ToFp16(max_min / static_cast<float>(scale_max));
  const float d = Half(b->d), dmin = Half(b->dmin);
  for (int j = 0; j < nsub; ++j) {
    b->sc[j] = static_cast<int8_t>(d > 0 ? ClampRound(scales[j] / d, 0, scale_max) : 0);
    b->m[j] = static_cast<uint8_t>(dmin > 0 ? ClampRound(mins[j] / dmin, 0, scale_max) : 0);
    const float s = d * static_cast<float>(b->sc[j]), o = dmin * static_cast<float>(b->m[j]);
    for (int i = j * sub; i < (j + 1) * sub; ++i)
      b->q[i] = static_cast<uint8_t>(s > 0 ? ClampRound((x[i] + o) / s, 0, nmax) : 0);
  }
}

// Symmetric K-quants (Q6_K, Q3_K): q - offset in [-offset, offset - 1] per 16 weights, int8
// sub-scales in [-scale_max, scale_max] against one F16 super-scale.
void QuantizeSymmetricK(const float* x, int offset, int scale_max, UnpackedBlock* b) {
  float scales[16], max_abs = 0;
  for (int j = 0; j < 16; ++j) {
    scales[j] = SignedMax(x + 16 * j, 16) / static_cast<float>(-offset);
    max_abs = std::max(max_abs, std::fabs(scales[j]));
  }
  b->d = Fp32ToFp16(max_abs / static_cast<float>(scale_max));
  const float d = Half(b->d);
  for (int j = 0; j < 16; ++j) {
    b->sc[j] = static_cast<int8_t>(d > 0 ? ClampRound(scales[j] / d, -scale_max, scale_max) : 0);
    const float s = d * static_cast<float>(b->sc[j]);
    for (int i = 16 * j; i < 16 * (j + 1); ++i) {
      b->q[i] = static_cast<uint8_t>(s != 0 ? ClampRound(x[i] / s, -offset, offset - 1) + offset
                                            : offset);
    }
  }
}

}  // namespace

void QuantizeBlock(DType t, const float* x, uint8_t* dst) {
  UnpackedBlock b;
  switch (t) {
    case DType::kQ4_1:
    case DType::kQ5_1: {
      const int nmax = t == DType::kQ4_1 ? 15 : 31;
      float lo = x[0], hi = x[0];
      for (int i = 1; i < 32; ++i) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
      b.d = Fp32ToFp16((hi - lo) / static_cast<float>(nmax));
      b.dmin = Fp32ToFp16(lo);
      const float d = Half(b.d), m = Half(b.dmin);
      for (int i = 0; i < 32; ++i)
        b.q[i] = static_cast<uint8_t>(d > 0 ? ClampRound((x[i] - m) / d, 0, nmax) : 0);
      break;
    }
    case DType::kQ5_0: {
      b.d = Fp32ToFp16(SignedMax(x, 32) / -16.0f);
      const float d = Half(b.d);
      for (int i = 0; i < 32; ++i)
        b.q[i] = static_cast<uint8_t>(d != 0 ? ClampRound(x[i] / d, -16, 15) + 16 : 16);
      break;
    }
    case DType::kIQ4_NL: {
      b.d = Fp32ToFp16(BestIq4Scale(x));
      QuantizeIq4(x, 32, Half(b.d), b.q);
      break;
    }
    case DType::kIQ4_XS: {
      float scales[8], max_abs = 0;
      for (int ib = 0; ib < 8; ++ib) {
        scales[ib] = BestIq4Scale(x + 32 * ib);
        max_abs = std::max(max_abs, std::fabs(scales[ib]));
      }
      b.d = Fp32ToFp16(max_abs / 31.0f);
      const float d = Half(b.d);
      for (int ib = 0; ib < 8; ++ib) {
        b.sc[ib] = static_cast<int8_t>(d > 0 ? ClampRound(scales[ib] / d, -31, 31) : 0);
        QuantizeIq4(x + 32 * ib, 32, d * static_cast<float>(b.sc[ib]), b.q + 32 * ib);
      }
      break;
    }
    case DType::kMXFP4:
      QuantizeMxfp4(x, &b);
      break;
    case DType::kQ2_K:
      QuantizeAffineK(x, 16, 3, 15, &b);
      break;
    case DType::kQ4_K:
      QuantizeAffineK(x, 32, 15, 63, &b);
      break;
    case DType::kQ5_K:
      QuantizeAffineK(x, 32, 31, 63, &b);
      break;
    case DType::kQ3_K:
      QuantizeSymmetricK(x, 4, 31, &b);
      break;
    case DType::kQ6_K:
      QuantizeSymmetricK(x, 32, 127, &b);
      break;
    default:
      INFLIGHT_CHECK(false);
  }
  PackBlock(t, b, dst);
}

}  // namespace inflight::kernels
