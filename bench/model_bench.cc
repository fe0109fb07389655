// The workloads users run, per weight format of the files they download, against the limits
// measured in the same run: decode after 0, 512 and 2048 tokens of context (batch 1), decode
// of 16 and 32 sequences formed after 128- and 512-token prompts, and 512-token prompt
// processing. TinyLlama-1.1B shape (dim 2048, 22 layers, GQA 32/4, ffn 5632, Llama 2 vocab,
// untied output, context 4096 so 2048 + decode fits), random weights written once per format
// under --model-dir by our quantizer in llama-quantize's mixes.
//
//   decode limit  = read bandwidth / (weight bytes one token reads + K/V bytes of its context)
//   prompt limit  = peak ops / (2 x multiply-adds per token), for the compute type the kernel
//                   uses (int8 VNNI for quantized weights), measured again right before the
//                   format's prompt. F16 runs on the int16 VNNI dot (vpdpwssd, as many
//                   multiply-adds per instruction as vdpbf16ps): its share is quoted against
//                   the BF16 dot peak, the int16 peak printed beside it.
//
// Usage: model_bench [--formats f16,q8_0,q4_0,q4_k_m,q5_k_m,q6_k] [--threads 2]
//                    [--model-dir bench-models] [--readme bench/README.md]
//                    [--decode-only 1]
// --decode-only: per format only load (timed, with the minor page faults it took) and decode at
// depth 0, printing the faults taken while decoding: run it as separate processes to see how
// steady a freshly loaded file decodes.
// --readme replaces the text between the model_bench markers of that file with the table.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "bench_models.h"
#include "kernels/kernels.h"
#include "kvcache/kv_storage.h"
#include "limits.h"
#include "model/model.h"

using namespace inflight;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int32_t kTokensPerBlock = 32;

double Seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A paged F16 cache for `num_seqs` sequences of up to `max_tokens` each, sequence i owning a
// contiguous run of blocks.
struct Cache {
  Cache(const ModelConfig& c, int32_t num_seqs, int32_t max_tokens)
      : blocks_per_seq((max_tokens + kTokensPerBlock - 1) / kTokensPerBlock),
        storage(KvStorageConfig{c.num_layers, num_seqs * blocks_per_seq, kTokensPerBlock,
                                c.kv_dim(), DType::kF16, c.head_dim}) {
    view.layers = storage.LayerViews();
    view.num_blocks = storage.config().num_blocks;
    tables.resize(num_seqs);
    for (int32_t s = 0; s < num_seqs; ++s) {
      for (int32_t b = 0; b < blocks_per_seq; ++b) tables[s].push_back(s * blocks_per_seq + b);
    }
  }
  // Copies sequence 0's blocks holding its first `tokens` positions to every other sequence
  // (same content: the cost of a decode step does not depend on it; prefilling each would
  // only cost bench time).
  void Replicate(int32_t tokens) {
    const int64_t block =
        static_cast<int64_t>(storage.config().kv_dim) * 2 * kTokensPerBlock;  // F16 bytes
    const int64_t bytes =
        static_cast<int64_t>((tokens + kTokensPerBlock - 1) / kTokensPerBlock) * block;
    for (auto& l : view.layers) {
      for (size_t s = 1; s < tables.size(); ++s) {
        const int64_t dst = static_cast<int64_t>(tables[s][0]) * block;
        std::memcpy(static_cast<uint8_t*>(l.k) + dst, l.k, bytes);
        std::memcpy(static_cast<uint8_t*>(l.v) + dst, l.v, bytes);
      }
    }
  }
  int32_t blocks_per_seq;
  KvStorage storage;
  KvCacheView view;
  std::vector<std::vector<int32_t>> tables;
};

struct Bench {
  const Model& model;
  ThreadPool& pool;
  ForwardScratch scratch;
  std::vector<float> logits;

