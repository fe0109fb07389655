#include "backends/llm/llm_stats.h"

#include <chrono>

namespace inflight::serving {

EngineStep ToEngineStep(const IterationStats& s) {
  EngineStep e;
  e.iteration = s.iteration;
  e.step_ms = s.step_ms;
  e.forward_ms = s.forward_ms;
  e.num_active = s.num_active;
  e.num_queued = s.num_queued;
  e.num_scheduled_context = s.num_scheduled_context;
  e.num_scheduled_generation = s.num_scheduled_generation;
  e.num_context_tokens = s.num_context_tokens;
  e.num_generation_tokens = s.num_generation_tokens;
  e.num_draft_tokens = s.num_draft_tokens;
  e.num_accepted_draft_tokens = s.num_accepted_draft_tokens;
  e.num_paused = s.num_paused;
  e.num_paused_total = s.num_paused_total;
  e.kv_blocks_total = s.kv_blocks_total;
  e.kv_blocks_free = s.kv_blocks_free;
  e.kv_blocks_used = s.kv_blocks_used;
  e.kv_blocks_cached = s.kv_blocks_cached;
  e.window_kv_blocks_total = s.window_kv_blocks_total;
  e.window_kv_blocks_free = s.window_kv_blocks_free;
  e.window_kv_blocks_used = s.window_kv_blocks_used;
  e.window_kv_blocks_cached = s.window_kv_blocks_cached;
  e.kv_window = s.kv_window;
  e.kv_blocks_reused = s.kv_blocks_reused;
  e.kv_blocks_reused_from_disk = s.kv_blocks_reused_from_disk;
  e.kv_tokens_partially_reused = s.kv_tokens_partially_reused;
  e.waiting_for_kv_cache = s.waiting_for_kv_cache;
  e.waiting_for_max_num_tokens = s.waiting_for_max_num_tokens;
  e.waiting_for_max_batch_size = s.waiting_for_max_batch_size;
  e.waiting_for_static_batch = s.waiting_for_static_batch;
  e.waiting_for_latency_budget = s.waiting_for_latency_budget;
  e.latency_target_ms = s.latency_target_ms;
  return e;
}

std::vector<EngineStep> ToEngineSteps(const std::vector<IterationStats>& steps) {
  std::vector<EngineStep> out;
  out.reserve(steps.size());
  for (const IterationStats& s : steps) out.push_back(ToEngineStep(s));
  return out;
}

LlmRequestRecord ToRequestRecord(const RequestStats& s) {
  LlmRequestRecord r;
  r.num_prompt_tokens = s.num_prompt_tokens;
  r.num_generated_tokens = s.num_generated_tokens;
  r.num_draft_tokens = s.num_draft_tokens;
  r.num_accepted_draft_tokens = s.num_accepted_draft_tokens;
  if (s.first_scheduled_time != Clock::time_point{}) r.queue_ms = s.queue_ms();
  if (s.first_token_time != Clock::time_point{}) {
    r.time_to_first_token_ms = s.time_to_first_token_ms();
    r.end_to_end_ms =
        std::chrono::duration<double, std::milli>(s.last_token_time - s.arrival_time).count();
  }
  r.decode_ms = s.decode_ms();
  r.inter_token_latency = s.inter_token_latency;
  return r;
}

KvBlocks ToKvBlocks(const BlockCounts& b) {
  KvBlocks k;
  k.total = b.total;
  k.free = b.free;
  k.cached = b.cached;
  k.used = b.used;
  return k;
}

}  // namespace inflight::serving
