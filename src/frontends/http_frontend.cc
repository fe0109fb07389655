#include "frontends/http_frontend.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <thread>

#include "base/logging.h"
#include "frontends/compression.h"
#include "frontends/kserve_json.h"
#include "frontends/kv_events_http.h"
#include "frontends/log_settings.h"
#include "frontends/openai_json.h"
#include "frontends/shared_memory.h"
#include "serving/model_config_util.h"

namespace inflight::frontends {
namespace {

using nlohmann::json;
using serving::InferRequest;
using serving::InferResponse;

int HttpStatus(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk:
      return 200;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kUnavailable:
    case StatusCode::kResourceExhausted:
      return 503;
    case StatusCode::kUnimplemented:
      return 501;
    case StatusCode::kInternal:
    case StatusCode::kDataLoss:
      return 500;
    default:
      return 400;
  }
}

HttpResponse Json(int status, const json& j) { return {status, "application/json", Dump(j), {}}; }

HttpResponse Error(int status, const std::string& message) {
  HttpResponse r = Json(status, json{{"error", message}});
  // Overload (queue full, shutting down): tell the client when to come back.
  if (status == 503) r.headers.emplace_back("Retry-After", "1");
  return r;
}

HttpResponse Error(const Status& s) { return Error(HttpStatus(s), s.message()); }

std::string SseEvent(const json& j) { return "data: " + Dump(j) + "\n\n"; }

struct Route {
  std::string model, version,
      action;  // action: "", ready, config, infer, generate, generate_stream, stats
};

// /v2/models/{m}[/versions/{v}][/{action}]
std::optional<Route> ParseModelRoute(const std::vector<std::string>& seg) {
  if (seg.size() < 3 || seg[0] != "v2" || seg[1] != "models") return std::nullopt;
  Route r;
  r.model = seg[2];
  size_t i = 3;
  if (seg.size() > i + 1 && seg[i] == "versions") {
    r.version = seg[i + 1];
    if (r.version.empty() || r.version.find_first_not_of("0123456789") != std::string::npos)
      return std::nullopt;
    i += 2;
  }
  if (seg.size() == i + 1) {
    r.action = seg[i];
  } else if (seg.size() != i) {
    return std::nullopt;
  }
  static const char* kActions[] = {"",      "ready",     "config",
                                   "infer", "generate",  "generate_stream",
                                   "stats", "kv_events", "kv_blocks"};
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

// Collects one request's responses. The serving core calls the sink on whatever serving thread
// produced a response (an LLM model's delivery thread, for LLM steps; never the engine
// thread); each response is handed to the connection's strand, where it is encoded and
// written.
template <typename OnResponse>
serving::ResponseSink SinkOnStrand(const std::shared_ptr<HttpReply>& reply,
                                   OnResponse on_response) {
  auto handler = std::make_shared<OnResponse>(std::move(on_response));
  return [reply, handler](InferResponse&& r) {
    auto resp = std::make_shared<InferResponse>(std::move(r));
    reply->Post([handler, resp] { (*handler)(std::move(*resp)); });
  };
}

// As SinkOnStrand for a streamed reply, with back-pressure: a response counts in the reply's
// output credit from the moment it is produced until it has been encoded and queued (its
// encoded chunk counts from then until written), so the engine pauses the request while its
// client is behind instead of responses piling up on the strand.
constexpr int64_t kJsonExpansion = 4;
template <typename OnResponse>
serving::ResponseSink CreditedSinkOnStrand(const std::shared_ptr<HttpReply>& reply,
                                           OnResponse on_response) {
  auto handler = std::make_shared<OnResponse>(std::move(on_response));
  std::shared_ptr<OutputCredit> credit = reply->output_credit();
  return [reply, handler, credit](InferResponse&& r) {
    // Counted at what it may become as JSON (a 4-byte float is up to ~15 characters), so the
    // responses waiting here cannot outgrow the stream buffer's bound once encoded.
    int64_t bytes = static_cast<int64_t>(sizeof(InferResponse));
    for (const serving::InferTensor& t : r.outputs)
      bytes += kJsonExpansion * static_cast<int64_t>(t.data.size());
    credit->Add(bytes);
    auto resp = std::make_shared<InferResponse>(std::move(r));
    reply->Post([handler, resp, credit, bytes] {
      (*handler)(std::move(*resp));
      credit->Release(bytes);
    });
  };
}

HttpResponse RateLimited(const Admitted& a) {
  HttpResponse r = Json(429, json{{"error", a.reason}});
  r.headers.emplace_back("Retry-After", std::to_string(a.retry_after_s));
  return r;
}

class Handlers {
 public:
  Handlers(serving::Server* s, SharedMemoryRegistry* shm, std::shared_ptr<OpenAiFrontend> openai,
           std::shared_ptr<WebFrontend> web, std::shared_ptr<KvEventStreams> kv_streams,
           AccessPolicy access, size_t max_body_bytes)
      : s_(s),
        shm_(*shm),
        openai_(std::move(openai)),
        web_(std::move(web)),
        kv_streams_(std::move(kv_streams)),
        access_(std::move(access)),
        max_body_bytes_(max_body_bytes) {}

  void Dispatch(HttpRequest req, std::shared_ptr<HttpReply> reply) {
    const auto seg = Split(req.path);
    // Credentials first: without them a caller learns nothing, not even which models exist.
    std::string tenant;
    if (const auto group = HttpApiGroup(seg)) {
      // Kubernetes probes carry no key: the server's liveness/readiness is open by default.
      const bool probe = seg.size() == 3 && seg[0] == "v2" && seg[1] == "health";
      auto who = AuthorizeHttp(
          access_, *group, req,
          !seg.empty() && (seg[0] == "v1" || seg[0] == "tokenize" || seg[0] == "detokenize"),
          probe);
      if (auto* refusal = std::get_if<HttpResponse>(&who)) return reply->Send(std::move(*refusal));
      tenant = std::get<std::string>(std::move(who));
    }
    const bool get = req.method == "GET", post = req.method == "POST";
    auto method = [&](bool ok) {
      if (!ok) reply->Send(Error(405, "Method Not Allowed"));
      return ok;
    };
    auto status_only = [&](int status) { reply->Send({status, "", "", {}}); };
    if (seg == std::vector<std::string>{"v2", "health", "live"}) {
      if (method(get)) status_only(s_->live() ? 200 : 400);
      return;
    }
    if (seg == std::vector<std::string>{"v2", "health", "ready"}) {
      if (method(get)) status_only(s_->ready() ? 200 : 400);
      return;
    }
    if (!seg.empty() &&
        (seg[0] == "v1" || (seg.size() == 1 && (seg[0] == "tokenize" || seg[0] == "detokenize")))) {
      return openai_->Handle(req, seg, tenant, std::move(reply));
    }
    if (web_->Handle(req, reply)) return;
    if (seg == std::vector<std::string>{"v2"}) {
      if (method(get)) reply->Send(Json(200, ServerMetadata()));
      return;
    }
    if (seg == std::vector<std::string>{"v2", "models", "stats"}) {
      if (method(get)) reply->Send(Stats("", ""));
      return;
    }
    if (seg.size() >= 3 && seg[0] == "v2" && seg[1] == "repository") {
      return Repository(seg, req, std::move(reply));
    }
    if (seg == std::vector<std::string>{"v2", "trace", "setting"}) {
      if (req.method != "GET" && req.method != "POST")
        return reply->Send(Error(405, "Method Not Allowed"));
      return reply->Send(TraceSetting("", req));
    }
    if (seg.size() == 5 && seg[0] == "v2" && seg[1] == "models" && seg[3] == "trace" &&
        seg[4] == "setting") {
      if (req.method != "GET" && req.method != "POST")
        return reply->Send(Error(405, "Method Not Allowed"));
      if (!s_->ModelReady(seg[2], ""))
        return reply->Send(Error(404, "Request for unknown model: '" + seg[2] + "' is not found"));
      return reply->Send(TraceSetting(seg[2], req));
    }
    if (seg == std::vector<std::string>{"v2", "logging"}) {
      if (req.method != "GET" && req.method != "POST")
        return reply->Send(Error(405, "Method Not Allowed"));
      return reply->Send(Logging(req));
    }
    if (seg.size() >= 3 && seg[0] == "v2" && seg[1] == "systemsharedmemory") {
      return reply->Send(SharedMemory(seg, req));
    }
    if (seg.size() >= 3 && seg[0] == "v2" && seg[1] == "cudasharedmemory") {
      return reply->Send(Error(501, "CUDA shared memory is not supported by this server"));
    }
    if (auto r = ParseModelRoute(seg)) {
      if (r->action.empty()) {
        if (!method(get)) return;
        auto m = s_->GetModelMetadata(r->model, r->version);
        return reply->Send(m.ok() ? Json(200, MetadataToJson(*m)) : Error(m.status()));
      }
      if (r->action == "ready") {
        if (!method(get)) return;
        if (s_->ModelReady(r->model, r->version)) return status_only(200);
        return reply->Send(Error(400, "Model version not ready"));
      }
      if (r->action == "config") {
        if (!method(get)) return;
        auto c = s_->GetModelConfig(r->model, r->version);
        return reply->Send(c.ok() ? HttpResponse{200, "application/json", ModelConfigToJson(*c), {}}
                                  : Error(c.status()));
      }
      if (r->action == "stats") {
        if (method(get)) reply->Send(Stats(r->model, r->version));
        return;
      }
      if (r->action == "kv_events" || r->action == "kv_blocks") {
        if (!method(get)) return;
        if (r->action == "kv_events" && KvEventsStreamed(req.query))
          return kv_streams_->Start(reply, r->model, r->version, req.query);
        return reply->Send(r->action == "kv_events"
                               ? KvEventsResponse(*s_, r->model, r->version, req.query)
                               : KvBlocksResponse(*s_, r->model, r->version));
      }
      if (!method(post)) return;
      if (r->action == "infer") return Infer(*r, std::move(req), tenant, std::move(reply));
      return Generate(*r, req, tenant, std::move(reply), r->action == "generate_stream");
    }
    reply->Send(Error(404, "Not Found"));
  }

 private:
  static json ServerMetadata() {
    return {{"name", "inflight"},
            {"version", "0.4.0"},
            {"extensions",
             {"model_repository", "model_configuration", "system_shared_memory",
              "binary_tensor_data", "parameters", "statistics", "trace", "logging", "generate"}}};
  }

  // GET: the trace settings (global, or a model's); POST: change the given ones (all or
  // none; null clears a model's override), answer all.
  HttpResponse TraceSetting(const std::string& model, const HttpRequest& req) {
    serving::Tracer& tracer = s_->tracer();
    if (req.method == "POST") {
      auto body = ParseJsonBounded(req.body);
      if (!body.ok() || !body->is_object())
        return Error(400, "failed to parse the request JSON buffer");
      std::map<std::string, std::optional<std::vector<std::string>>> values;
      for (const auto& [key, v] : body->items()) {
        if (v.is_null()) {
          values[key] = std::nullopt;
        } else if (v.is_string()) {
          values[key] = std::vector<std::string>{v.get<std::string>()};
        } else if (v.is_array() &&
                   std::all_of(v.begin(), v.end(), [](const json& x) { return x.is_string(); })) {
          values[key] = v.get<std::vector<std::string>>();
        } else {
          return Error(400,
                       "trace setting '" + key + "' must be a string, a list of strings or null");
        }
      }
      const Status s = tracer.Update(model, values);
      if (!s.ok()) return Error(s);
    }
    json out = json::object();
    for (const auto& [k, v] : tracer.Settings(model)) {
      out[k] = k == "trace_level" ? json(v) : json(v.front());
    }
    return Json(200, out);
  }

  // GET: the logging settings; POST: change the given ones (all or none), answer all.
  static HttpResponse Logging(const HttpRequest& req) {
    LogSettings settings = GetLogSettings();
    if (req.method == "POST") {
      auto body = ParseJsonBounded(req.body);
      if (!body.ok() || !body->is_object())
        return Error(400, "failed to parse the request JSON buffer");
      for (const auto& [key, v] : body->items()) {
        LogSettingValue value;
        if (v.is_boolean()) {
          value = v.get<bool>();
        } else if (v.is_number_unsigned()) {
          value = v.get<uint64_t>();
        } else if (v.is_string()) {
          value = v.get<std::string>();
        } else if (!v.is_null()) {
          return Error(400, "invalid value for logging setting '" + key + "'");
        }
        const Status s = ApplyLogSetting(&settings, key, value);
        if (!s.ok()) return Error(s);
      }
      SetLogSettings(settings);
    }
    json out = json::object();
    for (const auto& [k, v] : LogSettingsView(settings)) {
      std::visit(
          [&, k = k](const auto& x) {
            using T = std::decay_t<decltype(x)>;
            if constexpr (std::is_same_v<T, std::monostate>)
              out[k] = nullptr;
            else
              out[k] = x;
          },
          v);
    }
    return Json(200, out);
  }

  // /v2/systemsharedmemory[/region/{name}]/{status,register,unregister}
  HttpResponse SharedMemory(const std::vector<std::string>& seg, const HttpRequest& req) {
    std::string name, action;
    if (seg.size() == 3) {
      action = seg[2];
    } else if (seg.size() == 5 && seg[2] == "region") {
      name = seg[3];
      action = seg[4];
    } else {
      return Error(404, "Not Found");
    }
    if (action == "status") {
      if (req.method != "GET") return Error(405, "Method Not Allowed");
      auto st = shm_.GetStatus(name);
      if (!st.ok()) return Error(st.status());
      json arr = json::array();
      for (const auto& r : *st) {
        arr.push_back(
            {{"name", r.name}, {"key", r.key}, {"offset", r.offset}, {"byte_size", r.byte_size}});
      }
      return Json(200, arr);
    }
    if (req.method != "POST") return Error(405, "Method Not Allowed");
    if (action == "unregister") {
      const Status s = shm_.Unregister(name);
      return s.ok() ? HttpResponse{200, "", "", {}} : Error(s);
    }
    if (action != "register" || name.empty()) return Error(404, "Not Found");
    auto body = ParseJsonBounded(req.body);
    if (!body.ok() || !body->is_object())
      return Error(400, "failed to parse the request JSON buffer");
    const json& b = *body;
    auto u64 = [&](const char* key, uint64_t* out) {
      if (!b.contains(key)) return key == std::string("offset");
      const json& v = b[key];
      if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0)) return false;
      *out = v.is_number_unsigned() ? v.get<uint64_t>() : static_cast<uint64_t>(v.get<int64_t>());
      return true;
    };
    uint64_t offset = 0, byte_size = 0;
    if (!b.contains("key") || !b["key"].is_string() || !u64("offset", &offset) ||
        !u64("byte_size", &byte_size)) {
      return Error(
          400,
          "shared memory register needs a string 'key' and unsigned 'byte_size' (and 'offset')");
    }
    const Status s = shm_.Register(name, b["key"].get<std::string>(), offset, byte_size);
    return s.ok() ? HttpResponse{200, "", "", {}} : Error(s);
  }

