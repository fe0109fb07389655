// batching_bench: what in-flight batching buys on this machine, as ratios from one run.
//   inflight-vs-static  N requests, prompt ~ N(128, 32), output ~ N(128, 64) tokens, arriving
//                       all at once and by a Poisson process: output tokens/s of in-flight
//                       batching over static batching (same batch size, same cache).
//   concurrency         aggregate decode tokens/s with 16 concurrent sequences over 1.
//   prefix              time to first token of requests sharing a 512-token prefix, with
//                       KV reuse over without.
//   scheduler           Scheduler::Step with 256 running sequences (fake model) as a share of
//                       one decode step of the model measured in the same run.
// Usage: batching_bench [--preset tinyllama-1.1b|small] [--dtype q8_0] [--requests 128]
//                       [--batch 32] [--scenario
//                       all|inflight-vs-static|concurrency|prefix|scheduler]
//                       [--rate R] [--threads 2] [--tokenizer PATH] [--model-dir DIR]
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include "bench_models.h"
#include "engine/executor.h"
#include "engine/output_stream.h"
#include "engine/scheduler.h"

using namespace inflight;

namespace {

struct Spec {
  std::vector<int32_t> prompt;
  int32_t max_tokens = 1;
  double arrival_ms = 0;
};

struct RunResult {
  double seconds = 0;
  int64_t output_tokens = 0;
  double mean_ttft_ms = 0;
  int32_t peak_batch = 0;
  int64_t steps = 0;
  double decode_seconds = 0;  // from the last first token to the end (all sequences decoding)
};

// Runs every spec through a fresh executor; arrivals relative to the start.
RunResult Run(const Model& model, const ExecutorConfig& config, const std::vector<Spec>& specs) {
  auto e = Executor::Create(model, config);
  if (!e.ok()) {
    std::fprintf(stderr, "%s\n", e.status().ToString().c_str());
    std::exit(1);
  }
  std::mutex mu;
  std::condition_variable cv;
  size_t done = 0;
  int64_t tokens = 0;
  double ttft_sum = 0;
  Clock::time_point last_first_token{};
  // Each request's results arrive through its own output stream, read here on the waiting
  // thread (the engine thread only pushes and wakes it).
  std::vector<std::shared_ptr<OutputStream>> streams;
  bool woken = false;
  auto collect = [&] {  // under mu
    for (auto& stream : streams) {
      if (!stream) continue;
      for (Result& res : stream->Take()) {
        if (!res.error.ok())
          std::fprintf(stderr, "request failed: %s\n", res.error.ToString().c_str());
        tokens += static_cast<int64_t>(res.output_token_ids.size());
        if (!res.is_final) continue;
        ttft_sum += res.stats.time_to_first_token_ms();
        last_first_token = std::max(last_first_token, res.stats.first_token_time);
        ++done;
        stream.reset();
        break;
      }
    }
  };
  const Clock::time_point start = Clock::now();
  for (const Spec& s : specs) {
    std::this_thread::sleep_until(
        start + std::chrono::microseconds(static_cast<int64_t>(s.arrival_ms * 1000)));
    Request r;
    r.prompt_ids = s.prompt;
    r.max_tokens = s.max_tokens;
    r.sampling.temperature = 0;
    r.exclude_input_in_output = true;
    r.output = std::make_shared<OutputStream>();
    r.output->SetNotify([&] {
      std::lock_guard<std::mutex> lock(mu);
      woken = true;
      cv.notify_all();
    });
    {
      std::lock_guard<std::mutex> lock(mu);
      streams.push_back(r.output);
    }
    if (auto id = (*e)->Enqueue(std::move(r)); !id.ok()) {
      std::fprintf(stderr, "enqueue: %s\n", id.status().ToString().c_str());
      std::exit(1);
    }
  }
  RunResult out;
  auto drain = [&] {
    for (const IterationStats& s : (*e)->GetLatestIterationStats()) {
      out.peak_batch =
          std::max(out.peak_batch, s.num_scheduled_context + s.num_scheduled_generation);
      out.steps = s.iteration;
    }
  };
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait_for(lock, std::chrono::milliseconds(20), [&] { return woken; });
      woken = false;
      collect();
      if (done == specs.size()) break;
    }
    drain();
  }
  const Clock::time_point end = Clock::now();
  drain();
  out.seconds = std::chrono::duration<double>(end - start).count();
  out.decode_seconds = std::chrono::duration<double>(end - last_first_token).count();
  out.output_tokens = tokens;
  out.mean_ttft_ms = ttft_sum / static_cast<double>(specs.size());
  return out;
}

std::vector<int32_t> RandomPrompt(std::mt19937& rng, int n, int32_t vocab) {
  std::vector<int32_t> p(std::max(1, n));
  for (auto& t : p) t = 3 + static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab - 3));
  return p;
}

