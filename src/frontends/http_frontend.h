// KServe v2 over HTTP/REST with Triton's extensions (generate, generate_stream, repository,
// statistics), and the Prometheus /metrics endpoint. Translation only: every decision is the
// serving::Server's.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "serving/server.h"

namespace httplib {
class Server;
}

namespace inflight::frontends {

struct HttpOptions {
  std::string address = "0.0.0.0";
  int port = 8000;          // 0: any free port
  int num_threads = 128;    // each open stream holds one
  size_t max_input_bytes = 64 << 20;
};

class HttpFrontend {
 public:
  HttpFrontend(serving::Server* server, HttpOptions options);
  ~HttpFrontend();
  // Binds and serves on a background thread. Returns the bound port; UNAVAILABLE if the
  // address cannot be bound.
  StatusOr<int> Start();
  void Stop();

 private:
  serving::Server* server_;
  HttpOptions options_;
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
};

// GET /metrics in the Prometheus text format.
class MetricsFrontend {
 public:
  MetricsFrontend(serving::Server* server, std::string address, int port);
  ~MetricsFrontend();
  StatusOr<int> Start();
  void Stop();

 private:
  serving::Server* server_;
  std::string address_;
  int port_;
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
};

}  // namespace inflight::frontends
