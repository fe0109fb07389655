#include "frontends/http_frontend.h"

#include <httplib.h>

#include <condition_variable>
#include <deque>
#include <mutex>

#include "base/logging.h"
#include "frontends/connection_watch.h"
#include "frontends/kserve_json.h"
#include "serving/model_config_util.h"

namespace inflight::frontends {
namespace {

using nlohmann::json;
using serving::InferRequest;
using serving::InferResponse;

int HttpStatus(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk: return 200;
    case StatusCode::kNotFound: return 404;
    case StatusCode::kUnavailable:
    case StatusCode::kResourceExhausted: return 503;
    case StatusCode::kUnimplemented: return 501;
    case StatusCode::kInternal:
    case StatusCode::kDataLoss: return 500;
    default: return 400;
  }
}

void SendError(httplib::Response& res, int status, const std::string& message) {
  res.status = status;
  res.set_content(Dump(json{{"error", message}}), "application/json");
}

void SendError(httplib::Response& res, const Status& s) { SendError(res, HttpStatus(s), s.message()); }

// Responses of one request, handed from the engine thread to the HTTP thread.
struct ResponseQueue {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<InferResponse> items;
  bool finished = false;

  // The sink keeps the queue alive: the engine may answer after the client has gone.
  static serving::ResponseSink SinkFor(const std::shared_ptr<ResponseQueue>& q) {
    return [q](InferResponse&& r) {
      std::lock_guard<std::mutex> lock(q->mu);
      q->finished = q->finished || r.final;
      q->items.push_back(std::move(r));
      q->cv.notify_all();
    };
  }
  // Waits up to `wait` for a response. Empty optional on timeout.
  std::optional<InferResponse> Pop(std::chrono::milliseconds wait) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, wait, [&] { return !items.empty(); });
    if (items.empty()) return std::nullopt;
    InferResponse r = std::move(items.front());
    items.pop_front();
    return r;
  }
};

struct Route {
  std::string model, version, action;  // action: "", ready, config, infer, generate, generate_stream, stats
};

// /v2/models/{m}[/versions/{v}][/{action}]
std::optional<Route> ParseModelRoute(const std::vector<std::string>& seg) {
  if (seg.size() < 3 || seg[0] != "v2" || seg[1] != "models") return std::nullopt;
  Route r;
  r.model = seg[2];
  size_t i = 3;
  if (seg.size() > i + 1 && seg[i] == "versions") {
    r.version = seg[i + 1];
    if (r.version.empty() || r.version.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
    i += 2;
  }
  if (seg.size() == i + 1) {
    r.action = seg[i];
  } else if (seg.size() != i) {
    return std::nullopt;
  }
  static const char* kActions[] = {"", "ready", "config", "infer", "generate", "generate_stream", "stats"};
  for (const char* a : kActions) {
    if (r.action == a) return r;
  }
  return std::nullopt;
}

std::vector<std::string> Split(const std::string& path) {
  std::vector<std::string> out;
  size_t start = 1;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    out.push_back(path.substr(start, end - start));
    start = end + 1;
  }
  if (!out.empty() && out.back().empty()) out.pop_back();
  return out;
}

class Handlers {
 public:
  explicit Handlers(serving::Server* s) : s_(s) {}

