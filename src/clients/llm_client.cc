#include "clients/llm_client.h"

#include <grpcpp/grpcpp.h>
#include <httplib.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "grpc_service.grpc.pb.h"

namespace inflight::clients {
namespace {

using nlohmann::json;

// Splits "data: ...\n\n" events off the front of a growing SSE buffer.
std::vector<std::string> TakeSseEvents(std::string* buffer) {
  std::vector<std::string> out;
  size_t end;
  while ((end = buffer->find("\n\n")) != std::string::npos) {
    std::string block = buffer->substr(0, end);
    buffer->erase(0, end + 2);
    size_t pos = 0;
    while (pos < block.size()) {
      size_t nl = block.find('\n', pos);
      if (nl == std::string::npos) nl = block.size();
      const std::string line = block.substr(pos, nl - pos);
      if (line.rfind("data: ", 0) == 0) out.push_back(line.substr(6));
      pos = nl + 1;
    }
  }
  return out;
}

std::vector<double> Numbers(const json& v) {
  std::vector<double> out;
  if (v.is_number()) out.push_back(v.get<double>());
  if (v.is_array()) {
    for (const json& x : v) {
      if (x.is_number()) out.push_back(x.get<double>());
    }
  }
  return out;
}

// One generate / generate_stream JSON object -> event. Error objects -> the error message.
std::optional<std::string> ParseGenerateObject(const json& j, GenEvent* e) {
  if (j.contains("error"))
    return j["error"].is_string() ? j["error"].get<std::string>() : j["error"].dump();
  if (j.contains("text_output")) {
    const json& t = j["text_output"];
    if (t.is_string()) {
      e->text = t.get<std::string>();
    } else if (t.is_array()) {
      for (const json& s : t) e->text += s.is_string() ? s.get<std::string>() : "";
    }
  }
  if (j.contains("output_ids")) {
    for (double id : Numbers(j["output_ids"])) e->token_ids.push_back(static_cast<int32_t>(id));
  }
  if (j.contains("batch_index") && j["batch_index"].is_number())
    e->batch_index = j["batch_index"].get<int64_t>();
  for (const char* k :
       {"cum_log_probs", "output_log_probs", "context_logits", "generation_logits"}) {
    if (j.contains(k)) e->extra[k] = Numbers(j[k]);
  }
  e->num_tokens = !e->token_ids.empty() ? static_cast<int64_t>(e->token_ids.size()) : 1;
  return std::nullopt;
}

// A host as it stands in a URL (an IPv6 address in brackets).
std::string HostForUrl(const std::string& host) {
  return host.find(':') != std::string::npos && host.front() != '[' ? "[" + host + "]" : host;
}

// The whole file, or nullopt when it cannot be read.
std::optional<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  if (!in.good() && !in.eof()) return std::nullopt;
  return s.str();
}

std::shared_ptr<grpc::ChannelCredentials> GrpcCredentials(const ClientOptions& o) {
  if (!o.tls) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  if (!o.tls_ca.empty()) ssl.pem_root_certs = ReadWholeFile(o.tls_ca).value_or("");
  if (!o.tls_cert.empty()) ssl.pem_cert_chain = ReadWholeFile(o.tls_cert).value_or("");
  if (!o.tls_key.empty()) ssl.pem_private_key = ReadWholeFile(o.tls_key).value_or("");
  return grpc::SslCredentials(ssl);
}

class HttpClient : public LlmClient {
 public:
  explicit HttpClient(const ClientOptions& o)
      : o_(o),
        http_((o.tls ? "https://" : "http://") + HostForUrl(o.host) + ":" + std::to_string(o.port),
              o.tls_cert, o.tls_key) {
    if (o.tls) {
      http_.enable_server_certificate_verification(true);
      if (!o.tls_ca.empty()) http_.set_ca_cert_path(o.tls_ca);
    }
    http_.set_connection_timeout(5);
    http_.set_read_timeout(o.timeout_ms / 1000 + 1);
    http_.set_write_timeout(30);
    if (!o.api_key.empty()) http_.set_default_headers({{"Authorization", "Bearer " + o.api_key}});
  }

