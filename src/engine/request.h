// What a client hands the executor and what it gets back, in the shape of TensorRT-LLM's
// executor API (Request, Result, FinishReason, RequestStage). Plain values; thread-safe to copy.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/latency_histogram.h"
#include "base/status.h"
#include "engine/lookahead.h"
#include "kvcache/kv_handoff.h"
#include "model/lora.h"
#include "sampling/sampler.h"
#include "sampling/token_constraint.h"

namespace inflight {

using RequestId = uint64_t;
using Clock = std::chrono::steady_clock;

// TensorRT-LLM's FinishReason values.
enum class FinishReason : int32_t {
  kNotFinished = 0,
  kEndId = 1,
  kStopWords = 2,
  kLength = 3,
  kTimedOut = 4,
  kCancelled = 5,
};
const char* FinishReasonName(FinishReason r);

class OutputStream;

// TensorRT-LLM's RequestType (disaggregated serving). A context-only request runs its prompt,
// draws its first token and ends, its final result carrying the hand-off
// (kvcache/kv_handoff.h); a generation-only request starts from a hand-off's K/V blocks
// instead of computing them, then runs as an ordinary request.
enum class RequestType : int32_t {
  kContextAndGeneration = 0,
  kContextOnly = 1,
  kGenerationOnly = 2,
};

struct Request {
  std::vector<int32_t> prompt_ids;
  int32_t max_tokens = 16;  // new tokens
  SamplingParams sampling;
  int32_t end_id = -1;  // sampling it finishes the sequence; -1: none
  int32_t pad_id = -1;
  std::vector<std::vector<int32_t>> stop_words;  // token sequences; the match stays in the output
  std::vector<std::vector<int32_t>> bad_words;   // token sequences never produced
  int32_t min_tokens = 0;                        // end_id and stop words are ignored before
  bool streaming = false;                        // a result per step with the new tokens
  bool exclude_input_in_output = false;          // non-streaming results omit the prompt
  bool return_log_probs = false;
  bool return_context_logits = false;     // [prompt_len, vocab]
  bool return_generation_logits = false;  // [generated, vocab]
  int32_t num_return_sequences = 1;       // independent samples sharing the prompt's KV blocks;
                                     // with beam search, the best beams returned (<= beam_width)
  // Beam search (beam_width > 1): the beam_width most likely continuations by cumulative
  // log-probability, their KV blocks shared copy-on-write. A hypothesis' score is
  // cum_log_prob / generated_length^length_penalty (the end token counts in the length).
  // early_stopping: 1 stops once beam_width hypotheses ended; 0 also while a live beam could
  // still beat the worst of them at its current length; > 1 at the longest length it may reach.
  // beam_search_diversity_rate: a candidate ranked r-th among its parent's children is ranked
  // overall by cum_log_prob - rate * r (its cum_log_prob is unchanged).
  int32_t beam_width = 1;
  float length_penalty = 0.0f;
  int32_t early_stopping = 1;
  float beam_search_diversity_rate = 0.0f;
  float priority = 0.5f;               // 0..1, higher is served first (then arrival order)
  int64_t timeout_ms = 0;              // allotted time from arrival; 0 = none
  int32_t kv_retention_priority = 35;  // 0..100, for this request's cached blocks
  // Prefix reuse happens only among requests with the same salt (a tenant's): 0 is the
  // shared, unsalted cache. Serving derives it from the client's cache_salt by a keyed hash.
  uint64_t cache_salt = 0;
  // Speculative decoding. draft_tokens: a client's guesses of the first generated tokens
  // (TensorRT-LLM's external draft tokens), verified together with the prompt's last position.
  // num_draft_tokens: drafts per step from the executor's proposer; -1 = its configured
  // max_draft_tokens, 0 = none for this request.
  std::vector<int32_t> draft_tokens;
  int32_t num_draft_tokens = -1;
  // The draft model's logits of each of draft_tokens ([draft_tokens, vocab]; empty: the
  // drafts were proposed with certainty). Sampling then keeps a draft with probability
  // min(1, p / q) (TensorRT-LLM's draft_logits).
  std::vector<float> draft_logits;
  // Lookahead decoding: this request's (window, n-gram, verification set), each at most the
  // model's; all 0: the model's.
  LookaheadConfig lookahead;
  // Guided decoding: the constraint at the start of the output (each sequence works on its
  // own clone); its mask applies before sampling, and the sequence ends once it is
  // complete. Not with beam search or draft tokens.
  std::shared_ptr<const TokenConstraint> guide;
  // LoRA: the adapter this request runs with (null: the base model), built for the
  // executor's model. Its KV blocks are reused only by requests of the same lora_task_id.
  std::shared_ptr<const LoraAdapter> lora;
  uint64_t lora_task_id = 0;
  // P-tuning (TensorRT-LLM's prompt_embedding_table): prompt ids vocab_size + i take row i of
  // this [rows, hidden] table as their embedding. Prefix reuse only among equal tables.
  std::shared_ptr<const std::vector<float>> prompt_table;
  // Disaggregated serving. A context-only request is run as one sequence drawing one token
  // (Enqueue sets max_tokens, num_return_sequences and beam_width to 1). A generation-only
  // request needs context_phase: the hand-off of a context-only run of the same prompt
  // (checked by Enqueue against the prompt, the model's KV layout, the salt and the adapter).
  RequestType request_type = RequestType::kContextAndGeneration;
  std::shared_ptr<const KvHandoff> context_phase;
  // Arrival time for the queue-time statistics; set by Enqueue when left at its default.
  Clock::time_point arrival_time{};
  // Where the results go, read on the consumer's own threads (the engine thread only pushes).
  // Left null, Enqueue makes one, read by AwaitResponses.
  std::shared_ptr<OutputStream> output;
};

// Times and counters of one request, filled as it runs.
struct RequestStats {
  Clock::time_point arrival_time{};
  Clock::time_point first_scheduled_time{};
  Clock::time_point first_token_time{};
  Clock::time_point last_token_time{};
  int32_t num_prompt_tokens = 0;
  int32_t num_generated_tokens = 0;    // over all sequences
  int32_t num_reused_blocks = 0;       // KV blocks served from the prefix cache (any tier)
  int32_t num_disk_reused_blocks = 0;  // of those, read back from the disk tier
  int32_t num_allocated_blocks = 0;    // KV blocks newly allocated
  int32_t num_pauses = 0;              // max_utilization preemptions
  // Generation-only: blocks taken from the hand-off, and the time from its export by the
  // context instance to their import here (wall clocks: exact on one host).
  bool from_handoff = false;
  int32_t num_imported_blocks = 0;
  double kv_transfer_ms = 0;
  int32_t num_draft_tokens = 0;           // speculative decoding: drafts verified
  int32_t num_accepted_draft_tokens = 0;  // and accepted
  // The time between the request's token-producing steps after its first token, one sample per
  // token (a step that produced k tokens adds k samples of its gap / k).
  LatencyHistogram inter_token_latency;

