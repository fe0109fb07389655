// The workload parallel_test runs on a tensor/pipeline-parallel executor (in parallel_harness,
// under mpirun) and on a single-process one (the reference), and what it records of each: 32
// requests in flight (greedy, streamed, seeded sampling, n = 2, a beam search, a shared prefix
// for reuse, prompts longer than a step's token budget, LoRA adapters), then a streamed request
// cancelled after a few tokens, and the executor's counters (pauses, reused blocks, leaks).
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/executor.h"

namespace inflight::testing {

struct ScenarioConfig {
  std::string name;
  CapacityPolicy policy = CapacityPolicy::kGuaranteedNoEvict;
  int64_t kv_tokens = 0;  // max_tokens_in_paged_kv_cache; 0: enough for everything
  int32_t max_num_tokens = 96;
  DType kv_dtype = DType::kF16;
};

// The scenarios by name: default; max_utilization (a cache too small for the peak: pauses);
// int8_kv (the 8-bit cache, max_utilization's small cache).
inline ScenarioConfig ScenarioNamed(const std::string& name) {
  ScenarioConfig s;
  s.name = name;
  if (name == "max_utilization" || name == "int8_kv") {
    s.policy = CapacityPolicy::kMaxUtilization;
    s.kv_tokens = 40 * 16;  // pauses: the workload needs more blocks than this at its peak
  }
  if (name == "int8_kv") s.kv_dtype = DType::kI8;
  return s;
}

inline ExecutorConfig ScenarioExecutorConfig(const ScenarioConfig& s) {
  ExecutorConfig c;
  c.max_batch_size = 16;
  c.max_num_tokens = s.max_num_tokens;
  c.enable_chunked_context = true;
  c.enable_kv_cache_reuse = true;
  c.tokens_per_block = 16;
  c.max_tokens_in_paged_kv_cache = s.kv_tokens > 0 ? s.kv_tokens : 16 * 1024;
  c.policy = s.policy;
  c.num_threads = 1;
  c.max_beam_width = 2;
  c.kv_dtype = s.kv_dtype;
  return c;
}

// A random LoRA adapter on the q projection of layer 0 and the FFN down projection of the last
// layer, strong enough to change greedy outputs.
inline std::shared_ptr<const LoraAdapter> ScenarioAdapter(const ModelConfig& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  const int32_t rank = 4;
  // (Mixture-of-experts models take adapters on attention only: the output projection there.)
  const std::vector<std::pair<int32_t, int32_t>> targets = {
      {kLoraAttnQ, 0}, {c.num_experts > 0 ? kLoraAttnDense : kLoraMlp4hToH, c.num_layers - 1}};
  int64_t cols = 0;
  for (const auto& [module, layer] : targets) {
    int32_t in = 0, out = 0;
    LoraModuleShape(c, module, &in, &out);
    cols = std::max<int64_t>(cols, int64_t{rank} * (in + out));
  }
  std::vector<float> weights(targets.size() * cols);
  for (float& w : weights) w = normal(rng);
  std::vector<int32_t> config;
  for (const auto& [module, layer] : targets) config.insert(config.end(), {module, layer, rank});
  auto adapter =
      LoraAdapter::FromTensors(c, weights, static_cast<int64_t>(targets.size()), cols, config);
  return adapter.ok() ? *adapter : nullptr;
}

inline std::vector<Request> ScenarioRequests(const ModelConfig& model) {
  const int32_t vocab = model.vocab_size;
  const auto adapter_a = ScenarioAdapter(model, 1), adapter_b = ScenarioAdapter(model, 2);
  std::mt19937 rng(1234);
  auto random_ids = [&](int n) {
    std::vector<int32_t> ids(n);
    for (int32_t& id : ids) id = 3 + static_cast<int32_t>(rng() % (vocab - 3));
    return ids;
  };
  const std::vector<int32_t> shared_prefix = random_ids(40);
  std::vector<Request> requests;
  for (int i = 0; i < 32; ++i) {
    Request r;
    r.prompt_ids = i % 4 == 0 ? shared_prefix : std::vector<int32_t>();
    const std::vector<int32_t> tail = random_ids(8 + static_cast<int>(rng() % 150));
    r.prompt_ids.insert(r.prompt_ids.end(), tail.begin(), tail.end());
    r.max_tokens = 8 + static_cast<int32_t>(rng() % 40);
    r.sampling.temperature = 0;
    r.streaming = i % 3 == 0;
    if (i == 5 || i == 17) {  // seeded sampling: the same logits must give the same draws
      r.sampling.temperature = 0.8f;
      r.sampling.top_k = 20;
      r.sampling.seed = 100 + i;
    }
    if (i == 9)
      r.num_return_sequences = 2, r.sampling.temperature = 1.0f,
      r.sampling.seed = 7;                                      // forked blocks
    if (i == 13) r.beam_width = 2, r.num_return_sequences = 2;  // copy-on-write blocks
    if (i == 21 || i == 25)
      r.lora = adapter_a, r.lora_task_id = 1;  // LoRA: two adapters and none in a step
    if (i == 29) r.lora = adapter_b, r.lora_task_id = 2;
    requests.push_back(std::move(r));
  }
  return requests;
}

// Runs the workload; the JSON holds every output and the counters.
inline nlohmann::json RunScenario(Executor& executor, const ScenarioConfig& s,
                                  const ModelConfig& model) {
  nlohmann::json out;
  out["name"] = s.name;
  std::vector<Request> requests = ScenarioRequests(model);
  std::vector<RequestId> ids;
  // Four waves: later requests join batches already running.
  for (size_t i = 0; i < requests.size(); ++i) {
    auto id = executor.Enqueue(requests[i]);
    if (!id.ok()) {
      out["error"] = id.status().message();
      return out;
    }
    ids.push_back(*id);
    if (i % 8 == 7) std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
  nlohmann::json outputs = nlohmann::json::array();
  for (size_t i = 0; i < ids.size(); ++i) {
    std::vector<std::vector<int32_t>> seqs;
    std::string error;
    bool final = false;
    for (int polls = 0; !final && polls < 12000; ++polls) {
      for (Result& r : executor.AwaitResponses(ids[i], std::chrono::milliseconds(10))) {
        if (!r.error.ok()) error = r.error.message();
        if (!r.beams.empty()) {
          seqs.clear();
          for (const BeamOutput& b : r.beams) seqs.push_back(b.output_token_ids);
        } else {
          if (seqs.size() <= static_cast<size_t>(r.sequence_index))
            seqs.resize(r.sequence_index + 1);
          auto& seq = seqs[r.sequence_index];
          if (!requests[i].streaming) seq.clear();
          seq.insert(seq.end(), r.output_token_ids.begin(), r.output_token_ids.end());
        }
        final = final || r.is_final;
      }
    }
    outputs.push_back({{"sequences", seqs}, {"error", error}, {"final", final}});
  }
  out["outputs"] = outputs;

  // Cancellation: a long streamed request, cancelled once it has streamed 5 tokens.
  Request longer;
  longer.prompt_ids = requests[1].prompt_ids;
  longer.max_tokens = 400;
  longer.sampling.temperature = 0;
  longer.streaming = true;
  auto id = executor.Enqueue(longer);
  std::vector<int32_t> streamed;
  int32_t finish = -1;
  for (int polls = 0; id.ok() && finish < 0 && polls < 12000; ++polls) {
    for (Result& r : executor.AwaitResponses(*id, std::chrono::milliseconds(5))) {
      streamed.insert(streamed.end(), r.output_token_ids.begin(), r.output_token_ids.end());
      if (r.is_final) finish = static_cast<int32_t>(r.finish_reason);
    }
    if (streamed.size() >= 5 && finish < 0) executor.Cancel(*id);
  }
  out["cancelled"] = {{"tokens", streamed}, {"finish", finish}};

  int64_t paused = 0, reused = 0, max_context_tokens = 0;
  for (const IterationStats& st : executor.GetLatestIterationStats()) {
    paused = std::max(paused, st.num_paused_total);
    reused += st.kv_blocks_reused;
    max_context_tokens = std::max<int64_t>(max_context_tokens, st.num_context_tokens);
  }
  for (int i = 0;
       i < 200 && (executor.num_unfinished_requests() > 0 || executor.KvBlockCounts().used > 0);
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  out["paused_total"] = paused;
  out["reused_blocks"] = reused;
  out["max_context_tokens"] = max_context_tokens;
  out["kv_used_at_end"] = executor.KvBlockCounts().used;
  out["window_kv_used_at_end"] = executor.WindowKvBlockCounts().used;
  out["window_kv_blocks"] = executor.WindowKvBlockCounts().total;
  out["unfinished_at_end"] = executor.num_unfinished_requests();
  return out;
}

}  // namespace inflight::testing