  HttpResponse Stats(const std::string& model, const std::string& version) {
    auto st = s_->Statistics(model, version);
    if (!st.ok()) return Error(st.status());
    return Json(200, StatisticsToJson(*st));
  }

  void Repository(const std::vector<std::string>& seg, const HttpRequest& req,
                  std::shared_ptr<HttpReply> reply) {
    // /v2/repository[/{repo}]/index and /v2/repository[/{repo}]/models/{m}/load|unload
    size_t i = 2;
    if (seg.size() == 4 && seg[3] == "index") i = 3;
    if (seg.size() == 6 && seg[3] == "models") i = 3;
    if (req.method != "POST") return reply->Send(Error(405, "Method Not Allowed"));
    // tritonclient.http posts the index request with no body at all.
    auto parsed = req.body.empty() ? StatusOr<json>(json::object()) : ParseJsonBounded(req.body);
    if (!parsed.ok() || !parsed->is_object()) {
      return reply->Send(Error(400, "failed to parse the request JSON buffer"));
    }
    const json body = std::move(parsed).value();
    if (seg.size() == i + 1 && seg[i] == "index") {
      const bool ready =
          body.contains("ready") && body["ready"].is_boolean() && body["ready"].get<bool>();
      json arr = json::array();
      for (const auto& e : s_->RepositoryIndex(ready)) {
        json x = {{"name", e.name}};
        if (!e.version.empty()) x["version"] = e.version;
        if (!e.state.empty()) x["state"] = e.state;
        if (!e.reason.empty()) x["reason"] = e.reason;
        arr.push_back(std::move(x));
      }
      return reply->Send(Json(200, arr));
    }
    if (seg.size() == i + 3 && seg[i] == "models" &&
        (seg[i + 2] == "load" || seg[i + 2] == "unload")) {
      const std::string model = seg[i + 1];
      const json params = body.contains("parameters") && body["parameters"].is_object()
                              ? body["parameters"]
                              : json::object();
      const bool load = seg[i + 2] == "load";
      std::optional<std::string> config;
      if (load) {
        if (params.contains("config")) {
          if (!params["config"].is_string())
            return reply->Send(Error(400, "load parameter 'config' must be a string"));
          config = params["config"].get<std::string>();
        }
        for (const auto& [k, v] : params.items()) {
          if (k.rfind("file:", 0) == 0) {
            return reply->Send(
                Error(501, "load parameter '" + k + "': file overrides are not supported"));
          }
        }
      }
      const bool deps = params.contains("unload_dependents") &&
                        params["unload_dependents"].is_boolean() &&
                        params["unload_dependents"].get<bool>();
      // Loading a model takes seconds: off the I/O threads.
      std::thread([this, reply, model, config, load, deps] {
        const Status s = load ? s_->LoadModel(model, config) : s_->UnloadModel(model, deps);
        reply->Send(s.ok() ? HttpResponse{200, "", "", {}} : Error(s));
      }).detach();
      return;
    }
    reply->Send(Error(404, "Not Found"));
  }

