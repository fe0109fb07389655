#include "serving/model_config_util.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <cstdlib>

namespace inflight::serving {
namespace {

class CollectErrors : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (first_.empty())
      first_ = "line " + std::to_string(line + 1) + ", column " + std::to_string(column + 1) +
               ": " + message;
  }
  void AddWarning(int, int, const std::string&) override {}
  const std::string& first() const { return first_; }

 private:
  std::string first_;
};

}  // namespace

StatusOr<ModelConfig> ParseModelConfigText(const std::string& text) {
  google::protobuf::TextFormat::Parser parser;
  CollectErrors errors;
  parser.RecordErrorsTo(&errors);
  // The reference ensemble declares one output twice; protobuf accepts repeated entries, and
  // repeated scalar fields written twice are fine, so no special handling is needed here.
  ModelConfig config;
  if (!parser.ParseFromString(text, &config)) {
    return InvalidArgumentError(
        "config.pbtxt: " + (errors.first().empty() ? std::string("parse error") : errors.first()));
  }
  return config;
}

std::string ModelConfigToText(const ModelConfig& config) {
  std::string out;
  google::protobuf::TextFormat::PrintToString(config, &out);
  return out;
}

std::optional<std::string> GetParameter(const ModelConfig& config, const std::string& key) {
  auto it = config.parameters().find(key);
  if (it == config.parameters().end()) return std::nullopt;
  const std::string& v = it->second.string_value();
  if (v.empty() || v.find("${") != std::string::npos) return std::nullopt;
  return v;
}

std::optional<bool> ParseBoolValue(const std::string& v) {
  if (v == "True" || v == "true" || v == "TRUE" || v == "1") return true;
  if (v == "False" || v == "false" || v == "FALSE" || v == "0") return false;
  return std::nullopt;
}

bool GetBoolParameter(const ModelConfig& config, const std::string& key, bool default_value) {
  auto v = GetParameter(config, key);
  if (!v) return default_value;
  return ParseBoolValue(*v).value_or(default_value);
}

int64_t GetIntParameter(const ModelConfig& config, const std::string& key, int64_t default_value) {
  auto v = GetParameter(config, key);
  if (!v) return default_value;
  char* end = nullptr;
  const long long x = std::strtoll(v->c_str(), &end, 10);
  return (end && *end == '\0') ? x : default_value;
}

double GetDoubleParameter(const ModelConfig& config, const std::string& key, double default_value) {
  auto v = GetParameter(config, key);
  if (!v) return default_value;
  char* end = nullptr;
  const double x = std::strtod(v->c_str(), &end);
  return (end && *end == '\0') ? x : default_value;
}

bool IsDecoupled(const ModelConfig& config) {
  return config.model_transaction_policy().decoupled();
}

namespace {

bool HasInput(const ModelConfig& c, const std::string& name) {
  for (const auto& in : c.input()) {
    if (in.name() == name) return true;
  }
  return false;
}

}  // namespace

BackendKind KindOf(const ModelConfig& config) {
  if (config.platform() == "ensemble") return BackendKind::kEnsemble;
  const std::string& backend = config.backend();
  const bool python = backend == "python";
  // Before the LLM: the router has the tensorrt_llm model's inputs.
  if (backend == "inflight_disaggregated" ||
      (python && GetParameter(config, "context_model_name") &&
       GetParameter(config, "generation_model_name")))
    return BackendKind::kDisaggregated;
  if (backend == "tensorrtllm" || backend == "inflight_llm" ||
      (python && HasInput(config, "input_ids") && HasInput(config, "request_output_len"))) {
    return BackendKind::kLlm;
  }
  if (backend == "inflight_tokenizer" || (python && HasInput(config, "QUERY")))
    return BackendKind::kTokenizer;
  if (backend == "inflight_detokenizer" || (python && HasInput(config, "TOKENS_BATCH")))
    return BackendKind::kDetokenizer;
  if (backend == "inflight_bls" || (python && HasInput(config, "text_input")))
    return BackendKind::kBls;
  return BackendKind::kUnknown;
}

}  // namespace inflight::serving
