// KServe v2 gRPC (inference.GRPCInferenceService) over the serving core on gRPC's callback
// API (open calls hold no thread): unary RPCs, ModelInfer, and the bidirectional
// ModelStreamInfer with triton_final_response and a bound on output the client has not read.
#pragma once

#include <grpc/impl/codegen/compression_types.h>

#include <memory>
#include <string>

#include "frontends/access.h"
#include "frontends/http_server.h"
#include "frontends/shared_memory.h"
#include "serving/server.h"

namespace grpc {
class Server;
}

namespace inflight::frontends {

class GrpcService;
class HealthService;
class KvEventsService;

class GrpcFrontend {
 public:
  // max_stream_buffer_bytes: unread output one ModelStreamInfer call may hold; past it the
  // call's requests are cancelled and it ends with RESOURCE_EXHAUSTED.
  // shm: the system shared-memory regions (outlives the frontend; shared with HTTP).
  // access: keys, restricted groups and tenant limits for every RPC (grpc.health.v1 too).
  // tls: TLS (mutual with a client CA) instead of plaintext.
  GrpcFrontend(serving::Server* server, std::string address, int port, SharedMemoryRegistry* shm,
               size_t max_stream_buffer_bytes = 8 << 20, AccessPolicy access = {},
               TlsFiles tls = {});
  ~GrpcFrontend();
  // Returns the bound port (port 0 picks a free one); UNAVAILABLE when it cannot bind,
  // INVALID_ARGUMENT for TLS files that cannot be read.
  StatusOr<int> Start();
  // Compression of responses (before Start): none, or an algorithm the client accepts at
  // this level (Triton's --grpc-infer-response-compression-level).
  void set_response_compression_level(grpc_compression_level level) {
    response_compression_level_ = level;
  }
  // gzip/deflate on the gRPC port at all (before Start). Off by default: the gRPC library
  // (Debian 12's 1.51) checks a compressed request's size before inflating it, never after,
  // so one 64 MiB message could inflate to tens of GiB; a client sending compressed requests
  // to a server without it gets UNIMPLEMENTED. The same switch allows compressed responses.
  void set_allow_compression(bool allow) { allow_compression_ = allow; }
  // grpc.health.v1 answers NOT_SERVING from now on (the server is draining).
  void SetNotServing();
  void Stop();

 private:
  serving::Server* server_;
  std::string address_;
  int port_;
  SharedMemoryRegistry* shm_;
  size_t max_stream_buffer_bytes_;
  AccessPolicy access_;
  TlsFiles tls_;
  grpc_compression_level response_compression_level_ = GRPC_COMPRESS_LEVEL_NONE;
  bool allow_compression_ = false;
  std::unique_ptr<GrpcService> service_;
  std::unique_ptr<HealthService> health_;
  std::unique_ptr<KvEventsService> kv_events_;  // inflight.KvCacheEvents
  std::unique_ptr<grpc::Server> grpc_;          // last: destroyed first, while the services live
};

}  // namespace inflight::frontends
