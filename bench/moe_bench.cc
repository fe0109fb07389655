// Mixture-of-experts models of the real shapes (issue 26), random weights in the mixes users
// download, against the limits measured in the same run:
//   qwen3-30b-a3b  Q4_K_M     (hidden 2048, 128 experts top 8, expert FFN 768, vocab 151,936)
//   gpt-oss-20b    MXFP4_MOE  (hidden 2880, 32 experts top 4, expert FFN 2880, vocab 201,088)
// with the layer count cut so a file stays under ~6 GB (printed with every result).
//
//   decode limit = read bandwidth / bytes the step read: every non-expert matrix (attention,
//                  routers, output head; one embedding row per token), for each MoE layer the
//                  distinct experts the step's tokens chose (ForwardScratch::moe_experts_used,
//                  gate + up + down bytes each), and each sequence's K/V (window layers: the
//                  blocks of their window only). Batch B's limit in tok/s is B x that.
//   prompt limit = int8 VNNI peak / (2 x multiply-adds per prompt token): the non-expert
//                  matrices and the k chosen experts of each token (the output head runs on
//                  the last token only; attention's own products are not counted).
//
// Usage: moe_bench [--models qwen3-30b-a3b,gpt-oss-20b] [--model-dir bench-models]
//                  [--layers 12,10] [--threads 2] [--reps 3] [--write-only 1]
//                  [--measures decode,batch,prompt,segments,head,parts] [--mix f16]
// --layers: the layer cut per model (same order as --models); --mix: another weight type or
// llama-quantize mix than the released one (e.g. f16 for token checks); --write-only writes the
// files and exits (e.g. --layers 2,2 for the small cuts compared with llama.cpp token by token).
// "segments" (not in the default): kernels::MatMulSegments alone on layer 0's experts for 1,
// 4, 16 and 512 tokens routed at random, against the bandwidth and the int8 peak; "head": the
// output head's matmul alone at one token, against the bandwidth; "parts": a one-token step's
// matrices by kind (attention, routers, k experts, head) over all layers, each against the
// bandwidth.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <numeric>
#include <random>
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

void Check(const Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    std::exit(1);
  }
}

struct MoeModel {
  std::string preset, arch, mix;
  int32_t full_layers;
};

const MoeModel* FindModel(const std::string& preset) {
  static const MoeModel kModels[] = {{"qwen3-30b-a3b", "qwen3moe", "q4_k_m", 48},
                                     {"gpt-oss-20b", "gpt-oss", "mxfp4_moe", 24}};
  for (const MoeModel& m : kModels)
    if (m.preset == preset) return &m;
  return nullptr;
}

std::string FilePath(const std::string& dir, const MoeModel& m, int32_t layers) {
  return dir + "/" + m.preset + "-" + std::to_string(layers) + "of" +
         std::to_string(m.full_layers) + "L-" + m.mix + ".gguf";
}

// Writes the file when missing: the preset cut to `layers`, the Llama 2 SentencePiece vocabulary
// padded to the model's vocabulary size (the tokenizer plays no part in speed).
Status WriteIfMissing(const MoeModel& m, int32_t layers, const std::string& tokenizer,
                      const std::string& path) {
  if (std::filesystem::exists(path)) return OkStatus();
  const auto t0 = Clock::now();
  RETURN_IF_ERROR(WriteRandomModelIfMissing(path, m.arch, m.preset, layers, m.mix, tokenizer));
  std::fprintf(stderr, "wrote %s in %.0f s\n", path.c_str(), Seconds(t0));
  return OkStatus();
}

