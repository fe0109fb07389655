#include "frontends/http_server.h"

#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <atomic>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cerrno>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "base/logging.h"

namespace inflight::frontends {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

bool IEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  }
  return true;
}

const char* ReasonPhrase(int status) {
  return http::obsolete_reason(static_cast<http::status>(status)).data();
}

}  // namespace

std::string HttpRequest::Header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (IEquals(k, name)) return v;
  }
  return "";
}

bool HttpRequest::HasHeader(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (IEquals(k, name)) return true;
  }
  return false;
}

void RaiseOpenFileLimit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
}

// What the server needs of a connection, whatever its stream (plain TCP or TLS).
class SessionBase {
 public:
  virtual ~SessionBase() = default;
  virtual void Start() = 0;
  virtual void Close() = 0;
  virtual net::any_io_executor strand() const = 0;
};

using PlainStream = beast::tcp_stream;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

struct HttpServer::Impl : std::enable_shared_from_this<HttpServer::Impl> {
  Impl(HttpServerOptions o, HttpHandler h)
      : options(std::move(o)),
        handler(std::move(h)),
        ioc(options.num_threads),
        work(net::make_work_guard(ioc)) {}

  void Accept();
  void Track(const std::shared_ptr<SessionBase>& s);
  void Untrack(SessionBase* s);

  const HttpServerOptions options;
  const HttpHandler handler;
  net::io_context ioc;
  // The I/O threads run until Stop, also while no connection is open.
  net::executor_work_guard<net::io_context::executor_type> work;
  std::optional<tcp::acceptor> acceptor;
  std::optional<net::ssl::context> tls;  // set: every connection speaks TLS
  std::atomic<bool> accepting{true};
  std::vector<std::thread> threads;
  std::atomic<int64_t> connections{0};
  std::atomic<int64_t> busy{0};
  std::mutex mu;
  std::map<SessionBase*, std::weak_ptr<SessionBase>> by_ptr;  // open connections
};

// One connection. Every member below runs on the connection's strand; the HttpReply
// methods post onto it.
template <typename Stream>
class Session : public SessionBase, public std::enable_shared_from_this<Session<Stream>> {
 public:
  static constexpr bool kTls = std::is_same_v<Stream, TlsStream>;

  Session(tcp::socket socket, std::shared_ptr<HttpServer::Impl> server)
      : stream_(MakeStream(std::move(socket), *server)),
        strand_(stream_.get_executor()),
        server_(std::move(server)),
        options_(server_->options) {
    beast::error_code ec;
    const auto remote = Lowest().socket().remote_endpoint(ec);
    if (!ec) remote_address_ = remote.address().to_string();
  }

  void Start() override {
    net::dispatch(strand_, [self = this->shared_from_this()] {
      if constexpr (kTls) {
        // The handshake runs under the header deadline: a client that stalls in it is dropped.
        self->Lowest().expires_after(self->options_.header_timeout);
        self->stream_.async_handshake(net::ssl::stream_base::server, [self](beast::error_code ec) {
          if (ec) return self->Close();
          self->ReadRequest();
        });
      } else {
        self->ReadRequest();
      }
    });
  }
  void Close() override;
  net::any_io_executor strand() const override { return strand_; }
  bool busy() const { return reply_active_; }

  // Reply side (posted here by the Reply object).
  void Send(uint64_t gen, HttpResponse response);
  void StartStream(uint64_t gen, int status, std::string content_type);
  void QueueChunk(uint64_t gen, std::string data, std::shared_ptr<OutputCredit> credit);
  void EndStream(uint64_t gen);
  void AddGoneCallback(uint64_t gen, std::function<void(const std::string&)> fn);
  void ClientGone(const std::string& reason);
  std::atomic<int64_t>& unread_bytes() { return unread_bytes_; }
  std::atomic<bool>& gone() { return gone_; }
  uint64_t generation() const { return generation_; }

