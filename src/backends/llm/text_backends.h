// The `preprocessing` (tokenizer) and `postprocessing` (detokenizer) models of the reference
// repository, in C++ over the project's tokenizers.
#pragma once

#include <memory>
#include <string>

#include "serving/backend.h"
#include "tokenizer/tokenizer.h"

namespace inflight::serving {

// tokenizer_dir: a .gguf file, a Hugging Face folder (tokenizer.json) or a tokenizer.model.
// NOT_FOUND / INVALID_ARGUMENT naming the path on failure.
StatusOr<std::shared_ptr<const Tokenizer>> LoadTokenizer(const std::string& path);

StatusOr<std::unique_ptr<ModelBackend>> CreateTokenizerBackend(const inference::ModelConfig& config,
                                                               const BackendContext& context);
StatusOr<std::unique_ptr<ModelBackend>> CreateDetokenizerBackend(
    const inference::ModelConfig& config, const BackendContext& context);

}  // namespace inflight::serving
