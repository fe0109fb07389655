// KV cache events over HTTP for a router in front of many replicas (admin group: statistics):
//   GET /v2/models/{m}/kv_events?after=ID&max=N   events after ID (ascending, at most N,
//       default 1000); "gap": true when some were dropped from the bounded buffer (the router
//       resyncs from kv_blocks), "last_id", "dropped"
//   GET /v2/models/{m}/kv_blocks                  every reusable block now, with the id of the
//       last event reflected ("last_event_id")
// Hashes are the cache's 64-bit prefix keys, as decimal strings (JSON numbers lose bits).
// Thread-safe.
#pragma once

#include <string>

#include "frontends/http_server.h"
#include "serving/server.h"

namespace inflight::frontends {

HttpResponse KvEventsResponse(const serving::Server& server, const std::string& model,
                              const std::string& version, const std::string& query);
HttpResponse KvBlocksResponse(const serving::Server& server, const std::string& model,
                              const std::string& version);

}  // namespace inflight::frontends
