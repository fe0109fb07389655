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

// Writes `path` when missing: a random model of `arch` (model/random_model.h names) and
// `preset`, cut to `layers` (0: the preset's), `weights` a type or llama-quantize mix, with an
// untied output and the tokenizer at `tokenizer` padded to the preset's vocabulary.
Status WriteRandomModelIfMissing(const std::string& path, const std::string& arch,
                                 const std::string& preset, int32_t layers,
                                 const std::string& weights, const std::string& tokenizer);

// Multiply-adds of one token through every matrix (the matmul work of a decode token).
double MacsPerToken(const Model& model);

}  // namespace inflight