  void Infer(const Route& route, HttpRequest req, const std::string& tenant,
             std::shared_ptr<HttpReply> reply) {
    auto config = s_->GetModelConfig(route.model, route.version);
    if (!config.ok()) return reply->Send(Error(config.status()));
    if (serving::IsDecoupled(*config)) {
      return reply->Send(
          Error(501, "HTTP end point doesn't support models with decoupled transaction policy"));
    }
    // tritonclient's request_compression_algorithm: the body (binary data included) is
    // compressed, and Inference-Header-Content-Length counts the decompressed JSON header.
    // The decompressed body is held to the same bound as a plain one.
    auto coding = ParseContentEncoding(req.Header("Content-Encoding"));
    if (!coding.ok()) return reply->Send(Error(coding.status()));
    if (*coding != ContentCoding::kIdentity) {
      auto body = Decompress(req.body, *coding, max_body_bytes_);
      if (!body.ok()) {
        return reply->Send(Error(400, body.status().code() == StatusCode::kResourceExhausted
                                          ? "request exceeds the maximum allowed input size"
                                          : body.status().message()));
      }
      req.body = std::move(body).value();
    }
    // response_compression_algorithm: Accept-Encoding asks for a compressed answer (the
    // Inference-Header-Content-Length of a binary one still counts the plain JSON header).
    const ContentCoding answer_coding = PreferredCoding(req.Header("Accept-Encoding"));
    int64_t header_len = -1;
    if (req.HasHeader("Inference-Header-Content-Length")) {
      const std::string v = req.Header("Inference-Header-Content-Length");
      char* end = nullptr;
      errno = 0;
      header_len = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || errno != 0 || header_len < 0 ||
          header_len > static_cast<int64_t>(req.body.size())) {
        return reply->Send(
            Error(400, "Inference-Header-Content-Length header value '" + v + "' is out of range"));
      }
    }
    const SharedMemoryReader shm_reader = [this](const SharedMemoryRef& ref) {
      return shm_.Read(ref.region, ref.offset, ref.byte_size);
    };
    auto parsed = ParseInferRequest(req.body, header_len, &shm_reader);
    if (!parsed.ok()) return reply->Send(Error(parsed.status()));
    auto shape = std::make_shared<ParsedInfer>(std::move(parsed).value());
    InferRequest r = std::move(shape->request);
    r.model_name = route.model;
    r.model_version = route.version.empty() ? -1 : std::stoll(route.version);
    Admitted admitted = AdmitInference(access_, tenant, &r);
    if (!admitted.ticket) return reply->Send(RateLimited(admitted));
    auto cancel = r.cancel;
    reply->OnClientGone([cancel](const std::string&) { cancel->Cancel(); });
    auto responses = std::make_shared<std::vector<InferResponse>>();
    s_->Infer(
        std::move(r),
        HoldUntilFinal(
            std::move(admitted.ticket), SinkOnStrand(reply, [this, reply, responses, shape,
                                                             answer_coding](InferResponse&& resp) {
              const bool final = resp.final;
              responses->push_back(std::move(resp));
              if (!final) return;
              const InferResponse* data = nullptr;
              for (const auto& x : *responses) {
                if (!x.error.ok()) return reply->Send(Error(x.error));
                if (!x.empty() && !data) data = &x;
              }
              // Only an empty final response (e.g. the answer to a `stop` request): the reference
              // answers with no tensors.
              if (!data) data = &responses->back();
              for (const auto& t : data->outputs) {
                auto shm = shape->shm_outputs.find(t.name);
                if (shm == shape->shm_outputs.end()) continue;
                const Status written = shm_.Write(shm->second.region, shm->second.offset,
                                                  shm->second.byte_size, t.data);
                if (!written.ok()) return reply->Send(Error(written));
              }
              std::string binary;
              const std::string header = Dump(InferResponseToJson(*data, *shape, &binary));
              HttpResponse out{200, "application/json", header, {}};
              if (!binary.empty()) {
                out.content_type = "application/octet-stream";
                out.body += binary;
                out.headers.emplace_back("Inference-Header-Content-Length",
                                         std::to_string(header.size()));
              }
              if (answer_coding != ContentCoding::kIdentity) {
                out.body = Compress(out.body, answer_coding);
                out.headers.emplace_back("Content-Encoding",
                                         std::string(CodingName(answer_coding)));
              }
              reply->Send(std::move(out));
            })));
  }

  void Generate(const Route& route, const HttpRequest& req, const std::string& tenant,
                std::shared_ptr<HttpReply> reply, bool stream) {
    const std::string encoding = req.Header("Content-Encoding");
    if (!encoding.empty() && encoding != "identity") {
      return reply->Send(
          Error(400, "Unsupported content-encoding '" + encoding + "' for generate"));
    }
    auto config = s_->GetModelConfig(route.model, route.version);
    if (!config.ok()) return reply->Send(Error(config.status()));
    auto parsed = ParseGenerateRequest(req.body, *config);
    if (!parsed.ok()) return reply->Send(Error(parsed.status()));
    InferRequest r = std::move(parsed).value();
    r.model_name = route.model;
    r.model_version = route.version.empty() ? -1 : std::stoll(route.version);
    // A TensorRT-LLM `stop` request (stop=true, the id of the request to stop): the backend
    // answers it with one empty final response, which is the answer here too.
    bool stop_request = false;
    if (const serving::InferTensor* t = r.FindInput("stop")) {
      auto v = t->AsInt64();
      stop_request = v.ok() && !v->empty() && v->front() != 0;
    }
    Admitted admitted = AdmitInference(access_, tenant, &r);
    if (!admitted.ticket) return reply->Send(RateLimited(admitted));
    auto ticket = std::move(admitted.ticket);
    auto cancel = r.cancel;
    // Why the client is gone, if the server gave up on it (a slow reader): its last event.
    auto gone_reason = std::make_shared<std::string>();
    reply->OnClientGone([cancel, gone_reason](const std::string& reason) {
      *gone_reason = reason;
      cancel->Cancel();
    });
    if (!stream) {
      auto data = std::make_shared<std::vector<InferResponse>>();
      s_->Infer(
          std::move(r),
          HoldUntilFinal(
              std::move(ticket),
              SinkOnStrand(reply, [reply, data, stop_request](InferResponse&& resp) {
                if (!resp.error.ok() && data->empty()) return reply->Send(Error(resp.error));
                const bool final = resp.final;
                if (!resp.empty() || (final && stop_request && data->empty()))
                  data->push_back(std::move(resp));
                if (!final) return;
                if (data->size() != 1) {
                  return reply->Send(Json(
                      200,
                      json{{"error",
                            "generate expects model to produce exactly 1 response, use generate "
                            "stream for model that generates various number of responses"}}));
                }
                reply->Send(Json(200, GenerateResponseToJson(data->front())));
              })));
      return;
    }
    auto started = std::make_shared<bool>(false);
    r.output_credit = reply->output_credit();  // the engine pauses while the client is behind
    s_->Infer(std::move(r),
              HoldUntilFinal(
                  std::move(ticket),
                  CreditedSinkOnStrand(reply, [reply, started, gone_reason](InferResponse&& resp) {
                    if (!*started) {
                      // A request refused before any output (config checks, the engine's
                      // refusals) is a plain JSON error with its status, as the reference
                      // answers.
                      if (!resp.error.ok() && resp.final) return reply->Send(Error(resp.error));
                      reply->StartStream(200, "text/event-stream; charset=utf-8");
                      *started = true;
                    }
                    if (!resp.error.ok()) {
                      // Ended by an error after output started (shutdown, a slow reader, an
                      // engine error): the stream says so in a last event instead of looking
                      // complete.
                      const std::string message =
                          gone_reason->empty() ? resp.error.message() : *gone_reason;
                      reply->Write(SseEvent(json{{"error", message}}), /*force=*/true);
                    } else if (!resp.empty()) {
                      reply->Write(SseEvent(GenerateResponseToJson(resp)));
                    }
                    if (resp.final) reply->EndStream();
                  })));
  }

  serving::Server* s_;
  SharedMemoryRegistry& shm_;  // shared with the gRPC frontend, as in Triton
  std::shared_ptr<OpenAiFrontend> openai_;
  std::shared_ptr<WebFrontend> web_;
  std::shared_ptr<KvEventStreams> kv_streams_;
  const AccessPolicy access_;
  const size_t max_body_bytes_;  // also the bound of a decompressed body
};

}  // namespace

