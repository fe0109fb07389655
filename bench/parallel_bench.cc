// parallel_bench: forward-pass step time of tensor parallelism over MPI (TP=2, one compute
// thread per rank) against one process with one thread (TP=1), A/B interleaved step by step in
// one run, after realistic prompts: each sequence's 512-token prompt is prefilled first (those
// steps are measured too), then decode steps run at depth 512+. Rank 0 also reports the bytes
// and time of the all-gathers per step, and the read bandwidth of one and of two threads
// measured in the same run (the decode limits). Every TP=2 step's logits must equal TP=1's bit
// for bit, else exit 1.
//
//   mpirun -np 2 --bind-to core bench/parallel_bench [--preset tinyllama-1.1b --dtype q4_k_m]
//          [--prompt-tokens 512] [--batches 1,8] [--decode-steps 32] [--model-dir bench-models]
//
// A mixture of experts under expert parallelism (--moe-ep-size 2: each rank holds half the
// experts whole; 0: each rank half of every expert's columns), its layer count cut:
//   ... --arch qwen3moe --preset qwen3-30b-a3b --layers 4 --moe-ep-size 2
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "bench_models.h"
#include "engine/model_runner.h"
#include "limits.h"
#include "parallel/parallel_runner.h"

using namespace inflight;

namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Sample {
  std::vector<double> tp1_ms, tp2_ms, two_threads_ms, comm_ms, bytes, collectives;
};