 private:
  void ReadRequest();
  void ReadHeader();
  void OnHeader(beast::error_code ec);
  void OnBody(beast::error_code ec);
  void Dispatch();
  void WatchForDisconnect();
  void SendSimple(int status, const std::string& message, bool close);
  void Flush();
  void OnFlushed(beast::error_code ec, size_t n);
  void FinishReply();
  beast::tcp_stream& Lowest() { return beast::get_lowest_layer(stream_); }
  std::shared_ptr<Session> Self() { return this->shared_from_this(); }
  static Stream MakeStream(tcp::socket socket, HttpServer::Impl& server) {
    if constexpr (kTls) {
      return Stream(std::move(socket), *server.tls);
    } else {
      return Stream(std::move(socket));
    }
  }

  Stream stream_;
  std::string remote_address_;
  net::any_io_executor strand_;
  std::shared_ptr<HttpServer::Impl> server_;
  const HttpServerOptions& options_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  bool keep_alive_ = true;
  bool closed_ = false;

  // The reply in progress (generation_ counts requests on this connection).
  uint64_t generation_ = 0;
  bool reply_active_ = false;
  bool streaming_ = false;
  bool stream_ended_ = false;
  bool writing_ = false;
  bool close_after_write_ = false;
  // Bytes to write; `credited` of them count in `credit` (a streamed reply's chunk).
  struct Pending {
    std::string bytes;
    int64_t credited = 0;
    std::shared_ptr<OutputCredit> credit;
  };
  std::deque<Pending> out_;
  std::vector<std::pair<std::shared_ptr<OutputCredit>, int64_t>> writing_credit_;  // in flight
  std::vector<std::function<void(const std::string&)>> gone_callbacks_;
  std::optional<std::string> gone_reason_;
  std::atomic<bool> gone_{false};
  std::atomic<int64_t> unread_bytes_{0};
  std::shared_ptr<http::response<http::string_body>> response_;
};

template <typename Stream>
class Reply : public HttpReply {
 public:
  // The credit pauses the reply's request at an eighth of the bound: results the engine has
  // produced and the serving thread has not encoded yet still grow when encoded, ~4.75x for
  // generation logits as JSON, and must not reach the bound. (At a quarter, an engine at 4,400
  // tokens/s had 2 MB of raw logits waiting when the pause came; encoded, they were 9.7 MB.)
  // It ends the request after half the write timeout paused (before the stalled write closes
  // the connection, so a client that comes back still reads why).
  Reply(std::shared_ptr<Session<Stream>> s, uint64_t gen, size_t bound,
        std::chrono::milliseconds write_timeout)
      : s_(std::move(s)),
        gen_(gen),
        bound_(bound),
        credit_(
            std::make_shared<OutputCredit>(static_cast<int64_t>(bound / 8), write_timeout / 2)) {}

  void Send(HttpResponse response) override {
    net::post(s_->strand(),
              [s = s_, g = gen_, r = std::move(response)]() mutable { s->Send(g, std::move(r)); });
  }
  void StartStream(int status, std::string content_type) override {
    net::post(s_->strand(), [s = s_, g = gen_, status, c = std::move(content_type)]() mutable {
      s->StartStream(g, status, std::move(c));
    });
  }
  bool Write(std::string data, bool force) override {
    if (s_->gone()) return false;
    const int64_t size = static_cast<int64_t>(data.size());
    if (!force && s_->unread_bytes().fetch_add(size) + size > static_cast<int64_t>(bound_)) {
      s_->unread_bytes().fetch_sub(size);
      net::post(s_->strand(), [s = s_, g = gen_, bound = bound_] {
        if (s->generation() == g) {
          s->ClientGone("the client read the stream too slowly (more than " +
                        std::to_string(bound) + " bytes unread)");
        }
      });
      return false;
    }
    if (force) s_->unread_bytes().fetch_add(size);
    credit_->Add(size);  // released when written (or dropped)
    net::post(s_->strand(), [s = s_, g = gen_, d = std::move(data), c = credit_]() mutable {
      s->QueueChunk(g, std::move(d), std::move(c));
    });
    return true;
  }
  void EndStream() override {
    net::post(s_->strand(), [s = s_, g = gen_] { s->EndStream(g); });
  }
  void OnClientGone(std::function<void(const std::string&)> fn) override {
    net::post(s_->strand(), [s = s_, g = gen_, f = std::move(fn)]() mutable {
      s->AddGoneCallback(g, std::move(f));
    });
  }
  void Post(std::function<void()> fn) override { net::post(s_->strand(), std::move(fn)); }
  std::shared_ptr<OutputCredit> output_credit() override { return credit_; }

