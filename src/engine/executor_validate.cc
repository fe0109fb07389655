// Executor::Validate: what makes a request one the executor can never serve (INVALID_ARGUMENT
// at Enqueue, before it holds anything).
#include <cmath>
#include <string>

#include "engine/executor.h"

namespace inflight {
namespace {

constexpr int32_t kMaxReturnSequences = 64;

Status ValidateWords(const std::vector<std::vector<int32_t>>& words, int32_t vocab,
                     const char* what) {
  for (const auto& w : words) {
    if (w.empty()) return InvalidArgumentError(std::string(what) + " contain an empty word");
    for (int32_t id : w) {
      if (id < 0 || id >= vocab)
        return InvalidArgumentError(std::string(what) + " contain token id " + std::to_string(id) +
                                    " outside the vocabulary");
    }
  }
  return OkStatus();
}

}  // namespace

Status Executor::Validate(const Request& r) const {
  const int64_t prompt = static_cast<int64_t>(r.prompt_ids.size());
  if (prompt == 0) return InvalidArgumentError("the prompt is empty");
  int64_t table_rows = 0;
  if (r.prompt_table) {
    if (r.prompt_table->empty() ||
        r.prompt_table->size() % static_cast<size_t>(hidden_size_) != 0) {
      return InvalidArgumentError("the prompt embedding table must be [rows, " +
                                  std::to_string(hidden_size_) + "] (the model's hidden size)");
    }
    table_rows = static_cast<int64_t>(r.prompt_table->size()) / hidden_size_;
  }
  for (int32_t id : r.prompt_ids) {
    if (id < 0 || id >= vocab_size_ + table_rows) {
      return InvalidArgumentError(
          "prompt token id " + std::to_string(id) + " is outside the vocabulary (size " +
          std::to_string(vocab_size_) + ")" +
          (table_rows > 0
               ? " and the prompt embedding table (" + std::to_string(table_rows) + " rows)"
               : std::string()));
    }
  }
  if (r.max_tokens < 1) return InvalidArgumentError("max_tokens must be >= 1");
  if (prompt >= context_length_) {
    return InvalidArgumentError(
        "prompt (" + std::to_string(prompt) + " tokens) exceeds the maximum input length " +
        std::to_string(context_length_ - 1) + " (the model's context length is " +
        std::to_string(context_length_) + ")");
  }
  if (prompt + r.max_tokens > context_length_) {
    return InvalidArgumentError("prompt (" + std::to_string(prompt) + " tokens) + max_tokens (" +
                                std::to_string(r.max_tokens) +
                                ") exceeds the model's context length " +
                                std::to_string(context_length_));
  }
  RETURN_IF_ERROR(r.sampling.Validate());
  if (r.lora && r.lora->num_layers() != runner_->num_layers()) {
    return InvalidArgumentError("the LoRA adapter was built for " +
                                std::to_string(r.lora->num_layers()) + " layers; the model has " +
                                std::to_string(runner_->num_layers()));
  }
  if (r.num_return_sequences < 1 || r.num_return_sequences > kMaxReturnSequences) {
    return InvalidArgumentError("num_return_sequences must be in [1, " +
                                std::to_string(kMaxReturnSequences) + "]");
  }
  if (r.beam_width < 1) return InvalidArgumentError("beam_width must be >= 1");
  if (r.beam_width > config_.max_beam_width) {
    return InvalidArgumentError("beam_width " + std::to_string(r.beam_width) +
                                " exceeds max_beam_width " +
                                std::to_string(config_.max_beam_width));
  }
  RETURN_IF_ERROR(DecodingOf(r).Validate(r));
  if (r.guide && !r.draft_tokens.empty())
    return InvalidArgumentError("draft tokens cannot be verified with guided decoding");
  if (r.min_tokens < 0) return InvalidArgumentError("min_tokens must be >= 0");
  if (!(r.priority >= 0 && r.priority <= 1))
    return InvalidArgumentError("priority must be in [0, 1]");
  if (r.timeout_ms < 0) return InvalidArgumentError("timeout must be >= 0");
  if (r.kv_retention_priority < 0 || r.kv_retention_priority > 100)
    return InvalidArgumentError("kv retention priority must be in [0, 100]");
  if (r.end_id >= vocab_size_ || r.end_id < -1)
    return InvalidArgumentError("end_id " + std::to_string(r.end_id) +
                                " is outside the vocabulary");
  RETURN_IF_ERROR(ValidateWords(r.stop_words, vocab_size_, "stop words"));
  RETURN_IF_ERROR(ValidateWords(r.bad_words, vocab_size_, "bad words"));
  if (static_cast<int64_t>(r.draft_tokens.size()) > kMaxDraftTokens) {
    return InvalidArgumentError("the request holds " + std::to_string(r.draft_tokens.size()) +
                                " draft tokens; at most " + std::to_string(kMaxDraftTokens) +
                                " are verified per step");
  }
  for (int32_t id : r.draft_tokens) {
    if (id < 0 || id >= vocab_size_)
      return InvalidArgumentError("draft token id " + std::to_string(id) +
                                  " is outside the vocabulary");
  }
  if (!r.draft_logits.empty()) {
    if (r.draft_logits.size() != r.draft_tokens.size() * static_cast<size_t>(vocab_size_)) {
      return InvalidArgumentError("draft_logits must be [" + std::to_string(r.draft_tokens.size()) +
                                  ", " + std::to_string(vocab_size_) +
                                  "]: one row of the vocabulary's logits per draft token");
    }
    for (size_t row = 0; row < r.draft_tokens.size(); ++row) {
      bool finite = false;
      for (int32_t v = 0; v < vocab_size_; ++v) {
        const float x = r.draft_logits[row * vocab_size_ + v];
        if (std::isnan(x) || x == std::numeric_limits<float>::infinity())
          return InvalidArgumentError("draft_logits hold NaN or +inf");
        finite = finite || std::isfinite(x);
      }
      if (!finite) return InvalidArgumentError("a draft_logits row has no finite logit");
    }
  }
  if (r.num_draft_tokens < -1 || r.num_draft_tokens > kMaxDraftTokens) {
    return InvalidArgumentError("num_draft_tokens must be in [0, " +
                                std::to_string(kMaxDraftTokens) + "]");
  }
  if (!r.lookahead.empty()) {
    if (config_.speculative_mode != SpeculativeMode::kLookahead) {
      return InvalidArgumentError(
          "lookahead_window_size, lookahead_ngram_size and lookahead_verification_set_size need "
          "a model served with speculative_decoding_mode lookahead (this one: " +
          std::string(SpeculativeModeName(config_.speculative_mode)) + ")");
    }
    RETURN_IF_ERROR(r.lookahead.ValidateWithin(config_.lookahead, "lookahead_"));
  }
  if (!config_.enable_chunked_context && prompt > config_.max_num_tokens) {
    return InvalidArgumentError(
        "prompt of " + std::to_string(prompt) + " tokens exceeds max_num_tokens " +
        std::to_string(config_.max_num_tokens) + " (enable chunked context to split it)");
  }
  // Blocks the request needs at once: the whole request under guaranteed_no_evict, one
  // sequence under max_utilization (its siblings can wait or be paused), every beam of a beam
  // search.
  const int64_t tpb = config_.tokens_per_block;
  const int64_t lifetime = (prompt + r.max_tokens + tpb - 1) / tpb;
  const int64_t need = DecodingOf(r).BlocksNeededAtOnce(r, prompt / tpb, lifetime);
  if (need > num_kv_blocks_) {
    return InvalidArgumentError(
        "the request needs " + std::to_string(need) + " KV cache blocks of " + std::to_string(tpb) +
        " tokens but the whole cache has " + std::to_string(num_kv_blocks_));
  }
  if (window_blocks_ && scheduler_.policy().ReservesWindow()) {
    // The window group's reservation (engine/scheduler.h).
    const int64_t window_need = static_cast<int64_t>(WindowBlocksPerSequence(
                                    runner_->kv_window(), config_.tokens_per_block)) *
                                    std::max(r.beam_width, r.num_return_sequences) +
                                WindowBlocksPerStep(config_);
    if (window_need > window_blocks_->config().num_blocks) {
      return InvalidArgumentError("the request's " +
                                  std::to_string(std::max(r.beam_width, r.num_return_sequences)) +
                                  " sequences need " + std::to_string(window_need) +
                                  " blocks of the KV cache's sliding-window group but it has " +
                                  std::to_string(window_blocks_->config().num_blocks));
    }
  }
  return OkStatus();
}

}  // namespace inflight
