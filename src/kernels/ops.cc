#include "kernels/ops.h"

#include <algorithm>
#include <cmath>

#include "kernels/kernels.h"

namespace inflight::kernels {

void RmsNorm(const float* x, const float* weight, int64_t num_rows, int64_t n, float eps,
             float* out) {
  for (int64_t r = 0; r < num_rows; ++r) {
    const float* xr = x + r * n;
    float* o = out + r * n;
    double ss = 0;  // double: norms of wide rows are sensitive to summation order
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float scale = static_cast<float>(1.0 / std::sqrt(ss / n + eps));
    for (int64_t i = 0; i < n; ++i) o[i] = xr[i] * scale * weight[i];
  }
}

void LayerNorm(const float* x, const float* weight, const float* bias, int64_t num_rows, int64_t n,
               float eps, float* out) {
  for (int64_t r = 0; r < num_rows; ++r) {
    const float* xr = x + r * n;
    float* o = out + r * n;
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += xr[i];
    const double mean = sum / n;
    double var = 0;
    for (int64_t i = 0; i < n; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    const float scale = static_cast<float>(1.0 / std::sqrt(var / n + eps));
    const float m = static_cast<float>(mean);
    for (int64_t i = 0; i < n; ++i) {
      o[i] = (xr[i] - m) * scale * weight[i] + (bias ? bias[i] : 0.0f);
    }
  }
}

void AddBias(float* x, const float* bias, int64_t num_rows, int64_t n) {
  for (int64_t r = 0; r < num_rows; ++r) {
    for (int64_t i = 0; i < n; ++i) x[r * n + i] += bias[i];
  }
}

void AddInPlace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void SiluMul(float* gate, const float* up, int64_t n) { ActiveKernels().silu_mul(gate, up, n); }

void GeluTanh(float* x, int64_t n) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    x[i] = 0.5f * v * (1.0f + std::tanh(kSqrt2OverPi * (v + 0.044715f * v * v * v)));
  }
}

void GatedActivation(FfnActivation kind, float* gate, const float* up, int64_t n) {
  switch (kind) {
    case FfnActivation::kSilu:
      return SiluMul(gate, up, n);
    case FfnActivation::kGeluTanh:
      GeluTanh(gate, n);
      for (int64_t i = 0; i < n; ++i) gate[i] *= up[i];
      return;
    case FfnActivation::kSwigluOai: {
      constexpr float kAlpha = 1.702f, kLimit = 7.0f;
      for (int64_t i = 0; i < n; ++i) {
        const float g = std::min(gate[i], kLimit);
        const float u = std::clamp(up[i], -kLimit, kLimit);
        gate[i] = g / (1.0f + std::exp(-kAlpha * g)) * (u + 1.0f);
      }
      return;
    }
  }
}

void Softmax(float* x, int64_t n) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::fmax(mx, x[i]);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void RopeInvFreq(float base, int rope_dim, const float* freq_factors, float linear_scale,
                 float* inv_freq) {
  for (int i = 0; i < rope_dim / 2; ++i) {
    double f = std::pow(static_cast<double>(base), -2.0 * i / rope_dim);
    if (freq_factors) f /= freq_factors[i];
    f /= linear_scale;
    inv_freq[i] = static_cast<float>(f);
  }
}

void RopeAngles(const float* inv_freq, int rope_dim, int32_t pos, float* cos_out, float* sin_out) {
  for (int i = 0; i < rope_dim / 2; ++i) {
    const double theta = static_cast<double>(pos) * inv_freq[i];
    cos_out[i] = static_cast<float>(std::cos(theta));
    sin_out[i] = static_cast<float>(std::sin(theta));
  }
}

void ApplyRopeAngles(float* x, int num_heads, int head_dim, int rope_dim, RopeStyle style,
                     const float* cos, const float* sin) {
  const int half = rope_dim / 2;
  for (int h = 0; h < num_heads; ++h) {
    float* hx = x + h * head_dim;
    for (int i = 0; i < half; ++i) {
      const int a = style == RopeStyle::kAdjacentPairs ? 2 * i : i;
      const int b = style == RopeStyle::kAdjacentPairs ? 2 * i + 1 : i + half;
      const float x0 = hx[a], x1 = hx[b];
      hx[a] = x0 * cos[i] - x1 * sin[i];
      hx[b] = x0 * sin[i] + x1 * cos[i];
    }
  }
}

}  // namespace inflight::kernels