  // Prefills `ids` into sequence `seq` in chunks of up to 512 tokens; returns seconds.
  double Prefill(Cache& cache, int32_t seq, const std::vector<int32_t>& ids) {
    const auto t0 = Clock::now();
    for (size_t start = 0; start < ids.size(); start += 512) {
      BatchPlan plan;
      plan.chunks.push_back(
          {ids.data() + start, static_cast<int32_t>(std::min<size_t>(512, ids.size() - start)),
           static_cast<int32_t>(start), cache.tables[seq].data(), cache.blocks_per_seq, 1});
      Check(model.Forward(plan, cache.view, scratch, pool, Logits(1)));
    }
    return Seconds(t0);
  }
  // `steps` greedy decode steps of sequences 0..n-1, all at position `depth`; returns tok/s.
  double Decode(Cache& cache, int32_t n, int32_t depth, int32_t steps) {
    const int32_t vocab = model.config().vocab_size;
    std::vector<int32_t> next(n, 1);
    const auto t0 = Clock::now();
    for (int32_t step = 0; step < steps; ++step) {
      BatchPlan plan;
      for (int32_t s = 0; s < n; ++s) {
        plan.chunks.push_back(
            {&next[s], 1, depth + step, cache.tables[s].data(), cache.blocks_per_seq, 1});
      }
      float* out = Logits(n);
      Check(model.Forward(plan, cache.view, scratch, pool, out));
      for (int32_t s = 0; s < n; ++s)
        next[s] = static_cast<int32_t>(
            kernels::ActiveKernels().argmax(out + static_cast<int64_t>(s) * vocab, vocab));
    }
    return n * steps / Seconds(t0);
  }
  float* Logits(int64_t rows) {
    logits.resize(rows * model.config().vocab_size);
    return logits.data();
  }
  static void Check(const Status& s) {
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      std::exit(1);
    }
  }
};

std::vector<int32_t> PromptIds(int32_t n, int32_t vocab) {
  std::vector<int32_t> ids(n);
  for (int32_t i = 0; i < n; ++i) ids[i] = 100 + (i * 37) % (vocab - 200);
  return ids;
}

int64_t MinorFaults() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

