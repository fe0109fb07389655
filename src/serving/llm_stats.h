// What the core's metrics and the web dashboard know of an LLM model's engine: plain records
// the LLM backend fills from the engine's statistics (src/backends/llm/llm_stats.h), so the
// core and the frontends need no engine type.
#pragma once

#include <cstdint>
#include <string>

#include "base/latency_histogram.h"

namespace inflight::serving {

// One engine step (the engine's IterationStats).
struct EngineStep {
  int64_t iteration = 0;
  double step_ms = 0;
  double forward_ms = 0;                 // of step_ms, inside the model's forward pass
  int32_t num_active = 0;                // sequences holding KV state or running
  int32_t num_queued = 0;                // requests not started (or paused)
  int32_t num_scheduled_context = 0;     // sequences with a context chunk this step
  int32_t num_scheduled_generation = 0;  // sequences decoding one token this step
  int32_t num_context_tokens = 0;
  int32_t num_generation_tokens = 0;
  int32_t num_draft_tokens = 0;           // verified this step (speculative decoding)
  int32_t num_accepted_draft_tokens = 0;  // of which accepted
  int32_t num_paused = 0;                 // paused during this step
  int64_t num_paused_total = 0;           // since start
  // The full group: the K/V of every layer that attends to the whole context (all layers of
  // a model without sliding-window layers).
  int32_t kv_blocks_total = 0, kv_blocks_free = 0, kv_blocks_used = 0, kv_blocks_cached = 0;
  // The window group: the sliding-window layers' K/V, a separate pool of blocks (a sequence
  // keeps only those its window still sees), so its counts never add to the full group's.
  // All 0 when the model has no window group.
  int32_t window_kv_blocks_total = 0, window_kv_blocks_free = 0, window_kv_blocks_used = 0,
          window_kv_blocks_cached = 0;
  int32_t kv_window = 0;         // the window group's sliding window (tokens); 0: no window group
  int32_t kv_blocks_reused = 0;  // prefix blocks served from the cache this step
  int32_t kv_blocks_reused_from_disk = 0;  // of those, read back from the disk tier
  int32_t kv_tokens_partially_reused = 0;  // slots copied from partly matching cached blocks
  // Why sequences that could have run did not (counts this step).
  int32_t waiting_for_kv_cache = 0;
  int32_t waiting_for_max_num_tokens = 0;
  int32_t waiting_for_max_batch_size = 0;
  int32_t waiting_for_static_batch = 0;
  int32_t waiting_for_latency_budget = 0;  // prompts held back or cut short by the budget
  double latency_target_ms = 0;  // what the step's prompt tokens were budgeted to (0: no limit)
};

// One finished LLM request (the engine's RequestStats). Times < 0: the moment never came.
struct LlmRequestRecord {
  int32_t num_prompt_tokens = 0;
  int32_t num_generated_tokens = 0;  // over all sequences
  int32_t num_draft_tokens = 0;      // speculative decoding: drafts verified
  int32_t num_accepted_draft_tokens = 0;
  // The model's speculative decoding mode (a client's own drafts count under it too; none:
  // only clients' drafts).
  std::string speculative_mode = "none";
  // Disaggregated serving: a generation-only request that took its prompt's K/V from a
  // hand-off, and the time from the context instance's export to the import here.
  bool kv_transfer = false;
  double kv_transfer_ms = 0;
  double queue_ms = -1;                  // arrival -> first scheduled
  double time_to_first_token_ms = -1;    // arrival -> first token
  double end_to_end_ms = -1;             // arrival -> last token (set with the first token)
  double decode_ms = 0;                  // first token -> last token
  LatencyHistogram inter_token_latency;  // one sample per token after the first
};

// KV cache blocks now.
struct KvBlocks {
  int32_t total = 0;
  int32_t free = 0;    // unreferenced and holding nothing reusable
  int32_t cached = 0;  // unreferenced, committed: reusable until evicted
  int32_t used = 0;    // referenced by at least one sequence
};

}  // namespace inflight::serving
