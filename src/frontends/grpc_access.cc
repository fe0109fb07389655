#include "frontends/grpc_access.h"

#include <optional>
#include <vector>

#include "tokenizer/utf8.h"

namespace inflight::frontends {
namespace {

enum ServingStatus { kServing = 1, kNotServing = 2, kServiceUnknown = 3 };

// HealthCheckRequest.service; nullopt for bytes that are not a well-formed message.
std::optional<std::string> ParseService(const std::string& b) {
  std::string service;
  size_t i = 0;
  auto varint = [&](uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (i >= b.size()) return false;
      const uint8_t c = static_cast<uint8_t>(b[i++]);
      *v |= static_cast<uint64_t>(c & 0x7f) << shift;
      if (!(c & 0x80)) return true;
    }
    return false;
  };
  while (i < b.size()) {
    uint64_t tag = 0, v = 0;
    if (!varint(&tag)) return std::nullopt;
    switch (tag & 7) {
      case 0:
        if (!varint(&v)) return std::nullopt;
        break;
      case 1:
        if (b.size() - i < 8) return std::nullopt;
        i += 8;
        break;
      case 5:
        if (b.size() - i < 4) return std::nullopt;
        i += 4;
        break;
      case 2:
        if (!varint(&v) || v > b.size() - i) return std::nullopt;
        if ((tag >> 3) == 1) service = b.substr(i, v);
        i += v;
        break;
      default:
        return std::nullopt;
    }
  }
  return service;
}

}  // namespace

// The caller's tenant, or the status that refuses it: UNAUTHENTICATED without a valid key,
// PERMISSION_DENIED for a key without the right to the group. No detail either way.
std::variant<std::string, grpc::Status> AuthorizeGrpc(const AccessPolicy& access,
                                                      serving::ApiGroup group,
                                                      const grpc::ServerContextBase& ctx,
                                                      bool server_probe) {
  const auto& md = ctx.client_metadata();
  const auto lookup = [&md](std::string_view name) -> std::optional<std::string> {
    auto it = md.find(grpc::string_ref(name.data(), name.size()));
    if (it == md.end()) return std::nullopt;
    return std::string(it->second.data(), it->second.size());
  };
  const std::string authorization = lookup("authorization").value_or("");
  auto result =
      access.auth->Check(serving::Protocol::kGrpc, group, authorization, lookup, server_probe);
  if (auto* p = std::get_if<serving::Principal>(&result)) {
    // "ipv4:10.0.0.1:5000" / "ipv6:[::1]:5000": the bare address, as HTTP names it, so one
    // client is one tenant over both protocols.
    std::string peer = ctx.peer();
    if (const size_t colon = peer.rfind(':'); colon != std::string::npos && colon > peer.find(':'))
      peer.resize(colon);
    if (peer.rfind("ipv4:", 0) == 0) peer.erase(0, 5);
    if (peer.rfind("ipv6:[", 0) == 0 && peer.back() == ']') peer = peer.substr(6, peer.size() - 7);
    return TenantOf(*p, peer);
  }
  if (std::get<serving::AuthFailure>(result) == serving::AuthFailure::kForbidden) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "forbidden");
  }
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "unauthenticated");
}