  GenOutcome Generate(const GenRequest& r,
                      const std::function<bool(const GenEvent&)>& on_event) override {
    GenOutcome out;
    out.start = Clock::now();
    json body;
    std::string path;
    const bool openai = o_.protocol == Protocol::kOpenAi || o_.protocol == Protocol::kOpenAiChat;
    const bool chat = o_.protocol == Protocol::kOpenAiChat;
    if (openai) {
      path = chat ? "/v1/chat/completions" : "/v1/completions";
      body = {{"model", o_.model}, {"max_tokens", r.max_tokens}, {"stream", r.streaming}};
      if (chat)
        body["messages"] = json::array({{{"role", "user"}, {"content", r.text}}});
      else
        body["prompt"] = r.text;
      if (r.temperature) body["temperature"] = *r.temperature;
      if (r.top_p) body["top_p"] = *r.top_p;
      if (r.top_k) body["top_k"] = *r.top_k;
      if (r.seed) body["seed"] = *r.seed;
      if (r.min_tokens) body["min_tokens"] = *r.min_tokens;  // vLLM's extension, served by inflight
      if (r.streaming) body["stream_options"] = {{"include_usage", true}};
    } else if (!r.input_ids.empty()) {
      // The tensorrt_llm model's own input names.
      path = "/v2/models/" + o_.model + (r.streaming ? "/generate_stream" : "/generate");
      body = {{"input_ids", r.input_ids},
              {"input_lengths", r.input_ids.size()},
              {"request_output_len", r.max_tokens},
              {"streaming", r.streaming},
              {"exclude_input_in_output", r.exclude_input_in_output}};
      if (r.temperature) body["temperature"] = *r.temperature;
      if (r.top_k) body["runtime_top_k"] = *r.top_k;
      if (r.top_p) body["runtime_top_p"] = *r.top_p;
      if (r.seed) body["seed"] = *r.seed;
      if (r.min_tokens) body["min_tokens"] = *r.min_tokens;
      if (r.end_id) body["end_id"] = *r.end_id;
    } else {
      path = "/v2/models/" + o_.model + (r.streaming ? "/generate_stream" : "/generate");
      body = {{"text_input", r.text},
              {"max_tokens", r.max_tokens},
              {"stream", r.streaming},
              {"exclude_input_in_output", r.exclude_input_in_output}};
      if (r.temperature) body["temperature"] = *r.temperature;
      if (r.top_k) body["top_k"] = *r.top_k;
      if (r.top_p) body["top_p"] = *r.top_p;
      if (r.seed) body["seed"] = *r.seed;
      if (r.min_tokens) body["min_tokens"] = *r.min_tokens;
      if (r.end_id) body["end_id"] = *r.end_id;
    }
    if (!openai) {
      if (!r.id.empty()) body["id"] = r.id;
      if (r.return_log_probs) body["return_log_probs"] = true;
      if (r.return_context_logits) body["return_context_logits"] = true;
      if (r.return_generation_logits) body["return_generation_logits"] = true;
    }
    httplib::Request req;
    req.method = "POST";
    req.path = path;
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    std::string buffer, whole;
    bool streaming_body = false;
    std::string stream_error;
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      buffer.append(data, n);
      if (!streaming_body && buffer.rfind("data: ", 0) != 0) {
        whole.append(data, n);
        buffer.clear();
        return true;
      }
      streaming_body = true;
      for (const std::string& payload : TakeSseEvents(&buffer)) {
        if (payload == "[DONE]") continue;
        json j = json::parse(payload, nullptr, false);
        GenEvent e;
        e.time = Clock::now();
        if (j.is_discarded()) {
          stream_error = "unparsable event: " + payload.substr(0, 200);
          return false;
        }
        if (openai) {
          if (j.contains("error")) {
            stream_error = j["error"].dump();
            return false;
          }
          // A chunk is one token; a chat stream's opening chunk (the role) and the usage
          // chunk carry none (the usage chunk has the server's count).
          if (j.contains("usage") && j["usage"].is_object()) {
            out.reported_output_tokens = j["usage"].value("completion_tokens", int64_t{0});
          }
          if (!j.contains("choices") || j["choices"].empty()) continue;
          const json& c = j["choices"][0];
          if (chat) {
            if (c.contains("delta") && c["delta"].contains("role") &&
                c["delta"].value("content", "").empty())
              continue;
            e.text = c.contains("delta") ? c["delta"].value("content", "") : "";
          } else {
            e.text = c.value("text", "");
          }
          e.num_tokens = 1;
        } else if (auto err = ParseGenerateObject(j, &e)) {
          stream_error = *err;
          return false;
        }
        out.events.push_back(e);
        if (!on_event(out.events.back())) {
          out.stopped_early = true;
          return false;
        }
      }
      return true;
    };
    auto res = http_.send(req);
    out.end = Clock::now();
    if (!stream_error.empty()) {
      out.status = InternalError(stream_error);
      out.error_kind = "stream_error";
      return out;
    }
    if (out.stopped_early) return out;
    if (!res) {
      out.status = UnavailableError("HTTP " + o_.host + ":" + std::to_string(o_.port) + ": " +
                                    httplib::to_string(res.error()));
      out.error_kind = res.error() == httplib::Error::Connection ? "connect" : "connection_lost";
      return out;
    }
    if (res->status != 200) {
      json j = json::parse(whole, nullptr, false);
      out.status = InternalError(j.is_object() && j.contains("error") ? j["error"].dump() : whole);
      out.error_kind = "http_" + std::to_string(res->status);
      return out;
    }
    if (!streaming_body) {
      json j = json::parse(whole, nullptr, false);
      GenEvent e;
      e.time = out.end;
      if (j.is_discarded()) {
        out.status = InternalError("unparsable response: " + whole.substr(0, 200));
        out.error_kind = "protocol";
        return out;
      }
      if (openai) {
        if (j.contains("choices") && !j["choices"].empty()) {
          const json& c = j["choices"][0];
          e.text = chat ? (c.contains("message") ? c["message"].value("content", "") : "")
                        : c.value("text", "");
        }
        e.num_tokens = j.contains("usage") ? j["usage"].value("completion_tokens", 0) : 0;
      } else if (auto err = ParseGenerateObject(j, &e)) {
        out.status = InternalError(*err);
        out.error_kind = "stream_error";
        return out;
      }
      out.events.push_back(e);
      on_event(out.events.back());
    }
    return out;
  }