std::optional<serving::ApiGroup> HttpApiGroup(const std::vector<std::string>& seg) {
  using G = serving::ApiGroup;
  if (seg.empty() || seg == std::vector<std::string>{"index.html"}) return std::nullopt;
  const std::string& top = seg[0];
  if (top == "v1") {
    return seg.size() >= 2 && seg[1] == "models" ? G::kMetadata : G::kInference;
  }
  if (top == "tokenize" || top == "detokenize") return G::kInference;
  if (top == "inflight") return G::kMetrics;  // the live dashboard's data
  if (top != "v2" || seg.size() == 1) return G::kMetadata;
  const std::string& second = seg[1];
  if (second == "health") return G::kHealth;
  if (second == "repository") return G::kModelRepository;
  if (second == "trace") return G::kTrace;
  if (second == "logging") return G::kLogging;
  if (second == "systemsharedmemory" || second == "cudasharedmemory") return G::kSharedMemory;
  if (second == "models") {
    if (seg.size() == 3 && seg[2] == "stats") return G::kStatistics;
    const std::string& last = seg.back();
    if (seg.size() >= 4) {
      if (last == "ready") return G::kHealth;
      if (last == "config") return G::kModelConfig;
      if (last == "stats" || last == "kv_events" || last == "kv_blocks") return G::kStatistics;
      if (last == "setting") return G::kTrace;
      if (last == "infer" || last == "generate" || last == "generate_stream") return G::kInference;
    }
  }
  return G::kMetadata;
}

