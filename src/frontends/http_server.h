// An asynchronous HTTP/1.1 server on Boost.Beast: a few I/O threads hold thousands of
// connections, keep-alive and pipelining, chunked and bodyless requests, deadlines for
// idle connections, headers, bodies and writes, limits on header count and bytes and body
// size, and streamed (chunked) replies with a bound on the output a client has not read.
// Protocol-agnostic: the handler decides what a request means.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/output_credit.h"
#include "base/status.h"

namespace inflight::frontends {

// PEM files for TLS: a certificate chain and its key serve HTTPS (and gRPC over TLS); a
// client CA requires and verifies client certificates (mutual TLS).
struct TlsFiles {
  std::string cert_file, key_file, client_ca_file;
  bool enabled() const { return !cert_file.empty() || !key_file.empty(); }
};

struct HttpServerOptions {
  std::string address = "0.0.0.0";
  int port = 0;  // 0: any free port
  int num_threads = 2;
  int max_connections = 16384;  // beyond it new connections are closed at once
  std::chrono::milliseconds idle_timeout{std::chrono::minutes(5)};  // keep-alive with no request
  std::chrono::milliseconds header_timeout{
      std::chrono::seconds(10)};  // first byte to end of headers
  std::chrono::milliseconds body_timeout{std::chrono::seconds(60)};
  // One write that makes no progress for this long ends the connection (a reader that
  // stays behind).
  std::chrono::milliseconds write_timeout{std::chrono::seconds(30)};
  size_t max_header_bytes = 16 << 10;
  int max_header_count = 100;
  size_t max_body_bytes = 64 << 20;
  size_t max_stream_buffer_bytes = 8 << 20;  // unread output one streamed reply may hold
  TlsFiles tls;                              // enabled: HTTPS only
};

struct HttpRequest {
  std::string method;
  std::string path;   // percent-decoding is left to the handler
  std::string query;  // after '?', "" if none
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::string remote_address;  // the client's IP address

  // Value of the first header of that name (case-insensitive); "" when absent.
  std::string Header(std::string_view name) const;
  bool HasHeader(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

// The answer to one request. Thread-safe: the serving core may call it from any thread;
// everything it does runs on the connection's own strand. A reply is either sent whole
// (Send) or streamed (StartStream, Write..., EndStream).
class HttpReply {
 public:
  virtual ~HttpReply() = default;
  virtual void Send(HttpResponse response) = 0;
  virtual void StartStream(int status, std::string content_type) = 0;
  // Queues one chunk. False when the client is gone, or when its unread output would pass
  // max_stream_buffer_bytes (then the client-gone callbacks run with that reason).
  // `force` skips the bound (for a last small error event).
  virtual bool Write(std::string data, bool force = false) = 0;
  virtual void EndStream() = 0;
  // Back-pressure of a streamed reply: its chunks count in this credit from Write until they
  // are written to the socket; it pauses at a quarter of max_stream_buffer_bytes, stalls after
  // half of write_timeout paused (a handler adds what it holds for the reply too, and hands
  // the credit to the engine's request).
  virtual std::shared_ptr<OutputCredit> output_credit() = 0;
  // fn(reason) runs once if the client disconnects, a write times out or the stream bound
  // is passed before the reply is complete; at once if that has already happened.
  virtual void OnClientGone(std::function<void(const std::string& reason)> fn) = 0;
  // Runs fn on the connection's strand (an I/O thread), e.g. to encode a response there
  // instead of on the thread that produced it.
  virtual void Post(std::function<void()> fn) = 0;
};

using HttpHandler = std::function<void(HttpRequest request, std::shared_ptr<HttpReply> reply)>;

class HttpServer {
 public:
  // The handler runs on an I/O thread and must not block.
  HttpServer(HttpServerOptions options, HttpHandler handler);
  ~HttpServer();
  // Binds and starts the I/O threads. The bound port; UNAVAILABLE if it cannot bind.
  StatusOr<int> Start();
  // Closes the listening socket; open connections keep working.
  void StopAccepting();
  // Stops accepting, gives replies in progress up to `grace` to finish, then closes every
  // connection and joins the I/O threads.
  void Stop(std::chrono::milliseconds grace = std::chrono::milliseconds(0));
  // Open connections / replies started and not finished.
  int64_t num_connections() const;
  int64_t num_busy() const;

  struct Impl;  // connections reach it too

 private:
  std::shared_ptr<Impl> impl_;
};

// Raises this process's open-file limit to its hard limit (each connection is a file).
void RaiseOpenFileLimit();

}  // namespace inflight::frontends
