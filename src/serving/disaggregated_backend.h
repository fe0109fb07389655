// The disaggregated-serving router (TensorRT-LLM's disaggregated_serving_bls model): each
// request runs first on a context model as context_only (it computes the prompt's K/V and draws
// the first token), then on a generation model as generation_only with the context response's
// context_phase_params (the K/V hand-off, kvcache/kv_handoff.h), whose responses are the
// client's. The two models may be in this server or in other inflight servers (separate
// processes or hosts), reached over KServe gRPC.
//
// Config: backend "inflight_disaggregated" (or a python model with these parameters), the
// tensorrt_llm model's inputs and outputs, decoupled, and the parameters
//   context_model_name, generation_model_name  the two models (required);
//   context_model_url, generation_model_url    "host:port" of the server holding each (empty:
//                                              this server);
//   health_check_ms                            how often a remote server's liveness is asked
//                                              (default 500).
//
// Streaming requests of one sequence without beams get the first token as soon as the context
// phase drew it; the generation phase draws the same token from the same logits (it computes
// the prompt's last token over the handed-over K/V) and the router checks it is the same before
// dropping it.
// A remote server that dies or stops answering ends its requests with UNAVAILABLE naming it
// (a killed process at once, a silent one after two missed checks) and makes this model not
// ready until it answers again.
#pragma once

#include <memory>

#include "serving/backend.h"

namespace inflight::serving {

StatusOr<std::unique_ptr<ModelBackend>> CreateDisaggregatedBackend(
    const inference::ModelConfig& config, const BackendContext& context);

}  // namespace inflight::serving