 private:
  ClientOptions o_;
  httplib::Client http_;
};

std::string ToRaw(const std::vector<int32_t>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

class GrpcClient : public LlmClient {
 public:
  explicit GrpcClient(const ClientOptions& o)
      : o_(o),
        stub_(inference::GRPCInferenceService::NewStub(grpc::CreateChannel(
            HostForUrl(o.host) + ":" + std::to_string(o.port), GrpcCredentials(o)))) {}

  GenOutcome Generate(const GenRequest& r,
                      const std::function<bool(const GenEvent&)>& on_event) override {
    GenOutcome out;
    out.start = Clock::now();
    std::vector<std::vector<int32_t>> rows = r.batch_input_ids;
    if (rows.empty()) rows.push_back(r.input_ids);
    inference::ModelInferRequest q;
    q.set_model_name(o_.model);
    q.set_id(r.id);
    const int64_t b = static_cast<int64_t>(rows.size());
    auto add = [&](const char* name, const char* dtype, std::vector<int64_t> shape,
                   std::string raw) {
      auto* in = q.add_inputs();
      in->set_name(name);
      in->set_datatype(dtype);
      for (int64_t d : shape) in->add_shape(d);
      q.add_raw_input_contents(std::move(raw));
    };
    auto per_row_i32 = [&](const char* name, int32_t v) {
      add(name, "INT32", {b, 1}, ToRaw(std::vector<int32_t>(b, v)));
    };
    auto per_row_bool = [&](const char* name, bool v) {
      add(name, "BOOL", {b, 1}, std::string(b, v ? '\1' : '\0'));
    };
    auto per_row_f32 = [&](const char* name, float v) {
      std::vector<float> vals(b, v);
      add(name, "FP32", {b, 1},
          std::string(reinterpret_cast<const char*>(vals.data()), vals.size() * 4));
    };
    size_t width = 0;
    for (const auto& row : rows) width = std::max(width, row.size());
    std::vector<int32_t> flat, lens;
    for (const auto& row : rows) {
      flat.insert(flat.end(), row.begin(), row.end());
      flat.insert(flat.end(), width - row.size(), 0);
      lens.push_back(static_cast<int32_t>(row.size()));
    }
    add("input_ids", "INT32", {b, static_cast<int64_t>(width)}, ToRaw(flat));
    add("input_lengths", "INT32", {b, 1}, ToRaw(lens));
    per_row_i32("request_output_len", r.max_tokens);
    per_row_bool("streaming", r.streaming);
    per_row_bool("exclude_input_in_output", r.exclude_input_in_output);
    if (r.temperature) per_row_f32("temperature", static_cast<float>(*r.temperature));
    if (r.top_p) per_row_f32("runtime_top_p", static_cast<float>(*r.top_p));
    if (r.top_k) per_row_i32("runtime_top_k", static_cast<int32_t>(*r.top_k));
    if (r.min_tokens) per_row_i32("min_tokens", static_cast<int32_t>(*r.min_tokens));
    if (r.end_id) per_row_i32("end_id", static_cast<int32_t>(*r.end_id));
    if (r.seed) {
      std::vector<uint64_t> seeds(b, static_cast<uint64_t>(*r.seed));
      add("seed", "UINT64", {b, 1},
          std::string(reinterpret_cast<const char*>(seeds.data()), seeds.size() * 8));
    }
    if (r.return_log_probs) per_row_bool("return_log_probs", true);
    if (r.return_context_logits) per_row_bool("return_context_logits", true);
    if (r.return_generation_logits) per_row_bool("return_generation_logits", true);

    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(o_.timeout_ms));
    if (!o_.api_key.empty()) ctx.AddMetadata("authorization", "Bearer " + o_.api_key);
    auto stream = stub_->ModelStreamInfer(&ctx);
    if (!stream->Write(q)) {
      out.end = Clock::now();
      grpc::Status s = stream->Finish();
      out.status = UnavailableError("gRPC " + o_.host + ":" + std::to_string(o_.port) + ": " +
                                    s.error_message());
      out.error_kind = s.error_code() == grpc::StatusCode::UNAVAILABLE
                           ? "connect"
                           : "grpc_" + std::to_string(s.error_code());
      return out;
    }
    stream->WritesDone();
    inference::ModelStreamInferResponse resp;
    while (stream->Read(&resp)) {
      if (!resp.error_message().empty()) {
        out.status = InternalError(resp.error_message());
        out.error_kind = "stream_error";
        ctx.TryCancel();
        break;
      }
      GenEvent e;
      e.time = Clock::now();
      const auto& ir = resp.infer_response();
      for (int i = 0; i < ir.outputs_size() && i < ir.raw_output_contents_size(); ++i) {
        const auto& o = ir.outputs(i);
        const std::string& raw = ir.raw_output_contents(i);
        if (o.datatype() == "INT32") {
          std::vector<int32_t> v(raw.size() / 4);
          if (!v.empty()) std::memcpy(v.data(), raw.data(), v.size() * 4);
          if (o.name() == "output_ids") e.token_ids = v;
          if (o.name() == "batch_index" && !v.empty()) e.batch_index = v[0];
        } else if (o.datatype() == "FP32") {
          std::vector<float> v(raw.size() / 4);
          if (!v.empty()) std::memcpy(v.data(), raw.data(), v.size() * 4);
          e.extra[o.name()] = std::vector<double>(v.begin(), v.end());
        } else if (o.datatype() == "BYTES" && raw.size() >= 4) {
          uint32_t len;
          std::memcpy(&len, raw.data(), 4);
          e.text = raw.substr(4, len);
        }
      }
      e.num_tokens = static_cast<int64_t>(e.token_ids.size());
      const bool final = ir.parameters().count("triton_final_response") &&
                         ir.parameters().at("triton_final_response").bool_param();
      if (ir.outputs_size() > 0) {
        out.events.push_back(e);
        if (!on_event(out.events.back())) {
          out.stopped_early = true;
          ctx.TryCancel();
          break;
        }
      }
      if (final) break;
    }
    grpc::Status s = stream->Finish();
    out.end = Clock::now();
    if (out.status.ok() && !out.stopped_early && !s.ok()) {
      out.status = UnavailableError("gRPC " + o_.host + ":" + std::to_string(o_.port) + ": " +
                                    s.error_message());
      out.error_kind = s.error_code() == grpc::StatusCode::UNAVAILABLE
                           ? "connect"
                           : "grpc_" + std::to_string(s.error_code());
    }
    return out;
  }

 private:
  ClientOptions o_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
};

}  // namespace

