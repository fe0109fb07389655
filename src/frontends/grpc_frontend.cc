#include "frontends/grpc_frontend.h"

#include <grpcpp/grpcpp.h>

#include <deque>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "base/output_credit.h"
#include "frontends/grpc_access.h"
#include "frontends/grpc_kv_events.h"
#include "frontends/log_settings.h"
#include "grpc_service.grpc.pb.h"
#include "serving/infer_params.h"
#include "serving/model_config_util.h"
#include "tokenizer/utf8.h"

namespace inflight::frontends {
namespace {

using serving::InferRequest;
using serving::InferResponse;
using serving::InferTensor;

// A ModelStreamInfer call refused before it starts.
class RefusedStream final : public grpc::ServerBidiReactor<inference::ModelInferRequest,
                                                           inference::ModelStreamInferResponse> {
 public:
  explicit RefusedStream(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

template <typename T>
void AppendRaw(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}

// InferTensorContents -> raw little-endian bytes of the declared datatype.
Status ContentsToRaw(const inference::InferTensorContents& c, InferTensor* t) {
  using inference::DataType;
  switch (t->dtype) {
    case inference::TYPE_BOOL:
      for (bool v : c.bool_contents()) AppendRaw<uint8_t>(&t->data, v);
      break;
    case inference::TYPE_INT8:
      for (int32_t v : c.int_contents()) AppendRaw<int8_t>(&t->data, static_cast<int8_t>(v));
      break;
    case inference::TYPE_INT16:
      for (int32_t v : c.int_contents()) AppendRaw<int16_t>(&t->data, static_cast<int16_t>(v));
      break;
    case inference::TYPE_INT32:
      for (int32_t v : c.int_contents()) AppendRaw<int32_t>(&t->data, v);
      break;
    case inference::TYPE_INT64:
      for (int64_t v : c.int64_contents()) AppendRaw<int64_t>(&t->data, v);
      break;
    case inference::TYPE_UINT8:
      for (uint32_t v : c.uint_contents()) AppendRaw<uint8_t>(&t->data, static_cast<uint8_t>(v));
      break;
    case inference::TYPE_UINT16:
      for (uint32_t v : c.uint_contents()) AppendRaw<uint16_t>(&t->data, static_cast<uint16_t>(v));
      break;
    case inference::TYPE_UINT32:
      for (uint32_t v : c.uint_contents()) AppendRaw<uint32_t>(&t->data, v);
      break;
    case inference::TYPE_UINT64:
      for (uint64_t v : c.uint64_contents()) AppendRaw<uint64_t>(&t->data, v);
      break;
    case inference::TYPE_FP32:
      for (float v : c.fp32_contents()) AppendRaw<float>(&t->data, v);
      break;
    case inference::TYPE_FP64:
      for (double v : c.fp64_contents()) AppendRaw<double>(&t->data, v);
      break;
    case inference::TYPE_STRING:
      for (const std::string& v : c.bytes_contents()) serving::AppendBytesElement(&t->data, v);
      break;
    default:
      return InvalidArgumentError("input '" + t->name +
                                  "': " + serving::DataTypeProtocolName(t->dtype) +
                                  " can only be sent in raw_input_contents");
  }
  return OkStatus();
}

// A tensor's shared_memory_* parameters (gRPC form); nullopt when it names no region.
StatusOr<std::optional<SharedMemoryRef>> SharedMemoryRefOf(
    const google::protobuf::Map<std::string, inference::InferParameter>& params,
    const std::string& tensor) {
  auto region = params.find("shared_memory_region");
  if (region == params.end()) return std::optional<SharedMemoryRef>();
  SharedMemoryRef ref;
  ref.region = region->second.string_param();
  auto number = [&](const char* key, bool required, uint64_t* out) -> Status {
    auto it = params.find(key);
    if (it == params.end()) {
      return required ? InvalidArgumentError("'" + tensor + "': shared_memory_region needs " + key)
                      : OkStatus();
    }
    if (it->second.has_int64_param() && it->second.int64_param() >= 0) {
      *out = static_cast<uint64_t>(it->second.int64_param());
    } else if (it->second.has_uint64_param()) {
      *out = it->second.uint64_param();
    } else {
      return InvalidArgumentError("'" + tensor + "': " + key + " must be a non-negative integer");
    }
    return OkStatus();
  };
  Status s = number("shared_memory_byte_size", true, &ref.byte_size);
  if (s.ok()) s = number("shared_memory_offset", false, &ref.offset);
  if (!s.ok()) return s;
  return std::optional<SharedMemoryRef>(ref);
}

StatusOr<InferRequest> FromProto(const inference::ModelInferRequest& p,
                                 const SharedMemoryRegistry& shm) {
  InferRequest r;
  r.model_name = p.model_name();
  if (!p.model_version().empty()) {
    if (p.model_version().find_first_not_of("0123456789") != std::string::npos ||
        p.model_version().size() > 18) {
      return InvalidArgumentError("model version '" + p.model_version() + "' is not a number");
    }
    r.model_version = std::stoll(p.model_version());
  }
  r.id = p.id();
  for (const auto& [k, v] : p.parameters()) {
    if (auto value = serving::ParamFromProto(v)) r.parameters[k] = *value;
  }
  const bool raw = p.raw_input_contents_size() > 0;
  if (raw && p.raw_input_contents_size() != p.inputs_size()) {
    return InvalidArgumentError("expected " + std::to_string(p.inputs_size()) +
                                " raw_input_contents, got " +
                                std::to_string(p.raw_input_contents_size()));
  }
  for (int i = 0; i < p.inputs_size(); ++i) {
    const auto& in = p.inputs(i);
    InferTensor t;
    t.name = in.name();
    t.dtype = serving::DataTypeFromProtocolName(in.datatype());
    if (t.dtype == inference::TYPE_INVALID) {
      return InvalidArgumentError("input '" + t.name + "' has an unknown datatype '" +
                                  in.datatype() + "'");
    }
    for (int64_t d : in.shape()) {
      if (d < 0)
        return InvalidArgumentError("input '" + t.name +
                                    "': shape must hold non-negative integers");
      t.shape.push_back(d);
    }
    auto shm_ref = SharedMemoryRefOf(in.parameters(), t.name);
    if (!shm_ref.ok()) return shm_ref.status();
    if (shm_ref->has_value()) {
      auto data = shm.Read((*shm_ref)->region, (*shm_ref)->offset, (*shm_ref)->byte_size);
      if (!data.ok()) return data.status();
      t.data = std::move(data).value();
    } else if (raw) {
      if (in.has_contents()) {
        return InvalidArgumentError(
            "contents field must not be specified when using raw_input_contents for '" + t.name +
            "'");
      }
      t.data = p.raw_input_contents(i);
    } else {
      Status s = ContentsToRaw(in.contents(), &t);
      if (!s.ok()) return s;
    }
    r.inputs.push_back(std::move(t));
  }
  for (const auto& out : p.outputs()) r.requested_outputs.push_back(out.name());
  return r;
}

// Requested outputs that go to shared memory, by name.
StatusOr<std::map<std::string, SharedMemoryRef>> SharedMemoryOutputs(
    const inference::ModelInferRequest& p) {
  std::map<std::string, SharedMemoryRef> out;
  for (const auto& o : p.outputs()) {
    auto ref = SharedMemoryRefOf(o.parameters(), o.name());
    if (!ref.ok()) return ref.status();
    if (ref->has_value()) out[o.name()] = **ref;
  }
  return out;
}

// Writes the outputs that go to shared memory there.
Status WriteSharedMemoryOutputs(const InferResponse& r,
                                const std::map<std::string, SharedMemoryRef>& refs,
                                const SharedMemoryRegistry& shm) {
  for (const InferTensor& t : r.outputs) {
    auto it = refs.find(t.name);
    if (it == refs.end()) continue;
    Status s = shm.Write(it->second.region, it->second.offset, it->second.byte_size, t.data);
    if (!s.ok()) return s;
  }
  return OkStatus();
}

// Outputs in `shm_outputs` carry their region parameters and an empty raw entry (their
// bytes are in shared memory), keeping raw_output_contents aligned with outputs.
void ToProto(const InferResponse& r, inference::ModelInferResponse* p,
             const std::map<std::string, SharedMemoryRef>& shm_outputs = {}) {
  p->set_model_name(r.model_name);
  p->set_model_version(r.model_version);
  p->set_id(r.id);
  for (const auto& [k, v] : r.parameters) serving::ParamToProto(v, &(*p->mutable_parameters())[k]);
  for (const InferTensor& t : r.outputs) {
    auto* o = p->add_outputs();
    o->set_name(t.name);
    o->set_datatype(serving::DataTypeProtocolName(t.dtype));
    for (int64_t d : t.shape) o->add_shape(d);
    if (auto shm = shm_outputs.find(t.name); shm != shm_outputs.end()) {
      (*o->mutable_parameters())["shared_memory_region"].set_string_param(shm->second.region);
      if (shm->second.offset != 0)
        (*o->mutable_parameters())["shared_memory_offset"].set_uint64_param(shm->second.offset);
      (*o->mutable_parameters())["shared_memory_byte_size"].set_uint64_param(t.data.size());
      p->add_raw_output_contents();
    } else {
      p->add_raw_output_contents(t.data);
    }
  }
}

// The reactor of one ModelInfer call: the request runs in the serving core and the call
// finishes from whichever thread delivers its final response; a client cancel cancels it.
class InferReactor final : public grpc::ServerUnaryReactor {
 public:
  InferReactor(serving::Server* s, InferRequest r, inference::ModelInferResponse* out,
               const SharedMemoryRegistry& shm, std::map<std::string, SharedMemoryRef> shm_outputs,
               std::shared_ptr<serving::TenantLimits::Ticket> ticket)
      : out_(out), cancel_(r.cancel), shm_(shm), shm_outputs_(std::move(shm_outputs)) {
    s->Infer(std::move(r), HoldUntilFinal(std::move(ticket), [this](InferResponse&& resp) {
               OnResponse(std::move(resp));
             }));
  }
  void OnCancel() override { cancel_->Cancel(); }
  void OnDone() override { delete this; }

 private:
  void OnResponse(InferResponse&& resp) {
    const bool final = resp.final;
    if (!resp.error.ok() && error_.ok()) error_ = resp.error;
    if (!resp.empty() && !data_) data_ = std::move(resp);
    if (!final) return;
    if (!error_.ok()) return Finish(ToGrpc(error_));
    // Only an empty final response (e.g. the answer to a `stop` request): the reference
    // answers with no tensors.
    const InferResponse& answer = data_ ? *data_ : resp;
    const Status written = WriteSharedMemoryOutputs(answer, shm_outputs_, shm_);
    if (!written.ok()) return Finish(ToGrpc(written));
    ToProto(answer, out_, shm_outputs_);
    Finish(grpc::Status::OK);
  }

  inference::ModelInferResponse* out_;
  std::shared_ptr<serving::CancelToken> cancel_;
  const SharedMemoryRegistry& shm_;
  const std::map<std::string, SharedMemoryRef> shm_outputs_;
  Status error_;
  std::optional<InferResponse> data_;
};

// A ModelStreamInfer call whose client reads nothing pauses its requests at half the unread
// bound; paused this long, they end with an error (they hold KV-cache blocks).
constexpr std::chrono::milliseconds kStreamStallLimit{5000};

// The reactor of one ModelStreamInfer call. Requests are read one at a time and run
// concurrently; their responses are written in arrival order, one write in flight. Output
// the client has not read is bounded: past half the bound the engine pauses the call's
// requests until the client reads (back-pressure; paused for kStreamStallLimit, a request
// ends with a "too slowly" error); past the bound (output that was already on its way) its
// requests are cancelled and the call ends with RESOURCE_EXHAUSTED. The call ends once the
// client stopped sending and every request has its final response written (or the call was
// cancelled).

class StreamReactor final : public grpc::ServerBidiReactor<inference::ModelInferRequest,
                                                           inference::ModelStreamInferResponse> {
 public:
  StreamReactor(serving::Server* s, const SharedMemoryRegistry& shm, size_t max_unread_bytes,
                const AccessPolicy* access, std::string tenant)
      : s_(s),
        shm_(shm),
        max_unread_(max_unread_bytes),
        credit_(std::make_shared<OutputCredit>(static_cast<int64_t>(max_unread_bytes / 2),
                                               kStreamStallLimit)),
        access_(*access),
        tenant_(std::move(tenant)) {
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      std::lock_guard<std::mutex> lock(mu_);
      reads_done_ = true;
      return MaybeFinishLocked();
    }
    bool empty_final = false;
    if (auto it = request_.parameters().find("triton_enable_empty_final_response");
        it != request_.parameters().end()) {
      empty_final = it->second.bool_param();
    }
    auto r = FromProto(request_, shm_);
    const std::string id = request_.id(), model = request_.model_name(),
                      version = request_.model_version();
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++outstanding_;
      if (r.ok()) cancels_.push_back(r->cancel);
    }
    auto push = [this, empty_final](InferResponse&& resp) { Push(std::move(resp), empty_final); };
    Admitted admitted;
    if (r.ok()) {
      // Each request of the stream is admitted on its own; a refused one gets its error
      // response and the stream goes on.
      admitted = AdmitInference(access_, tenant_, &*r);
      if (!admitted.ticket) {
        r = ResourceExhaustedError(admitted.reason + " (retry after " +
                                   std::to_string(admitted.retry_after_s) + " s)");
      }
    }
    if (!r.ok()) {
      InferResponse e = serving::ErrorResponse(r.status());
      e.id = id;
      e.model_name = model;
      e.model_version = version;
      push(std::move(e));
    } else {
      // Back-pressure: the engine pauses the call's requests while the call's unread output
      // (counted in credit_ until written) is past half the bound.
      r->output_credit = credit_;
      s_->Infer(std::move(r).value(), HoldUntilFinal(std::move(admitted.ticket), push));
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (!finished_) StartRead(&request_);
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    const size_t written = queue_.front().ByteSizeLong();
    unread_ -= written;
    credit_->Release(static_cast<int64_t>(written));
    queue_.pop_front();
    if (!ok) {
      // The client is gone: nothing more can be written.
      broken_ = true;
      queue_.clear();
      credit_->Release(static_cast<int64_t>(unread_));
      unread_ = 0;
      CancelAllLocked();
    }
    WriteNextLocked();
    MaybeFinishLocked();
  }

  void OnCancel() override {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    broken_ = true;
    CancelAllLocked();
    MaybeFinishLocked();
  }

  void OnDone() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    delete this;
  }

 private:
  void Push(InferResponse&& resp, bool empty_final) {
    inference::ModelStreamInferResponse out;
    const bool final = resp.final;
    if (!resp.error.ok()) {
      out.set_error_message(ToValidUtf8(resp.error.message()));
      out.mutable_infer_response()->set_id(resp.id);
      out.mutable_infer_response()->set_model_name(resp.model_name);
      out.mutable_infer_response()->set_model_version(resp.model_version);
    } else {
      ToProto(resp, out.mutable_infer_response());
    }
    (*out.mutable_infer_response()->mutable_parameters())["triton_final_response"].set_bool_param(
        final);
    std::lock_guard<std::mutex> lock(mu_);
    if (!resp.error.ok() && !overflowed_ && credit_->stalled(OutputCredit::Clock::now())) {
      // The engine ended a request the client left paused too long: the call ends as past
      // the bound.
      overflowed_ = true;
      CancelAllLocked();
    }
    const bool keep = !resp.empty() || !resp.error.ok() || empty_final;
    if (keep && !broken_) {
      const size_t bytes = out.ByteSizeLong();
      unread_ += bytes;
      credit_->Add(static_cast<int64_t>(bytes));
      queue_.push_back(std::move(out));
      if (unread_ > max_unread_ && !overflowed_) {
        overflowed_ = true;
        CancelAllLocked();
      }
      WriteNextLocked();
    }
    if (final) --outstanding_;
    MaybeFinishLocked();
  }

  void WriteNextLocked() {
    if (writing_ || queue_.empty() || finished_) return;
    writing_ = true;
    StartWrite(&queue_.front());
  }

  void CancelAllLocked() {
    for (auto& c : cancels_) c->Cancel();  // CancelToken callbacks only enqueue cancels
  }

  void MaybeFinishLocked() {
    if (finished_ || writing_ || outstanding_ > 0 || !queue_.empty()) return;
    if (!reads_done_ && !cancelled_ && !overflowed_) return;
    finished_ = true;
    if (overflowed_) {
      Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                          "the client read the stream too slowly (more than " +
                              std::to_string(max_unread_) +
                              " bytes unread); its requests were cancelled"));
    } else {
      Finish(cancelled_ ? grpc::Status::CANCELLED : grpc::Status::OK);
    }
  }