std::variant<std::string, HttpResponse> AuthorizeHttp(const AccessPolicy& access,
                                                      serving::ApiGroup group,
                                                      const HttpRequest& req, bool openai_errors,
                                                      bool server_probe) {
  const auto lookup = [&req](std::string_view name) -> std::optional<std::string> {
    if (!req.HasHeader(name)) return std::nullopt;
    return req.Header(name);
  };
  // Anthropic's clients send their key as x-api-key instead of a bearer token.
  std::string authorization = req.Header("Authorization");
  if (authorization.empty() && req.HasHeader("x-api-key"))
    authorization = "Bearer " + req.Header("x-api-key");
  auto result =
      access.auth->Check(serving::Protocol::kHttp, group, authorization, lookup, server_probe);
  if (auto* p = std::get_if<serving::Principal>(&result)) return TenantOf(*p, req.remote_address);
  // No detail: which keys exist, or which group needs which, is not the caller's business.
  const bool forbidden = std::get<serving::AuthFailure>(result) == serving::AuthFailure::kForbidden;
  const int status = forbidden ? 403 : 401;
  const std::string message = forbidden ? "forbidden" : "unauthenticated";
  HttpResponse r =
      openai_errors
          ? HttpResponse{status, "application/json", Dump(OpenAiErrorJson(status, message)), {}}
          : Json(status, json{{"error", message}});
  if (!forbidden) r.headers.emplace_back("WWW-Authenticate", "Bearer");
  return r;
}