// A paged F16 cache of `num_seqs` sequences, sequence i owning a contiguous run of blocks.
struct Cache {
  Cache(const ModelConfig& c, int32_t num_seqs, int32_t max_tokens)
      : blocks_per_seq((max_tokens + kTokensPerBlock - 1) / kTokensPerBlock),
        storage(KvStorageConfig{c.num_layers, num_seqs * blocks_per_seq, kTokensPerBlock,
                                c.kv_dim(), DType::kF16, c.head_dim}) {
    view.layers = storage.LayerViews();
    view.num_blocks = storage.config().num_blocks;
    tables.resize(num_seqs);
    for (int32_t s = 0; s < num_seqs; ++s)
      for (int32_t b = 0; b < blocks_per_seq; ++b) tables[s].push_back(s * blocks_per_seq + b);
  }
  // Copies sequence 0's first `tokens` positions to every other sequence (each then decodes
  // its own tokens, so their routes differ).
  void Replicate(int32_t tokens) {
    const int64_t block = static_cast<int64_t>(storage.config().kv_dim) * 2 * kTokensPerBlock;
    const int64_t bytes =
        static_cast<int64_t>((tokens + kTokensPerBlock - 1) / kTokensPerBlock) * block;
    for (auto& l : view.layers)
      for (size_t s = 1; s < tables.size(); ++s) {
        const int64_t dst = static_cast<int64_t>(tables[s][0]) * block;
        std::memcpy(static_cast<uint8_t*>(l.k) + dst, l.k, bytes);
        std::memcpy(static_cast<uint8_t*>(l.v) + dst, l.v, bytes);
      }
  }
  int32_t blocks_per_seq;
  KvStorage storage;
  KvCacheView view;
  std::vector<std::vector<int32_t>> tables;
};

// What a step of this model reads, from the counter the MoE block fills.
struct ByteModel {
  explicit ByteModel(const Model& model) : c(model.config()) {
    const ModelWeights& w = model.weights();
    fixed = static_cast<double>(w.output.num_bytes());
    embedding_row = static_cast<double>(w.token_embedding.row_bytes());
    prompt_macs = 0;
    for (const LayerWeights& l : w.layers) {
      for (const TensorView* t :
           {&l.wq, &l.wk, &l.wv, &l.wo, &l.wqkv, &l.w_gate, &l.w_up, &l.w_down, &l.router,
            &l.shared_gate, &l.shared_up, &l.shared_down}) {
        if (t->empty()) continue;
        fixed += static_cast<double>(t->num_bytes());
        prompt_macs += static_cast<double>(t->rows) * t->cols;
      }
      double expert = 0, macs = 0;
      for (const auto* e : {&l.expert_gate, &l.expert_up, &l.expert_down}) {
        if (e->empty()) continue;
        expert += static_cast<double>(e->front().num_bytes());
        macs += static_cast<double>(e->front().rows) * e->front().cols;
      }
      expert_bytes.push_back(expert);
      prompt_macs += macs * c.experts_per_token;
    }
  }
  // K/V bytes (F16) one token at position `pos` reads over all layers.
  double KvBytes(int32_t pos) const {
    double positions = 0;
    for (int l = 0; l < c.num_layers; ++l) {
      int32_t first = 0;
      if (c.is_window_layer(l))
        first = std::max(0, pos - c.sliding_window + 1) / kTokensPerBlock * kTokensPerBlock;
      positions += pos + 1 - first;
    }
    return positions * c.kv_dim() * 2 * 2;
  }
  // The weights the last forward pass read for `tokens` tokens.
  double WeightBytes(const ForwardScratch& s, int32_t tokens, double* experts_per_layer) const {
    double bytes = fixed + tokens * embedding_row, used = 0;
    for (int l = 0; l < c.num_layers; ++l) {
      const int32_t n = l < static_cast<int>(s.moe_experts_used.size()) ? s.moe_experts_used[l] : 0;
      bytes += n * expert_bytes[l];
      used += n;
    }
    if (experts_per_layer != nullptr) *experts_per_layer = used / c.num_layers;
    return bytes;
  }
  const ModelConfig& c;
  double fixed = 0, embedding_row = 0, prompt_macs = 0;
  std::vector<double> expert_bytes;  // [layer]: gate + up + down of one expert
};

struct DecodeResult {
  double tokens_per_s = 0, bytes_per_step = 0, experts_per_layer = 0;
};

