// The random-weight models the benchmarks run, written once under a model directory (no model
// hub is reachable here) and loaded, and the arithmetic per token they are measured against.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "model/model.h"

namespace inflight {

// Loads `path`, first writing it when missing: a random Llama of `preset` (model/random_model.h)
// with an untied output, `weights` a type or llama-quantize mix name (model/quant_mix.h), the
// tokenizer at `tokenizer`, and the preset's context unless `context_length` > 0.
StatusOr<std::unique_ptr<Model>> LoadOrWriteRandomModel(
    const std::string& path, const std::string& preset, const std::string& weights,
    const std::string& tokenizer, int32_t context_length = 0, float block_output_scale = 1.0f);

// Multiply-adds of one token through every matrix (the matmul work of a decode token).
double MacsPerToken(const Model& model);

}  // namespace inflight
