#include "frontends/messages_api.h"

#include <random>

#include "frontends/json_fields.h"
#include "frontends/kserve_json.h"

namespace inflight::frontends {
namespace {

using json = nlohmann::ordered_json;

std::string RandomId(const char* prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id = prefix;
  for (int i = 0; i < 24; ++i) id += kAlnum[rng() % 62];
  return id;
}

Status Bad(const std::string& message) { return InvalidArgumentError(message); }

// A text field given as a string or a list of {"type": "text", "text"} blocks.
StatusOr<std::string> BlocksText(const json& v, const std::string& where) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) return Bad(where + ": must be a string or a list of text blocks");
  std::string text;
  for (const json& b : v) {
    if (StringField(b, "type") != "text" || !b.contains("text") || !b["text"].is_string()) {
      return Bad(where + ": only text blocks are supported here");
    }
    text += b["text"].get<std::string>();
  }
  return text;
}

// One Anthropic message -> chat messages (tool results become tool messages first).
Status ChatMessages(const json& m, const std::string& where, json* out) {
  if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
    return Bad(where + ".role must be 'user' or 'assistant'");
  const std::string role = m["role"];
  if (role != "user" && role != "assistant")
    return Bad(where + ".role must be 'user' or 'assistant'");
  if (!m.contains("content")) return Bad(where + ".content is required");
  const json& content = m["content"];
  if (content.is_string()) {
    out->push_back({{"role", role}, {"content", content}});
    return OkStatus();
  }
  if (!content.is_array()) return Bad(where + ".content must be a string or a list of blocks");
  std::string text, thinking;
  json calls = json::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const json& b = content[i];
    const std::string at = where + ".content[" + std::to_string(i) + "]";
    const std::string type = StringField(b, "type");
    if (type == "text" && b.contains("text") && b["text"].is_string()) {
      text += b["text"].get<std::string>();
    } else if (type == "tool_result" && role == "user") {
      if (!b.contains("tool_use_id") || !b["tool_use_id"].is_string())
        return Bad(at + ".tool_use_id must be a string");
      auto result = BlocksText(b.value("content", json("")), at + ".content");
      if (!result.ok()) return result.status();
      if (b.contains("is_error") && !b["is_error"].is_boolean())
        return Bad(at + ".is_error: must be a boolean");
      const bool error = TrueField(b, "is_error");
      out->push_back({{"role", "tool"},
                      {"tool_call_id", b["tool_use_id"]},
                      {"content", error ? "Error: " + *result : *result}});
    } else if (type == "tool_use" && role == "assistant") {
      if (!b.contains("id") || !b["id"].is_string() || !b.contains("name") ||
          !b["name"].is_string())
        return Bad(at + ": a tool_use block needs a string id and name");
      const json input = b.value("input", json::object());
      calls.push_back({{"id", b["id"]},
                       {"type", "function"},
                       {"function", {{"name", b["name"]}, {"arguments", Dump(input)}}}});
    } else if (type == "thinking" && role == "assistant") {
      if (b.contains("thinking") && b["thinking"].is_string())
        thinking += b["thinking"].get<std::string>();
    } else if (type == "redacted_thinking" && role == "assistant") {
      continue;
    } else {
      return Bad(at + ": blocks of type '" + type.substr(0, 32) + "' are not supported here");
    }
  }
  if (role == "assistant") {
    json turn = {{"role", "assistant"}, {"content", text}};
    if (!thinking.empty()) turn["reasoning_content"] = thinking;
    if (!calls.empty()) turn["tool_calls"] = std::move(calls);
    out->push_back(std::move(turn));
  } else if (!text.empty() || content.empty()) {
    out->push_back({{"role", "user"}, {"content", text}});
  }
  return OkStatus();
}

// The chat request's field names in the Messages API's terms.
std::string MessagesField(const std::string& chat_param) {
  if (chat_param == "stop") return "stop_sequences";
  if (chat_param == "chat_template_kwargs") return "thinking";
  return chat_param;
}