HttpFrontend::HttpFrontend(serving::Server* server, HttpServerOptions options,
                           SharedMemoryRegistry* shm, OpenAiOptions openai, AccessPolicy access)
    : server_(server),
      options_(std::move(options)),
      shm_(shm),
      access_(access),
      openai_(std::make_shared<OpenAiFrontend>(server, std::move(openai), access)),
      web_(std::make_shared<WebFrontend>(server)),
      kv_streams_(std::make_shared<KvEventStreams>(server)) {}

HttpFrontend::~HttpFrontend() { Stop(); }

StatusOr<int> HttpFrontend::Start() {
  RETURN_IF_ERROR(openai_->Init());
  auto handlers = std::make_shared<Handlers>(server_, shm_, openai_, web_, kv_streams_, access_,
                                             options_.max_body_bytes);
  http_ = std::make_unique<HttpServer>(
      options_, [handlers](HttpRequest req, std::shared_ptr<HttpReply> reply) {
        try {
          handlers->Dispatch(std::move(req), reply);
        } catch (const std::exception& e) {
          // Nothing a client sends may take an I/O thread down.
          reply->Send(Error(500, std::string("internal error: ") + e.what()));
        }
      });
  return http_->Start();
}

void HttpFrontend::StopAccepting() {
  if (http_) http_->StopAccepting();
}