int Leader(const std::string& path, int32_t prompt_tokens, const std::vector<int>& batches,
           int32_t decode_steps, int32_t moe_ep_size) {
  auto model = Model::Load(path);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
    return 1;
  }
  ExecutorConfig config;
  config.num_threads = 1;
  config.tokens_per_block = 32;
  const int max_batch = *std::max_element(batches.begin(), batches.end());
  const int32_t blocks_per_seq = (prompt_tokens + decode_steps + 31) / 32;
  config.max_tokens_in_paged_kv_cache = int64_t{32} * blocks_per_seq * max_batch;
  config.max_batch_size = max_batch;
  parallel::ParallelConfig pc;
  pc.tp_size = 2;
  pc.moe_ep_size = moe_ep_size;
  pc.share_host_cores = false;
  auto tp2 = parallel::ParallelModelRunner::Create(MPI_COMM_WORLD, path, config, pc);
  if (!tp2.ok()) {
    std::fprintf(stderr, "%s\n", tp2.status().ToString().c_str());
    return 1;
  }
  LocalModelRunner tp1(**model, config);
  // The same two cores used by one process's two compute threads: what TP=2 competes with.
  ExecutorConfig two_config = config;
  two_config.num_threads = 2;
  LocalModelRunner two_threads(**model, two_config);

  // The limits of this run: one thread's and two threads' read bandwidth (rank 1 idles).
  ThreadPool one(1), two(2);
  const double bw1 = MeasureReadBandwidth(one), bw2 = MeasureReadBandwidth(two);
  const double weight_bytes = static_cast<double>((*model)->DecodeWeightBytes());
  std::printf("model %s\n%s\n", path.c_str(), (*model)->Describe().c_str());
  if ((*model)->config().num_experts > 0) {
    std::printf("TP=2 ranks: %s\n", moe_ep_size == 2
                                        ? "expert parallel (moe_ep_size 2: half the experts each)"
                                        : "moe_tp_size 2 (half of every expert's columns each)");
  }
  std::printf(
      "read bandwidth: 1 thread %.1f GB/s, 2 threads %.1f GB/s; weights read per decode step %.0f "
      "MB\n",
      bw1 / 1e9, bw2 / 1e9, weight_bytes / 1e6);
  std::printf("decode limit at batch 1 (weights / bandwidth): TP=1 %.1f ms, TP=2 %.1f ms\n\n",
              weight_bytes / bw1 * 1e3, weight_bytes / bw2 * 1e3);

  const int32_t vocab = (*model)->config().vocab_size;
  std::mt19937 rng(7);
  std::printf(
      "| phase | batch | TP=1 step ms | TP=2 step ms | TP=2 speed-up | 1 process, 2 threads: ms "
      "(speed-up) | all-gathers / step | MB sent / step (rank 0) | comm ms / step | comm share "
      "|\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  bool identical = true;
  for (int batch : batches) {
    std::vector<std::vector<int32_t>> tokens(batch), blocks(batch);
    int32_t next_block = 0;
    for (int b = 0; b < batch; ++b) {
      tokens[b].resize(prompt_tokens + decode_steps + 1);
      for (int32_t& t : tokens[b]) t = 3 + static_cast<int32_t>(rng() % (vocab - 3));
      for (int32_t i = 0; i < blocks_per_seq; ++i) blocks[b].push_back(next_block++);
    }
    Sample prefill, decode;
    std::vector<float> l1, l2;
    auto step = [&](const BatchPlan& plan, Sample* s) {
      const size_t n = static_cast<size_t>(plan.num_logit_rows()) * vocab;
      l1.resize(n), l2.resize(n);
      auto t0 = std::chrono::steady_clock::now();
      if (!tp1.Forward(plan, l1.data()).ok()) std::exit(1);
      auto t1 = std::chrono::steady_clock::now();
      const parallel::CommStats before = (*tp2)->comm_stats();
      if (!(*tp2)->Forward(plan, l2.data()).ok()) std::exit(1);
      auto t2 = std::chrono::steady_clock::now();
      const parallel::CommStats after = (*tp2)->comm_stats();
      if (!two_threads.Forward(plan, l1.data()).ok()) std::exit(1);
      s->two_threads_ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t2).count());
      s->tp1_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      s->tp2_ms.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
      s->comm_ms.push_back(after.comm_ms - before.comm_ms);
      s->bytes.push_back(static_cast<double>(after.bytes - before.bytes));
      s->collectives.push_back(static_cast<double>(after.collectives - before.collectives));
      identical = identical && std::memcmp(l1.data(), l2.data(), n * sizeof(float)) == 0;
    };
    // Prefill: one sequence's whole prompt per step.
    for (int b = 0; b < batch; ++b) {
      BatchPlan plan;
      plan.chunks.push_back(
          SequenceChunk{tokens[b].data(), prompt_tokens, 0, blocks[b].data(), blocks_per_seq, 1});
      step(plan, &prefill);
    }
    for (int32_t s = 0; s < decode_steps; ++s) {
      BatchPlan plan;
      for (int b = 0; b < batch; ++b) {
        plan.chunks.push_back(SequenceChunk{tokens[b].data() + prompt_tokens + s, 1,
                                            prompt_tokens + s, blocks[b].data(), blocks_per_seq,
                                            1});
      }
      step(plan, &decode);
    }
    for (auto [name, s] :
         {std::pair{"prefill " + std::to_string(prompt_tokens), &prefill},
          std::pair{"decode at depth " + std::to_string(prompt_tokens), &decode}}) {
      const double a = Median(s->tp1_ms), b = Median(s->tp2_ms), c = Median(s->two_threads_ms),
                   comm = Median(s->comm_ms);
      std::printf(
          "| %s | %d | %.1f | %.1f | %.2fx | %.1f (%.2fx) | %.0f | %.2f | %.2f | %.0f%% |\n",
          name.c_str(), batch, a, b, a / b, c, a / c, Median(s->collectives),
          Median(s->bytes) / 1e6, comm, 100 * comm / b);
    }
  }
  std::printf("\nTP=2 logits identical to TP=1 on every step: %s\n", identical ? "yes" : "NO");
  return identical ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::string preset = "tinyllama-1.1b", dtype = "q4_k_m", model_dir = "bench-models",
              batches_arg = "1,8";
  std::string tokenizer = std::string(INFLIGHT_SOURCE_DIR) +
                          "/../shared/models/tokenizers/llama2-sentencepiece/tokenizer.model";
  std::string arch = "llama";
  int32_t prompt_tokens = 512, decode_steps = 32, layers = 0, moe_ep_size = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i], v = argv[i + 1];
    if (f == "--preset")
      preset = v;
    else if (f == "--dtype")
      dtype = v;
    else if (f == "--model-dir")
      model_dir = v;
    else if (f == "--batches")
      batches_arg = v;
    else if (f == "--prompt-tokens")
      prompt_tokens = std::stoi(v);
    else if (f == "--decode-steps")
      decode_steps = std::stoi(v);
    else if (f == "--tokenizer")
      tokenizer = v;
    else if (f == "--arch")
      arch = v;
    else if (f == "--layers")
      layers = std::stoi(v);
    else if (f == "--moe-ep-size")
      moe_ep_size = std::stoi(v);
  }
  if (size != 2) {
    if (rank == 0)
      std::fprintf(stderr, "parallel_bench runs as 2 ranks: mpirun -np 2 %s\n", argv[0]);
    MPI_Finalize();
    return 2;
  }
  const bool custom = arch != "llama" || layers > 0;
  const std::string path = model_dir + "/" + preset +
                           (layers > 0 ? "-" + std::to_string(layers) + "L" : "") + "-random-" +
                           dtype + ".gguf";
  int code = 0;
  if (rank == 0) {
    // Written once (rank 1 waits at the barrier), then loaded by each rank as it needs.
    const Status written =
        custom ? WriteRandomModelIfMissing(path, arch, preset, layers, dtype, tokenizer)
               : LoadOrWriteRandomModel(path, preset, dtype, tokenizer).status();
    if (!written.ok()) {
      std::fprintf(stderr, "%s\n", written.ToString().c_str());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    std::vector<int> batches;
    std::stringstream in(batches_arg);
    for (std::string b; std::getline(in, b, ',');) batches.push_back(std::stoi(b));
    code = Leader(path, prompt_tokens, batches, decode_steps, moe_ep_size);
    parallel::SendDismissal(MPI_COMM_WORLD);
  } else {
    const Status s = parallel::RunFollower(MPI_COMM_WORLD);
    if (!s.ok()) std::fprintf(stderr, "rank 1: %s\n", s.message().c_str());
  }
  MPI_Finalize();
  return code;
}