int StatusOf(const Status& s) {
  switch (s.code()) {
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kResourceExhausted:
    case StatusCode::kUnavailable:
      return 529;
    case StatusCode::kUnimplemented:
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
    case StatusCode::kFailedPrecondition:
      return 400;
    case StatusCode::kCancelled:
      return 499;
    default:
      return 500;
  }
}

const char* ErrorType(int status) {
  switch (status) {
    case 400:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 429:
      return "rate_limit_error";
    case 529:
      return "overloaded_error";
    default:
      return "api_error";
  }
}

json ErrorBody(int status, const std::string& message) {
  return {{"type", "error"}, {"error", {{"type", ErrorType(status)}, {"message", message}}}};
}

const char* StopReason(const ChatResult& r) {
  if (r.finish_reason == "tool_calls") return "tool_use";
  if (r.finish_reason == "length") return "max_tokens";
  return r.stop_sequence.empty() ? "end_turn" : "stop_sequence";
}

json ToolInput(const std::string& arguments) {
  if (JsonNestingDepth(arguments) > 64) return json::object();  // dumps recurse per level
  json input = json::parse(arguments, nullptr, false);
  return input.is_object() ? input : json::object();
}

}  // namespace

StatusOr<OpenAiRequest> ParseMessagesRequest(std::string_view body, bool count_tokens) {
  auto bounded = ParseJsonBounded(body);
  if (!bounded.ok())
    return Bad("the request body is not valid JSON: " + bounded.status().message());
  const json b = json::parse(body, nullptr, false);
  if (!b.is_object()) return Bad("the request body must be a JSON object");
  if (!b.contains("model") || !b["model"].is_string()) return Bad("model: must be a string");
  json chat = {{"model", b["model"]}};
  if (!count_tokens) {
    if (!b.contains("max_tokens")) return Bad("max_tokens: Field required");
    chat["max_tokens"] = b["max_tokens"];
  }
  json messages = json::array();
  if (b.contains("system") && !b["system"].is_null()) {
    auto system = BlocksText(b["system"], "system");
    if (!system.ok()) return system.status();
    messages.push_back({{"role", "system"}, {"content", *system}});
  }
  if (!b.contains("messages") || !b["messages"].is_array() || b["messages"].empty())
    return Bad("messages: must be a non-empty list");
  if (b["messages"].size() > static_cast<size_t>(kOpenAiMaxMessages))
    return Bad("messages: at most " + std::to_string(kOpenAiMaxMessages) + " messages");
  for (size_t i = 0; i < b["messages"].size(); ++i) {
    RETURN_IF_ERROR(
        ChatMessages(b["messages"][i], "messages[" + std::to_string(i) + "]", &messages));
  }
  chat["messages"] = std::move(messages);
  if (b.contains("tools") && !b["tools"].is_null()) {
    if (!b["tools"].is_array()) return Bad("tools: must be a list");
    json tools = json::array();
    for (size_t i = 0; i < b["tools"].size(); ++i) {
      const json& t = b["tools"][i];
      const std::string at = "tools[" + std::to_string(i) + "]";
      if (!t.is_object()) return Bad(at + ": must be an object");
      const std::string type = t.contains("type") ? StringField(t, "type") : "custom";
      if (type != "custom") {
        return Bad(at + ": server tools (type '" + type.substr(0, 48) +
                   "') are not supported; give custom tools with an input_schema");
      }
      json fn = {{"name", t.value("name", json())}};
      if (t.contains("description")) fn["description"] = t["description"];
      if (!t.contains("input_schema") || !t["input_schema"].is_object())
        return Bad(at + ".input_schema: must be a JSON schema object");
      fn["parameters"] = t["input_schema"];
      tools.push_back({{"type", "function"}, {"function", std::move(fn)}});
    }
    chat["tools"] = std::move(tools);
  }
  if (b.contains("tool_choice") && !b["tool_choice"].is_null()) {
    const json& c = b["tool_choice"];
    const std::string type = StringField(c, "type");
    if (type == "auto") {
      chat["tool_choice"] = "auto";
    } else if (type == "any") {
      chat["tool_choice"] = "required";
    } else if (type == "none") {
      chat["tool_choice"] = "none";
    } else if (type == "tool" && c.contains("name")) {
      chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", c["name"]}}}};
    } else {
      return Bad(
          "tool_choice: must be {\"type\": \"auto\" | \"any\" | \"none\"} or {\"type\": "
          "\"tool\", \"name\"}");
    }
    if (c.contains("disable_parallel_tool_use") && !c["disable_parallel_tool_use"].is_boolean())
      return Bad("tool_choice.disable_parallel_tool_use: must be a boolean");
    if (TrueField(c, "disable_parallel_tool_use")) chat["parallel_tool_calls"] = false;
  }
  if (b.contains("stop_sequences")) chat["stop"] = b["stop_sequences"];
  for (const char* k : {"temperature", "top_p", "top_k", "stream"}) {
    if (b.contains(k)) chat[k] = b[k];
  }
  if (b.contains("temperature") && b["temperature"].is_number() &&
      b["temperature"].get<double>() > 1.0) {
    return Bad("temperature: must be in [0, 1]");
  }
  if (b.contains("thinking") && b["thinking"].is_object()) {
    const std::string type = StringField(b["thinking"], "type");
    if (type != "enabled" && type != "disabled")
      return Bad("thinking.type: must be 'enabled' or 'disabled'");
    chat["chat_template_kwargs"] = {{"enable_thinking", type == "enabled"}};
  }
  if (b.contains("metadata") && b["metadata"].is_object() && b["metadata"].contains("user_id") &&
      b["metadata"]["user_id"].is_string()) {
    chat["user"] = b["metadata"]["user_id"];
  }
  if (count_tokens) chat["max_tokens"] = 1;
  std::string param;
  auto parsed = ParseOpenAiRequest(Dump(chat), /*chat=*/true, &param);
  if (!parsed.ok()) {
    if (param.empty()) return parsed.status();
    return Status(parsed.status().code(), MessagesField(param) + ": " + parsed.status().message());
  }
  return parsed;
}

