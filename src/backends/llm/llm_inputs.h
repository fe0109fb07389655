// The decoding-feature inputs of one row of a tensorrt_llm request, read into the engine's
// Request: draft logits, a guide, a LoRA adapter, a prompt embedding table. Matrices come as
// [rows, cols] (shared by every batch item) or [B, rows, cols] with the batch dimension.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "backends/llm/guide_cache.h"
#include "backends/llm/lora_cache.h"
#include "base/status.h"
#include "engine/request.h"
#include "model/model_config.h"
#include "serving/infer.h"

namespace inflight::serving {

// A scalar input of batch item `row` (one value shared by all rows, or one per row).
StatusOr<std::optional<double>> ScalarInput(const InferRequest& r, const char* name, int64_t row);

// draft_logits [k, vocab]: the draft model's logits of q->draft_tokens (read first).
Status ReadDraftLogits(const InferRequest& r, int64_t row, int32_t vocab, Request* q);
// guided_decoding_guide_type / guided_decoding_guide; `guides` null: no tokenizer.
Status ReadGuide(const InferRequest& r, int64_t row, GuideCache* guides, Request* q);
// lora_task_id (+ lora_weights and lora_config on first use, cached in `loras`).
Status ReadLora(const InferRequest& r, int64_t row, const inflight::ModelConfig& c,
                LoraCache& loras, Request* q);
// prompt_embedding_table [rows, hidden] and prompt_vocab_size.
Status ReadPromptTable(const InferRequest& r, int64_t row, int32_t hidden, Request* q);

// lookahead_window_size / _ngram_size / _verification_set_size: the request's lookahead
// triple (a field left out or 0 takes the model's; the executor checks it against the model's).
Status ReadLookahead(const InferRequest& r, int64_t row, const LookaheadConfig& model, Request* q);

// lora_prefetch_dir: caches the PEFT adapter of every subfolder named by a task id.
StatusOr<int> PrefetchLoras(const std::string& dir, const inflight::ModelConfig& c,
                            LoraCache& loras);

}  // namespace inflight::serving