  void Dispatch(const httplib::Request& req, httplib::Response& res) {
    const auto seg = Split(req.path);
    const bool get = req.method == "GET", post = req.method == "POST";
    auto method = [&](bool ok) {
      if (!ok) SendError(res, 405, "Method Not Allowed");
      return ok;
    };
    if (seg == std::vector<std::string>{"v2", "health", "live"}) {
      if (method(get)) res.status = s_->live() ? 200 : 400;
      return;
    }
    if (seg == std::vector<std::string>{"v2", "health", "ready"}) {
      if (method(get)) res.status = s_->ready() ? 200 : 400;
      return;
    }
    if (seg == std::vector<std::string>{"v2"}) {
      if (method(get)) ServerMetadata(res);
      return;
    }
    if (seg == std::vector<std::string>{"v2", "models", "stats"}) {
      if (method(get)) Stats("", "", res);
      return;
    }
    if (seg.size() >= 3 && seg[0] == "v2" && seg[1] == "repository") {
      return Repository(seg, req, res);
    }
    if (auto r = ParseModelRoute(seg)) {
      if (r->action.empty()) {
        if (!method(get)) return;
        auto m = s_->GetModelMetadata(r->model, r->version);
        if (!m.ok()) return SendError(res, m.status());
        return res.set_content(Dump(MetadataToJson(*m)), "application/json");
      }
      if (r->action == "ready") {
        if (!method(get)) return;
        if (s_->ModelReady(r->model, r->version)) {
          res.status = 200;
        } else {
          SendError(res, 400, "Model version not ready");
        }
        return;
      }
      if (r->action == "config") {
        if (!method(get)) return;
        auto c = s_->GetModelConfig(r->model, r->version);
        if (!c.ok()) return SendError(res, c.status());
        return res.set_content(ModelConfigToJson(*c), "application/json");
      }
      if (r->action == "stats") {
        if (method(get)) Stats(r->model, r->version, res);
        return;
      }
      if (!method(post)) return;
      if (r->action == "infer") return Infer(*r, req, res);
      return Generate(*r, req, res, r->action == "generate_stream");
    }
    SendError(res, 404, "Not Found");
  }

 private:
  void ServerMetadata(httplib::Response& res) {
    json j = {{"name", "inflight"},
              {"version", "0.4.0"},
              {"extensions", {"model_repository", "model_configuration", "binary_tensor_data", "parameters",
                              "statistics", "generate"}}};
    res.set_content(Dump(j), "application/json");
  }

  void Stats(const std::string& model, const std::string& version, httplib::Response& res) {
    auto st = s_->Statistics(model, version);
    if (!st.ok()) return SendError(res, st.status());
    res.set_content(Dump(StatisticsToJson(*st)), "application/json");
  }

  void Repository(const std::vector<std::string>& seg, const httplib::Request& req, httplib::Response& res) {
    // /v2/repository[/{repo}]/index and /v2/repository[/{repo}]/models/{m}/load|unload
    size_t i = 2;
    if (seg.size() == 4 && seg[3] == "index") i = 3;
    if (seg.size() == 6 && seg[3] == "models") i = 3;
    if (req.method != "POST") return SendError(res, 405, "Method Not Allowed");
    json body = req.body.empty() ? json::object() : json::parse(req.body, nullptr, false);
    if (body.is_discarded() || !body.is_object()) return SendError(res, 400, "failed to parse the request JSON buffer");
    if (seg.size() == i + 1 && seg[i] == "index") {
      const bool ready = body.contains("ready") && body["ready"].is_boolean() && body["ready"].get<bool>();
      json arr = json::array();
      for (const auto& e : s_->RepositoryIndex(ready)) {
        json x = {{"name", e.name}};
        if (!e.version.empty()) x["version"] = e.version;
        if (!e.state.empty()) x["state"] = e.state;
        if (!e.reason.empty()) x["reason"] = e.reason;
        arr.push_back(std::move(x));
      }
      return res.set_content(Dump(arr), "application/json");
    }
    if (seg.size() == i + 3 && seg[i] == "models" && (seg[i + 2] == "load" || seg[i + 2] == "unload")) {
      const std::string& model = seg[i + 1];
      const json params = body.contains("parameters") && body["parameters"].is_object() ? body["parameters"] : json::object();
      Status s;
      if (seg[i + 2] == "load") {
        std::optional<std::string> config;
        if (params.contains("config")) {
          if (!params["config"].is_string()) return SendError(res, 400, "load parameter 'config' must be a string");
          config = params["config"].get<std::string>();
        }
        for (const auto& [k, v] : params.items()) {
          if (k.rfind("file:", 0) == 0) return SendError(res, 501, "load parameter '" + k + "': file overrides are not supported");
        }
        s = s_->LoadModel(model, config);
      } else {
        const bool deps = params.contains("unload_dependents") && params["unload_dependents"].is_boolean() &&
                          params["unload_dependents"].get<bool>();
        s = s_->UnloadModel(model, deps);
      }
      if (!s.ok()) return SendError(res, s);
      res.status = 200;
      return;
    }
    SendError(res, 404, "Not Found");
  }