 private:
  std::shared_ptr<Session<Stream>> s_;
  const uint64_t gen_;
  const size_t bound_;
  const std::shared_ptr<OutputCredit> credit_;
};

template <typename Stream>
void Session<Stream>::ReadRequest() {
  if (closed_) return;
  parser_.emplace();
  parser_->header_limit(static_cast<std::uint32_t>(options_.max_header_bytes));
  parser_->body_limit(options_.max_body_bytes);
  if (buffer_.size() > 0) return ReadHeader();  // a pipelined request is already here
  // An idle keep-alive connection waits for its first byte under the idle deadline; the
  // header deadline starts with that byte (so a trickling client cannot hold the line).
  Lowest().expires_after(options_.idle_timeout);
  stream_.async_read_some(buffer_.prepare(4096), [self = Self()](beast::error_code ec, size_t n) {
    if (ec) return self->Close();
    self->buffer_.commit(n);
    self->ReadHeader();
  });
}

template <typename Stream>
void Session<Stream>::ReadHeader() {
  Lowest().expires_after(options_.header_timeout);
  http::async_read_header(stream_, buffer_, *parser_,
                          [self = Self()](beast::error_code ec, size_t) { self->OnHeader(ec); });
}

template <typename Stream>
void Session<Stream>::OnHeader(beast::error_code ec) {
  if (ec == http::error::header_limit) {
    return SendSimple(
        431, "request headers exceed " + std::to_string(options_.max_header_bytes) + " bytes",
        true);
  }
  if (ec == beast::error::timeout)
    return SendSimple(408, "request headers not received in time", true);
  if (ec == http::error::end_of_stream || ec == net::error::eof ||
      ec == net::error::connection_reset)
    return Close();
  if (ec) return SendSimple(400, "malformed HTTP request: " + ec.message(), true);
  const auto& msg = parser_->get();
  if (std::distance(msg.begin(), msg.end()) > options_.max_header_count) {
    return SendSimple(
        431, "more than " + std::to_string(options_.max_header_count) + " request headers", true);
  }
  if (parser_->is_done()) return Dispatch();
  const auto expect = msg[http::field::expect];
  if (IEquals(std::string_view(expect.data(), expect.size()), "100-continue")) {
    // curl waits for this before sending a body over 1 KiB.
    auto cont = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
    Lowest().expires_after(options_.write_timeout);
    return net::async_write(
        stream_, net::buffer(*cont), [self = Self(), cont](beast::error_code ec, size_t) {
          if (ec) return self->Close();
          self->Lowest().expires_after(self->options_.body_timeout);
          http::async_read(self->stream_, self->buffer_, *self->parser_,
                           [self](beast::error_code ec, size_t) { self->OnBody(ec); });
        });
  }
  Lowest().expires_after(options_.body_timeout);
  http::async_read(stream_, buffer_, *parser_,
                   [self = Self()](beast::error_code ec, size_t) { self->OnBody(ec); });
}

template <typename Stream>
void Session<Stream>::OnBody(beast::error_code ec) {
  if (ec == http::error::body_limit) {
    // Triton answers an oversized body with 400 and this message.
    return SendSimple(400, "request exceeds the maximum allowed input size", true);
  }
  if (ec == beast::error::timeout)
    return SendSimple(408, "request body not received in time", true);
  if (ec) return Close();
  Dispatch();
}

template <typename Stream>
void Session<Stream>::Dispatch() {
  Lowest().expires_never();
  auto& msg = parser_->get();
  HttpRequest req;
  req.method = std::string(msg.method_string());
  const std::string_view target(msg.target().data(), msg.target().size());
  const size_t q = target.find('?');
  req.path = std::string(target.substr(0, q));
  if (q != std::string_view::npos) req.query = std::string(target.substr(q + 1));
  for (const auto& f : msg)
    req.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
  req.body = std::move(msg.body());
  req.remote_address = remote_address_;
  keep_alive_ = msg.keep_alive();
  ++generation_;
  reply_active_ = true;
  streaming_ = stream_ended_ = close_after_write_ = false;
  gone_ = false;
  unread_bytes_ = 0;
  gone_callbacks_.clear();
  gone_reason_.reset();
  ++server_->busy;
  WatchForDisconnect();
  server_->handler(std::move(req), std::make_shared<Reply<Stream>>(Self(), generation_,
                                                                   options_.max_stream_buffer_bytes,
                                                                   options_.write_timeout));
}