struct Bench {
  const Model& model;
  const ByteModel& bytes;
  ThreadPool& pool;
  ForwardScratch scratch;
  std::vector<float> logits;

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
  // `steps` greedy steps of sequences 0..n-1 at position `depth`, sequence s starting from its
  // own token; the bytes each step read are summed from the experts counter.
  DecodeResult Decode(Cache& cache, int32_t n, int32_t depth, int32_t steps) {
    const int32_t vocab = model.config().vocab_size;
    std::vector<int32_t> next(n);
    for (int32_t s = 0; s < n; ++s) next[s] = 100 + (s * 7919 + depth) % 30000;
    double total_bytes = 0, experts = 0;
    double elapsed = 0;
    for (int32_t step = 0; step < steps; ++step) {
      BatchPlan plan;
      for (int32_t s = 0; s < n; ++s)
        plan.chunks.push_back(
            {&next[s], 1, depth + step, cache.tables[s].data(), cache.blocks_per_seq, 1});
      float* out = Logits(n);
      const auto t0 = Clock::now();
      Check(model.Forward(plan, cache.view, scratch, pool, out));
      for (int32_t s = 0; s < n; ++s)
        next[s] = static_cast<int32_t>(
            kernels::ActiveKernels().argmax(out + static_cast<int64_t>(s) * vocab, vocab));
      elapsed += Seconds(t0);
      double e = 0;
      total_bytes += bytes.WeightBytes(scratch, n, &e) + n * bytes.KvBytes(depth + step);
      experts += e;
    }
    return {n * steps / elapsed, total_bytes / steps, experts / steps};
  }
  float* Logits(int64_t rows) {
    logits.resize(rows * model.config().vocab_size);
    return logits.data();
  }
};

std::vector<int32_t> PromptIds(int32_t n, int32_t vocab) {
  std::vector<int32_t> ids(n);
  for (int32_t i = 0; i < n; ++i) ids[i] = 100 + (i * 37) % (vocab - 200);
  return ids;
}

std::string Format(const char* fmt, double a, double b = 0, double c = 0) {
  char buf[160];
  std::snprintf(buf, sizeof buf, fmt, a, b, c);
  return buf;
}

// One measure repeated `reps` times, each between two bandwidth readings; returns the median
// rate and share and prints every sample.
struct Measured {
  double rate = 0, share = 0, limit = 0, bytes = 0, experts = 0, bw_lo = 1e30, bw_hi = 0;
  double best_rate = 0, best_share = 0;  // the best sample (the machine is shared)
};

