#include "limits.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/thread_pool.h"

namespace inflight {
namespace {

using Clock = std::chrono::steady_clock;

__attribute__((target("avx512f"))) double SumRange(const float* p, int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i < n; i += 64) {
    a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
    a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

constexpr int kChains = 16;  // independent accumulators: enough to cover the latency
constexpr int64_t kIters = 1 << 22;

__attribute__((target("avx512f,avx512vnni"))) int64_t Int8Chains() {
  __m512i acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_epi32(c);
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(5);
  for (int64_t i = 0; i < kIters; ++i) {
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbusd_epi32(acc[c], a, b);
  }
  __m512i s = acc[0];
  for (int c = 1; c < kChains; ++c) s = _mm512_add_epi32(s, acc[c]);
  return _mm512_reduce_add_epi32(s);
}

__attribute__((target("avx512f,avx512vnni"))) int64_t Int16Chains() {
  __m512i acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_epi32(c);
  const __m512i a = _mm512_set1_epi16(3), b = _mm512_set1_epi16(5);
  for (int64_t i = 0; i < kIters; ++i) {
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpwssd_epi32(acc[c], a, b);
  }
  __m512i s = acc[0];
  for (int c = 1; c < kChains; ++c) s = _mm512_add_epi32(s, acc[c]);
  return _mm512_reduce_add_epi32(s);
}

__attribute__((target("avx512f"))) float Fp32Chains() {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c));
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(0.001f);
  for (int64_t i = 0; i < kIters; ++i) {
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  }
  __m512 s = acc[0];
  for (int c = 1; c < kChains; ++c) s = _mm512_add_ps(s, acc[c]);
  return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx512f,avx512bf16"))) float Bf16Chains() {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c));
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3a83);
  for (int64_t i = 0; i < kIters; ++i) {
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
  }
  __m512 s = acc[0];
  for (int c = 1; c < kChains; ++c) s = _mm512_add_ps(s, acc[c]);
  return _mm512_reduce_add_ps(s);
}

// Best of three runs of `chains` on every pool thread; ops_per_instruction per lane-vector.
template <typename Fn>
double Peak(ThreadPool& pool, double ops_per_instruction, Fn chains) {
  double best = 0;
  std::vector<double> sink(pool.num_threads());
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    pool.Run([&](int ti, int) { sink[ti] = static_cast<double>(chains()); });
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, pool.num_threads() * ops_per_instruction * kChains * kIters / s);
  }
  return best;
}

std::vector<double> ReadBandwidthPasses(ThreadPool& pool, int passes) {
  const int64_t n = (int64_t{1} << 30) / 4;
  static AlignedBuffer* buf = nullptr;
  if (buf == nullptr) {
    buf = new AlignedBuffer(n * 4);
    float* p = buf->as<float>();
    pool.ParallelFor(n, 1 << 20, [&](int64_t b, int64_t e) { std::fill(p + b, p + e, 1.0f); });
  }
  const float* p = buf->as<float>();
  std::vector<double> rates, sinks(pool.num_threads());
  for (int pass = 0; pass < passes; ++pass) {
    const auto t0 = Clock::now();
    pool.Run([&](int ti, int nt) {
      const int64_t chunk = n / nt / 64 * 64;
      sinks[ti] = SumRange(p + ti * chunk, chunk);
    });
    rates.push_back(n * 4.0 / std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(rates.begin(), rates.end());
  return rates;
}

}  // namespace

double MeasureReadBandwidth(ThreadPool& pool, int passes) {
  return ReadBandwidthPasses(pool, passes).back();
}

double MedianReadBandwidth(ThreadPool& pool, int passes) {
  const std::vector<double> r = ReadBandwidthPasses(pool, passes);
  return r[r.size() / 2];
}

double MeasureInt8Peak(ThreadPool& pool) { return Peak(pool, 2.0 * 64, Int8Chains); }
double MeasureInt16Peak(ThreadPool& pool) { return Peak(pool, 2.0 * 32, Int16Chains); }
double MeasureFp32Peak(ThreadPool& pool) { return Peak(pool, 2.0 * 16, Fp32Chains); }
double MeasureBf16Peak(ThreadPool& pool) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512bf16")) return 0;
  return Peak(pool, 2.0 * 32, Bf16Chains);
}

}  // namespace inflight
