// Disaggregated serving in the executor: a context-only request's hand-off exported when its
// sequence finishes, and a generation-only request's hand-off checked at Enqueue (the
// scheduler imports its blocks at admission, engine/scheduler.h).
#include <algorithm>
#include <chrono>

#include "engine/executor.h"

namespace inflight {

Status Executor::CheckDisaggregated(const Request& r) const {
  if (r.request_type == RequestType::kContextAndGeneration) {
    if (r.context_phase)
      return InvalidArgumentError("context_phase_params is only read by a generation_only request");
    return OkStatus();
  }
  const char* type =
      r.request_type == RequestType::kContextOnly ? "context_only" : "generation_only";
  if (runner_->KvBlockBytes(kFullGroup) <= 0)
    return InvalidArgumentError(std::string(type) +
                                " requests are not supported yet with tensor or pipeline "
                                "parallelism (the K/V blocks are spread over the ranks)");
  if (window_blocks_)
    return InvalidArgumentError(std::string(type) +
                                " requests are not supported yet for models with "
                                "sliding-window layers");
  if (r.return_context_logits)
    return InvalidArgumentError(std::string(type) +
                                " requests cannot return context logits (the prompt's logits "
                                "stay with the context instance)");
  if (r.request_type == RequestType::kContextOnly) {
    if (r.context_phase)
      return InvalidArgumentError("context_phase_params is only read by a generation_only request");
    return OkStatus();
  }
  if (!r.context_phase)
    return InvalidArgumentError(
        "a generation_only request needs context_phase_params (the output of its context_only "
        "request)");
  const KvHandoff& h = *r.context_phase;
  if (h.layout_fingerprint != handoff_fingerprint_)
    return InvalidArgumentError(
        "context_phase_params comes from another model or KV cache layout (its fingerprint "
        "differs from this model's)");
  if (h.tokens_per_block != config_.tokens_per_block)
    return InvalidArgumentError("context_phase_params has " + std::to_string(h.tokens_per_block) +
                                " tokens per block where this model has " +
                                std::to_string(config_.tokens_per_block));
  if (h.block_bytes != runner_->KvBlockBytes(kFullGroup) ||
      static_cast<int64_t>(h.kv.size()) != h.num_blocks() * h.block_bytes)
    return InvalidArgumentError("context_phase_params: its blocks are not this model's size");
  const size_t covered = h.tokens.size();
  if (covered + 1 > r.prompt_ids.size() ||
      !std::equal(h.tokens.begin(), h.tokens.end(), r.prompt_ids.begin()))
    return InvalidArgumentError(
        "context_phase_params holds the K/V of another prompt (its tokens are not this "
        "request's input_ids)");
  if (h.cache_salt != r.cache_salt || h.lora_task_id != (r.lora ? r.lora_task_id : 0))
    return InvalidArgumentError(
        "context_phase_params was computed under another cache salt or LoRA adapter");
  return OkStatus();
}

// The generation instance runs the request as asked (its own sampler draws the same first
// token from the same logits).
void Executor::AsContextPhase(Request* r) {
  r->max_tokens = 1;
  // min_tokens keeps the end token from being drawn first, as in the generation phase.
  r->min_tokens = std::min(r->min_tokens, 1);
  r->num_return_sequences = 1;
  r->beam_width = 1;
  r->streaming = false;
  r->draft_tokens.clear();
  r->draft_logits.clear();
  r->return_generation_logits = false;
}

void Executor::ExportHandoff(Sequence* seq) {
  RequestState* rs = seq->request;
  if (rs->context_phase || seq->index != 0) return;
  const Request& r = rs->request;
  auto h = std::make_shared<KvHandoff>();
  h->layout_fingerprint = handoff_fingerprint_;
  h->tokens_per_block = config_.tokens_per_block;
  h->block_bytes = runner_->KvBlockBytes(kFullGroup);
  h->cache_salt = r.cache_salt;
  h->lora_task_id = r.lora ? r.lora_task_id : 0;
  h->first_tokens.assign(seq->tokens.begin() + seq->prompt_len, seq->tokens.end());
  // Every prompt position but the last: the generation instance computes the last token and
  // draws the first generated one itself.
  const int64_t tpb = config_.tokens_per_block;
  int64_t covered = std::min<int64_t>(seq->prompt_len - 1, seq->num_computed);
  covered = std::min<int64_t>(covered, static_cast<int64_t>(seq->blocks.size()) * tpb);
  const int64_t n = (covered + tpb - 1) / tpb;
  h->tokens.assign(seq->tokens.begin(), seq->tokens.begin() + covered);
  h->kv.resize(static_cast<size_t>(n * h->block_bytes));
  for (int64_t i = 0; i < n; ++i) {
    if (!runner_->ExportBlock(kFullGroup, seq->blocks[static_cast<size_t>(i)],
                              h->kv.data() + i * h->block_bytes)) {
      h->tokens.resize(static_cast<size_t>(i * tpb));
      h->kv.resize(static_cast<size_t>(i * h->block_bytes));
      break;
    }
  }
  h->created_unix_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  rs->context_phase = std::move(h);
}

}  // namespace inflight