class HealthService::Call final : public grpc::ServerGenericBidiReactor {
 public:
  Call(HealthService* owner, grpc::GenericCallbackServerContext* ctx) : owner_(owner) {
    const std::string& method = ctx->method();
    watch_ = method == "/grpc.health.v1.Health/Watch";
    if (!watch_ && method != "/grpc.health.v1.Health/Check") {
      Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, ""));
      return;
    }
    auto who = AuthorizeGrpc(owner_->access_, serving::ApiGroup::kHealth, *ctx,
                             /*server_probe=*/true);
    if (auto* refusal = std::get_if<grpc::Status>(&who)) {
      Finish(*refusal);
      return;
    }
    StartRead(&in_);
  }

  void OnReadDone(bool ok) override {
    std::lock_guard<std::recursive_mutex> lock(owner_->mu_);
    if (read_) return;  // one request per call; more are ignored
    read_ = true;
    if (!ok)
      return Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no HealthCheckRequest"));
    std::vector<grpc::Slice> slices;
    std::string bytes;
    if (in_.Dump(&slices).ok()) {
      for (const auto& sl : slices)
        bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
    }
    const auto service = ParseService(bytes);
    if (!service)
      return Finish(
          grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "malformed HealthCheckRequest"));
    known_ = service->empty() || *service == "inference.GRPCInferenceService";
    if (!watch_) {
      if (!known_) return Finish(grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown service"));
      SetOut(owner_->StatusLocked());
      return StartWriteAndFinish(&out_, grpc::WriteOptions(), grpc::Status::OK);
    }
    if (owner_->shut_down_) return Finish(grpc::Status::OK);
    // Probes need no key: bound what keyless Watch streams can hold open.
    constexpr size_t kMaxWatchers = 1024;
    if (owner_->watchers_.size() >= kMaxWatchers)
      return Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                 "too many grpc.health.v1 Watch streams are open"));
    owner_->watchers_.insert(this);
    NotifyLocked(owner_->StatusLocked());
  }

  // Writes `status` now, or after the write in flight.
  void NotifyLocked(int status) {
    if (ended_) return;
    if (!known_) status = kServiceUnknown;
    if (writing_) {
      pending_ = status;
      return;
    }
    writing_ = true;
    SetOut(status);
    StartWrite(&out_);
  }

  void EndLocked() {
    if (ended_) return;
    ended_ = true;
    owner_->watchers_.erase(this);
    Finish(grpc::Status::OK);
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::recursive_mutex> lock(owner_->mu_);
    writing_ = false;
    if (!ok) return EndLocked();
    if (pending_ >= 0) {
      const int next = pending_;
      pending_ = -1;
      NotifyLocked(next);
    }
  }

  void OnCancel() override {
    std::lock_guard<std::recursive_mutex> lock(owner_->mu_);
    if (watch_ && read_) EndLocked();
  }

  void OnDone() override {
    {
      std::lock_guard<std::recursive_mutex> lock(owner_->mu_);
      owner_->watchers_.erase(this);
    }
    delete this;
  }

 private:
  void SetOut(int status) {
    const char bytes[2] = {0x08, static_cast<char>(status)};
    grpc::Slice slice(bytes, sizeof bytes);
    out_ = grpc::ByteBuffer(&slice, 1);
  }

  HealthService* owner_;
  bool watch_ = false, known_ = true, read_ = false, writing_ = false, ended_ = false;
  int pending_ = -1;
  grpc::ByteBuffer in_, out_;
};

grpc::ServerGenericBidiReactor* HealthService::CreateReactor(
    grpc::GenericCallbackServerContext* ctx) {
  return new Call(this, ctx);
}

int HealthService::StatusLocked() const { return serving_ ? kServing : kNotServing; }

void HealthService::SetServing(bool serving) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  serving_ = serving;
  for (Call* c : watchers_) c->NotifyLocked(StatusLocked());
}

void HealthService::Shutdown() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  shut_down_ = true;
  std::set<Call*> watchers = watchers_;
  for (Call* c : watchers) c->EndLocked();
}

grpc::Status ToGrpc(const Status& s) {
  grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
  switch (s.code()) {
    case StatusCode::kOk:
      return grpc::Status::OK;
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
    case StatusCode::kFailedPrecondition:
      code = grpc::StatusCode::INVALID_ARGUMENT;
      break;
    case StatusCode::kNotFound:
      code = grpc::StatusCode::NOT_FOUND;
      break;
    case StatusCode::kUnimplemented:
      code = grpc::StatusCode::UNIMPLEMENTED;
      break;
    case StatusCode::kResourceExhausted:
    case StatusCode::kUnavailable:
      code = grpc::StatusCode::UNAVAILABLE;
      break;
    case StatusCode::kCancelled:
      code = grpc::StatusCode::CANCELLED;
      break;
    case StatusCode::kInternal:
    case StatusCode::kDataLoss:
      code = grpc::StatusCode::INTERNAL;
      break;
  }
  return grpc::Status(code, ToValidUtf8(s.message()));
}

}  // namespace inflight::frontends