void InflightVsStatic(const Model& model, ExecutorConfig c, int n, double rate) {
  std::mt19937 rng(42);
  std::normal_distribution<double> in(128, 32), out(128, 64);
  std::exponential_distribution<double> gap(rate);
  std::vector<Spec> all_at_once, poisson;
  double t = 0;
  for (int i = 0; i < n; ++i) {
    Spec s;
    s.prompt = RandomPrompt(rng, static_cast<int>(std::clamp(in(rng), 1.0, 512.0)),
                            model.config().vocab_size);
    s.max_tokens = static_cast<int32_t>(std::clamp(out(rng), 1.0, 512.0));
    all_at_once.push_back(s);
    s.arrival_ms = t;
    t += 1000 * gap(rng);
    poisson.push_back(s);
  }
  std::printf(
      "\n== in-flight vs static: %d requests, prompt ~ N(128, 32), output ~ N(128, 64), "
      "max_batch_size %d\n",
      n, c.max_batch_size);
  std::printf("%-26s %10s %10s %12s %10s %8s %12s\n", "arrivals / batching", "seconds", "out tok",
              "out tok/s", "peak batch", "steps", "mean TTFT ms");
  std::vector<std::pair<const char*, std::vector<Spec>*>> order = {{"all at once", &all_at_once},
                                                                   {"Poisson", &poisson}};
  if (std::getenv("POISSON_FIRST"))
    std::swap(order[0], order[1]);  // to check that run order does not matter
  for (auto& [name, specs_ptr] : order) {
    const std::vector<Spec>& specs = *specs_ptr;
    double tps[2];
    for (int k = 0; k < 2; ++k) {
      c.batching = k == 0 ? BatchingStrategy::kInflight : BatchingStrategy::kStatic;
      const RunResult r = Run(model, c, specs);
      tps[k] = r.output_tokens / r.seconds;
      std::printf("%-12s %-13s %10.1f %10lld %12.1f %10d %8lld %12.0f\n", name,
                  k == 0 ? "in-flight" : "static", r.seconds,
                  static_cast<long long>(r.output_tokens), tps[k], r.peak_batch,
                  static_cast<long long>(r.steps), r.mean_ttft_ms);
      std::fflush(stdout);
    }
    std::printf("%-12s in-flight / static output tokens/s: %.2fx\n", name, tps[0] / tps[1]);
  }
}

// Returns the mean decode step time at batch 1 (ms), for the scheduler comparison.
double Concurrency(const Model& model, ExecutorConfig c) {
  std::mt19937 rng(7);
  std::printf(
      "\n== aggregate decode tokens/s: 16 concurrent sequences vs 1 (prompt 16, output 128), best "
      "of 3 alternating runs\n");
  double tps[2] = {0, 0}, step_ms = 0;
  int32_t peak[2] = {0, 0};
  for (int rep = 0; rep < 3; ++rep) {
    for (int k = 0; k < 2; ++k) {
      const int n = k == 0 ? 1 : 16;
      std::vector<Spec> specs;
      for (int i = 0; i < n; ++i)
        specs.push_back({RandomPrompt(rng, 16, model.config().vocab_size), 128, 0});
      const RunResult r = Run(model, c, specs);
      // Decode rate: tokens after the first token of the last sequence to start, over that time.
      const double rate = (r.output_tokens - n) / r.decode_seconds;
      if (rate > tps[k]) {
        tps[k] = rate;
        if (k == 0) step_ms = 1000 * r.decode_seconds / 127;
      }
      peak[k] = r.peak_batch;
    }
  }
  std::printf(" 1 sequence:   %8.1f decode tokens/s (peak batch %d)\n", tps[0], peak[0]);
  std::printf("16 sequences: %8.1f decode tokens/s (peak batch %d)\n", tps[1], peak[1]);
  std::printf("16 vs 1: %.2fx\n", tps[1] / tps[0]);
  return step_ms;
}

void Prefix(const Model& model, ExecutorConfig c) {
  std::mt19937 rng(9);
  const std::vector<int32_t> prefix = RandomPrompt(rng, 512, model.config().vocab_size);
  std::printf(
      "\n== shared 512-token prefix (+16 own tokens), 8 requests one after another, 8 output "
      "tokens\n");
  double ttft[2];
  for (int k = 0; k < 2; ++k) {
    c.enable_kv_cache_reuse = k == 0;
    auto e = Executor::Create(model, c);
    double sum = 0;
    for (int i = 0; i < 9; ++i) {
      Request r;
      r.prompt_ids = prefix;
      for (int32_t t : RandomPrompt(rng, 16, model.config().vocab_size)) r.prompt_ids.push_back(t);
      r.max_tokens = 8;
      r.sampling.temperature = 0;
      auto id = (*e)->Enqueue(r);
      std::vector<Result> rs;
      while (rs.empty() || !rs.back().is_final) {
        for (Result& x : (*e)->AwaitResponses(*id, std::chrono::milliseconds(100)))
          rs.push_back(std::move(x));
      }
      if (i > 0) sum += rs.back().stats.time_to_first_token_ms();  // request 0 fills the cache
    }
    ttft[k] = sum / 8;
    std::printf("KV reuse %-3s: mean time to first token %8.1f ms\n", k == 0 ? "on" : "off",
                ttft[k]);
  }
  std::printf("without / with reuse: %.2fx faster\n", ttft[1] / ttft[0]);
}

