// The web page at / (a playground for the OpenAI endpoints and a live dashboard of the
// in-flight batcher; assets compiled into the binary), and GET /inflight/live: an SSE stream
// with a snapshot of every LLM model's engine twice a second. One broadcaster thread serves
// every dashboard; a dashboard that reads too slowly is dropped like any slow stream.
// Thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "frontends/http_server.h"
#include "serving/server.h"

namespace inflight::frontends {

class WebFrontend {
 public:
  static constexpr size_t kMaxDashboards = 256;
  static constexpr std::chrono::milliseconds kPeriod{500};

  explicit WebFrontend(serving::Server* server);
  ~WebFrontend();
  // True when it served the request (/, /index.html, /inflight/live, /inflight/snapshot).
  bool Handle(const HttpRequest& req, const std::shared_ptr<HttpReply>& reply);
  // Ends every live stream and the broadcaster.
  void Stop();

  // The live snapshot as the page reads it (JSON text).
  static std::string SnapshotJson(const std::vector<serving::LlmLiveSnapshot>& models);

 private:
  void Broadcast();

  serving::Server* server_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<HttpReply>> dashboards_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace inflight::frontends