int64_t GenOutcome::output_tokens() const {
  if (reported_output_tokens) return *reported_output_tokens;
  int64_t n = 0;
  for (const GenEvent& e : events) n += e.num_tokens;
  return n;
}

Status CheckTlsOptions(const ClientOptions& o) {
  if (o.tls_cert.empty() != o.tls_key.empty()) {
    return InvalidArgumentError(
        "a client certificate needs its key and a key its certificate (--tls-cert with --tls-key)");
  }
  for (const std::string* f : {&o.tls_ca, &o.tls_cert, &o.tls_key}) {
    if (!f->empty() && !ReadWholeFile(*f))
      return InvalidArgumentError("cannot read TLS file '" + *f + "'");
  }
  if (!o.tls && (!o.tls_ca.empty() || !o.tls_cert.empty())) {
    return InvalidArgumentError("TLS files were given without --tls");
  }
  return OkStatus();
}

StatusOr<Protocol> ProtocolFromName(const std::string& name) {
  if (name == "http") return Protocol::kKserveHttp;
  if (name == "grpc") return Protocol::kGrpc;
  if (name == "openai") return Protocol::kOpenAi;
  if (name == "openai-chat") return Protocol::kOpenAiChat;
  return InvalidArgumentError("protocol must be http, grpc, openai or openai-chat, got '" + name +
                              "'");
}

std::unique_ptr<LlmClient> CreateClient(const ClientOptions& options) {
  if (options.protocol == Protocol::kGrpc) return std::make_unique<GrpcClient>(options);
  return std::make_unique<HttpClient>(options);
}

}  // namespace inflight::clients