template <typename Fn>
Measured Repeat(ThreadPool& pool, int reps, int32_t batch, const char* label, Fn run) {
  std::vector<double> rates, shares, limits, bytes, experts;
  Measured m;
  double bw = MedianReadBandwidth(pool);
  for (int rep = 0; rep < reps; ++rep) {
    const DecodeResult r = run(rep);
    const double bw_after = MedianReadBandwidth(pool);
    const double limit = batch * 0.5 * (bw + bw_after) / r.bytes_per_step;
    std::printf(
        "  %-28s %7.1f tok/s, limit %7.1f (%.3f GB/step, %.1f experts/layer, "
        "%.1f-%.1f GB/s): %3.0f%%\n",
        label, r.tokens_per_s, limit, r.bytes_per_step / 1e9, r.experts_per_layer, bw / 1e9,
        bw_after / 1e9, 100 * r.tokens_per_s / limit);
    std::fflush(stdout);
    m.bw_lo = std::min({m.bw_lo, bw, bw_after}), m.bw_hi = std::max({m.bw_hi, bw, bw_after});
    rates.push_back(r.tokens_per_s), shares.push_back(r.tokens_per_s / limit);
    limits.push_back(limit), bytes.push_back(r.bytes_per_step);
    experts.push_back(r.experts_per_layer);
    bw = bw_after;
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  m.rate = median(rates), m.share = median(shares), m.limit = median(limits);
  m.bytes = median(bytes), m.experts = median(experts);
  m.best_rate = *std::max_element(rates.begin(), rates.end());
  m.best_share = *std::max_element(shares.begin(), shares.end());
  return m;
}

// MatMulSegments alone over layer 0's experts, tokens routed uniformly at random (k distinct
// experts each) and grouped as the MoE block groups them: how much of a step the expert
// matmuls take, and their share of the int8 peak (prompt) or of the bandwidth (decode).
// The matrices of a one-token decode step by kind, each kind run over every layer (so nothing
// stays in the cache between layers), against the read bandwidth measured right before:
// attention projections (q/k/v as one group, then o), routers, 8 (k) experts per layer chosen
// at random (gate/up segments, then down), the output head.
void PartsBench(const Model& model, ThreadPool& pool, int reps) {
  const ModelConfig& c = model.config();
  const ModelWeights& mw = model.weights();
  const int64_t H = c.hidden_size;
  std::vector<float> x(std::max<int64_t>(H, c.q_dim()) * 8, 0.01f);
  std::vector<float> out(std::max<int64_t>(c.vocab_size, 4 * c.q_dim()) * 8);
  std::vector<float> gate(8 * c.expert_ffn_size), up(8 * c.expert_ffn_size),
      act(8 * c.expert_ffn_size, 0.01f);
  kernels::MatMulScratch scratch;
  std::mt19937 rng(5);
  std::vector<std::vector<int>> chosen(c.num_layers);
  for (auto& e : chosen) {
    std::vector<int> all(c.num_experts);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    e.assign(all.begin(), all.begin() + c.experts_per_token);
  }
  struct Part {
    const char* name;
    double bytes = 0;
    std::function<void()> run;
  };
  std::vector<Part> parts;
  Part attn{"attention q/k/v + o"};
  for (const LayerWeights& lw : mw.layers)
    attn.bytes += lw.wq.num_bytes() + lw.wk.num_bytes() + lw.wv.num_bytes() + lw.wo.num_bytes();
  attn.run = [&] {
    for (const LayerWeights& lw : mw.layers) {
      const kernels::MatMulTarget t[] = {{&lw.wq, out.data()},
                                         {&lw.wk, out.data() + c.q_dim()},
                                         {&lw.wv, out.data() + c.q_dim() + c.kv_dim()}};
      kernels::MatMulGroup(t, 3, x.data(), 1, pool, scratch);
      kernels::MatMul(lw.wo, x.data(), 1, out.data(), pool, scratch);
    }
  };
  parts.push_back(attn);
  Part router{"routers"};
  for (const LayerWeights& lw : mw.layers) router.bytes += lw.router.num_bytes();
  router.run = [&] {
    for (const LayerWeights& lw : mw.layers)
      kernels::MatMul(lw.router, x.data(), 1, out.data(), pool, scratch);
  };
  parts.push_back(router);
  Part experts{"experts (k per layer)"};
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& lw = mw.layers[l];
    for (int e : chosen[l])
      experts.bytes += lw.expert_gate[e].num_bytes() + lw.expert_up[e].num_bytes() +
                       lw.expert_down[e].num_bytes();
  }
  experts.run = [&] {
    const int32_t zeros[8] = {};
    for (int l = 0; l < c.num_layers; ++l) {
      const LayerWeights& lw = mw.layers[l];
      std::vector<kernels::MatMulSegment> gu, dn;
      for (size_t i = 0; i < chosen[l].size(); ++i) {
        const int e = chosen[l][i];
        const int64_t r = static_cast<int64_t>(i);
        gu.push_back({&lw.expert_gate[e], r, 1, gate.data() + r * c.expert_ffn_size});
        gu.push_back({&lw.expert_up[e], r, 1, up.data() + r * c.expert_ffn_size});
        dn.push_back({&lw.expert_down[e], r, 1, out.data() + r * H});
      }
      const int64_t k = static_cast<int64_t>(chosen[l].size());
      kernels::MatMulSegments(gu.data(), static_cast<int>(gu.size()), x.data(), 1, pool, scratch,
                              zeros, k);
      kernels::MatMulSegments(dn.data(), static_cast<int>(dn.size()), act.data(), k, pool, scratch);
    }
  };
  parts.push_back(experts);
  Part head{"output head"};
  head.bytes = static_cast<double>(mw.output.num_bytes());
  head.run = [&] { kernels::MatMul(mw.output, x.data(), 1, out.data(), pool, scratch); };
  parts.push_back(head);
  for (Part& p : parts) {
    p.run();
    const double bw = MedianReadBandwidth(pool);
    double best = 1e30;
    for (int rep = 0; rep < reps; ++rep) {
      const auto t0 = Clock::now();
      for (int i = 0; i < 5; ++i) p.run();
      best = std::min(best, Seconds(t0) / 5);
    }
    std::printf("  1-token %-24s %7.3f GB %8.3f ms = %5.1f GB/s (%3.0f%% of %.1f)\n", p.name,
                p.bytes / 1e9, best * 1e3, p.bytes / best / 1e9, 100 * p.bytes / best / bw,
                bw / 1e9);
  }
  std::fflush(stdout);
}

