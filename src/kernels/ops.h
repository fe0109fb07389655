// Element-wise and row-wise operators of the transformer block. Portable C++ (the compiler
// vectorises them); they are a small share of a step next to the matmuls.
#pragma once

#include <cstdint>

namespace inflight::kernels {

// out[t] = x[t] / rms(x[t]) * weight, rows of n. out may alias x.
void RmsNorm(const float* x, const float* weight, int64_t num_rows, int64_t n, float eps,
             float* out);
// out[t] = (x[t] - mean) / sqrt(var + eps) * weight + bias. out may alias x.
void LayerNorm(const float* x, const float* weight, const float* bias, int64_t num_rows, int64_t n,
               float eps, float* out);
// x[t, :] += bias for each of num_rows rows.
void AddBias(float* x, const float* bias, int64_t num_rows, int64_t n);
// x += y
void AddInPlace(float* x, const float* y, int64_t n);
// gate[i] = silu(gate[i]) * up[i]
void SiluMul(float* gate, const float* up, int64_t n);
// x = gelu(x), tanh approximation (GPT-2)
void GeluTanh(float* x, int64_t n);

// The activation of a gated FFN: gate = act(gate) * up.
enum class FfnActivation {
  kSilu,       // SwiGLU
  kGeluTanh,   // GeGLU with the tanh GELU (Gemma)
  kSwigluOai,  // gpt-oss: g = min(g, 7), u = clamp(u, -7, 7): g * sigmoid(1.702 g) * (u + 1)
};
void GatedActivation(FfnActivation kind, float* gate, const float* up, int64_t n);
// In-place softmax over n values; returns nothing, x sums to 1.
void Softmax(float* x, int64_t n);

enum class RopeStyle {
  kAdjacentPairs,  // (x[2i], x[2i+1]): GGUF llama (weights permuted at conversion)
  kHalves,         // (x[i], x[i + d/2]): NeoX, Qwen, Hugging Face llama
};

// Inverse frequencies: inv_freq[i] = base^(-2i/rope_dim) / freq_factor[i] / linear_scale.
// freq_factors may be null (Llama 3 scaling supplies them).
void RopeInvFreq(float base, int rope_dim, const float* freq_factors, float linear_scale,
                 float* inv_freq);
// RoPE in two parts, so a step computes a token's angles once for every layer, Q and K:
// cos/sin of pos * inv_freq[i] for i < rope_dim / 2 (in double), then the in-place rotation
// of the first rope_dim dims of each of num_heads heads of one token.
void RopeAngles(const float* inv_freq, int rope_dim, int32_t pos, float* cos_out, float* sin_out);
void ApplyRopeAngles(float* x, int num_heads, int head_dim, int rope_dim, RopeStyle style,
                     const float* cos, const float* sin);

}  // namespace inflight::kernels