template <typename Stream>
void Session<Stream>::WatchForDisconnect() {
  // Readable while a reply is pending: either the client closed (cancel its request) or it
  // pipelined the next request (left in the socket for ReadRequest).
  Lowest().socket().async_wait(
      tcp::socket::wait_read, [self = Self(), gen = generation_](beast::error_code ec) {
        if (ec || self->closed_ || self->generation_ != gen || !self->reply_active_) return;
        // POLLRDHUP sees the client's FIN even behind unread bytes (a TLS close_notify).
        pollfd p{self->Lowest().socket().native_handle(), POLLIN | POLLRDHUP, 0};
        if (::poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) {
          self->ClientGone("the client disconnected");
        }
      });
}

template <typename Stream>
void Session<Stream>::AddGoneCallback(uint64_t gen, std::function<void(const std::string&)> fn) {
  if (gen != generation_) return;
  if (gone_reason_) return fn(*gone_reason_);
  gone_callbacks_.push_back(std::move(fn));
}

template <typename Stream>
void Session<Stream>::ClientGone(const std::string& reason) {
  if (!reply_active_ || gone_reason_) return;
  gone_reason_ = reason;
  auto callbacks = std::move(gone_callbacks_);
  gone_callbacks_.clear();
  for (auto& fn : callbacks) fn(reason);
  // A slow reader may still take its last error event; a disconnected one cannot.
  if (reason.find("disconnected") != std::string::npos || closed_) gone_ = true;
}

template <typename Stream>
void Session<Stream>::SendSimple(int status, const std::string& message, bool close) {
  ++generation_;
  reply_active_ = true;
  ++server_->busy;
  keep_alive_ = keep_alive_ && !close;
  HttpResponse r;
  r.status = status;
  r.content_type = "application/json";
  std::string escaped;
  for (char c : message) {
    if (c == '"' || c == '\\') escaped += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) escaped += c;
  }
  r.body = "{\"error\":\"" + escaped + "\"}";
  Send(generation_, std::move(r));
}

template <typename Stream>
void Session<Stream>::Send(uint64_t gen, HttpResponse r) {
  if (gen != generation_ || !reply_active_ || streaming_ || response_ || closed_) return;
  beast::error_code ignored;
  Lowest().socket().cancel(ignored);  // the disconnect watch
  response_ =
      std::make_shared<http::response<http::string_body>>(static_cast<http::status>(r.status), 11);
  response_->set(http::field::server, "inflight");
  if (!r.content_type.empty()) response_->set(http::field::content_type, r.content_type);
  for (auto& [k, v] : r.headers) response_->set(k, v);
  response_->body() = std::move(r.body);
  response_->keep_alive(keep_alive_);
  response_->prepare_payload();
  Lowest().expires_after(options_.write_timeout);
  http::async_write(stream_, *response_, [self = Self()](beast::error_code ec, size_t) {
    self->response_.reset();
    if (ec) return self->Close();
    self->FinishReply();
  });
}

template <typename Stream>
void Session<Stream>::StartStream(uint64_t gen, int status, std::string content_type) {
  if (gen != generation_ || !reply_active_ || streaming_ || response_ || closed_) return;
  streaming_ = true;
  std::string head = "HTTP/1.1 " + std::to_string(status) + " " + ReasonPhrase(status) + "\r\n";
  head += "Server: inflight\r\nContent-Type: " + content_type + "\r\nCache-Control: no-cache\r\n";
  head += "Transfer-Encoding: chunked\r\n";
  head += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  out_.push_back({std::move(head)});
  Flush();
}

template <typename Stream>
void Session<Stream>::QueueChunk(uint64_t gen, std::string data,
                                 std::shared_ptr<OutputCredit> credit) {
  const int64_t credited = static_cast<int64_t>(data.size());
  if (gen != generation_ || !streaming_ || stream_ended_ || closed_) {
    if (gen == generation_) unread_bytes_ -= credited;
    credit->Release(credited);
    return;
  }
  if (data.empty()) return;
  char size[24];
  std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  data.insert(0, size);
  data += "\r\n";
  out_.push_back({std::move(data), credited, std::move(credit)});
  Flush();
}

