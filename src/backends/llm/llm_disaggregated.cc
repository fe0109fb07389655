#include "backends/llm/llm_disaggregated.h"

#include <memory>
#include <string>
#include <variant>

#include "base/logging.h"
#include "serving/model_config_util.h"
#include "serving/model_paths.h"

namespace inflight::serving {

StatusOr<std::unique_ptr<KvHandoffShm>> OpenHandoffShm(const inference::ModelConfig& config,
                                                       const BackendContext& context) {
  const auto where = GetParameter(config, "context_phase_shm_dir");
  if (!where || where->empty()) return std::unique_ptr<KvHandoffShm>();
  auto dir =
      OwnFolderPath("context_phase_shm_dir", *where, context.model_dir, context.allowed_roots);
  if (!dir.ok()) return dir.status();
  const int64_t ttl_ms = GetIntParameter(config, "context_phase_shm_ttl_ms", 30000);
  if (ttl_ms < 100 || ttl_ms > 3600000)
    return InvalidArgumentError("parameter context_phase_shm_ttl_ms must be in [100, 3600000]");
  const int64_t max_bytes =
      GetIntParameter(config, "context_phase_shm_max_bytes", int64_t{1} << 30);
  if (max_bytes < 1 << 20 || max_bytes > int64_t{1} << 40)
    return InvalidArgumentError("parameter context_phase_shm_max_bytes must be in [1 MiB, 1 TiB]");
  return KvHandoffShm::Open(*dir, ttl_ms, max_bytes);
}

Status ReadDisaggregated(const InferRequest& r, int64_t rows, KvHandoffShm* shm, Request* q,
                         DisaggregatedRow* out) {
  if (auto it = r.parameters.find("request_type"); it != r.parameters.end()) {
    const std::string* type = std::get_if<std::string>(&it->second);
    if (type && *type == "context_and_generation")
      q->request_type = RequestType::kContextAndGeneration;
    else if (type && *type == "context_only")
      q->request_type = RequestType::kContextOnly;
    else if (type && *type == "generation_only")
      q->request_type = RequestType::kGenerationOnly;
    else
      return InvalidArgumentError(
          "parameter request_type must be context_and_generation, context_only or "
          "generation_only");
  }
  if (auto it = r.parameters.find("context_phase_transport"); it != r.parameters.end()) {
    const std::string* how = std::get_if<std::string>(&it->second);
    if (!how || (*how != "inline" && *how != "shm"))
      return InvalidArgumentError("parameter context_phase_transport must be inline or shm");
    if (*how == "shm") {
      if (q->request_type != RequestType::kContextOnly)
        return InvalidArgumentError(
            "parameter context_phase_transport goes with request_type context_only");
      if (!shm)
        return InvalidArgumentError(
            "parameter context_phase_transport shm: this model has no context_phase_shm_dir");
      out->to_shm = true;
    }
  }
  const InferTensor* t = r.FindInput("context_phase_params");
  if (!t || t->num_elements() == 0) return OkStatus();
  if (t->dtype != inference::TYPE_UINT8)
    return InvalidArgumentError("context_phase_params must be UINT8");
  if (rows != 1)
    return InvalidArgumentError(
        "context_phase_params goes with a request of one row (input_ids "
        "of batch size 1)");
  RETURN_IF_ERROR(t->CheckSize());
  const auto* data = reinterpret_cast<const uint8_t*>(t->data.data());
  if (IsKvHandoffShmDescriptor(data, t->data.size())) {
    // A segment of a context instance on this host: taken (read once) once the request's
    // inputs and the queue bound passed, so a request refused for those can be sent again.
    if (!shm)
      return InvalidArgumentError(
          "context_phase_params names a shared-memory segment, but this model has no "
          "context_phase_shm_dir");
    if (t->data.size() != kKvHandoffShmDescriptorBytes)
      return InvalidArgumentError("context_phase_params: not a KV hand-off segment descriptor");
    out->segment = t->data;
    // Enqueue needs the hand-off to tell a generation-only request from a plain one.
    if (q->request_type != RequestType::kGenerationOnly)
      return InvalidArgumentError("context_phase_params is only read by a generation_only request");
    return OkStatus();
  }
  auto parsed = ParseKvHandoff(data, t->data.size());
  if (!parsed.ok()) return parsed.status();
  q->context_phase = std::make_shared<KvHandoff>(std::move(parsed).value());
  return OkStatus();
}

Status TakeHandoffSegment(KvHandoffShm& shm, const std::string& descriptor, Request* q) {
  auto segment = shm.Take(reinterpret_cast<const uint8_t*>(descriptor.data()), descriptor.size());
  if (!segment.ok()) return segment.status();
  auto parsed = ParseKvHandoff(segment->data(), segment->size());
  if (!parsed.ok()) return parsed.status();
  q->context_phase = std::make_shared<KvHandoff>(std::move(parsed).value());
  return OkStatus();
}

InferTensor ContextPhaseOutput(const KvHandoff& handoff, KvHandoffShm* shm) {
  // Serialized here, on the serving thread (not on the engine thread), straight into the
  // segment or the tensor.
  InferTensor t;
  t.name = "context_phase_params";
  t.dtype = inference::TYPE_UINT8;
  const size_t size = KvHandoffSerializedSize(handoff);
  if (shm) {
    auto descriptor = shm->Write(size, [&](uint8_t* out) { SerializeKvHandoffTo(handoff, out); });
    if (descriptor.ok() && descriptor->has_value()) {
      t.data = std::move(**descriptor);
      t.shape = {1, static_cast<int64_t>(t.data.size())};
      return t;
    }
    // No room (the folder holds context_phase_shm_max_bytes, or its filesystem is full) or an
    // I/O error: the bytes go inline, which every generation instance reads.
    if (!descriptor.ok()) {
      INFLIGHT_LOG(kWarning) << descriptor.status().message() << "; sent inline";
    }
  }
  t.data.resize(size);
  SerializeKvHandoffTo(handoff, reinterpret_cast<uint8_t*>(t.data.data()));
  t.shape = {1, static_cast<int64_t>(size)};
  return t;
}

}  // namespace inflight::serving
