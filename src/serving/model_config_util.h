// config.pbtxt handling: parsing with protobuf's TextFormat and reading the string-typed
// `parameters` the way the TensorRT-LLM backend does (unfilled ${...} templates are unset).
#pragma once

#include <optional>
#include <string>

#include "base/status.h"
#include "model_config.pb.h"

namespace inflight::serving {

using inference::ModelConfig;

// Parses config.pbtxt text. INVALID_ARGUMENT with the line, column and the parser's message
// (which names the field) on error.
StatusOr<ModelConfig> ParseModelConfigText(const std::string& text);
// Renders a config as text format (init-repo, tests).
std::string ModelConfigToText(const ModelConfig& config);

// The parameter's string, or nullopt when absent, empty or an unfilled ${...} template.
std::optional<std::string> GetParameter(const ModelConfig& config, const std::string& key);
// Booleans accept True/true/TRUE/1 and False/false/FALSE/0; anything else is unset (nullopt).
std::optional<bool> ParseBoolValue(const std::string& v);
// Typed parameters: the default when unset or unparsable (as the reference backend does).
bool GetBoolParameter(const ModelConfig& config, const std::string& key, bool default_value);
int64_t GetIntParameter(const ModelConfig& config, const std::string& key, int64_t default_value);
double GetDoubleParameter(const ModelConfig& config, const std::string& key, double default_value);

bool IsDecoupled(const ModelConfig& config);

// Which built-in implementation serves a config: platform "ensemble"; backend "tensorrtllm"
// (or a python model with the tensorrt_llm inputs); python models with the preprocessing,
// postprocessing or tensorrt_llm_bls interfaces (their input names say which).
enum class BackendKind {
  kEnsemble,
  kLlm,
  kTokenizer,
  kDetokenizer,
  kBls,
  kDisaggregated,  // the disaggregated-serving router (serving/disaggregated_backend.h)
  kUnknown
};
BackendKind KindOf(const ModelConfig& config);

}  // namespace inflight::serving
