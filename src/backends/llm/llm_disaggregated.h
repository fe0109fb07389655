// Disaggregated serving's side of the tensorrt_llm model: the request parameters
// request_type and context_phase_transport, the input context_phase_params a generation-only
// request brings, and the output a context-only request answers (the hand-off's bytes, or the
// descriptor of a shared-memory segment holding them: kvcache/kv_handoff_shm.h). All of it runs
// on serving threads, never on the engine thread.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "engine/request.h"
#include "kvcache/kv_handoff.h"
#include "kvcache/kv_handoff_shm.h"
#include "model_config.pb.h"
#include "serving/backend.h"
#include "serving/infer.h"

namespace inflight::serving {

// The parameters context_phase_shm_dir (a folder of its own, confined like every path a config
// names; null when not given), context_phase_shm_ttl_ms and context_phase_shm_max_bytes.
StatusOr<std::unique_ptr<KvHandoffShm>> OpenHandoffShm(const inference::ModelConfig& config,
                                                       const BackendContext& context);

// What ReadDisaggregated leaves for later.
struct DisaggregatedRow {
  bool to_shm = false;  // context_phase_transport shm: answer the hand-off in a segment
  std::string segment;  // a descriptor to take once the request is accepted (TakeHandoffSegment)
};

// request_type (context_and_generation, context_only or generation_only), the input
// context_phase_params (UINT8, one per request: a hand-off, parsed and checked here, or the
// descriptor of a segment of `shm`, checked here and taken later) and context_phase_transport
// ("inline" or "shm": how a context-only request answers). `shm` is null when the model has no
// context_phase_shm_dir.
Status ReadDisaggregated(const InferRequest& r, int64_t rows, KvHandoffShm* shm, Request* q,
                         DisaggregatedRow* out);

// Reads (and removes) the segment `descriptor` names into q->context_phase.
Status TakeHandoffSegment(KvHandoffShm& shm, const std::string& descriptor, Request* q);

// The output context_phase_params of a context-only request's final response: in a segment of
// `shm` when given and it has room, else the bytes themselves.
InferTensor ContextPhaseOutput(const KvHandoff& handoff, KvHandoffShm* shm);

}  // namespace inflight::serving