  serving::Server* s_;
  const SharedMemoryRegistry& shm_;
  const size_t max_unread_;
  const std::shared_ptr<OutputCredit> credit_;  // the call's unread output, for back-pressure
  const AccessPolicy& access_;
  const std::string tenant_;
  inference::ModelInferRequest request_;  // the read in flight
  std::mutex mu_;
  std::deque<inference::ModelStreamInferResponse> queue_;  // front: the write in flight
  size_t unread_ = 0;
  int64_t outstanding_ = 0;  // requests without their final response
  std::vector<std::shared_ptr<serving::CancelToken>> cancels_;
  bool writing_ = false, reads_done_ = false, cancelled_ = false, broken_ = false,
       overflowed_ = false;
  bool finished_ = false, done_ = false;
};

}  // namespace

// KServe over gRPC's callback API: no call holds a thread while it waits for the engine.
class GrpcService final : public inference::GRPCInferenceService::CallbackService {
 public:
  GrpcService(serving::Server* s, SharedMemoryRegistry* shm, size_t max_stream_buffer_bytes,
              AccessPolicy access)
      : s_(s),
        shm_(*shm),
        max_stream_buffer_(max_stream_buffer_bytes),
        access_(std::move(access)) {}

  // A reactor already finished with UNAUTHENTICATED / PERMISSION_DENIED, or null when the
  // caller may go on (its tenant in *tenant).
  grpc::ServerUnaryReactor* Refuse(grpc::CallbackServerContext* ctx, serving::ApiGroup group,
                                   std::string* tenant = nullptr, bool server_probe = false) {
    auto who = AuthorizeGrpc(access_, group, *ctx, server_probe);
    if (auto* t = std::get_if<std::string>(&who)) {
      if (tenant) *tenant = std::move(*t);
      return nullptr;
    }
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(std::get<grpc::Status>(who));
    return reactor;
  }

