// KV cache events over gRPC (serving/proto/kv_events.proto, service inflight.KvCacheEvents):
// the HTTP form's data (frontends/kv_events_http.h) for routers that speak gRPC. Events with
// follow stream new events as they come: one poller thread for every open stream checks each
// every 100 ms and writes to those that are not still writing (a slow reader holds at most one
// response, never the engine); at most 64 such streams. Statistics group. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "frontends/access.h"
#include "kv_events.grpc.pb.h"
#include "serving/server.h"

namespace inflight::frontends {

class KvEventsService final : public inflight::KvCacheEvents::CallbackService {
 public:
  static constexpr size_t kMaxStreams = 64;
  static constexpr std::chrono::milliseconds kPeriod{100};

  KvEventsService(const serving::Server* server, const AccessPolicy* access);
  ~KvEventsService() override;
  // Ends the open streams (before the gRPC server shuts down).
  void Shutdown();

  grpc::ServerWriteReactor<KvEventsResponse>* Events(grpc::CallbackServerContext* ctx,
                                                     const KvEventsRequest* request) override;
  grpc::ServerUnaryReactor* Blocks(grpc::CallbackServerContext* ctx, const KvBlocksRequest* request,
                                   KvBlocksResponse* response) override;

  class Stream;

 private:
  friend class Stream;
  void Poll();
  void Remove(Stream* s);

  const serving::Server* server_;
  const AccessPolicy& access_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::set<Stream*> streams_;  // following; under mu_
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace inflight::frontends