  // Waits for the request's responses, cancelling it when the client disconnects.
  static std::vector<InferResponse> AwaitAll(ResponseQueue& q, const ConnectionWatch& watch, serving::CancelToken& cancel) {
    std::vector<InferResponse> out;
    while (true) {
      auto r = q.Pop(std::chrono::milliseconds(20));
      if (!r) {
        if (watch.PeerClosed()) cancel.Cancel();
        continue;
      }
      const bool final = r->final;
      out.push_back(std::move(*r));
      if (final) return out;
    }
  }

  void Infer(const Route& route, const httplib::Request& req, httplib::Response& res) {
    auto config = s_->GetModelConfig(route.model, route.version);
    if (!config.ok()) return SendError(res, config.status());
    if (serving::IsDecoupled(*config)) {
      return SendError(res, 501, "HTTP end point doesn't support models with decoupled transaction policy");
    }
    int64_t header_len = -1;
    if (req.has_header("Inference-Header-Content-Length")) {
      const std::string v = req.get_header_value("Inference-Header-Content-Length");
      char* end = nullptr;
      header_len = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || header_len < 0 || header_len > static_cast<int64_t>(req.body.size())) {
        return SendError(res, 400, "Inference-Header-Content-Length header value '" + v + "' is out of range");
      }
    }
    auto parsed = ParseInferRequest(req.body, header_len);
    if (!parsed.ok()) return SendError(res, parsed.status());
    InferRequest r = std::move(parsed->request);
    r.model_name = route.model;
    r.model_version = route.version.empty() ? -1 : std::stoll(route.version);
    auto cancel = r.cancel;
    auto q = std::make_shared<ResponseQueue>();
    s_->Infer(std::move(r), ResponseQueue::SinkFor(q));
    ConnectionWatch watch(req.local_port, req.remote_addr, req.remote_port);
    auto responses = AwaitAll(*q, watch, *cancel);
    const InferResponse* data = nullptr;
    for (const auto& resp : responses) {
      if (!resp.error.ok()) return SendError(res, resp.error);
      if (!resp.empty() && !data) data = &resp;
    }
    if (!data) return SendError(res, 500, "the model produced no response");
    std::string binary;
    const std::string header = Dump(InferResponseToJson(*data, *parsed, &binary));
    if (binary.empty()) return res.set_content(header, "application/json");
    res.set_header("Inference-Header-Content-Length", std::to_string(header.size()));
    res.set_content(header + binary, "application/octet-stream");
  }

  void Generate(const Route& route, const httplib::Request& req, httplib::Response& res, bool stream) {
    const std::string encoding = req.get_header_value("Content-Encoding");
    if (!encoding.empty() && encoding != "identity") {
      return SendError(res, 400, "Unsupported content-encoding '" + encoding + "' for generate");
    }
    auto config = s_->GetModelConfig(route.model, route.version);
    if (!config.ok()) return SendError(res, config.status());
    auto parsed = ParseGenerateRequest(req.body, *config);
    if (!parsed.ok()) return SendError(res, parsed.status());
    InferRequest r = std::move(parsed).value();
    r.model_name = route.model;
    r.model_version = route.version.empty() ? -1 : std::stoll(route.version);
    auto cancel = r.cancel;
    auto q = std::make_shared<ResponseQueue>();
    s_->Infer(std::move(r), ResponseQueue::SinkFor(q));
    {
      // Errors before inference started (checks against the config) are plain JSON errors.
      std::lock_guard<std::mutex> lock(q->mu);
      if (q->finished && q->items.size() == 1 && !q->items.front().error.ok()) {
        return SendError(res, q->items.front().error);
      }
    }
    auto watch = std::make_shared<ConnectionWatch>(req.local_port, req.remote_addr, req.remote_port);
    if (!stream) {
      auto responses = AwaitAll(*q, *watch, *cancel);
      std::vector<const InferResponse*> data;
      for (const auto& resp : responses) {
        if (!resp.error.ok() && data.empty()) return SendError(res, resp.error);
        if (!resp.empty()) data.push_back(&resp);
      }
      if (data.size() != 1) {
        res.status = 200;
        return res.set_content(Dump(json{{"error", "generate expects model to produce exactly 1 response, use generate "
                                               "stream for model that generates various number of responses"}}),
                               "application/json");
      }
      return res.set_content(Dump(GenerateResponseToJson(*data[0])), "application/json");
    }
    res.status = 200;
    res.set_chunked_content_provider(
        "text/event-stream; charset=utf-8",
        [q, watch, cancel](size_t, httplib::DataSink& sink) {
          // Nothing may escape a content provider (it runs outside httplib's handler guard).
          try {
          while (true) {
            auto r = q->Pop(std::chrono::milliseconds(20));
            if (!r) {
              if (watch->PeerClosed()) {
                cancel->Cancel();
                return false;
              }
              continue;
            }
            if (!r->empty()) {
              const std::string event = "data: " + Dump(GenerateResponseToJson(*r)) + "\n\n";
              if (!sink.write(event.data(), event.size())) {
                cancel->Cancel();
                return false;
              }
            }
            if (r->final) {
              sink.done();
              return true;
            }
          }
          } catch (const std::exception& e) {
            cancel->Cancel();
            const std::string event = "data: " + Dump(json{{"error", std::string("internal error: ") + e.what()}}) + "\n\n";
            sink.write(event.data(), event.size());
            sink.done();
            return true;
          }
        },
        [q, cancel](bool success) {
          // The provider ended early (write failed or the client left): free the engine request.
          if (!success) cancel->Cancel();
        });
  }

  serving::Server* s_;
};

}  // namespace

