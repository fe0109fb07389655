// Single-stream decode and prompt speed on a TinyLlama-1.1B-shaped random model, reported
// as a fraction of the limits measured in the same run: read bandwidth (decode) and
// FP32 FMA / int8 VNNI peaks are left for the batched benchmark.
//
// Usage: decode_bench [--dtype q8_0] [--threads 2] [--tokenizer PATH] [--model-dir DIR]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "bench_models.h"
#include "engine/generate.h"
#include "limits.h"
#include "model/model.h"

using namespace inflight;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  std::string dtype = "q8_0",
              tokenizer = std::string(INFLIGHT_SOURCE_DIR) +
                          "/../shared/models/tokenizers/llama2-sentencepiece/tokenizer.model";
  std::string model_dir = "bench-models";
  int threads = 2, decode_tokens = 64, prompt_tokens = 128, reps = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i], v = argv[i + 1];
    if (f == "--dtype")
      dtype = v;
    else if (f == "--threads")
      threads = std::stoi(v);
    else if (f == "--tokenizer")
      tokenizer = v;
    else if (f == "--model-dir")
      model_dir = v;
    else if (f == "--decode-tokens")
      decode_tokens = std::stoi(v);
    else if (f == "--reps")
      reps = std::stoi(v);
    else {
      std::fprintf(stderr, "unknown flag %s\n", f.c_str());
      return 2;
    }
  }
  const std::string path = model_dir + "/tinyllama-1.1b-random-" + dtype + ".gguf";
  auto model = LoadOrWriteRandomModel(path, "tinyllama-1.1b", dtype, tokenizer);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
    return 1;
  }
  ThreadPool pool(threads);
  std::vector<int32_t> prompt(prompt_tokens);
  for (int i = 0; i < prompt_tokens; ++i) prompt[i] = 100 + (i * 37) % 20000;
  GenerateParams gp;
  gp.max_new_tokens = decode_tokens;
  gp.sampling.temperature = 0;
  gp.stop_at_eos = false;
  const double weight_bytes = static_cast<double>((*model)->DecodeWeightBytes());
  std::printf("model %s: %s, %.2f GB read per decoded token, %d threads\n", path.c_str(),
              (*model)->Describe().c_str(), weight_bytes / 1e9, threads);
  std::printf("%-4s %12s %14s %14s %12s %12s\n", "rep", "bandwidth", "decode tok/s", "limit tok/s",
              "share", "prompt tok/s");
  for (int r = 0; r < reps; ++r) {
    const double bw = MeasureReadBandwidth(pool);
    auto res = Generate(**model, prompt, gp, pool, nullptr);
    if (!res.ok()) {
      std::fprintf(stderr, "%s\n", res.status().ToString().c_str());
      return 1;
    }
    const double tps = res->decode_steps / res->decode_seconds;
    const double limit = bw / weight_bytes;
    std::printf("%-4d %9.1f GB/s %14.2f %14.2f %11.0f%% %12.1f\n", r, bw / 1e9, tps, limit,
                100 * tps / limit, prompt.size() / res->prompt_seconds);
    std::fflush(stdout);
  }
  return 0;
}