void SchedulerOverhead(double decode_step_ms) {
  ExecutorConfig c;
  c.max_batch_size = 256;
  c.max_num_tokens = 4096;
  c.tokens_per_block = 32;
  KvBlockManager blocks({256 * 64, 32, true});
  Scheduler s(c, blocks);
  std::vector<std::unique_ptr<RequestState>> reqs;
  for (int i = 0; i < 256; ++i) {
    auto rs = std::make_unique<RequestState>();
    rs->request.max_tokens = 1800;
    rs->request.prompt_ids.assign(100, i);
    auto seq = std::make_unique<Sequence>(rs.get(), 0, SamplingParams{});
    seq->order = i;
    seq->tokens = rs->request.prompt_ids;
    seq->prompt_len = 100;
    rs->forked = true;
    s.AddWaiting(seq.get());
    rs->sequences.push_back(std::move(seq));
    reqs.push_back(std::move(rs));
  }
  auto advance = [&](const ScheduleOutput& out) {
    for (const ScheduledChunk& ch : out.chunks) {
      ch.seq->num_computed += ch.num_tokens;
      s.CommitFullBlocks(ch.seq);
      if (ch.seq->num_computed == static_cast<int32_t>(ch.seq->tokens.size()))
        ch.seq->tokens.push_back(5);
    }
  };
  for (int i = 0; i < 10; ++i) advance(s.Step());  // all 256 admitted and decoding
  const int kSteps = 2000;
  const Clock::time_point t0 = Clock::now();
  size_t scheduled = 0;
  for (int i = 0; i < kSteps; ++i) {
    const ScheduleOutput& out = s.Step();
    scheduled += out.chunks.size();
    advance(out);
  }
  const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / kSteps;
  std::printf(
      "\n== scheduler: %.1f us per step with %zu running sequences (incl. the fake model's "
      "bookkeeping)\n",
      us, scheduled / kSteps);
  if (decode_step_ms > 0)
    std::printf("   = %.3f%% of one batch-1 decode step of this model (%.1f ms)\n",
                100 * us / 1000 / decode_step_ms, decode_step_ms);
}

}  // namespace

int main(int argc, char** argv) {
  std::string preset = "tinyllama-1.1b", dtype = "q8_0", scenario = "all",
              model_dir = "bench-models";
  std::string tokenizer = std::string(INFLIGHT_SOURCE_DIR) +
                          "/../shared/models/tokenizers/llama2-sentencepiece/tokenizer.model";
  int requests = 128, batch = 32, threads = 2;
  double rate = 0;  // Poisson requests/s; 0 = picked from the model size
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i], v = argv[i + 1];
    if (f == "--preset")
      preset = v;
    else if (f == "--dtype")
      dtype = v;
    else if (f == "--scenario")
      scenario = v;
    else if (f == "--requests")
      requests = std::stoi(v);
    else if (f == "--batch")
      batch = std::stoi(v);
    else if (f == "--rate")
      rate = std::stod(v);
    else if (f == "--threads")
      threads = std::stoi(v);
    else if (f == "--tokenizer")
      tokenizer = v;
    else if (f == "--model-dir")
      model_dir = v;
    else {
      std::fprintf(stderr, "unknown flag %s\n", f.c_str());
      return 2;
    }
  }
  const std::string path = model_dir + "/" + preset + "-random-" + dtype + ".gguf";
  auto model = LoadOrWriteRandomModel(path, preset, dtype, tokenizer);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
    return 1;
  }
  std::printf("model %s: %s, %d threads\n", path.c_str(), (*model)->Describe().c_str(), threads);
  ExecutorConfig c;
  c.max_batch_size = batch;
  c.max_num_tokens = 2048;
  c.enable_chunked_context = true;
  c.max_tokens_in_paged_kv_cache = 64 * 1024;
  c.num_threads = threads;
  if (rate <= 0) rate = preset == "tinyllama-1.1b" ? 2 : 40;  // above what this machine sustains
  const bool all = scenario == "all";
  if (all || scenario == "inflight-vs-static") InflightVsStatic(**model, c, requests, rate);
  double step_ms = 0;
  if (all || scenario == "concurrency" || scenario == "scheduler")
    step_ms = Concurrency(**model, c);
  if (all || scenario == "prefix") Prefix(**model, c);
  if (all || scenario == "scheduler") SchedulerOverhead(step_ms);
  return 0;
}
