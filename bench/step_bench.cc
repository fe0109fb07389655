// Google Benchmark of the pieces of one engine step: a batched decode forward pass of a real
// model shape (random weights) at 1..32 sequences, and the int8 matmul alone. Counters give
// tokens/s and int8 GOPS so the batched cost can be read against the ~940 GOPS VNNI peak of
// this machine; compare rows of one run, not absolute times.
//
// Usage: step_bench [--preset small|tinyllama-1.1b] [--dtype q8_0|q4_0|q4_k_m|f16|...]
//                   [--threads N] [--model-dir DIR]
//                   [google benchmark flags, e.g. --benchmark_filter=Decode]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/fp16.h"
#include "base/thread_pool.h"
#include "bench_models.h"
#include "kernels/attention.h"
#include "kernels/interleave.h"
#include "kernels/kernels.h"
#include "kernels/quantize.h"
#include "kvcache/kv_storage.h"
#include "limits.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

using namespace inflight;

namespace {

std::string g_preset = "small";
std::string g_model_dir = "bench-models";
std::string g_dtype =
    "q8_0";  // weights of the step benchmarks (any inflight-model make-random type or mix)
int g_threads = 2;

const Model& BenchModel() {
  static std::unique_ptr<Model> model = [] {
    const std::string tokenizer =
        std::string(INFLIGHT_SOURCE_DIR) +
        "/../shared/models/tokenizers/llama2-sentencepiece/tokenizer.model";
    auto m = LoadOrWriteRandomModel(g_model_dir + "/" + g_preset + "-random-" + g_dtype + ".gguf",
                                    g_preset, g_dtype, tokenizer);
    if (!m.ok()) {
      std::fprintf(stderr, "%s\n", m.status().ToString().c_str());
      std::exit(1);
    }
    return std::move(*m);
  }();
  return *model;
}

// A paged F16 KV cache of `blocks` blocks of 32 tokens for the bench model, and its view.
struct BenchCache {
  static constexpr int32_t kTokensPerBlock = 32;
  BenchCache(const ModelConfig& c, int32_t blocks)
      : storage(KvStorageConfig{c.num_layers, blocks, kTokensPerBlock, c.kv_dim(), DType::kF16,
                                c.head_dim}) {
    view.layers = storage.LayerViews();
    view.num_blocks = storage.config().num_blocks;
  }
  KvStorage storage;
  KvCacheView view;
};

// One decode step of `batch` sequences, each with `context` tokens already in the cache.
void BM_DecodeStep(benchmark::State& state) {
  const Model& model = BenchModel();
  const ModelConfig& c = model.config();
  const int32_t batch = static_cast<int32_t>(state.range(0)),
                context = static_cast<int32_t>(state.range(1));
  const int32_t blocks_per_seq =
      (context + BenchCache::kTokensPerBlock) / BenchCache::kTokensPerBlock;
  BenchCache cache(c, batch * blocks_per_seq);
  const KvCacheView& kv = cache.view;
  ThreadPool pool(g_threads);
  ForwardScratch scratch;
  std::mt19937 rng(1);
  std::vector<std::vector<int32_t>> tables(batch), tokens(batch);
  BatchPlan prefill;
  for (int32_t i = 0; i < batch; ++i) {
    for (int32_t b = 0; b < blocks_per_seq; ++b) tables[i].push_back(i * blocks_per_seq + b);
    for (int32_t t = 0; t <= context; ++t)
      tokens[i].push_back(static_cast<int32_t>(rng() % c.vocab_size));
    prefill.chunks.push_back({tokens[i].data(), context, 0, tables[i].data(), blocks_per_seq, 1});
  }
  std::vector<float> logits(static_cast<size_t>(batch) * c.vocab_size);
  if (Status s = model.Forward(prefill, kv, scratch, pool, logits.data()); !s.ok()) {
    state.SkipWithError(s.ToString().c_str());
    return;
  }
  BatchPlan decode;
  for (int32_t i = 0; i < batch; ++i) {
    decode.chunks.push_back(
        {tokens[i].data() + context, 1, context, tables[i].data(), blocks_per_seq, 1});
  }
  for (auto _ : state) {
    // Rewrites the same cache slot each time: the cost of the step, not of a growing context.
    Status s = model.Forward(decode, kv, scratch, pool, logits.data());
    benchmark::DoNotOptimize(logits.data());
    if (!s.ok()) state.SkipWithError(s.ToString().c_str());
  }
  state.counters["tok/s"] =
      benchmark::Counter(static_cast<double>(batch), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["int8_GOPS"] = benchmark::Counter(2e-9 * MacsPerToken(model) * batch,
                                                   benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_DecodeStep)
    ->ArgNames({"batch", "context"})
    ->Args({1, 128})
    ->Args({2, 128})
    ->Args({4, 128})
    ->Args({8, 128})
    ->Args({16, 128})
    ->Args({32, 128})
    ->Args({1, 512})
    ->Args({16, 512})
    ->Args({1, 2000})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// One prompt of `tokens` tokens in one forward pass (prefill, causal attention over itself).
void BM_PrefillStep(benchmark::State& state) {
  const Model& model = BenchModel();
  const ModelConfig& c = model.config();
  const int32_t tokens = static_cast<int32_t>(state.range(0));
  const int32_t blocks = (tokens + BenchCache::kTokensPerBlock - 1) / BenchCache::kTokensPerBlock;
  BenchCache cache(c, blocks);
  const KvCacheView& kv = cache.view;
  ThreadPool pool(g_threads);
  ForwardScratch scratch;
  std::mt19937 rng(1);
  std::vector<int32_t> table(blocks), prompt(tokens);
  for (int32_t b = 0; b < blocks; ++b) table[b] = b;
  for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % c.vocab_size);
  BatchPlan plan;
  plan.chunks.push_back({prompt.data(), tokens, 0, table.data(), blocks, 1});
  std::vector<float> logits(c.vocab_size);
  // One untimed pass: the engine's scratch is allocated once and kept, so its first page
  // faults are not part of a prompt's cost.
  if (Status s = model.Forward(plan, kv, scratch, pool, logits.data()); !s.ok())
    state.SkipWithError(s.ToString().c_str());
  for (auto _ : state) {
    Status s = model.Forward(plan, kv, scratch, pool, logits.data());
    benchmark::DoNotOptimize(logits.data());
    if (!s.ok()) state.SkipWithError(s.ToString().c_str());
  }
  state.counters["tok/s"] = benchmark::Counter(static_cast<double>(tokens),
                                               benchmark::Counter::kIsIterationInvariantRate);
  // The share of the compute peak of the kernels' type, measured right after the timed loop.
  const bool int8 = kernels::UsesQuantizedActivations(model.weights().layers[0].w_up.dtype);
  const double peak = int8 ? MeasureInt8Peak(pool) : MeasureFp32Peak(pool);
  state.counters["peak_share"] = benchmark::Counter(2.0 * MacsPerToken(model) * tokens / peak,
                                                    benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_PrefillStep)
    ->ArgNames({"tokens"})
    ->Arg(128)
    ->Arg(512)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// y = x W^T for an interleaved quantized matrix (rows x cols, stored type `type`, a ggml id:
// 8 Q8_0, 2 Q4_0, 12 Q4_K, 20 IQ4_NL, 39 MXFP4, ...) and `tokens` activation rows. cold = 1: the
// call cycles through copies of the matrix totalling >= 96 MB, so the weights come from memory as
// in a real step (the model is larger than the caches); cold = 0: one copy, cache-resident when it
// fits.
void BM_MatMul(benchmark::State& state) {
  const int64_t rows = state.range(0), cols = state.range(1), tokens = state.range(2);
  const bool cold = state.range(3) != 0;
  const DType type = static_cast<DType>(state.range(4));
  state.SetLabel(DTypeName(type));
  std::mt19937 rng(2);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> f(cols);
  std::vector<uint8_t> q8(DTypeRowBytes(type, cols) * rows);
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : f) v = nd(rng);
    kernels::QuantizeRow(type, f.data(), cols, q8.data() + r * DTypeRowBytes(type, cols));
  }
  const TensorView source{q8.data(), type, rows, cols};
  const int64_t bytes = kernels::InterleavedBytes(source);
  const int64_t copies = cold ? std::max<int64_t>(2, (int64_t{96} << 20) / bytes + 1) : 1;
  std::vector<std::vector<uint8_t>> buffers(copies);
  std::vector<TensorView> views;
  for (auto& b : buffers) {
    b.resize(bytes + 64);
    views.push_back(kernels::Interleave(source, b.data()));
  }
  std::vector<float> x(tokens * cols), y(tokens * rows);
  for (float& v : x) v = nd(rng);
  ThreadPool pool(g_threads);
  kernels::MatMulScratch scratch;
  size_t i = 0;
  for (auto _ : state) {
    kernels::MatMul(views[i], x.data(), tokens, y.data(), pool, scratch);
    i = (i + 1) % views.size();
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["int8_GOPS"] = benchmark::Counter(2e-9 * rows * cols * tokens,
                                                   benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GB/s"] =
      benchmark::Counter(1e-9 * bytes, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_MatMul)
    ->ArgNames({"rows", "cols", "tokens", "cold", "type"})
    ->ArgsProduct({{512}, {512}, {1, 16}, {0}, {8}})
    ->ArgsProduct({{32000}, {512}, {1, 16}, {0, 1}, {8}})
    ->ArgsProduct({{2048}, {2048}, {1, 16}, {0, 1}, {8}})
    ->ArgsProduct({{5632}, {2048}, {16}, {0, 1}, {8}})
    ->ArgsProduct({{2048}, {5632}, {16}, {0, 1}, {8}})
    ->ArgsProduct({{2048}, {2048}, {128}, {0}, {8}})
    // Every weight format the files users download carry: decode (1 token, weights from
    // memory), batched decode (16) and prompt processing (128).
    ->ArgsProduct({{5632}, {2048}, {1}, {1}, {8, 2, 3, 6, 7, 10, 11, 12, 13, 14, 20, 23}})
    ->ArgsProduct({{5632}, {2048}, {1, 16, 128}, {0}, {8, 2, 10, 11, 12, 13, 14, 23}})
    // A 512-token prompt: the activations no longer fit in L2 (wide matrices most of all).
    ->ArgsProduct({{5632}, {2048}, {512}, {0}, {8, 2, 12}})
    ->ArgsProduct({{2048}, {5632}, {128, 512}, {0}, {8, 2, 12}})
    // gpt-oss's expert shape: MXFP4 against the other 4-bit formats (Q4_0, IQ4_NL), decode and
    // a 512-token prompt.
    ->ArgsProduct({{2880}, {2880}, {1, 512}, {1}, {2, 20, 39}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// Attention of one decode token per sequence: `batch` sequences of `context` cached
// positions, `heads` query heads over 4 KV heads of 64 (8: the small model, 32: the 1.1B
// shape), F16 cache.
void BM_DecodeAttention(benchmark::State& state) {
  const int32_t batch = static_cast<int32_t>(state.range(0)),
                context = static_cast<int32_t>(state.range(1));
  const kernels::AttentionShape shape{static_cast<int32_t>(state.range(2)), 4, 64, 0.125f};
  const int32_t kv_dim = shape.num_kv_heads * shape.head_dim, tpb = 32,
                blocks_per_seq = (context + tpb - 1) / tpb;
  const int64_t slots = static_cast<int64_t>(batch) * blocks_per_seq * tpb;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<uint16_t> k(slots * kv_dim), v(slots * kv_dim);
  for (auto* buf : {&k, &v})
    for (uint16_t& x : *buf) x = Fp32ToFp16(nd(rng));
  const kernels::KvLayerView kv{k.data(), v.data(), DType::kF16, tpb, kv_dim, shape.head_dim};
  std::vector<int32_t> table(static_cast<size_t>(batch) * blocks_per_seq);
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
  std::shuffle(table.begin(), table.end(), rng);
  std::vector<kernels::AttentionSeq> seqs;
  for (int32_t i = 0; i < batch; ++i)
    seqs.push_back({table.data() + i * blocks_per_seq, context - 1, 1, i});
  std::vector<float> q(static_cast<size_t>(batch) * shape.num_heads * shape.head_dim),
      out(q.size());
  for (float& x : q) x = nd(rng);
  ThreadPool pool(g_threads);
  std::vector<float> scratch(kernels::AttentionScratchFloats(shape, g_threads, tpb));
  for (auto _ : state) {
    kernels::PagedAttention(kv, shape, seqs.data(), batch, q.data(), out.data(), pool,
                            scratch.data());
    benchmark::DoNotOptimize(out.data());
  }
  // Multiply-adds: q.K and p.V over every position of every head.
  state.counters["GFLOPS"] =
      benchmark::Counter(4e-9 * batch * shape.num_heads * shape.head_dim * context,
                         benchmark::Counter::kIsIterationInvariantRate);
  // K and V bytes read (F16): the bandwidth the kernel draws from the cache.
  state.counters["KV_GB/s"] = benchmark::Counter(4e-9 * batch * kv_dim * context,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_DecodeAttention)
    ->ArgNames({"batch", "context", "heads"})
    ->Args({16, 128, 8})
    ->Args({16, 1024, 8})
    ->Args({1, 512, 32})
    ->Args({1, 2048, 32})
    ->Args({16, 512, 32})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    const bool has_value = i + 1 < argc;
    if (f == "--preset" && has_value)
      g_preset = argv[++i];
    else if (f == "--dtype" && has_value)
      g_dtype = argv[++i];
    else if (f == "--threads" && has_value)
      g_threads = std::stoi(argv[++i]);
    else if (f == "--model-dir" && has_value)
      g_model_dir = argv[++i];
    else
      rest.push_back(argv[i]);
  }
  int n = static_cast<int>(rest.size());
  benchmark::Initialize(&n, rest.data());
  if (benchmark::ReportUnrecognizedArguments(n, rest.data())) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