std::string Format(const char* fmt, double a, double b = 0, double c = 0) {
  char buf[128];
  std::snprintf(buf, sizeof buf, fmt, a, b, c);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  std::string formats = "f16,q8_0,q4_0,q4_k_m,q5_k_m,q6_k", model_dir = "bench-models", readme;
  std::string tokenizer = std::string(INFLIGHT_SOURCE_DIR) +
                          "/../shared/models/tokenizers/llama2-sentencepiece/tokenizer.model";
  int threads = 2;
  bool decode_only = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i], v = argv[i + 1];
    if (f == "--formats")
      formats = v;
    else if (f == "--threads")
      threads = std::stoi(v);
    else if (f == "--model-dir")
      model_dir = v;
    else if (f == "--readme")
      readme = v;
    else if (f == "--tokenizer")
      tokenizer = v;
    else if (f == "--decode-only")
      decode_only = v != "0";
    else {
      std::fprintf(stderr, "unknown flag %s\n", f.c_str());
      return 2;
    }
  }
  ThreadPool pool(threads);
  std::ostringstream table;
  table << "| weights | GB read / token | decode tok/s at depth 0 / 512 / 2048 | share of the "
           "bandwidth limit (same order) "
           "| depth 2048 / depth 0 | batch 16 / batch 1 decode, 128 / 512-token prompts | batch 32 "
           "/ batch 1 (same) "
           "| prompt 512: tok/s | share of peak | that peak, GOPS (measured before the prompt) "
           "| bandwidth, GB/s "
           "|\n|---|---|---|---|---|---|---|---|---|---|---|\n";
  const double int8_peak = MeasureInt8Peak(pool), fp32_peak = MeasureFp32Peak(pool),
               bf16_peak = MeasureBf16Peak(pool), int16_peak = MeasureInt16Peak(pool);
  std::printf(
      "peaks (%d threads): int8 VNNI %.0f GOPS, FP32 FMA %.0f GFLOP/s, BF16 dot %.0f GFLOP/s, "
      "int16 VNNI %.0f GOPS\n",
      threads, int8_peak / 1e9, fp32_peak / 1e9, bf16_peak / 1e9, int16_peak / 1e9);
  std::stringstream list(formats);
  for (std::string fmt; std::getline(list, fmt, ',');) {
    const int64_t faults_before_load = MinorFaults();
    const auto load_start = Clock::now();
    auto loaded = LoadOrWriteRandomModel(model_dir + "/tinyllama-1.1b-ctx4096-" + fmt + ".gguf",
                                         "tinyllama-1.1b", fmt, tokenizer, 4096);
    if (!loaded.ok()) {
      std::fprintf(stderr, "%s\n", loaded.status().ToString().c_str());
      return 1;
    }
    const Model& model = **loaded;
    const ModelConfig& c = model.config();
    Bench bench{model, pool, {}, {}};
    const double weight_bytes = static_cast<double>(model.DecodeWeightBytes());
    const double kv_bytes_per_pos = 2.0 * c.num_layers * c.kv_dim() * 2;  // K and V, F16
    std::printf("== %s: %s, %.3f GB read per token\n", fmt.c_str(), model.Describe().c_str(),
                weight_bytes / 1e9);
    std::printf("  load: %.2f s, %lld minor faults\n", Seconds(load_start),
                static_cast<long long>(MinorFaults() - faults_before_load));

    // The compute type of the prompt's matmuls and its peak, measured now (the host drifts).
    const DType up = model.weights().layers[0].w_up.dtype;
    const bool int8 = kernels::UsesQuantizedActivations(up), bf16 = up == DType::kI16x16;
    const char* peak_name = int8 ? "int8 VNNI" : bf16 ? "BF16 dot" : "FP32 FMA";
    const double peak = decode_only ? 0
                        : int8      ? MeasureInt8Peak(pool)
                        : bf16      ? MeasureBf16Peak(pool)
                                    : MeasureFp32Peak(pool);
    // Batch 1: prompt 512 (timed as prompt processing), decode at depth 0, 512, 2048. Each
    // decode is measured three times, each between two bandwidth readings (median of 3
    // passes); the share is the median of the three decode / limit ratios.
    const int32_t kDecode = 32, kReps = 3;
    double decode[3], share[3], bw_min = 1e30, bw_max = 0, prompt_tps = 0;
    const int32_t depths[3] = {0, 512, 2048};
    for (int i = 0; i < (decode_only ? 1 : 3); ++i) {
      Cache cache(c, 1, depths[i] + kReps * kDecode + 1);
      const std::vector<int32_t> ids = PromptIds(std::max(1, depths[i]), c.vocab_size);
      const double prefill_s = bench.Prefill(cache, 0, ids);
      if (depths[i] == 512) {
        // Prompt processing as the engine runs it: its scratch is allocated by the first long
        // pass and kept, so the first pass's page faults are not counted (best of 3 passes,
        // each rewriting the same positions).
        const double again = std::min(bench.Prefill(cache, 0, ids), bench.Prefill(cache, 0, ids));
        prompt_tps = 512 / std::min(prefill_s, again);
      }
      std::vector<double> rates, shares;
      double bw = MedianReadBandwidth(pool);
      for (int rep = 0; rep < kReps; ++rep) {
        const int32_t pos = static_cast<int32_t>(ids.size()) + rep * kDecode;
        const int64_t faults = MinorFaults();
        const double rate = bench.Decode(cache, 1, pos, kDecode);
        if (decode_only)
          std::printf("  decode: %lld minor faults\n",
                      static_cast<long long>(MinorFaults() - faults));
        const double bw_after = MedianReadBandwidth(pool);
        const double limit =
            0.5 * (bw + bw_after) / (weight_bytes + kv_bytes_per_pos * (pos + kDecode / 2));
        bw_min = std::min({bw_min, bw, bw_after}), bw_max = std::max({bw_max, bw, bw_after});
        rates.push_back(rate), shares.push_back(rate / limit);
        std::printf("  decode at depth %4d: %6.1f tok/s, limit %6.1f (%.1f-%.1f GB/s): %3.0f%%\n",
                    pos, rate, limit, bw / 1e9, bw_after / 1e9, 100 * rate / limit);
        bw = bw_after;
      }
      std::sort(rates.begin(), rates.end()), std::sort(shares.begin(), shares.end());
      decode[i] = rates[kReps / 2], share[i] = shares[kReps / 2];
    }
    if (decode_only) {
      std::printf("  decode-only %s: %.1f tok/s (median of %d), %.0f%% of the limit\n", fmt.c_str(),
                  decode[0], kReps, 100 * share[0]);
      continue;
    }
    const double prompt_share = prompt_tps * 2 * MacsPerToken(model) / peak;
    std::printf("  prompt 512: %.1f tok/s = %.0f%% of the %s peak (%.0f GOPS)\n", prompt_tps,
                100 * prompt_share, peak_name, peak / 1e9);
    if (bf16) {
      const double i16 = MeasureInt16Peak(pool), fp32 = MeasureFp32Peak(pool);
      std::printf("  (int16 VNNI peak now %.0f GOPS: %.0f%% of it; FP32 FMA %.0f GFLOP/s)\n",
                  i16 / 1e9, 100 * prompt_tps * 2 * MacsPerToken(model) / i16, fp32 / 1e9);
    }

    // Batches formed after real prefills: batch 1, 16, 32 after 128- and 512-token prompts.
    double batch_ratio[2][2];
    const int32_t prompts[2] = {128, 512};
    for (int p = 0; p < 2; ++p) {
      Cache cache(c, 32, prompts[p] + 17);
      bench.Prefill(cache, 0, PromptIds(prompts[p], c.vocab_size));
      cache.Replicate(prompts[p]);
      const double one = bench.Decode(cache, 1, prompts[p], 16);
      const double b16 = bench.Decode(cache, 16, prompts[p], 16);
      const double b32 = bench.Decode(cache, 32, prompts[p], 16);
      batch_ratio[p][0] = b16 / one, batch_ratio[p][1] = b32 / one;
      std::printf(
          "  after %d-token prompts: batch 1 %.1f, 16 %.1f (%.2fx), 32 %.1f (%.2fx) tok/s\n",
          prompts[p], one, b16, b16 / one, b32, b32 / one);
    }
    table << "| " << fmt << " | " << Format("%.3f", weight_bytes / 1e9) << " | "
          << Format("%.1f / %.1f / %.1f", decode[0], decode[1], decode[2]) << " | "
          << Format("%.0f%% / %.0f%% / %.0f%%", 100 * share[0], 100 * share[1], 100 * share[2])
          << " | " << Format("%.2f", decode[2] / decode[0]) << " | "
          << Format("%.2fx / %.2fx", batch_ratio[0][0], batch_ratio[1][0]) << " | "
          << Format("%.2fx / %.2fx", batch_ratio[0][1], batch_ratio[1][1]) << " | "
          << Format("%.1f", prompt_tps) << " | " << Format("%.0f%% ", 100 * prompt_share)
          << (int8   ? "int8"
              : bf16 ? "BF16"
                     : "FP32")
          << " | " << Format("%.0f ", peak / 1e9) << peak_name << " | "
          << Format("%.0f-%.0f", bw_min / 1e9, bw_max / 1e9) << " |\n";
    std::fflush(stdout);
  }
  table << "\nPeaks measured in the same run (" << threads << " threads): int8 VNNI "
        << Format("%.0f", int8_peak / 1e9) << " GOPS, FP32 FMA " << Format("%.0f", fp32_peak / 1e9)
        << " GFLOP/s, BF16 dot " << Format("%.0f", bf16_peak / 1e9) << " GFLOP/s, int16 VNNI "
        << Format("%.0f", int16_peak / 1e9) << " GOPS.\n";
  if (decode_only) return 0;
  std::printf("\n%s", table.str().c_str());
  if (!readme.empty()) {
    std::ifstream in(readme);
    std::stringstream all;
    all << in.rdbuf();
    std::string text = all.str();
    const std::string begin = "<!-- model_bench:begin -->", end = "<!-- model_bench:end -->";
    const size_t b = text.find(begin), e = text.find(end);
    if (b == std::string::npos || e == std::string::npos || e < b) {
      std::fprintf(stderr, "%s has no model_bench markers\n", readme.c_str());
      return 1;
    }
    text = text.substr(0, b + begin.size()) + "\n" + table.str() + text.substr(e);
    std::ofstream(readme) << text;
    std::printf("wrote the table into %s\n", readme.c_str());
  }
  return 0;
}
