// The KV cache's 8-bit type against F16 on the workload it is for: decode after long contexts.
// TinyLlama-1.1B shape in Q4_0 (random weights, context 16384), decode of 1 and 8 sequences
// at depth 2048 and 8192, F16 and int8 caches interleaved rep by rep, each against the limit
// measured in the same run:
//
//   decode limit = read bandwidth / (weight bytes one step reads + K/V bytes of every
//                  sequence's context)
//
// and the sequences of a given context that fit in the same cache memory. The caches are
// filled with random K/V (a decode step's cost does not depend on what they hold; prefilling
// 8192 tokens per sequence would only cost bench time).
//
// and the time to first token of a repeated 2,000-token system prompt cold, from the pool and
// from the disk tier after a restart.
//
// Usage: kv_bench [--threads 2] [--model-dir bench-models] [--steps 16] [--reps 3]
//                 [--ttft-only 1 | --attention-only 1] [--disk-dir kv_bench_disk]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "bench_models.h"
#include "engine/executor.h"
#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "kvcache/kv_storage.h"
#include "limits.h"
#include "model/model.h"

using namespace inflight;
using kernels::AttentionShape;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int32_t kTokensPerBlock = 32;

struct Cache {
  Cache(const ModelConfig& c, DType dtype, int32_t num_seqs, int32_t max_tokens)
      : blocks_per_seq((max_tokens + kTokensPerBlock - 1) / kTokensPerBlock),
        storage(KvStorageConfig{c.num_layers, num_seqs * blocks_per_seq, kTokensPerBlock,
                                c.kv_dim(), dtype, c.head_dim}) {
    view.layers = storage.LayerViews();
    view.num_blocks = storage.config().num_blocks;
    tables.resize(num_seqs);
    for (int32_t s = 0; s < num_seqs; ++s)
      for (int32_t b = 0; b < blocks_per_seq; ++b) tables[s].push_back(s * blocks_per_seq + b);
  }
  // Random K/V (normal, as RoPE'd keys and values look) at positions [0, tokens) of every
  // sequence and layer.
  void Fill(int32_t tokens, std::mt19937& rng) {
    const int32_t kv_dim = storage.config().kv_dim, chunk = 256;
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> k(static_cast<size_t>(chunk) * kv_dim), v(k.size());
    for (float& x : k) x = nd(rng);
    for (float& x : v) x = nd(rng);
    for (auto& layer : view.layers) {
      for (auto& table : tables) {
        for (int32_t p = 0; p < tokens; p += chunk) {
          kernels::WriteKv(layer, {table.data(), p, std::min(chunk, tokens - p), 0}, k.data(),
                           v.data());
        }
      }
    }
  }
  int32_t blocks_per_seq;
  KvStorage storage;
  KvCacheView view;
  std::vector<std::vector<int32_t>> tables;
};

// `steps` greedy decode steps of every sequence at position `depth`; returns tok/s.
double Decode(const Model& model, Cache& cache, int32_t depth, int32_t steps, ThreadPool& pool,
              ForwardScratch& scratch, std::vector<float>& logits) {
  const int32_t n = static_cast<int32_t>(cache.tables.size()), vocab = model.config().vocab_size;
  logits.resize(static_cast<size_t>(n) * vocab);
  std::vector<int32_t> next(n, 1);
  const auto t0 = Clock::now();
  for (int32_t step = 0; step < steps; ++step) {
    BatchPlan plan;
    for (int32_t s = 0; s < n; ++s) {
      plan.chunks.push_back(
          {&next[s], 1, depth + step, cache.tables[s].data(), cache.blocks_per_seq, 1});
    }
    Status st = model.Forward(plan, cache.view, scratch, pool, logits.data());
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", st.ToString().c_str());
      std::exit(1);
    }
    for (int32_t s = 0; s < n; ++s) {
      next[s] = static_cast<int32_t>(
          kernels::ActiveKernels().argmax(logits.data() + static_cast<int64_t>(s) * vocab, vocab));
    }
  }
  return n * steps / std::chrono::duration<double>(Clock::now() - t0).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Time to first token of one request (greedy, 4 tokens) through the executor.
double Ttft(Executor& e, const std::vector<int32_t>& prompt, int32_t* disk_blocks) {
  Request r;
  r.prompt_ids = prompt;
  r.max_tokens = 4;
  r.sampling.temperature = 0;
  auto id = e.Enqueue(std::move(r));
  if (!id.ok()) {
    std::fprintf(stderr, "%s\n", id.status().ToString().c_str());
    std::exit(1);
  }
  for (;;) {
    for (const Result& res : e.AwaitResponses(*id, std::chrono::milliseconds(100))) {
      if (res.is_final) {
        *disk_blocks = res.stats.num_disk_reused_blocks;
        return res.stats.time_to_first_token_ms();
      }
    }
  }
}

