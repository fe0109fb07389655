#include "serving/text_model.h"

#include "serving/model_config_util.h"

namespace inflight::serving {
namespace {

// Fills the LLM side (model name, streaming) from the config of `llm`.
Status SetLlm(const Server& server, const std::string& llm, TextModel* out) {
  auto config = server.GetModelConfig(llm, "");
  if (!config.ok()) return config.status();
  // The disaggregated router has the LLM model's interface (its context length is the
  // workers': 0 here, so the workers check lengths).
  if (KindOf(*config) != BackendKind::kLlm && KindOf(*config) != BackendKind::kDisaggregated)
    return InvalidArgumentError("model '" + llm + "' is not an LLM model");
  out->llm_model = llm;
  out->streaming = IsDecoupled(*config);
  out->batch_dim = config->max_batch_size() > 0;
  auto context = server.ContextLengthOf(llm);
  if (!context.ok()) return context.status();
  out->context_length = *context;
  return OkStatus();
}

}  // namespace

StatusOr<TextModel> ResolveTextModel(const Server& server, const std::string& name) {
  auto config = server.GetModelConfig(name, "");
  if (!config.ok()) return config.status();
  TextModel m;
  m.name = name;
  const std::string no_text = "model '" + name + "' cannot serve text requests: ";
  // The tokenizer of a named step, if it is ready and has one.
  auto tokenizer_of = [&](const std::string& model) -> std::shared_ptr<const Tokenizer> {
    auto t = server.TokenizerOf(model);
    return t.ok() ? *t : nullptr;
  };
  switch (KindOf(*config)) {
    case BackendKind::kLlm:
      RETURN_IF_ERROR(SetLlm(server, name, &m));
      m.tokenizer = tokenizer_of(name);
      break;
    case BackendKind::kEnsemble:
      for (const auto& step : config->ensemble_scheduling().step()) {
        auto step_config = server.GetModelConfig(step.model_name(), "");
        if (!step_config.ok())
          return InvalidArgumentError(no_text + step_config.status().message());
        switch (KindOf(*step_config)) {
          case BackendKind::kLlm:
          case BackendKind::kDisaggregated:
            RETURN_IF_ERROR(SetLlm(server, step.model_name(), &m));
            break;
          case BackendKind::kTokenizer:
            m.tokenizer = tokenizer_of(step.model_name());
            m.add_special_tokens = GetBoolParameter(*step_config, "add_special_tokens", true);
            break;
          case BackendKind::kDetokenizer:
            m.skip_special_tokens = GetBoolParameter(*step_config, "skip_special_tokens", true);
            if (!m.tokenizer) m.tokenizer = tokenizer_of(step.model_name());
            break;
          default:
            break;
        }
      }
      break;
    case BackendKind::kBls: {
      // The BLS model calls preprocessing, the LLM model and postprocessing by these names.
      RETURN_IF_ERROR(SetLlm(
          server, GetParameter(*config, "tensorrt_llm_model_name").value_or("tensorrt_llm"), &m));
      if (auto pre = server.GetModelConfig("preprocessing", ""); pre.ok()) {
        m.tokenizer = tokenizer_of("preprocessing");
        m.add_special_tokens = GetBoolParameter(*pre, "add_special_tokens", true);
      }
      if (auto post = server.GetModelConfig("postprocessing", ""); post.ok()) {
        m.skip_special_tokens = GetBoolParameter(*post, "skip_special_tokens", true);
      }
      if (!m.tokenizer) m.tokenizer = tokenizer_of(m.llm_model);
      break;
    }
    default:
      return InvalidArgumentError(no_text + "it is neither an LLM, an ensemble nor a BLS model");
  }
  if (m.llm_model.empty()) return InvalidArgumentError(no_text + "it has no LLM step");
  if (!m.tokenizer) return InvalidArgumentError(no_text + "it has no tokenizer");
  return m;
}

}  // namespace inflight::serving
