// The ensemble scheduler: runs the steps of `ensemble_scheduling` by their input_map and
// output_map, every response of a decoupled step triggering the steps downstream, so the
// ensemble streams. Also the built-in `tensorrt_llm_bls` model (the same three steps).
#pragma once

#include <memory>

#include "serving/backend.h"

namespace inflight::serving {

// INVALID_ARGUMENT naming the step for a bad wiring (a step input fed by nothing, a cycle).
StatusOr<std::unique_ptr<ModelBackend>> CreateEnsembleBackend(const inference::ModelConfig& config,
                                                              const BackendContext& context);
// preprocessing -> tensorrt_llm (parameter tensorrt_llm_model_name) -> postprocessing.
StatusOr<std::unique_ptr<ModelBackend>> CreateBlsBackend(const inference::ModelConfig& config,
                                                         const BackendContext& context);
// The wiring of the reference ensemble (init-repo writes it; the BLS model runs it).
// bls: the BLS model's extra inputs are wired too (num_draft_tokens).
inference::ModelEnsembling ReferenceEnsembleSteps(const std::string& llm_model_name,
                                                  bool bls = false);

}  // namespace inflight::serving