template <typename Stream>
void Session<Stream>::EndStream(uint64_t gen) {
  if (gen != generation_ || !streaming_ || stream_ended_ || closed_) return;
  stream_ended_ = true;
  out_.push_back({"0\r\n\r\n"});
  Flush();
}

template <typename Stream>
void Session<Stream>::Flush() {
  if (writing_ || closed_) return;
  if (out_.empty()) {
    if (stream_ended_) {
      stream_ended_ = false;
      streaming_ = false;
      FinishReply();
    }
    return;
  }
  writing_ = true;
  auto data = std::make_shared<std::string>();
  while (!out_.empty() && data->size() < (1 << 20)) {
    Pending& p = out_.front();
    *data += p.bytes;
    if (p.credit) writing_credit_.emplace_back(std::move(p.credit), p.credited);
    out_.pop_front();
  }
  Lowest().expires_after(options_.write_timeout);
  net::async_write(
      stream_, net::buffer(*data),
      [self = Self(), data](beast::error_code ec, size_t) { self->OnFlushed(ec, data->size()); });
}

template <typename Stream>
void Session<Stream>::OnFlushed(beast::error_code ec, size_t n) {
  writing_ = false;
  unread_bytes_ -= static_cast<int64_t>(n);
  for (auto& [credit, bytes] : writing_credit_) credit->Release(bytes);
  writing_credit_.clear();
  if (ec) {
    ClientGone(ec == beast::error::timeout
                   ? "the client read nothing for " +
                         std::to_string(options_.write_timeout.count() / 1000) + " s"
                   : "the client disconnected");
    return Close();
  }
  Flush();
}

template <typename Stream>
void Session<Stream>::FinishReply() {
  if (reply_active_) {
    reply_active_ = false;
    --server_->busy;
  }
  gone_callbacks_.clear();
  beast::error_code ignored_ec;
  Lowest().socket().cancel(ignored_ec);  // the disconnect watch of a streamed reply
  if (!keep_alive_) {
    beast::error_code ignored;
    Lowest().socket().shutdown(tcp::socket::shutdown_send, ignored);
    return Close();
  }
  ReadRequest();
}

template <typename Stream>
void Session<Stream>::Close() {
  if (closed_) return;
  closed_ = true;
  gone_ = true;
  ClientGone("the client disconnected");
  if (reply_active_) {
    reply_active_ = false;
    --server_->busy;
  }
  gone_callbacks_.clear();
  for (Pending& p : out_) {
    if (p.credit) p.credit->Release(p.credited);
  }
  out_.clear();
  beast::error_code ignored;
  Lowest().socket().shutdown(tcp::socket::shutdown_both, ignored);
  Lowest().close();
  --server_->connections;
  server_->Untrack(this);
}

