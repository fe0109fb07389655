// How text reaches a repository model for a text API (OpenAI): the LLM model that runs the
// request, and the tokenizer, special-token settings and chat template of the model the
// client named (an ensemble's preprocessing/postprocessing steps, a BLS model's, or an LLM
// model's own weights).
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "serving/server.h"
#include "tokenizer/tokenizer.h"

namespace inflight::serving {

struct TextModel {
  std::string name;            // as the client named it
  std::string llm_model;       // the tensorrt_llm model the token ids go to
  bool streaming = false;      // the LLM model is decoupled (a response per step)
  int64_t context_length = 0;  // the LLM model's (prompt + output tokens)
  bool batch_dim = true;       // the LLM model's inputs have a batch dimension (max_batch_size > 0)
  std::shared_ptr<const Tokenizer> tokenizer;
  bool add_special_tokens = true;   // the preprocessing step's setting
  bool skip_special_tokens = true;  // the postprocessing step's
};

// NOT_FOUND for an unknown model; INVALID_ARGUMENT naming the model when it has no LLM step or
// no tokenizer (e.g. the preprocessing model alone).
StatusOr<TextModel> ResolveTextModel(const Server& server, const std::string& name);

}  // namespace inflight::serving