// A repeated 2,000-token system prompt: cold, from the pool, and from the disk tier after a
// restart (a new executor over the same directory, nothing in memory), each with its own
// 32-token question after it.
void TtftTable(const Model& model, const std::string& dir, int reps) {
  std::mt19937 rng(5);
  auto tokens = [&](int n) {
    std::vector<int32_t> v(n);
    for (auto& t : v) t = static_cast<int32_t>(100 + rng() % 30000);
    return v;
  };
  const std::vector<int32_t> system = tokens(2000);
  auto with_question = [&] {
    std::vector<int32_t> p = system;
    for (int32_t t : tokens(32)) p.push_back(t);
    return p;
  };
  std::printf(
      "\n| KV | cold TTFT ms | from the pool | from disk after a restart | disk / cold | "
      "blocks read from disk |\n|---|---:|---:|---:|---:|---:|\n");
  for (DType dt : {DType::kF16, DType::kI8}) {
    std::vector<double> cold, pool, disk;
    int32_t blocks = 0, unused = 0;
    for (int r = 0; r < reps; ++r) {
      std::filesystem::remove_all(dir);
      ExecutorConfig c;
      c.kv_dtype = dt;
      c.tokens_per_block = kTokensPerBlock;
      c.max_tokens_in_paged_kv_cache = 8192;
      c.max_num_tokens = 2048;
      c.enable_chunked_context = true;
      c.enable_kv_cache_reuse = true;
      c.kv_cache_disk_path = dir;
      c.kv_cache_disk_bytes = int64_t{4} << 30;
      c.kv_cache_disk_fingerprint = "kv_bench";
      {
        auto e = Executor::Create(model, c);
        if (!e.ok()) {
          std::fprintf(stderr, "%s\n", e.status().ToString().c_str());
          std::exit(1);
        }
        cold.push_back(Ttft(**e, with_question(), &unused));
        pool.push_back(Ttft(**e, with_question(), &unused));
        (*e)->Shutdown();  // the disk tier's queue is written
      }
      auto e = Executor::Create(model, c);
      disk.push_back(Ttft(**e, with_question(), &blocks));
    }
    std::printf("| %s | %.0f | %.0f | %.0f | %.2f | %d |\n", dt == DType::kF16 ? "F16" : "int8",
                Median(cold), Median(pool), Median(disk), Median(disk) / Median(cold), blocks);
    std::fflush(stdout);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_dir = "bench-models",
              tokenizer = std::string(INFLIGHT_SOURCE_DIR) +
                          "/../shared/models/tokenizers/llama2-sentencepiece/tokenizer.model";
  int threads = 2, steps = 16, reps = 3;
  bool ttft_only = false, attention_only = false;
  std::string disk_dir = "kv_bench_disk";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i], v = argv[i + 1];
    if (f == "--threads")
      threads = std::stoi(v);
    else if (f == "--model-dir")
      model_dir = v;
    else if (f == "--steps")
      steps = std::stoi(v);
    else if (f == "--reps")
      reps = std::stoi(v);
    else if (f == "--tokenizer")
      tokenizer = v;
    else if (f == "--ttft-only")
      ttft_only = v == "1";
    else if (f == "--attention-only")
      attention_only = v == "1";
    else if (f == "--disk-dir")
      disk_dir = v;
    else {
      std::fprintf(stderr, "unknown flag %s\n", f.c_str());
      return 2;
    }
  }
  const std::string path = model_dir + "/tinyllama-1.1b-random-q4_0-ctx16k.gguf";
  auto model_or = LoadOrWriteRandomModel(path, "tinyllama-1.1b", "q4_0", tokenizer, 16384);
  if (!model_or.ok()) {
    std::fprintf(stderr, "%s\n", model_or.status().ToString().c_str());
    return 1;
  }
  const Model& model = **model_or;
  const ModelConfig& c = model.config();
  ThreadPool pool(threads);
  ForwardScratch scratch;
  std::vector<float> logits;
  std::mt19937 rng(1);
  const double weight_bytes = static_cast<double>(model.DecodeWeightBytes());
  std::printf("model %s: %s, %.2f GB of weights read per step, %d threads\n", path.c_str(),
              model.Describe().c_str(), weight_bytes / 1e9, threads);

  if (ttft_only) {
    TtftTable(model, disk_dir, reps);
    return 0;
  }
  auto token_bytes = [&](DType dt) {  // K and V of one token over every layer
    const KvStorageConfig one{c.num_layers, 1, kTokensPerBlock, c.kv_dim(), dt, c.head_dim};
    return static_cast<double>(KvStorage::BytesPerBlock(one)) / kTokensPerBlock;
  };
  std::printf(
      "K/V bytes per token: F16 %.0f, int8 %.0f (%.2fx as many tokens in the same memory)\n",
      token_bytes(DType::kF16), token_bytes(DType::kI8),
      token_bytes(DType::kF16) / token_bytes(DType::kI8));
  for (int32_t ctx : {2048, 8192}) {
    const double budget = 4.0 * (1 << 30);
    std::printf("  sequences of %d tokens in 4 GiB of cache: F16 %d, int8 %d\n", ctx,
                static_cast<int>(budget / (token_bytes(DType::kF16) * ctx)),
                static_cast<int>(budget / (token_bytes(DType::kI8) * ctx)));
  }

  // The attention alone (every layer's PagedAttention of one decode token per sequence).
  {
    const AttentionShape shape{c.num_heads, c.num_kv_heads, c.head_dim,
                               1.0f / std::sqrt(static_cast<float>(c.head_dim))};
    std::printf("\nattention alone, ms per step (%d layers):\n", c.num_layers);
    for (int32_t depth : {2048, 8192}) {
      for (int32_t batch : {1, 8}) {
        double ms[2];
        for (int t = 0; t < 2; ++t) {
          const DType dt = t == 0 ? DType::kF16 : DType::kI8;
          Cache cache(c, dt, batch, depth + 1);
          cache.Fill(depth, rng);
          std::vector<kernels::AttentionSeq> seqs;
          for (int32_t s = 0; s < batch; ++s) seqs.push_back({cache.tables[s].data(), depth, 1, s});
          std::vector<float> q(static_cast<size_t>(batch) * c.num_heads * c.head_dim, 0.5f),
              out(q.size());
          std::vector<float> sc(
              kernels::AttentionScratchFloats(shape, pool.num_threads(), kTokensPerBlock));
          std::vector<double> times;
          for (int r = 0; r < 5; ++r) {
            const auto t0 = Clock::now();
            for (auto& layer : cache.view.layers)
              kernels::PagedAttention(layer, shape, seqs.data(), batch, q.data(), out.data(), pool,
                                      sc.data());
            times.push_back(std::chrono::duration<double>(Clock::now() - t0).count() * 1e3);
          }
          ms[t] = Median(times);
        }
        std::printf("  depth %d batch %d: F16 %.2f ms, int8 %.2f ms (%.2fx)\n", depth, batch, ms[0],
                    ms[1], ms[0] / ms[1]);
      }
    }
  }

  if (attention_only) return 0;
  std::printf(
      "\n| depth | batch | F16 tok/s | int8 tok/s | int8 / F16 | F16 share of limit | "
      "int8 share of limit | int8 / F16 at the limits "
      "|\n|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int32_t depth : {2048, 8192}) {
    for (int32_t batch : {1, 8}) {
      Cache f16(c, DType::kF16, batch, depth + steps + 1),
          i8(c, DType::kI8, batch, depth + steps + 1);
      f16.Fill(depth, rng);
      i8.Fill(depth, rng);
      std::vector<double> tf, ti, sf, si;
      Decode(model, f16, depth, 2, pool, scratch, logits);  // warm-up
      Decode(model, i8, depth, 2, pool, scratch, logits);
      for (int r = 0; r < reps; ++r) {
        const double bw = MeasureReadBandwidth(pool);
        const double a = Decode(model, f16, depth, steps, pool, scratch, logits);
        const double b = Decode(model, i8, depth, steps, pool, scratch, logits);
        tf.push_back(a), ti.push_back(b);
        auto limit = [&](DType dt) {
          return batch * bw / (weight_bytes + batch * token_bytes(dt) * depth);
        };
        sf.push_back(a / limit(DType::kF16)), si.push_back(b / limit(DType::kI8));
      }
      // The ratio both would reach at the bandwidth limit (bytes read per step, F16 over int8).
      const double ceiling = (weight_bytes + batch * token_bytes(DType::kF16) * depth) /
                             (weight_bytes + batch * token_bytes(DType::kI8) * depth);
      std::printf("| %d | %d | %.2f | %.2f | %.2fx | %.0f%% | %.0f%% | %.2fx |\n", depth, batch,
                  Median(tf), Median(ti), Median(ti) / Median(tf), 100 * Median(sf),
                  100 * Median(si), ceiling);
      std::fflush(stdout);
    }
  }
  TtftTable(model, disk_dir, reps);
  return 0;
}