HttpResponse AnthropicError(const Status& s) {
  const int status = StatusOf(s);
  HttpResponse r{status, "application/json", Dump(ErrorBody(status, s.message())), {}};
  if (status == 529) r.headers.emplace_back("Retry-After", "1");
  return r;
}

MessagesEncoder::MessagesEncoder(std::string model)
    : model_(std::move(model)), id_(RandomId("msg_")) {}

HttpResponse MessagesEncoder::Error(const Status& s, const std::string& param) const {
  if (param.empty() || s.message().rfind(param, 0) == 0) return AnthropicError(s);
  return AnthropicError(Status(s.code(), MessagesField(param) + ": " + s.message()));
}

HttpResponse MessagesEncoder::RateLimited(const std::string& message, int64_t retry_after_s) const {
  HttpResponse r{429, "application/json", Dump(ErrorBody(429, message)), {}};
  r.headers.emplace_back("Retry-After", std::to_string(retry_after_s));
  return r;
}

void MessagesEncoder::Event(HttpReply& reply, const char* type, json data) {
  json event = {{"type", type}};
  for (auto& [k, v] : data.items()) event[k] = std::move(v);
  reply.Write(std::string("event: ") + type + "\ndata: " + Dump(event) + "\n\n");
}

void MessagesEncoder::StartStream(HttpReply& reply, int64_t prompt_tokens) {
  Event(reply, "message_start",
        {{"message",
          {{"id", id_},
           {"type", "message"},
           {"role", "assistant"},
           {"model", model_},
           {"content", json::array()},
           {"stop_reason", nullptr},
           {"stop_sequence", nullptr},
           {"usage", {{"input_tokens", prompt_tokens}, {"output_tokens", 0}}}}}});
}

void MessagesEncoder::Open(HttpReply& reply, Kind kind, const chat::ToolCallDelta* call) {
  Close(reply);
  open_ = kind;
  ++index_;
  json block;
  if (kind == Kind::kThinking) {
    block = {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}};
  } else if (kind == Kind::kText) {
    block = {{"type", "text"}, {"text", ""}};
  } else {
    block = {
        {"type", "tool_use"}, {"id", call->id}, {"name", call->name}, {"input", json::object()}};
  }
  Event(reply, "content_block_start", {{"index", index_}, {"content_block", block}});
}

