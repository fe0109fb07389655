// KServe v2 over HTTP/REST with Triton's extensions (generate, generate_stream, repository,
// statistics), and the Prometheus /metrics endpoint, on the asynchronous HttpServer.
// Translation only: every decision is the serving::Server's.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "frontends/access.h"
#include "frontends/http_server.h"
#include "frontends/kv_events_http.h"
#include "frontends/openai_frontend.h"
#include "frontends/shared_memory.h"
#include "frontends/web_frontend.h"
#include "serving/server.h"

namespace inflight::frontends {

class HttpFrontend {
 public:
  // shm: the system shared-memory regions (outlives the frontend; shared with gRPC).
  // openai: the OpenAI API's settings (it is served on the same port). access: keys,
  // restricted groups and tenant limits for every endpoint.
  HttpFrontend(serving::Server* server, HttpServerOptions options, SharedMemoryRegistry* shm,
               OpenAiOptions openai = {}, AccessPolicy access = {});
  ~HttpFrontend();
  // Binds and serves on background threads. Returns the bound port; UNAVAILABLE if the
  // address cannot be bound, INVALID_ARGUMENT for a chat template that does not parse.
  StatusOr<int> Start();
  void StopAccepting();
  // Gives replies in progress up to `grace`, then closes every connection.
  void Stop(std::chrono::milliseconds grace = std::chrono::milliseconds(0));

 private:
  serving::Server* server_;
  HttpServerOptions options_;
  SharedMemoryRegistry* shm_;
  AccessPolicy access_;
  std::shared_ptr<OpenAiFrontend> openai_;
  std::shared_ptr<WebFrontend> web_;
  std::shared_ptr<KvEventStreams> kv_streams_;
  std::unique_ptr<HttpServer> http_;
};

// GET /metrics in the Prometheus text format (API group `metrics`: the admin key when keys
// are set).
class MetricsFrontend {
 public:
  MetricsFrontend(serving::Server* server, std::string address, int port, AccessPolicy access = {},
                  TlsFiles tls = {});
  ~MetricsFrontend();
  StatusOr<int> Start();
  void Stop();

 private:
  serving::Server* server_;
  std::string address_;
  int port_;
  AccessPolicy access_;
  TlsFiles tls_;
  std::unique_ptr<HttpServer> http_;
};

// The API group of an HTTP request (`seg`: its path's segments); nullopt for the web page
// itself, which holds no data and asks for the key in the browser.
std::optional<serving::ApiGroup> HttpApiGroup(const std::vector<std::string>& seg);

// Checks the caller's credentials for `group`: the tenant, or a 401/403 response to send.
// `server_probe`: /v2/health/live|ready, open without a key unless the server says otherwise.
std::variant<std::string, HttpResponse> AuthorizeHttp(const AccessPolicy& access,
                                                      serving::ApiGroup group,
                                                      const HttpRequest& req, bool openai_errors,
                                                      bool server_probe = false);

}  // namespace inflight::frontends
