// The executor's configuration (TensorRT-LLM names) and its statistics types.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/lookahead.h"
#include "model/eagle.h"
#include "model/medusa.h"
#include "tensor/dtype.h"

namespace inflight {

enum class CapacityPolicy {
  kGuaranteedNoEvict,  // admit only when blocks for prompt + max_tokens are reserved; never pause
  kMaxUtilization,     // admit while the next step fits; pause the newest requests when short
};
enum class BatchingStrategy {
  kInflight,  // inflight_fused_batching: join and leave every step
  kStatic,    // a batch forms, runs until its longest request ends; nobody joins meanwhile
};

StatusOr<CapacityPolicy> CapacityPolicyFromName(
    const std::string& name);  // guaranteed_no_evict|max_utilization
StatusOr<BatchingStrategy> BatchingStrategyFromName(
    const std::string& name);  // inflight[_fused_batching]|static[_batching]|v1
const char* CapacityPolicyName(CapacityPolicy p);
// The K/V types of the cache by kv_cache_dtype name: f16, bf16, f32, int8 (kI8); else nullopt.
std::optional<DType> KvDtypeFromName(const std::string& name);

// Where draft tokens come from (speculative decoding: k guesses verified in one forward pass).
enum class SpeculativeMode {
  kNone,          // only drafts a client hands in (Request::draft_tokens)
  kPromptLookup,  // the tokens that followed the latest earlier occurrence of the last n-gram
  kDraftModel,    // a smaller model of the same vocabulary, run greedily inside the step
  kLookahead,     // Jacobi guesses and an n-gram pool verified as a tree (engine/lookahead.h)
  kMedusa,        // Medusa heads' top-k guesses along medusa_choices, verified as a tree
  kEagle,         // an EAGLE-3 draft layer's tree along eagle_choices, verified as a tree
};
StatusOr<SpeculativeMode> SpeculativeModeFromName(
    const std::string& name);  // none|prompt_lookup|draft_model|lookahead|medusa|eagle
const char* SpeculativeModeName(SpeculativeMode m);
const char* BatchingStrategyName(BatchingStrategy b);

// Draft tokens verified per step and sequence, at most (a request's own drafts included).
inline constexpr int32_t kMaxDraftTokens = 32;
inline constexpr int32_t kMaxBeamWidth = 64;  // as num_return_sequences

struct ExecutorConfig {
  int32_t max_batch_size = 64;    // sequences per step
  int32_t max_num_tokens = 2048;  // tokens per step (context chunks + generation tokens)
  int32_t max_queue_size = 0;     // waiting requests; 0 = unbounded
  int32_t max_beam_width = 1;     // widest beam search a request may ask for
  // Results of one request not yet taken by its consumer, in bytes, beyond which the request
  // is cancelled (for streams Enqueue makes; 0 = unbounded).
  size_t max_unread_output_bytes = 0;
  CapacityPolicy policy = CapacityPolicy::kGuaranteedNoEvict;
  BatchingStrategy batching = BatchingStrategy::kInflight;
  bool enable_chunked_context = false;
  // The target time between a running sequence's tokens while prompts arrive: prompt tokens
  // join a step that decodes only as far as the step's measured cost stays within it
  // (engine/step_budget.h). > 0: milliseconds; 0: auto (twice the decode rows' own step);
  // < 0: off (prompts limited by max_num_tokens only). In-flight batching only.
  double max_inter_token_latency_ms = 0;
  bool enable_kv_cache_reuse = false;
  int32_t tokens_per_block = 32;
  int64_t max_tokens_in_paged_kv_cache = 0;  // 0 = unset
  // KV cache events (kvcache/kv_events.h) kept for routers: the newest this many (0: off;
  // TensorRT-LLM's event_buffer_max_size).
  int32_t kv_event_buffer_size = 0;
  double kv_cache_free_mem_fraction = 0.9;  // of the memory available after loading weights
  DType kv_dtype = DType::kF16;             // kF16, kF32, kBF16 or kI8 (kv_cache_dtype int8)
  // The KV cache's disk tier (kvcache/kv_disk_store.h): reusable blocks written behind to this
  // directory, kept under kv_cache_disk_bytes, read back on prefix lookups; off when empty.
  // The fingerprint binds the files to the model file (the executor adds the model's layers,
  // weights and KV layout).
  std::string kv_cache_disk_path;
  int64_t kv_cache_disk_bytes = 0;
  std::string kv_cache_disk_fingerprint;
  int32_t num_threads = 2;  // compute threads of the forward pass
  // Speculative decoding: drafts per step and sequence (a request may ask for fewer), and the
  // longest n-gram prompt lookup matches (it falls back to shorter ones down to 1).
  SpeculativeMode speculative_mode = SpeculativeMode::kNone;
  int32_t max_draft_tokens = 4;
  // Per sequence, draft only as many tokens as pay off at the acceptance it has seen (none
  // when drafts rarely hold, trying one now and then); false: always max_draft_tokens.
  bool adaptive_draft_length = true;
  int32_t prompt_lookup_ngram = 3;
  // Lookahead decoding's (window, n-gram, verification set): the model's, which requests may
  // lower (TensorRT-LLM's lookahead_window_size, _ngram_size, _verification_set_size). On a
  // CPU every verified row costs: a narrow, deep tree (one Jacobi column, 4-token n-grams)
  // gave the most tokens per second in spec_bench (bench/README.md).
  LookaheadConfig lookahead{1, 5, 4};
  // Medusa: the heads (model/medusa.h, loaded for this model) and the tree of their top-k
  // indices to verify (ParseMedusaChoices; empty: DefaultMedusaChoices).
  std::shared_ptr<MedusaHeads> medusa_heads;
  std::vector<std::vector<int32_t>> medusa_choices;
  // EAGLE: the draft head (model/eagle.h, loaded for this model) and the tree of its top-k
  // indices, level by level (the format of medusa_choices; empty: DefaultEagleChoices).
  std::shared_ptr<EagleHead> eagle_head;
  std::vector<std::vector<int32_t>> eagle_choices;
  // EAGLE-2's dynamic tree instead of eagle_choices (TensorRT-LLM's eagle_use_dynamic_tree):
  // eagle_num_layers levels; each expands the eagle_dynamic_tree_max_top_k nodes of the level
  // with the best path scores (sums of the head's log-probabilities) into their top-k each,
  // and the max_draft_tokens best nodes of all become the tree verified.
  bool eagle_dynamic_tree = false;
  int32_t eagle_dynamic_tree_max_top_k = 4;
  int32_t eagle_num_layers = 4;