  double queue_ms() const;
  double time_to_first_token_ms() const;
  double decode_ms() const;
};

// One beam of a beam-search result.
struct BeamOutput {
  std::vector<int32_t> output_token_ids;  // as Result::output_token_ids
  std::vector<float> log_probs;           // per generated token
  float cum_log_prob = 0.0f;
  float score = 0.0f;  // cum_log_prob with the length penalty
  FinishReason finish_reason = FinishReason::kNotFinished;
};

struct Result {
  RequestId request_id = 0;
  int32_t sequence_index = 0;
  bool is_final = false;           // the request's last result
  bool is_sequence_final = false;  // this sequence's last result
  Status error;                    // not OK: the request failed; is_final is set
  // Streaming: the new tokens of this step. Otherwise: the whole output (prompt first unless
  // exclude_input_in_output).
  std::vector<int32_t> output_token_ids;
  std::vector<float> log_probs;  // per generated token in output_token_ids
  // Per generated token: the sampling.num_top_logprobs most likely (id, log-prob), best first.
  std::vector<std::vector<std::pair<int32_t, float>>> top_logprobs;
  float cum_log_prob = 0.0f;
  FinishReason finish_reason = FinishReason::kNotFinished;
  // Beam search: the best num_return_sequences beams, best first, all in one result
  // (sequence_index 0); the fields above repeat beams[0]. Streaming results carry the live
  // beams so far (provisional: beams are re-ranked every step).
  std::vector<BeamOutput> beams;
  std::vector<float> context_logits;     // [prompt_len, vocab], in the first result
  std::vector<float> generation_logits;  // [tokens, vocab] of the tokens in this result
  int32_t vocab_size = 0;
  // Context-only: the hand-off, in the final result.
  std::shared_ptr<const KvHandoff> context_phase;
  int32_t decoding_iteration = 0;  // executor step that produced this result
  RequestStats stats;              // complete in the final result
};

}  // namespace inflight
