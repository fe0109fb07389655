// Single-stream decode and prompt speed on a TinyLlama-1.1B-shaped random model, reported
// as a fraction of the limits measured in the same run: read bandwidth (decode) and
// FP32 FMA / int8 VNNI peaks are left for the batched benchmark.
//
// Usage: decode_bench [--dtype q8_0] [--threads 2] [--tokenizer PATH] [--model-dir DIR]
#include <immintrin.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/thread_pool.h"
#include "engine/generate.h"
#include "model/model.h"
#include "model/random_model.h"

using namespace inflight;
using Clock = std::chrono::steady_clock;

namespace {

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

// Best-of-5 read bandwidth over 1 GiB, one range per thread, in bytes/s.
double MeasureReadBandwidth(ThreadPool& pool) {
  const int64_t n = (int64_t{1} << 30) / 4;
  AlignedBuffer buf(n * 4);
  float* p = buf.as<float>();
  for (int64_t i = 0; i < n; ++i) p[i] = 1.0f;
  double best = 0;
  std::vector<double> sinks(pool.num_threads());
  for (int pass = 0; pass < 5; ++pass) {
    const auto t0 = Clock::now();
    pool.Run([&](int ti, int nt) {
      const int64_t chunk = n / nt / 64 * 64;
      sinks[ti] = SumRange(p + ti * chunk, chunk);
    });
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, n * 4.0 / s);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dtype = "q8_0", tokenizer = std::string(INFLIGHT_SOURCE_DIR) + "/../shared/models/tokenizers/llama2-sentencepiece/tokenizer.model";
  std::string model_dir = "bench-models";
  int threads = 2, decode_tokens = 64, prompt_tokens = 128, reps = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i], v = argv[i + 1];
    if (f == "--dtype") dtype = v;
    else if (f == "--threads") threads = std::stoi(v);
    else if (f == "--tokenizer") tokenizer = v;
    else if (f == "--model-dir") model_dir = v;
    else if (f == "--decode-tokens") decode_tokens = std::stoi(v);
    else if (f == "--reps") reps = std::stoi(v);
    else { std::fprintf(stderr, "unknown flag %s\n", f.c_str()); return 2; }
  }
  std::filesystem::create_directories(model_dir);
  const std::string path = model_dir + "/tinyllama-1.1b-random-" + dtype + ".gguf";
  if (!std::filesystem::exists(path)) {
    std::fprintf(stderr, "writing %s ...\n", path.c_str());
    auto spec = LoadTokenizerSpecFile(tokenizer);
    if (!spec.ok()) { std::fprintf(stderr, "%s\n", spec.status().ToString().c_str()); return 1; }
    RandomModelParams params;
    params.config = *PresetConfig(Architecture::kLlama, "tinyllama-1.1b");
    params.dtype = *DTypeFromName(dtype);
    params.tied_embeddings = false;
    if (Status s = WriteRandomGguf(params, *spec, path); !s.ok()) { std::fprintf(stderr, "%s\n", s.ToString().c_str()); return 1; }
  }
  auto model = Model::Load(path);
  if (!model.ok()) { std::fprintf(stderr, "%s\n", model.status().ToString().c_str()); return 1; }
  ThreadPool pool(threads);
  std::vector<int32_t> prompt(prompt_tokens);
  for (int i = 0; i < prompt_tokens; ++i) prompt[i] = 100 + (i * 37) % 20000;
  GenerateParams gp;
  gp.max_new_tokens = decode_tokens;
  gp.sampling.temperature = 0;
  gp.stop_at_eos = false;
  const double weight_bytes = static_cast<double>((*model)->DecodeWeightBytes());
  std::printf("model %s: %s, %.2f GB read per decoded token, %d threads\n", path.c_str(), (*model)->Describe().c_str(), weight_bytes / 1e9, threads);
  std::printf("%-4s %12s %14s %14s %12s %12s\n", "rep", "bandwidth", "decode tok/s", "limit tok/s", "share", "prompt tok/s");
  for (int r = 0; r < reps; ++r) {
    const double bw = MeasureReadBandwidth(pool);
    auto res = Generate(**model, prompt, gp, pool, nullptr);
    if (!res.ok()) { std::fprintf(stderr, "%s\n", res.status().ToString().c_str()); return 1; }
    const double tps = res->decode_steps / res->decode_seconds;
    const double limit = bw / weight_bytes;
    std::printf("%-4d %9.1f GB/s %14.2f %14.2f %11.0f%% %12.1f\n", r, bw / 1e9, tps, limit, 100 * tps / limit,
                prompt.size() / res->prompt_seconds);
    std::fflush(stdout);
  }
  return 0;
}
