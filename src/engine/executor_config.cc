#include "engine/executor_config.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "engine/request.h"

namespace inflight {

StatusOr<CapacityPolicy> CapacityPolicyFromName(const std::string& name) {
  if (name == "guaranteed_no_evict") return CapacityPolicy::kGuaranteedNoEvict;
  if (name == "max_utilization") return CapacityPolicy::kMaxUtilization;
  return InvalidArgumentError("unknown batch scheduler policy '" + name +
                              "' (guaranteed_no_evict, max_utilization)");
}

std::optional<DType> KvDtypeFromName(const std::string& name) {
  if (name == "f16") return DType::kF16;
  if (name == "bf16") return DType::kBF16;
  if (name == "f32") return DType::kF32;
  if (name == "int8" || name == "i8") return DType::kI8;
  return std::nullopt;
}

StatusOr<BatchingStrategy> BatchingStrategyFromName(const std::string& name) {
  if (name == "inflight" || name == "inflight_fused_batching" || name == "inflight_batching")
    return BatchingStrategy::kInflight;
  if (name == "static" || name == "static_batching" || name == "V1" || name == "v1")
    return BatchingStrategy::kStatic;
  return InvalidArgumentError("unknown batching strategy '" + name +
                              "' (inflight_fused_batching, static)");
}

const char* CapacityPolicyName(CapacityPolicy p) {
  return p == CapacityPolicy::kGuaranteedNoEvict ? "guaranteed_no_evict" : "max_utilization";
}

StatusOr<SpeculativeMode> SpeculativeModeFromName(const std::string& name) {
  if (name == "none" || name.empty()) return SpeculativeMode::kNone;
  if (name == "prompt_lookup") return SpeculativeMode::kPromptLookup;
  if (name == "draft_model" || name == "draft_tokens_external") return SpeculativeMode::kDraftModel;
  if (name == "lookahead" || name == "lookahead_decoding") return SpeculativeMode::kLookahead;
  if (name == "medusa") return SpeculativeMode::kMedusa;
  if (name == "eagle" || name == "eagle3") return SpeculativeMode::kEagle;
  return InvalidArgumentError("unknown speculative decoding mode '" + name +
                              "' (none, prompt_lookup, draft_model, lookahead, medusa, eagle)");
}

const char* SpeculativeModeName(SpeculativeMode m) {
  switch (m) {
    case SpeculativeMode::kNone:
      return "none";
    case SpeculativeMode::kPromptLookup:
      return "prompt_lookup";
    case SpeculativeMode::kDraftModel:
      return "draft_model";
    case SpeculativeMode::kLookahead:
      return "lookahead";
    case SpeculativeMode::kMedusa:
      return "medusa";
    case SpeculativeMode::kEagle:
      return "eagle";
  }
  return "none";
}

const char* BatchingStrategyName(BatchingStrategy b) {
  return b == BatchingStrategy::kInflight ? "inflight_fused_batching" : "static";
}

Status ExecutorConfig::Validate() const {
  if (max_batch_size < 1) return InvalidArgumentError("max_batch_size must be >= 1");
  if (max_num_tokens < 1) return InvalidArgumentError("max_num_tokens must be >= 1");
  if (max_queue_size < 0) return InvalidArgumentError("max_queue_size must be >= 0");
  if (tokens_per_block < 1 || (tokens_per_block & (tokens_per_block - 1)) != 0) {
    return InvalidArgumentError("tokens_per_block must be a power of two");
  }
  if (enable_chunked_context && max_num_tokens < tokens_per_block) {
    return InvalidArgumentError("max_num_tokens must be >= tokens_per_block with chunked context");
  }
  if (max_tokens_in_paged_kv_cache < 0)
    return InvalidArgumentError("max_tokens_in_paged_kv_cache must be >= 0");
  if (!(kv_cache_free_mem_fraction > 0 && kv_cache_free_mem_fraction <= 1)) {
    return InvalidArgumentError("kv_cache_free_mem_fraction must be in (0, 1]");
  }
  if (kv_dtype != DType::kF16 && kv_dtype != DType::kF32 && kv_dtype != DType::kBF16 &&
      kv_dtype != DType::kI8) {
    return InvalidArgumentError("kv cache dtype must be f16, f32, bf16 or int8");
  }
  if (!kv_cache_disk_path.empty() && kv_cache_disk_bytes <= 0)
    return InvalidArgumentError("kv_cache_disk_bytes must be > 0 with kv_cache_disk_path");
  if (!kv_cache_disk_path.empty() && !enable_kv_cache_reuse)
    return InvalidArgumentError("kv_cache_disk_path needs enable_kv_cache_reuse");
  // The 8-bit kernels round the probabilities per 128-position span: block sizes that divide it
  // keep results independent of the block size (and of batching).
  if (kv_dtype == DType::kI8 && tokens_per_block != 16 && tokens_per_block != 32 &&
      tokens_per_block != 64 && tokens_per_block != 128) {
    return InvalidArgumentError("an int8 KV cache needs tokens_per_block 16, 32, 64 or 128");
  }
  if (num_threads < 1) return InvalidArgumentError("num_threads must be >= 1");
  if (max_beam_width < 1 || max_beam_width > kMaxBeamWidth) {
    return InvalidArgumentError("max_beam_width must be in [1, " + std::to_string(kMaxBeamWidth) +
                                "]");
  }
  if (max_draft_tokens < 0 || max_draft_tokens > kMaxDraftTokens) {
    return InvalidArgumentError("max_draft_tokens must be in [0, " +
                                std::to_string(kMaxDraftTokens) + "]");
  }
  if (kv_event_buffer_size < 0 || kv_event_buffer_size > (1 << 22))
    return InvalidArgumentError("kv_event_buffer_size must be in [0, 4194304]");
  if (!std::isfinite(max_inter_token_latency_ms) || max_inter_token_latency_ms > 3.6e6)
    return InvalidArgumentError("max_inter_token_latency_ms must be finite and <= 3600000");
  if (prompt_lookup_ngram < 1 || prompt_lookup_ngram > 16)
    return InvalidArgumentError("prompt_lookup_ngram must be in [1, 16]");
  if (speculative_mode == SpeculativeMode::kLookahead)
    RETURN_IF_ERROR(lookahead.Validate("lookahead_"));
  return OkStatus();
}

std::string IterationStats::ToJson() const {
  nlohmann::json j = {{"iter", iteration},
                      {"step_ms", step_ms},
                      {"forward_ms", forward_ms},
                      {"num_active", num_active},
                      {"num_queued", num_queued},
                      {"num_scheduled_context", num_scheduled_context},
                      {"num_scheduled_generation", num_scheduled_generation},
                      {"num_context_tokens", num_context_tokens},
                      {"num_generation_tokens", num_generation_tokens},
                      {"num_draft_tokens", num_draft_tokens},
                      {"num_accepted_draft_tokens", num_accepted_draft_tokens},
                      {"num_paused", num_paused},
                      {"num_paused_total", num_paused_total},
                      {"kv_blocks",
                       {{"total", kv_blocks_total},
                        {"free", kv_blocks_free},
                        {"used", kv_blocks_used},
                        {"cached", kv_blocks_cached},
                        {"reused", kv_blocks_reused},
                        {"reused_from_disk", kv_blocks_reused_from_disk},
                        {"partially_reused_tokens", kv_tokens_partially_reused}}},
                      {"window_kv_blocks",
                       {{"total", window_kv_blocks_total},
                        {"free", window_kv_blocks_free},
                        {"used", window_kv_blocks_used},
                        {"cached", window_kv_blocks_cached},
                        {"window", kv_window}}},
                      {"waiting_for",
                       {{"kv_cache", waiting_for_kv_cache},
                        {"max_num_tokens", waiting_for_max_num_tokens},
                        {"max_batch_size", waiting_for_max_batch_size},
                        {"static_batch", waiting_for_static_batch},
                        {"latency_budget", waiting_for_latency_budget},
                        {"kv_disk_reads", waiting_for_kv_disk_reads}}},
                      {"latency_target_ms", latency_target_ms},
                      {"predicted_forward_ms", predicted_forward_ms}};
  return j.dump();
}

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kNotFinished:
      return "not_finished";
    case FinishReason::kEndId:
      return "end_id";
    case FinishReason::kStopWords:
      return "stop_words";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kTimedOut:
      return "timed_out";
    case FinishReason::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

namespace {
double Ms(Clock::time_point a, Clock::time_point b) {
  if (a == Clock::time_point{} || b == Clock::time_point{}) return 0;
  return std::chrono::duration<double, std::milli>(b - a).count();
}
}  // namespace

double RequestStats::queue_ms() const { return Ms(arrival_time, first_scheduled_time); }
double RequestStats::time_to_first_token_ms() const { return Ms(arrival_time, first_token_time); }
double RequestStats::decode_ms() const { return Ms(first_token_time, last_token_time); }

}  // namespace inflight