HttpFrontend::HttpFrontend(serving::Server* server, HttpOptions options) : server_(server), options_(std::move(options)) {}

HttpFrontend::~HttpFrontend() { Stop(); }

StatusOr<int> HttpFrontend::Start() {
  http_ = std::make_unique<httplib::Server>();
  const int threads = options_.num_threads;
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http_->set_payload_max_length(options_.max_input_bytes);
  http_->set_read_timeout(60);
  http_->set_write_timeout(60);
  auto handlers = std::make_shared<Handlers>(server_);
  auto h = [handlers](const httplib::Request& req, httplib::Response& res) { handlers->Dispatch(req, res); };
  http_->Get(".*", h);
  http_->Post(".*", h);
  http_->Put(".*", h);
  http_->Delete(".*", h);
  http_->Patch(".*", h);
  http_->set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.body.empty()) {
      if (res.status == 413) {
        res.status = 400;
        res.set_content(Dump(json{{"error", "request exceeds the maximum allowed input size"}}), "application/json");
      } else {
        res.set_content(Dump(json{{"error", res.status == 404 ? "Not Found" : res.status == 405 ? "Method Not Allowed" : "Bad Request"}}), "application/json");
      }
    }
  });
  int port = options_.port;
  if (port == 0) {
    port = http_->bind_to_any_port(options_.address);
  } else if (!http_->bind_to_port(options_.address, port)) {
    port = -1;
  }
  if (port < 0) return UnavailableError("HTTP: cannot bind " + options_.address + ":" + std::to_string(options_.port));
  RaiseListenBacklog(port);
  thread_ = std::thread([this] { http_->listen_after_bind(); });
  return port;
}

void HttpFrontend::Stop() {
  if (http_) http_->stop();
  if (thread_.joinable()) thread_.join();
}

MetricsFrontend::MetricsFrontend(serving::Server* server, std::string address, int port)
    : server_(server), address_(std::move(address)), port_(port) {}

MetricsFrontend::~MetricsFrontend() { Stop(); }

StatusOr<int> MetricsFrontend::Start() {
  http_ = std::make_unique<httplib::Server>();
  http_->new_task_queue = [] { return new httplib::ThreadPool(4); };
  http_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(server_->metrics().Serialize(), "text/plain; version=0.0.4; charset=utf-8");
  });
  int port = port_ == 0 ? http_->bind_to_any_port(address_) : (http_->bind_to_port(address_, port_) ? port_ : -1);
  if (port < 0) return UnavailableError("metrics: cannot bind " + address_ + ":" + std::to_string(port_));
  thread_ = std::thread([this] { http_->listen_after_bind(); });
  return port;
}

void MetricsFrontend::Stop() {
  if (http_) http_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace inflight::frontends
