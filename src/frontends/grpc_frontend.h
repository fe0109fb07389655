// KServe v2 gRPC (inference.GRPCInferenceService) over the serving core: unary RPCs,
// ModelInfer, and the bidirectional ModelStreamInfer with triton_final_response.
#pragma once

#include <memory>
#include <string>

#include "serving/server.h"

namespace grpc {
class Server;
}

namespace inflight::frontends {

class GrpcService;

class GrpcFrontend {
 public:
  GrpcFrontend(serving::Server* server, std::string address, int port);
  ~GrpcFrontend();
  // Returns the bound port (port 0 picks a free one); UNAVAILABLE when it cannot bind.
  StatusOr<int> Start();
  void Stop();

 private:
  serving::Server* server_;
  std::string address_;
  int port_;
  std::unique_ptr<GrpcService> service_;
  std::unique_ptr<grpc::Server> grpc_;
};

}  // namespace inflight::frontends