  template <typename Fn>
  static grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* ctx, Fn fn) {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(fn());
    return reactor;
  }

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* ctx,
                                       const inference::ServerLiveRequest*,
                                       inference::ServerLiveResponse* r) override {
    if (auto* refused = Refuse(ctx, serving::ApiGroup::kHealth, nullptr, /*server_probe=*/true))
      return refused;
    return Unary(ctx, [&] {
      r->set_live(s_->live());
      return grpc::Status::OK;
    });
  }
  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* ctx,
                                        const inference::ServerReadyRequest*,
                                        inference::ServerReadyResponse* r) override {
    if (auto* refused = Refuse(ctx, serving::ApiGroup::kHealth, nullptr, /*server_probe=*/true))
      return refused;
    return Unary(ctx, [&] {
      r->set_ready(s_->ready());
      return grpc::Status::OK;
    });
  }
  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* ctx,
                                       const inference::ModelReadyRequest* q,
                                       inference::ModelReadyResponse* r) override {
    if (auto* refused = Refuse(ctx, serving::ApiGroup::kHealth)) return refused;
    return Unary(ctx, [&] {
      r->set_ready(s_->ModelReady(q->name(), q->version()));
      return grpc::Status::OK;
    });
  }
  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* ctx,
                                           const inference::ServerMetadataRequest*,
                                           inference::ServerMetadataResponse* r) override {
    if (auto* refused = Refuse(ctx, serving::ApiGroup::kMetadata)) return refused;
    return Unary(ctx, [&] {
      r->set_name("inflight");
      r->set_version("0.4.0");
      for (const char* e : {"model_repository", "model_configuration", "system_shared_memory",
                            "binary_tensor_data", "parameters", "statistics", "trace", "logging"}) {
        r->add_extensions(e);
      }
      return grpc::Status::OK;
    });
  }
  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* ctx,
                                          const inference::ModelMetadataRequest* q,
                                          inference::ModelMetadataResponse* r) override {
    if (auto* refused = Refuse(ctx, serving::ApiGroup::kMetadata)) return refused;
    return Unary(ctx, [&] {
      auto m = s_->GetModelMetadata(q->name(), q->version());
      if (!m.ok()) return ToGrpc(m.status());
      r->set_name(m->name);
      for (const auto& v : m->versions) r->add_versions(v);
      r->set_platform(m->platform);
      auto add = [](const serving::TensorMetadata& t,
                    inference::ModelMetadataResponse::TensorMetadata* x) {
        x->set_name(t.name);
        x->set_datatype(t.datatype);
        for (int64_t d : t.shape) x->add_shape(d);
      };
      for (const auto& t : m->inputs) add(t, r->add_inputs());
      for (const auto& t : m->outputs) add(t, r->add_outputs());
      return grpc::Status::OK;
    });
  }
  grpc::ServerUnaryReactor* ModelConfig(grpc::CallbackServerContext* ctx,
                                        const inference::ModelConfigRequest* q,
                                        inference::ModelConfigResponse* r) override {
    if (auto* refused = Refuse(ctx, serving::ApiGroup::kModelConfig)) return refused;
    return Unary(ctx, [&] {
      auto c = s_->GetModelConfig(q->name(), q->version());
      if (!c.ok()) return ToGrpc(c.status());
      *r->mutable_config() = *c;
      return grpc::Status::OK;
    });
  }
  grpc::ServerUnaryReactor* ModelStatistics(grpc::CallbackServerContext* ctx,
                                            const inference::ModelStatisticsRequest* q,
                                            inference::ModelStatisticsResponse* r) override {
    if (auto* refused = Refuse(ctx, serving::ApiGroup::kStatistics)) return refused;
    return Unary(ctx, [&] { return Statistics(*q, r); });
  }
  grpc::ServerUnaryReactor* RepositoryIndex(grpc::CallbackServerContext* ctx,
                                            const inference::RepositoryIndexRequest* q,
                                            inference::RepositoryIndexResponse* r) override {
    if (auto* refused = Refuse(ctx, serving::ApiGroup::kModelRepository)) return refused;
    return Unary(ctx, [&] {
      for (const auto& e : s_->RepositoryIndex(q->ready())) {
        auto* m = r->add_models();
        m->set_name(e.name);
        m->set_version(e.version);
        m->set_state(e.state);
        m->set_reason(e.reason);
      }
      return grpc::Status::OK;
    });
  }
  // Loading takes seconds: off gRPC's threads, the call finishes when it is done.
  grpc::ServerUnaryReactor* RepositoryModelLoad(grpc::CallbackServerContext* ctx,
                                                const inference::RepositoryModelLoadRequest* q,
                                                inference::RepositoryModelLoadResponse*) override {
    if (auto* refused = Refuse(ctx, serving::ApiGroup::kModelRepository)) return refused;
    std::optional<std::string> config;
    auto it = q->parameters().find("config");
    if (it != q->parameters().end()) {
      if (it->second.parameter_choice_case() != inference::ModelRepositoryParameter::kStringParam)
        return Unary(ctx, [] {
          return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                              "load parameter 'config' must be a string");
        });
      config = it->second.string_param();
    }
    // The same answer as HTTP's (501 there): Triton's override files are not supported.
    for (const auto& [k, v] : q->parameters()) {
      if (k.rfind("file:", 0) == 0) {
        return Unary(ctx, [&k = k] {
          return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                              "load parameter '" + k + "': file overrides are not supported");
        });
      }
    }
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    std::thread([this, reactor, name = q->model_name(), config] {
      reactor->Finish(ToGrpc(s_->LoadModel(name, config)));
    }).detach();
    return reactor;
  }
  grpc::ServerUnaryReactor* RepositoryModelUnload(
      grpc::CallbackServerContext* ctx, const inference::RepositoryModelUnloadRequest* q,
      inference::RepositoryModelUnloadResponse*) override {
    if (auto* refused = Refuse(ctx, serving::ApiGroup::kModelRepository)) return refused;
    auto it = q->parameters().find("unload_dependents");
    const bool deps = it != q->parameters().end() && it->second.bool_param();
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    std::thread([this, reactor, name = q->model_name(), deps] {
      reactor->Finish(ToGrpc(s_->UnloadModel(name, deps)));
    }).detach();
    return reactor;
  }

  grpc::ServerUnaryReactor* SystemSharedMemoryStatus(
      grpc::CallbackServerContext* ctx, const inference::SystemSharedMemoryStatusRequest* q,
      inference::SystemSharedMemoryStatusResponse* r) override {
    if (auto* refused = Refuse(ctx, serving::ApiGroup::kSharedMemory)) return refused;
    return Unary(ctx, [&] {
      auto st = shm_.GetStatus(q->name());
      if (!st.ok()) return ToGrpc(st.status());
      for (const auto& region : *st) {
        auto& x = (*r->mutable_regions())[region.name];
        x.set_name(region.name);
        x.set_key(region.key);
        x.set_offset(region.offset);
        x.set_byte_size(region.byte_size);
      }
      return grpc::Status::OK;
    });
  }
  grpc::ServerUnaryReactor* SystemSharedMemoryRegister(
      grpc::CallbackServerContext* ctx, const inference::SystemSharedMemoryRegisterRequest* q,
      inference::SystemSharedMemoryRegisterResponse*) override {
    if (auto* refused = Refuse(ctx, serving::ApiGroup::kSharedMemory)) return refused;
    return Unary(ctx, [&] {
      return ToGrpc(shm_.Register(q->name(), q->key(), q->offset(), q->byte_size()));
    });
  }
  grpc::ServerUnaryReactor* SystemSharedMemoryUnregister(
      grpc::CallbackServerContext* ctx, const inference::SystemSharedMemoryUnregisterRequest* q,
      inference::SystemSharedMemoryUnregisterResponse*) override {
    if (auto* refused = Refuse(ctx, serving::ApiGroup::kSharedMemory)) return refused;
    return Unary(ctx, [&] { return ToGrpc(shm_.Unregister(q->name())); });
  }

  // An empty value list clears a model's override of that key (as Triton).
  grpc::ServerUnaryReactor* TraceSetting(grpc::CallbackServerContext* ctx,
                                         const inference::TraceSettingRequest* q,
                                         inference::TraceSettingResponse* r) override {
    if (auto* refused = Refuse(ctx, serving::ApiGroup::kTrace)) return refused;
    return Unary(ctx, [&] {
      if (!q->model_name().empty() && !s_->ModelReady(q->model_name(), "")) {
        return ToGrpc(
            NotFoundError("Request for unknown model: '" + q->model_name() + "' is not found"));
      }
      std::map<std::string, std::optional<std::vector<std::string>>> values;
      for (const auto& [key, v] : q->settings()) {
        if (v.value().empty()) {
          values[key] = std::nullopt;
        } else {
          values[key] = std::vector<std::string>(v.value().begin(), v.value().end());
        }
      }
      if (!values.empty()) {
        const Status s = s_->tracer().Update(q->model_name(), values);
        if (!s.ok()) return ToGrpc(s);
      }
      for (const auto& [key, v] : s_->tracer().Settings(q->model_name())) {
        auto& x = (*r->mutable_settings())[key];
        for (const auto& e : v) x.add_value(e);
      }
      return grpc::Status::OK;
    });
  }

  grpc::ServerUnaryReactor* LogSettings(grpc::CallbackServerContext* ctx,
                                        const inference::LogSettingsRequest* q,
                                        inference::LogSettingsResponse* r) override {
    if (auto* refused = Refuse(ctx, serving::ApiGroup::kLogging)) return refused;
    return Unary(ctx, [&] {
      inflight::LogSettings settings = GetLogSettings();
      for (const auto& [key, v] : q->settings()) {
        LogSettingValue value;
        switch (v.parameter_choice_case()) {
          case inference::LogSettingsRequest::SettingValue::kBoolParam:
            value = v.bool_param();
            break;
          case inference::LogSettingsRequest::SettingValue::kUint32Param:
            value = static_cast<uint64_t>(v.uint32_param());
            break;
          case inference::LogSettingsRequest::SettingValue::kStringParam:
            value = v.string_param();
            break;
          default:
            break;
        }
        const Status s = ApplyLogSetting(&settings, key, value);
        if (!s.ok()) return ToGrpc(s);
      }
      if (!q->settings().empty()) SetLogSettings(settings);
      for (const auto& [key, v] : LogSettingsView(settings)) {
        auto& x = (*r->mutable_settings())[key];
        if (const bool* b = std::get_if<bool>(&v)) x.set_bool_param(*b);
        if (const uint64_t* u = std::get_if<uint64_t>(&v))
          x.set_uint32_param(static_cast<uint32_t>(*u));
        if (const std::string* str = std::get_if<std::string>(&v)) x.set_string_param(*str);
      }
      return grpc::Status::OK;
    });
  }

  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* ctx,
                                       const inference::ModelInferRequest* q,
                                       inference::ModelInferResponse* out) override {
    std::string tenant;
    if (auto* refused = Refuse(ctx, serving::ApiGroup::kInference, &tenant)) return refused;
    auto r = FromProto(*q, shm_);
    if (!r.ok()) return Unary(ctx, [&] { return ToGrpc(r.status()); });
    auto shm_outputs = SharedMemoryOutputs(*q);
    if (!shm_outputs.ok()) return Unary(ctx, [&] { return ToGrpc(shm_outputs.status()); });
    auto config = s_->ModelConfigOf(r->model_name, r->model_version);
    if (!config.ok()) return Unary(ctx, [&] { return ToGrpc(config.status()); });
    if (serving::IsDecoupled(*config)) {
      return Unary(ctx, [] {
        return grpc::Status(
            grpc::StatusCode::UNIMPLEMENTED,
            "ModelInfer RPC doesn't support models with decoupled transaction policy");
      });
    }
    Admitted admitted = AdmitInference(access_, tenant, &*r);
    if (!admitted.ticket) {
      ctx->AddTrailingMetadata("retry-after", std::to_string(admitted.retry_after_s));
      return Unary(
          ctx, [&] { return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, admitted.reason); });
    }
    return new InferReactor(s_, std::move(r).value(), out, shm_, std::move(shm_outputs).value(),
                            std::move(admitted.ticket));
  }

  grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
  ModelStreamInfer(grpc::CallbackServerContext* ctx) override {
    auto who = AuthorizeGrpc(access_, serving::ApiGroup::kInference, *ctx);
    if (auto* refusal = std::get_if<grpc::Status>(&who)) return new RefusedStream(*refusal);
    return new StreamReactor(s_, shm_, max_stream_buffer_, &access_,
                             std::get<std::string>(std::move(who)));
  }

 private:
  grpc::Status Statistics(const inference::ModelStatisticsRequest& q,
                          inference::ModelStatisticsResponse* r) {
    auto st = s_->Statistics(q.name(), q.version());
    if (!st.ok()) return ToGrpc(st.status());
    auto dur = [](const serving::Duration& d, inference::StatisticDuration* p) {
      p->set_count(d.count);
      p->set_ns(d.ns);
    };
    for (const auto& s : *st) {
      auto* m = r->add_model_stats();
      m->set_name(s.name);
      m->set_version(s.version);
      m->set_last_inference(s.last_inference_ms);
      m->set_inference_count(s.inference_count);
      m->set_execution_count(s.execution_count);
      auto* is = m->mutable_inference_stats();
      dur(s.success, is->mutable_success());
      dur(s.fail, is->mutable_fail());
      dur(s.queue, is->mutable_queue());
      dur(s.compute_input, is->mutable_compute_input());
      dur(s.compute_infer, is->mutable_compute_infer());
      dur(s.compute_output, is->mutable_compute_output());
      dur(s.cache_hit, is->mutable_cache_hit());
      dur(s.cache_miss, is->mutable_cache_miss());
      for (const auto& [i, rs] : s.response_stats) {
        auto& x = (*m->mutable_response_stats())[std::to_string(i)];
        dur(rs.compute_infer, x.mutable_compute_infer());
        dur(rs.compute_output, x.mutable_compute_output());
        dur(rs.success, x.mutable_success());
        dur(rs.fail, x.mutable_fail());
        dur(rs.empty_response, x.mutable_empty_response());
        dur(rs.cancel, x.mutable_cancel());
      }
      if (s.batch1_infer.count > 0) {
        auto* b = m->add_batch_stats();
        b->set_batch_size(1);
        dur(s.batch1_input, b->mutable_compute_input());
        dur(s.batch1_infer, b->mutable_compute_infer());
        dur(s.batch1_output, b->mutable_compute_output());
      }
    }
    return grpc::Status::OK;
  }

  serving::Server* s_;
  SharedMemoryRegistry& shm_;
  const size_t max_stream_buffer_;
  const AccessPolicy access_;
};