// The output head alone at one token (a decode step's largest single matrix on the cut
// files), against the read bandwidth measured right before.
void HeadBench(const Model& model, ThreadPool& pool, int reps) {
  const ModelConfig& c = model.config();
  const TensorView& head = model.weights().output;
  std::vector<float> x(c.hidden_size, 0.01f), y(c.vocab_size);
  kernels::MatMulScratch scratch;
  kernels::MatMul(head, x.data(), 1, y.data(), pool, scratch);
  const double bw = MedianReadBandwidth(pool);
  double best = 1e30;
  for (int rep = 0; rep < reps; ++rep) {
    const auto t0 = Clock::now();
    for (int i = 0; i < 10; ++i) kernels::MatMul(head, x.data(), 1, y.data(), pool, scratch);
    best = std::min(best, Seconds(t0) / 10);
  }
  const double bytes = static_cast<double>(head.num_bytes());
  std::printf("  output head (%s, %.3f GB), 1 token: %8.3f ms = %5.1f GB/s (%3.0f%% of %.1f)\n",
              DTypeName(head.dtype), bytes / 1e9, best * 1e3, bytes / best / 1e9,
              100 * bytes / best / bw, bw / 1e9);
  std::fflush(stdout);
}

void SegmentsBench(const Model& model, ThreadPool& pool, int64_t tokens, int reps) {
  const ModelConfig& c = model.config();
  const LayerWeights& lw = model.weights().layers[0];
  const int E = c.num_experts, K = c.experts_per_token;
  const int64_t H = c.hidden_size, F = c.expert_ffn_size, P = tokens * K;
  std::mt19937 rng(static_cast<uint32_t>(tokens));
  std::vector<int32_t> count(E, 0), order(E);
  for (int64_t t = 0; t < tokens; ++t) {
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    for (int k = 0; k < K; ++k) ++count[order[k]];
  }
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> in(P * H), gate(P * F), up(P * F), act(P * F), down(P * H);
  for (float& x : in) x = normal(rng);
  for (float& x : act) x = 0.1f * normal(rng);
  std::vector<kernels::MatMulSegment> gate_up, downs;
  int64_t row = 0, distinct = 0;
  for (int e = 0; e < E; ++e) {
    if (count[e] == 0) continue;
    ++distinct;
    gate_up.push_back({&lw.expert_gate[e], row, count[e], gate.data() + row * F});
    gate_up.push_back({&lw.expert_up[e], row, count[e], up.data() + row * F});
    downs.push_back({&lw.expert_down[e], row, count[e], down.data() + row * H});
    row += count[e];
  }
  kernels::MatMulScratch scratch;
  auto run = [&] {
    kernels::MatMulSegments(gate_up.data(), static_cast<int>(gate_up.size()), in.data(), P, pool,
                            scratch);
    kernels::MatMulSegments(downs.data(), static_cast<int>(downs.size()), act.data(), P, pool,
                            scratch);
  };
  run();
  const double bw = MedianReadBandwidth(pool), peak = MeasureInt8Peak(pool);
  double best = 1e30;
  for (int rep = 0; rep < reps; ++rep) {
    const auto t0 = Clock::now();
    for (int i = 0; i < 5; ++i) run();
    best = std::min(best, Seconds(t0) / 5);
  }
  const double bytes = distinct * (lw.expert_gate[0].num_bytes() + lw.expert_up[0].num_bytes() +
                                   lw.expert_down[0].num_bytes());
  const double ops = 2.0 * P * 3 * F * H;
  std::printf(
      "  MatMulSegments, layer 0, %4lld tokens (%lld experts): %8.3f ms = %5.1f GB/s "
      "(%3.0f%% of %.1f) = %6.0f GOPS (%3.0f%% of the int8 peak %.0f)\n",
      static_cast<long long>(tokens), static_cast<long long>(distinct), best * 1e3,
      bytes / best / 1e9, 100 * bytes / best / bw, bw / 1e9, ops / best / 1e9,
      100 * ops / best / peak, peak / 1e9);
  std::fflush(stdout);
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string models = "qwen3-30b-a3b,gpt-oss-20b", model_dir = "bench-models", layers = "12,10";
  std::string measures = "decode,batch,prompt";
  std::string tokenizer = std::string(INFLIGHT_SOURCE_DIR) +
                          "/../shared/models/tokenizers/llama2-sentencepiece/tokenizer.model";
  std::string mix;  // empty: each model's released mix
  int threads = 2, reps = 3;
  bool write_only = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i], v = argv[i + 1];
    if (f == "--models")
      models = v;
    else if (f == "--model-dir")
      model_dir = v;
    else if (f == "--layers")
      layers = v;
    else if (f == "--threads")
      threads = std::stoi(v);
    else if (f == "--reps")
      reps = std::stoi(v);
    else if (f == "--write-only")
      write_only = v != "0";
    else if (f == "--measures")
      measures = v;
    else if (f == "--tokenizer")
      tokenizer = v;
    else if (f == "--mix")
      mix = v;
    else {
      std::fprintf(stderr, "unknown flag %s\n", f.c_str());
      return 2;
    }
  }
  const std::vector<std::string> names = Split(models), cuts = Split(layers);
  auto wants = [&](const char* m) { return measures.find(m) != std::string::npos; };
  ThreadPool pool(threads);
  std::ostringstream table;
  table << "| model (layers of the file) | measure | tok/s, median (best) | limit, tok/s | share "
           "of limit, median (best) | GB "
           "read / step | experts read / layer | bandwidth, GB/s |\n"
           "|---|---|---|---|---|---|---|---|\n";
  for (size_t i = 0; i < names.size(); ++i) {
    const MoeModel* found = FindModel(names[i]);
    if (found == nullptr) {
      std::fprintf(stderr, "unknown model %s (qwen3-30b-a3b, gpt-oss-20b)\n", names[i].c_str());
      return 2;
    }
    MoeModel model_spec = *found;
    if (!mix.empty()) model_spec.mix = mix;
    const MoeModel* m = &model_spec;
    const int32_t cut = i < cuts.size() ? std::stoi(cuts[i]) : m->full_layers;
    const std::string path = FilePath(model_dir, *m, cut);
    Check(WriteIfMissing(*m, cut, tokenizer, path));
    if (write_only) continue;
    const auto load_start = Clock::now();
    auto loaded = Model::Load(path);
    Check(loaded.status());
    const Model& model = **loaded;
    const ModelConfig& c = model.config();
    const ByteModel bytes(model);
    const std::string label = m->preset + " " + m->mix + " (" + std::to_string(cut) + " of " +
                              std::to_string(m->full_layers) + " layers)";
    std::printf(
        "== %s: %s\n  %s, loaded in %.1f s; %.3f GB of non-expert weights per step, "
        "%.1f MB per expert (layer 0)\n",
        path.c_str(), label.c_str(), model.Describe().c_str(), Seconds(load_start),
        bytes.fixed / 1e9, bytes.expert_bytes[0] / 1e6);
    Bench bench{model, bytes, pool, {}, {}};
    auto row = [&](const std::string& measure, const Measured& r) {
      table << "| " << label << " | " << measure << " | "
            << Format("%.1f (%.1f)", r.rate, r.best_rate) << " | " << Format("%.1f", r.limit)
            << " | " << Format("%.0f%% (%.0f%%)", 100 * r.share, 100 * r.best_share) << " | "
            << Format("%.3f", r.bytes / 1e9) << " | " << Format("%.1f", r.experts) << " | "
            << Format("%.0f-%.0f", r.bw_lo / 1e9, r.bw_hi / 1e9) << " |\n";
    };
    const int32_t kDecode = 16;
    if (wants("decode")) {
      for (int32_t depth : {0, 512, 2048}) {
        Cache cache(c, 1, depth + reps * kDecode + 1);
        const std::vector<int32_t> ids = PromptIds(std::max(1, depth), c.vocab_size);
        bench.Prefill(cache, 0, ids);
        const std::string name = "decode, depth " + std::to_string(depth);
        const Measured r = Repeat(pool, reps, 1, name.c_str(), [&](int rep) {
          return bench.Decode(cache, 1, static_cast<int32_t>(ids.size()) + rep * kDecode, kDecode);
        });
        row("decode at depth " + std::to_string(depth) + ", batch 1", r);
      }
    }
    if (wants("batch")) {
      Cache cache(c, 16, 512 + reps * kDecode + 1);
      bench.Prefill(cache, 0, PromptIds(512, c.vocab_size));
      cache.Replicate(512);
      for (int32_t n : {1, 4, 16}) {
        const std::string name = "batch " + std::to_string(n) + " after 512";
        const Measured r = Repeat(pool, reps, n, name.c_str(), [&](int rep) {
          return bench.Decode(cache, n, 512 + rep * kDecode, kDecode);
        });
        row("decode batch " + std::to_string(n) + " after 512-token prompts", r);
      }
    }
    if (wants("prompt")) {
      Cache cache(c, 1, 513);
      const std::vector<int32_t> ids = PromptIds(512, c.vocab_size);
      bench.Prefill(cache, 0, ids);  // first pass: scratch allocation and page faults
      std::vector<double> rates, shares;
      Measured r;
      for (int rep = 0; rep < reps; ++rep) {
        const double peak = MeasureInt8Peak(pool);
        const double rate = 512 / bench.Prefill(cache, 0, ids);
        const double limit = peak / (2 * bytes.prompt_macs);
        double experts = 0;
        const double read = bytes.WeightBytes(bench.scratch, 512, &experts);
        std::printf(
            "  prompt 512 %22s %7.1f tok/s, int8 limit %7.1f (%.0f GOPS): %3.0f%%; "
            "reads %.2f GB (%.1f experts/layer)\n",
            "", rate, limit, peak / 1e9, 100 * rate / limit, read / 1e9, experts);
        rates.push_back(rate), shares.push_back(rate / limit);
        r.limit = limit, r.bytes = read, r.experts = experts;
      }
      std::sort(rates.begin(), rates.end()), std::sort(shares.begin(), shares.end());
      r.rate = rates[reps / 2], r.share = shares[reps / 2], r.bw_lo = r.bw_hi = 0;
      table << "| " << label << " | prompt 512 (vs int8 VNNI peak) | "
            << Format("%.1f (%.1f)", r.rate, rates.back()) << " | " << Format("%.1f", r.limit)
            << " | " << Format("%.0f%% (%.0f%%)", 100 * r.share, 100 * shares.back()) << " | "
            << Format("%.3f", r.bytes / 1e9) << " | " << Format("%.1f", r.experts) << " | - |\n";
    }
    if (wants("head")) HeadBench(model, pool, reps);
    if (wants("parts")) PartsBench(model, pool, reps);
    if (wants("segments"))
      for (int64_t tokens : {1, 4, 16, 512}) SegmentsBench(model, pool, tokens, reps);
    std::fflush(stdout);
  }
  if (write_only) return 0;
  std::printf("\n%s", table.str().c_str());
  return 0;
}