void HttpFrontend::Stop(std::chrono::milliseconds grace) {
  web_->Stop();  // live dashboards end; their connections close with the rest
  kv_streams_->Stop();
  if (http_) http_->Stop(grace);
}

MetricsFrontend::MetricsFrontend(serving::Server* server, std::string address, int port,
                                 AccessPolicy access, TlsFiles tls)
    : server_(server),
      address_(std::move(address)),
      port_(port),
      access_(std::move(access)),
      tls_(std::move(tls)) {}

MetricsFrontend::~MetricsFrontend() { Stop(); }

StatusOr<int> MetricsFrontend::Start() {
  HttpServerOptions o;
  o.address = address_;
  o.port = port_;
  o.num_threads = 1;
  o.max_body_bytes = 1 << 20;
  o.tls = tls_;
  http_ =
      std::make_unique<HttpServer>(o, [this](HttpRequest req, std::shared_ptr<HttpReply> reply) {
        auto who = AuthorizeHttp(access_, serving::ApiGroup::kMetrics, req, false);
        if (auto* refusal = std::get_if<HttpResponse>(&who))
          return reply->Send(std::move(*refusal));
        if (req.path != "/metrics") return reply->Send(Error(404, "Not Found"));
        if (req.method != "GET") return reply->Send(Error(405, "Method Not Allowed"));
        reply->Send(
            {200, "text/plain; version=0.0.4; charset=utf-8", server_->metrics().Serialize(), {}});
      });
  return http_->Start();
}

void MetricsFrontend::Stop() {
  if (http_) http_->Stop();
}

}  // namespace inflight::frontends
