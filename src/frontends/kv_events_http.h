// KV cache events over HTTP for a router in front of many replicas (admin group: statistics):
//   GET /v2/models/{m}/kv_events?after=ID&max=N   events after ID (ascending, at most N,
//       default 1000); "gap": true when some were dropped from the bounded buffer (the router
//       resyncs from kv_blocks), "last_id", "dropped"
//   GET /v2/models/{m}/kv_events?after=ID&stream=true   the same as server-sent events: one
//       message per batch of new events, polled every 100 ms by one thread for every stream;
//       a client that leaves or reads too slowly is dropped (its reply's bound, never the
//       engine's time) and resumes with after=its last id, or resyncs after a gap; an idle
//       stream gets a ": keep-alive" comment every second
//   GET /v2/models/{m}/kv_blocks                  every reusable block now, with the id of the
//       last event reflected ("last_event_id")
// Hashes are the cache's 64-bit prefix keys, as decimal strings (JSON numbers lose bits).
// Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "frontends/http_server.h"
#include "serving/server.h"

namespace inflight::frontends {

HttpResponse KvEventsResponse(const serving::Server& server, const std::string& model,
                              const std::string& version, const std::string& query);
HttpResponse KvBlocksResponse(const serving::Server& server, const std::string& model,
                              const std::string& version);

// Whether a kv_events query asks for a stream (stream=true).
bool KvEventsStreamed(const std::string& query);

// The streamed form's subscribers and their poller. Thread-safe.
class KvEventStreams {
 public:
  static constexpr size_t kMaxStreams = 64;
  static constexpr std::chrono::milliseconds kPeriod{100};

  explicit KvEventStreams(const serving::Server* server) : server_(server) {}
  ~KvEventStreams() { Stop(); }
  // Answers an error at once (bad query, unknown model, events off), else starts the stream.
  void Start(const std::shared_ptr<HttpReply>& reply, const std::string& model,
             const std::string& version, const std::string& query);
  // Ends every stream and the poller.
  void Stop();

 private:
  struct Stream {
    std::shared_ptr<HttpReply> reply;
    std::string model, version;
    uint64_t cursor = 0;
    std::chrono::steady_clock::time_point last_write;
  };
  // An idle stream gets a comment this often: a router tells a quiet replica from a dead
  // connection, and the server finds clients that left.
  static constexpr std::chrono::seconds kKeepAlive{1};
  void Poll();
  // One batch for `s` as an SSE message ("" when nothing is new); false: end the stream.
  bool Next(Stream& s, std::string* message) const;

  const serving::Server* server_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Stream> streams_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace inflight::frontends
