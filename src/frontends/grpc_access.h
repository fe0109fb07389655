// The gRPC side of access control: the credentials check every RPC makes, and the standard
// grpc.health.v1.Health service written so that it makes it too (gRPC's built-in one cannot).
#pragma once

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>

#include <mutex>
#include <set>
#include <string>
#include <variant>

#include "base/status.h"
#include "frontends/access.h"

namespace inflight::frontends {

// The caller's tenant, or the status that refuses it: UNAUTHENTICATED without a valid key,
// PERMISSION_DENIED for a key without the right to the group. No detail either way.
// `server_probe`: the server's liveness/readiness (not a model's), open without a key unless
// the server says otherwise (serving::AuthOptions::health_needs_key).
// The gRPC status of a project status (INVALID_ARGUMENT, NOT_FOUND, UNAVAILABLE, ...), its
// message made valid UTF-8.
grpc::Status ToGrpc(const Status& s);

std::variant<std::string, grpc::Status> AuthorizeGrpc(const AccessPolicy& access,
                                                      serving::ApiGroup group,
                                                      const grpc::ServerContextBase& ctx,
                                                      bool server_probe = false);

// grpc.health.v1.Health (Check and Watch) on the generic API; every other method no service
// implements ends UNIMPLEMENTED. Its messages are one-field protobufs, encoded here:
// HealthCheckRequest {string service = 1}, HealthCheckResponse {enum status = 1}.
class HealthService final : public grpc::CallbackGenericService {
 public:
  explicit HealthService(const AccessPolicy* access) : access_(*access) {}
  ~HealthService() override { Shutdown(); }

  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* ctx) override;
  // SERVING / NOT_SERVING from now on; Watch calls hear of it.
  void SetServing(bool serving);
  // Ends every Watch call (before the server shuts down).
  void Shutdown();

 private:
  class Call;
  int StatusLocked() const;

  const AccessPolicy& access_;
  // Recursive: gRPC may run a reaction (OnDone, OnWriteDone) inline from Finish or StartWrite,
  // which are called with it held.
  std::recursive_mutex mu_;
  bool serving_ = true, shut_down_ = false;
  std::set<Call*> watchers_;
};

}  // namespace inflight::frontends