void HttpServer::Impl::Accept() {
  acceptor->async_accept(
      net::make_strand(ioc), [self = shared_from_this()](beast::error_code ec, tcp::socket socket) {
        if (ec == net::error::operation_aborted || !self->acceptor || !self->acceptor->is_open())
          return;
        if (!ec) {
          if (self->connections.load() >= self->options.max_connections) {
            beast::error_code ignored;
            socket.close(ignored);
          } else {
            socket.set_option(tcp::no_delay(true), ec);
            ++self->connections;
            std::shared_ptr<SessionBase> s;
            if (self->tls) {
              s = std::make_shared<Session<TlsStream>>(std::move(socket), self);
            } else {
              s = std::make_shared<Session<PlainStream>>(std::move(socket), self);
            }
            self->Track(s);
            s->Start();
          }
        } else if (ec == net::error::no_descriptors) {
          // Out of file descriptors: back off a little instead of spinning.
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        self->Accept();
      });
}

void HttpServer::Impl::Track(const std::shared_ptr<SessionBase>& s) {
  std::lock_guard<std::mutex> lock(mu);
  by_ptr[s.get()] = s;
}

void HttpServer::Impl::Untrack(SessionBase* s) {
  std::lock_guard<std::mutex> lock(mu);
  by_ptr.erase(s);
}

HttpServer::HttpServer(HttpServerOptions options, HttpHandler handler)
    : impl_(std::make_shared<Impl>(std::move(options), std::move(handler))) {}

HttpServer::~HttpServer() { Stop(); }

StatusOr<int> HttpServer::Start() {
  RaiseOpenFileLimit();
  const auto& o = impl_->options;
  if (o.tls.enabled()) {
    if (o.tls.cert_file.empty() || o.tls.key_file.empty()) {
      return InvalidArgumentError("TLS needs both a certificate and a private key file");
    }
    // TLS 1.2 and 1.3 only; a client certificate signed by the given CA when one is named.
    net::ssl::context ctx(net::ssl::context::tls_server);
    ctx.set_options(net::ssl::context::default_workarounds | net::ssl::context::no_sslv2 |
                    net::ssl::context::no_sslv3 | net::ssl::context::no_tlsv1 |
                    net::ssl::context::no_tlsv1_1 | net::ssl::context::single_dh_use);
    beast::error_code tls_ec;
    ctx.use_certificate_chain_file(o.tls.cert_file, tls_ec);
    if (tls_ec)
      return InvalidArgumentError("TLS certificate '" + o.tls.cert_file + "': " + tls_ec.message());
    ctx.use_private_key_file(o.tls.key_file, net::ssl::context::pem, tls_ec);
    if (tls_ec)
      return InvalidArgumentError("TLS private key '" + o.tls.key_file + "': " + tls_ec.message());
    if (!o.tls.client_ca_file.empty()) {
      ctx.load_verify_file(o.tls.client_ca_file, tls_ec);
      if (tls_ec)
        return InvalidArgumentError("TLS client CA '" + o.tls.client_ca_file +
                                    "': " + tls_ec.message());
      ctx.set_verify_mode(net::ssl::verify_peer | net::ssl::verify_fail_if_no_peer_cert);
    }
    impl_->tls.emplace(std::move(ctx));
  }
  beast::error_code ec;
  const auto address = net::ip::make_address(impl_->options.address, ec);
  if (ec) return InvalidArgumentError("HTTP: bad address '" + impl_->options.address + "'");
  tcp::endpoint endpoint(address, static_cast<uint16_t>(impl_->options.port));
  impl_->acceptor.emplace(net::make_strand(impl_->ioc));
  auto& a = *impl_->acceptor;
  a.open(endpoint.protocol(), ec);
  if (!ec) a.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(endpoint, ec);
  if (!ec) a.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    impl_->acceptor.reset();
    return UnavailableError("HTTP: cannot bind " + impl_->options.address + ":" +
                            std::to_string(impl_->options.port) + ": " + ec.message());
  }
  const int port = a.local_endpoint().port();
  impl_->Accept();
  for (int i = 0; i < impl_->options.num_threads; ++i) {
    impl_->threads.emplace_back([impl = impl_] { impl->ioc.run(); });
  }
  return port;
}

void HttpServer::StopAccepting() {
  auto impl = impl_;
  if (!impl->acceptor || !impl->accepting.exchange(false)) return;
  std::promise<void> done;
  net::dispatch(impl->acceptor->get_executor(), [impl, &done] {
    beast::error_code ignored;
    impl->acceptor->close(ignored);
    done.set_value();
  });
  if (impl->threads.empty()) return;
  done.get_future().wait();
}

void HttpServer::Stop(std::chrono::milliseconds grace) {
  if (impl_->threads.empty()) return;
  StopAccepting();
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (impl_->busy.load() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::vector<std::shared_ptr<SessionBase>> open;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    for (auto& [p, w] : impl_->by_ptr) {
      if (auto s = w.lock()) open.push_back(std::move(s));
    }
  }
  for (auto& s : open) net::post(s->strand(), [s] { s->Close(); });
  open.clear();
  for (int i = 0; i < 200 && impl_->connections.load() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  impl_->work.reset();
  impl_->ioc.stop();
  for (auto& t : impl_->threads) t.join();
  impl_->threads.clear();
  // Run what the closes left queued (aborted reads and waits) so no handler keeps a
  // connection, and through it this server, alive.
  impl_->ioc.restart();
  impl_->ioc.poll();
}

int64_t HttpServer::num_connections() const { return impl_->connections.load(); }
int64_t HttpServer::num_busy() const { return impl_->busy.load(); }

}  // namespace inflight::frontends
