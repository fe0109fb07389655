#include "serving/backend.h"

#include "serving/disaggregated_backend.h"
#include "serving/ensemble_backend.h"
#include "serving/model_config_util.h"

namespace inflight::serving {

InferResponse ErrorResponse(const Status& error) {
  InferResponse r;
  r.error = error;
  r.final = true;
  return r;
}

StatusOr<std::unique_ptr<ModelBackend>> CreateBackend(const inference::ModelConfig& config,
                                                      const BackendContext& context,
                                                      const BackendFactories& factories) {
  const BackendKind kind = KindOf(config);
  switch (kind) {
    case BackendKind::kEnsemble:
      if (!config.has_ensemble_scheduling())
        return InvalidArgumentError("platform 'ensemble' needs ensemble_scheduling");
      return CreateEnsembleBackend(config, context);
    case BackendKind::kBls:
      return CreateBlsBackend(config, context);
    case BackendKind::kDisaggregated:
      return CreateDisaggregatedBackend(config, context);
    case BackendKind::kLlm:
    case BackendKind::kTokenizer:
    case BackendKind::kDetokenizer:
      if (auto it = factories.find(kind); it != factories.end() && it->second)
        return it->second(config, context);
      break;
    case BackendKind::kUnknown:
      break;
  }
  const std::string& backend = config.backend();
  if (backend.empty() && config.platform().empty()) {
    return InvalidArgumentError("config names neither 'backend' nor 'platform'");
  }
  return InvalidArgumentError("backend '" + (backend.empty() ? config.platform() : backend) +
                              "' is not supported: inflight serves ensemble, tensorrtllm and the "
                              "preprocessing/postprocessing/tensorrt_llm_bls python models");
}

}  // namespace inflight::serving
