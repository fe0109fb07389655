// Writes a loaded model (from any supported format) as a GGUF file in a chosen weight type:
// `inflight-model convert` and the random-model writer share the metadata code here.
#pragma once

#include <string>

#include "base/status.h"
#include "format/gguf.h"
#include "model/model.h"
#include "model/quant_mix.h"
#include "tokenizer/tokenizer.h"

namespace inflight {

// llama.cpp's architecture keys (<arch>.embedding_length, ...).
void WriteModelMetadata(const ModelConfig& config, const std::string& name, GgufWriter& w);
// tokenizer.ggml.* keys.
void WriteTokenizerMetadata(const TokenizerSpec& spec, GgufWriter& w);

// Re-encodes every 2-D weight in the type `mix` gives it (one type, or a llama-quantize mix;
// a matrix whose rows are not a multiple of the block size falls back as llama.cpp does);
// norms, biases and position embeddings stay F32. Llama checkpoints whose Q/K rows are in
// Hugging Face's rotate-half order are permuted to GGUF's interleaved order. A non-empty
// chat_template replaces the tokenizer's (tokenizer.chat_template).
Status ExportGguf(const Model& model, const QuantMix& mix, const std::string& path,
                  const std::string& chat_template = "");

}  // namespace inflight