void MessagesEncoder::Close(HttpReply& reply) {
  if (open_ == Kind::kNone) return;
  Event(reply, "content_block_stop", {{"index", index_}});
  open_ = Kind::kNone;
}

void MessagesEncoder::Delta(HttpReply& reply, const chat::OutputDelta& d) {
  // The open call's last arguments come before what follows it in the same delta.
  size_t first_new = 0;
  for (; first_new < d.tool_calls.size() && d.tool_calls[first_new].id.empty(); ++first_new) {
    const chat::ToolCallDelta& t = d.tool_calls[first_new];
    if (open_ != Kind::kToolUse || t.arguments.empty()) continue;
    Event(reply, "content_block_delta",
          {{"index", index_},
           {"delta", {{"type", "input_json_delta"}, {"partial_json", t.arguments}}}});
  }
  if (!d.reasoning.empty()) {
    if (open_ != Kind::kThinking) Open(reply, Kind::kThinking, nullptr);
    Event(reply, "content_block_delta",
          {{"index", index_}, {"delta", {{"type", "thinking_delta"}, {"thinking", d.reasoning}}}});
  }
  if (!d.content.empty()) {
    if (open_ != Kind::kText) Open(reply, Kind::kText, nullptr);
    Event(reply, "content_block_delta",
          {{"index", index_}, {"delta", {{"type", "text_delta"}, {"text", d.content}}}});
  }
  for (size_t i = first_new; i < d.tool_calls.size(); ++i) {
    const chat::ToolCallDelta& t = d.tool_calls[i];
    if (!t.id.empty()) Open(reply, Kind::kToolUse, &t);
    if (t.arguments.empty() || open_ != Kind::kToolUse) continue;
    Event(reply, "content_block_delta",
          {{"index", index_},
           {"delta", {{"type", "input_json_delta"}, {"partial_json", t.arguments}}}});
  }
}

void MessagesEncoder::Finish(HttpReply& reply, const ChatResult& r, bool streaming) {
  const json stop_sequence = r.stop_sequence.empty() ? json() : json(r.stop_sequence);
  if (streaming) {
    Close(reply);
    Event(reply, "message_delta",
          {{"delta", {{"stop_reason", StopReason(r)}, {"stop_sequence", stop_sequence}}},
           {"usage", {{"output_tokens", r.completion_tokens}}}});
    Event(reply, "message_stop", json::object());
    return;
  }
  json content = json::array();
  if (!r.reasoning.empty())
    content.push_back({{"type", "thinking"}, {"thinking", r.reasoning}, {"signature", ""}});
  if (!r.content.empty() || r.tool_calls.empty())
    content.push_back({{"type", "text"}, {"text", r.content}});
  for (const chat::ToolCall& t : r.tool_calls) {
    content.push_back(
        {{"type", "tool_use"}, {"id", t.id}, {"name", t.name}, {"input", ToolInput(t.arguments)}});
  }
  const json body = {{"id", id_},
                     {"type", "message"},
                     {"role", "assistant"},
                     {"model", model_},
                     {"content", std::move(content)},
                     {"stop_reason", StopReason(r)},
                     {"stop_sequence", stop_sequence},
                     {"usage",
                      {{"input_tokens", r.prompt_tokens},
                       {"output_tokens", r.completion_tokens},
                       {"cache_read_input_tokens", r.cached_tokens},
                       {"cache_creation_input_tokens", 0}}}};
  reply.Send({200, "application/json", Dump(body), {}});
}

void MessagesEncoder::Fail(HttpReply& reply, const Status& s, bool streaming) {
  if (!streaming) return reply.Send(AnthropicError(s));
  Event(reply, "error", {{"error", {{"type", ErrorType(StatusOf(s))}, {"message", s.message()}}}});
}

}  // namespace inflight::frontends