GrpcFrontend::GrpcFrontend(serving::Server* server, std::string address, int port,
                           SharedMemoryRegistry* shm, size_t max_stream_buffer_bytes,
                           AccessPolicy access, TlsFiles tls)
    : server_(server),
      address_(std::move(address)),
      port_(port),
      shm_(shm),
      max_stream_buffer_bytes_(max_stream_buffer_bytes),
      access_(std::move(access)),
      tls_(std::move(tls)) {}

GrpcFrontend::~GrpcFrontend() { Stop(); }

namespace {

StatusOr<std::string> ReadPem(const std::string& what, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return InvalidArgumentError("gRPC TLS: cannot read the " + what + " '" + path + "'");
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (data.find("-----BEGIN") == std::string::npos)
    return InvalidArgumentError("gRPC TLS: the " + what + " '" + path + "' is not PEM");
  return data;
}

}  // namespace

StatusOr<int> GrpcFrontend::Start() {
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (tls_.enabled()) {
    if (tls_.cert_file.empty() || tls_.key_file.empty()) {
      return InvalidArgumentError("gRPC TLS needs both a certificate and a private key file");
    }
    grpc::SslServerCredentialsOptions ssl;
    auto cert = ReadPem("certificate", tls_.cert_file);
    if (!cert.ok()) return cert.status();
    auto key = ReadPem("private key", tls_.key_file);
    if (!key.ok()) return key.status();
    ssl.pem_key_cert_pairs.push_back({*key, *cert});
    if (!tls_.client_ca_file.empty()) {
      auto ca = ReadPem("client CA", tls_.client_ca_file);
      if (!ca.ok()) return ca.status();
      ssl.pem_root_certs = *ca;
      ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
    }
    credentials = grpc::SslServerCredentials(ssl);
  }
  service_ = std::make_unique<GrpcService>(server_, shm_, max_stream_buffer_bytes_, access_);
  // grpc.health.v1 (Kubernetes gRPC probes), behind the same credentials: SERVING until drained.
  health_ = std::make_unique<HealthService>(&access_);
  kv_events_ = std::make_unique<KvEventsService>(server_, &access_);
  grpc::ServerBuilder builder;
  int bound = 0;
  builder.AddListeningPort(address_ + ":" + std::to_string(port_), credentials, &bound);
  builder.RegisterService(service_.get());
  builder.RegisterService(kv_events_.get());
  builder.RegisterCallbackGenericService(health_.get());
  // tritonclient's compression_algorithm (with --grpc-allow-compression): gzip/deflate
  // requests are decompressed, and responses are compressed at
  // --grpc-infer-response-compression-level (Triton's option; none by default) with an
  // algorithm the client accepts (its grpc-accept-encoding). Without it both algorithms are
  // off: a compressed request is refused before it is inflated (see set_allow_compression).
  builder.SetCompressionAlgorithmSupportStatus(GRPC_COMPRESS_GZIP, allow_compression_);
  builder.SetCompressionAlgorithmSupportStatus(GRPC_COMPRESS_DEFLATE, allow_compression_);
  if (allow_compression_ && response_compression_level_ != GRPC_COMPRESS_LEVEL_NONE)
    builder.SetDefaultCompressionLevel(response_compression_level_);
  builder.SetMaxReceiveMessageSize(64 << 20);
  builder.SetMaxSendMessageSize(256 << 20);
  grpc_ = builder.BuildAndStart();
  if (!grpc_ || bound == 0)
    return UnavailableError("gRPC: cannot bind " + address_ + ":" + std::to_string(port_));
  return bound;
}

void GrpcFrontend::SetNotServing() {
  if (health_) health_->SetServing(false);
}

void GrpcFrontend::Stop() {
  if (grpc_) {
    if (health_)
      health_->Shutdown();  // open Watch calls end, so the shutdown need not wait them out
    if (kv_events_) kv_events_->Shutdown();  // and open KV event streams
    grpc_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
    grpc_.reset();
  }
}

}  // namespace inflight::frontends