  // INVALID_ARGUMENT naming the field.
  Status Validate() const;
};

// One executor step (TensorRT-LLM's IterationStats, plus why waiting requests waited).
struct IterationStats {
  int64_t iteration = 0;
  double step_ms = 0;
  double forward_ms = 0;   // of step_ms, inside the model's forward pass (the rest is the
                           // engine thread's own work: scheduling, sampling, handing results out)
  int32_t num_active = 0;  // sequences holding KV state or running
  int32_t num_queued = 0;  // requests not started (or paused)
  int32_t num_scheduled_context = 0;     // sequences with a context chunk this step
  int32_t num_scheduled_generation = 0;  // sequences decoding one token this step
  int32_t num_context_tokens = 0;
  int32_t num_generation_tokens = 0;
  int32_t num_draft_tokens = 0;           // verified this step (speculative decoding)
  int32_t num_accepted_draft_tokens = 0;  // of which accepted
  int32_t num_paused = 0;                 // paused during this step
  int64_t num_paused_total = 0;           // since start
  int32_t kv_blocks_total = 0, kv_blocks_free = 0, kv_blocks_used = 0, kv_blocks_cached = 0;
  // The window group's blocks (sliding-window layers' K/V; all 0 when the cache has none).
  int32_t window_kv_blocks_total = 0, window_kv_blocks_free = 0, window_kv_blocks_used = 0,
          window_kv_blocks_cached = 0;
  int32_t kv_window = 0;                   // the window group's sliding window (tokens)
  int32_t kv_blocks_reused = 0;            // prefix blocks served from the cache this step
  int32_t kv_blocks_reused_from_disk = 0;  // of those, read back from the disk tier
  int32_t kv_tokens_partially_reused = 0;  // slots copied from partly matching cached blocks
  // Why sequences that could have run did not (counts this step).
  int32_t waiting_for_kv_cache = 0;
  int32_t waiting_for_max_num_tokens = 0;
  int32_t waiting_for_max_batch_size = 0;
  int32_t waiting_for_static_batch = 0;
  int32_t waiting_for_latency_budget = 0;  // prompts held back or cut short by the budget
  int32_t waiting_for_kv_disk_reads = 0;   // prefixes being read from the disk tier
  // The latency target this step's prompt tokens were budgeted to (0: no limit this step),
  // and the step's forward time the cost model predicted before it ran (0: no prediction).
  double latency_target_ms = 0;
  double predicted_forward_ms = 0;
  std::string ToJson() const;
};

}  // namespace inflight
