#include "frontends/responses_api.h"

#include <chrono>
#include <random>

#include "frontends/json_fields.h"
#include "frontends/kserve_json.h"
#include "frontends/openai_completion.h"

namespace inflight::frontends {
namespace {

using json = nlohmann::ordered_json;

std::string RandomHex(const char* prefix, int digits) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char kHex[] = "0123456789abcdef";
  std::string id = prefix;
  for (int i = 0; i < digits; ++i) id += kHex[rng() & 15];
  return id;
}

Status Fail(std::string* param, const std::string& field, const std::string& message) {
  *param = field;
  return InvalidArgumentError(message);
}

// A content list's text ({"type": "input_text" | "output_text" | "text", "text"} parts).
StatusOr<std::string> PartsText(const json& content, const std::string& where, std::string* param) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    return Fail(param, "input", where + " must be a string or a list of parts");
  std::string text;
  for (const json& part : content) {
    const std::string type = StringField(part, "type");
    if (type == "input_text" || type == "output_text" || type == "text") {
      if (!part.contains("text") || !part["text"].is_string())
        return Fail(param, "input", where + ": a " + type + " part needs a string 'text'");
      text += part["text"].get<std::string>();
    } else if (type == "refusal" && part.contains("refusal") && part["refusal"].is_string()) {
      text += part["refusal"].get<std::string>();
    } else {
      return Fail(
          param, "input",
          where + ": content of type '" + type.substr(0, 32) + "' is not supported (text only)");
    }
  }
  return text;
}

// Input items -> chat messages (appended to *messages).
Status InputMessages(const json& input, json* messages, std::string* param) {
  if (input.is_string()) {
    messages->push_back({{"role", "user"}, {"content", input}});
    return OkStatus();
  }
  if (!input.is_array()) return Fail(param, "input", "'input' must be a string or a list of items");
  for (size_t i = 0; i < input.size(); ++i) {
    const json& item = input[i];
    const std::string where = "input[" + std::to_string(i) + "]";
    if (!item.is_object()) return Fail(param, "input", where + " must be an object");
    const std::string type = item.contains("type")   ? StringField(item, "type")
                             : item.contains("role") ? "message"
                                                     : "";
    if (type == "message") {
      if (!item.contains("role") || !item["role"].is_string())
        return Fail(param, "input", where + ".role must be a string");
      auto text = PartsText(item.value("content", json("")), where + ".content", param);
      if (!text.ok()) return text.status();
      messages->push_back({{"role", item["role"]}, {"content", *text}});
    } else if (type == "function_call") {
      for (const char* k : {"call_id", "name", "arguments"}) {
        if (!item.contains(k) || !item[k].is_string())
          return Fail(param, "input", where + "." + k + " must be a string");
      }
      const json call = {{"id", item["call_id"]},
                         {"type", "function"},
                         {"function", {{"name", item["name"]}, {"arguments", item["arguments"]}}}};
      // Calls in a row are one assistant turn (parallel calls).
      if (!messages->empty() && messages->back()["role"] == "assistant" &&
          messages->back().contains("tool_calls")) {
        messages->back()["tool_calls"].push_back(call);
      } else {
        messages->push_back(
            {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", json::array({call})}});
      }
    } else if (type == "function_call_output") {
      if (!item.contains("call_id") || !item["call_id"].is_string())
        return Fail(param, "input", where + ".call_id must be a string");
      auto text = PartsText(item.value("output", json("")), where + ".output", param);
      if (!text.ok()) return text.status();
      messages->push_back(
          {{"role", "tool"}, {"tool_call_id", item["call_id"]}, {"content", *text}});
    } else if (type == "reasoning") {
      continue;  // earlier reasoning is not shown to the model again (as chat templates drop it)
    } else {
      return Fail(param, "input",
                  where + ": items of type '" + type.substr(0, 32) +
                      "' are not supported (message, function_call, function_call_output, "
                      "reasoning)");
    }
  }
  return OkStatus();
}

// The chat request's field names in the Responses API's terms.
std::string ResponsesParam(const std::string& chat_param) {
  if (chat_param == "messages") return "input";
  if (chat_param == "max_tokens") return "max_output_tokens";
  if (chat_param == "response_format") return "text";
  if (chat_param == "reasoning_effort") return "reasoning";
  return chat_param;
}

}  // namespace

void ResponseStore::EraseLocked(std::map<Key, Stored>::iterator it) {
  Usage& u = tenants_[it->first.first];
  u.entries -= 1;
  u.bytes -= it->second.bytes;
  if (u.entries == 0) tenants_.erase(it->first.first);
  bytes_ -= it->second.bytes;
  oldest_first_.erase(it->second.age);
  entries_.erase(it);
}

void ResponseStore::Put(const std::string& tenant, const std::string& id, Entry entry) {
  const size_t bytes = Dump(entry.conversation).size() + Dump(entry.response).size();
  if (bytes > limits_.max_tenant_bytes || bytes > limits_.max_bytes) return;
  auto stored = std::make_shared<const Entry>(std::move(entry));
  std::lock_guard<std::mutex> lock(mu_);
  const Key key{tenant, id};
  if (auto it = entries_.find(key); it != entries_.end()) EraseLocked(it);
  // The tenant's own oldest first, then the store's.
  for (auto age = oldest_first_.begin(); age != oldest_first_.end();) {
    const Usage& u = tenants_[tenant];
    if (u.entries < limits_.max_tenant_entries && u.bytes + bytes <= limits_.max_tenant_bytes)
      break;
    auto next = std::next(age);
    if (age->first == tenant) EraseLocked(entries_.find(*age));
    age = next;
  }
  while (!oldest_first_.empty() &&
         (entries_.size() >= limits_.max_entries || bytes_ + bytes > limits_.max_bytes)) {
    EraseLocked(entries_.find(oldest_first_.front()));
  }
  oldest_first_.push_back(key);
  entries_[key] = {std::move(stored), bytes, std::prev(oldest_first_.end())};
  Usage& u = tenants_[tenant];
  u.entries += 1;
  u.bytes += bytes;
  bytes_ += bytes;
}

std::shared_ptr<const ResponseStore::Entry> ResponseStore::Get(const std::string& tenant,
                                                               const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find({tenant, id});
  return it == entries_.end() ? nullptr : it->second.entry;
}

bool ResponseStore::Delete(const std::string& tenant, const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find({tenant, id});
  if (it == entries_.end()) return false;
  EraseLocked(it);
  return true;
}

size_t ResponseStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

StatusOr<ResponsesRequest> ParseResponsesRequest(std::string_view body, const ResponseStore& store,
                                                 const std::string& tenant, std::string* param) {
  param->clear();
  auto bounded = ParseJsonBounded(body);
  if (!bounded.ok())
    return InvalidArgumentError("the request body is not valid JSON: " +
                                bounded.status().message());
  const json b = json::parse(body, nullptr, false);
  if (!b.is_object()) return InvalidArgumentError("the request body must be a JSON object");
  ResponsesRequest out;
  json chat = json::object();
  if (!b.contains("model") || !b["model"].is_string())
    return Fail(param, "model", "'model' must be a string");
  chat["model"] = b["model"];
  json conversation = json::array();
  if (b.contains("previous_response_id") && !b["previous_response_id"].is_null()) {
    if (!b["previous_response_id"].is_string())
      return Fail(param, "previous_response_id", "'previous_response_id' must be a string");
    const std::string prev = b["previous_response_id"];
    auto entry = store.Get(tenant, prev);
    if (!entry) {
      *param = "previous_response_id";
      return NotFoundError("Previous response with id '" + prev.substr(0, 128) +
                           "' not found (never stored, evicted, or deleted).");
    }
    conversation = entry->conversation;
  }
  if (!b.contains("input")) return Fail(param, "input", "'input' is required");
  RETURN_IF_ERROR(InputMessages(b["input"], &conversation, param));
  json messages = json::array();
  if (b.contains("instructions") && !b["instructions"].is_null()) {
    if (!b["instructions"].is_string())
      return Fail(param, "instructions", "'instructions' must be a string");
    messages.push_back({{"role", "system"}, {"content", b["instructions"]}});
  }
  for (const json& m : conversation) messages.push_back(m);
  chat["messages"] = std::move(messages);
  if (b.contains("tools") && !b["tools"].is_null()) {
    if (!b["tools"].is_array()) return Fail(param, "tools", "'tools' must be a list");
    json tools = json::array();
    for (size_t i = 0; i < b["tools"].size(); ++i) {
      const json& t = b["tools"][i];
      const std::string type = StringField(t, "type");
      if (type != "function") {
        return Fail(param, "tools",
                    "tools[" + std::to_string(i) + "].type '" + type.substr(0, 32) +
                        "' is not supported (function tools only)");
      }
      json fn = json::object();
      for (const char* k : {"name", "description", "parameters", "strict"}) {
        if (t.contains(k)) fn[k] = t[k];
      }
      tools.push_back({{"type", "function"}, {"function", std::move(fn)}});
    }
    chat["tools"] = std::move(tools);
  }
  if (b.contains("tool_choice") && !b["tool_choice"].is_null()) {
    const json& c = b["tool_choice"];
    if (StringField(c, "type") == "function" && c.contains("name")) {
      chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", c["name"]}}}};
    } else {
      chat["tool_choice"] = c;
    }
  }
  for (const char* k : {"parallel_tool_calls", "temperature", "top_p", "stream", "user",
                        "top_logprobs", "priority"}) {
    if (b.contains(k)) chat[k] = b[k];
  }
  if (b.contains("max_output_tokens")) chat["max_tokens"] = b["max_output_tokens"];
  if (b.contains("reasoning") && b["reasoning"].is_object() && b["reasoning"].contains("effort") &&
      !b["reasoning"]["effort"].is_null()) {
    chat["reasoning_effort"] = b["reasoning"]["effort"];
  }
  if (b.contains("text") && b["text"].is_object() && b["text"].contains("format")) {
    const json& f = b["text"]["format"];
    const std::string type = StringField(f, "type");
    if (type == "json_object") {
      chat["response_format"] = {{"type", "json_object"}};
    } else if (type == "json_schema") {
      chat["response_format"] = {
          {"type", "json_schema"},
          {"json_schema",
           {{"name", StringField(f, "name").empty() ? "schema" : StringField(f, "name")},
            {"schema", f.value("schema", json())}}}};
    } else if (type != "text") {
      return Fail(param, "text",
                  "'text.format.type' must be 'text', 'json_object' or 'json_schema'");
    }
  }
  if (b.contains("store") && !b["store"].is_null()) {
    if (!b["store"].is_boolean()) return Fail(param, "store", "'store' must be a boolean");
    out.store = b["store"];
  }
  if (b.contains("metadata") && !b["metadata"].is_null() &&
      (!b["metadata"].is_object() || b["metadata"].size() > 16)) {
    return Fail(param, "metadata", "'metadata' must be an object of at most 16 keys");
  }
  auto parsed = ParseOpenAiRequest(Dump(chat), /*chat=*/true, param);
  if (!parsed.ok()) {
    *param = ResponsesParam(*param);
    return parsed.status();
  }
  out.chat = std::move(parsed).value();
  for (const char* k : {"instructions", "max_output_tokens", "metadata", "parallel_tool_calls",
                        "previous_response_id", "reasoning", "temperature", "text", "tool_choice",
                        "tools", "top_p", "user"}) {
    out.echo[k] = b.contains(k) ? b[k] : json();
  }
  if (out.echo["tools"].is_null()) out.echo["tools"] = json::array();
  if (out.echo["tool_choice"].is_null()) out.echo["tool_choice"] = "auto";
  if (out.echo["parallel_tool_calls"].is_null()) out.echo["parallel_tool_calls"] = true;
  if (out.echo["metadata"].is_null()) out.echo["metadata"] = json::object();
  if (out.echo["text"].is_null()) out.echo["text"] = {{"format", {{"type", "text"}}}};
  out.echo["store"] = out.store;
  out.conversation = std::move(conversation);
  return out;
}

ResponsesEncoder::ResponsesEncoder(ResponsesRequest request, std::shared_ptr<ResponseStore> store,
                                   std::string tenant)
    : request_(std::move(request)),
      store_(std::move(store)),
      tenant_(std::move(tenant)),
      id_(RandomHex("resp_", 32)),
      created_(std::chrono::duration_cast<std::chrono::seconds>(
                   std::chrono::system_clock::now().time_since_epoch())
                   .count()) {}

HttpResponse ResponsesEncoder::Error(const Status& s, const std::string& param) const {
  HttpResponse r = OpenAiError(s, ResponsesParam(param));
  if (s.code() == StatusCode::kNotFound && param == "previous_response_id") {
    auto body = nlohmann::json::parse(r.body);
    body["error"]["code"] = "previous_response_not_found";
    r.body = Dump(body);
  }
  return r;
}

HttpResponse ResponsesEncoder::RateLimited(const std::string& message,
                                           int64_t retry_after_s) const {
  return OpenAiRateLimited(message, retry_after_s);
}

json ResponsesEncoder::Response(const char* status) const {
  json r = {{"id", id_},
            {"object", "response"},
            {"created_at", created_},
            {"status", status},
            {"error", nullptr},
            {"incomplete_details", nullptr},
            {"model", request_.chat.model},
            {"output", output_},
            {"truncation", "disabled"}};
  for (const auto& [k, v] : request_.echo.items()) r[k] = v;
  r["usage"] = usage_.is_null() ? json() : usage_;
  return r;
}

json ResponsesEncoder::Usage(const ChatResult& r) const {
  return {{"input_tokens", r.prompt_tokens},
          {"input_tokens_details", {{"cached_tokens", r.cached_tokens}}},
          {"output_tokens", r.completion_tokens},
          {"output_tokens_details", {{"reasoning_tokens", r.reasoning_tokens}}},
          {"total_tokens", r.prompt_tokens + r.completion_tokens}};
}

void ResponsesEncoder::Event(HttpReply& reply, const char* type, json data) {
  json event = {{"type", type}, {"sequence_number", sequence_++}};
  for (auto& [k, v] : data.items()) event[k] = std::move(v);
  reply.Write(std::string("event: ") + type + "\ndata: " + Dump(event) + "\n\n");
}

void ResponsesEncoder::StartStream(HttpReply& reply, int64_t /*prompt_tokens*/) {
  Event(reply, "response.created", {{"response", Response("in_progress")}});
  Event(reply, "response.in_progress", {{"response", Response("in_progress")}});
}

void ResponsesEncoder::Open(HttpReply& reply, Kind kind, const chat::ToolCallDelta* call) {
  Close(reply);
  open_ = kind;
  text_.clear();
  const size_t index = output_.size();
  if (kind == Kind::kReasoning) {
    item_ = {{"type", "reasoning"}, {"id", RandomHex("rs_", 32)}, {"summary", json::array()}};
  } else if (kind == Kind::kMessage) {
    item_ = {{"type", "message"},
             {"id", RandomHex("msg_", 32)},
             {"status", "in_progress"},
             {"role", "assistant"},
             {"content", json::array()}};
  } else {
    item_ = {{"type", "function_call"}, {"id", RandomHex("fc_", 32)},
             {"call_id", call->id},     {"name", call->name},
             {"arguments", ""},         {"status", "in_progress"}};
  }
  Event(reply, "response.output_item.added", {{"output_index", index}, {"item", item_}});
  if (kind == Kind::kMessage) {
    Event(reply, "response.content_part.added",
          {{"item_id", item_["id"]},
           {"output_index", index},
           {"content_index", 0},
           {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}}}});
  }
}

void ResponsesEncoder::Close(HttpReply& reply) {
  if (open_ == Kind::kNone) return;
  const size_t index = output_.size();
  const json at = {{"item_id", item_["id"]}, {"output_index", index}};
  if (open_ == Kind::kReasoning) {
    Event(
        reply, "response.reasoning_text.done",
        {{"item_id", item_["id"]}, {"output_index", index}, {"content_index", 0}, {"text", text_}});
    item_["content"] = json::array({{{"type", "reasoning_text"}, {"text", text_}}});
  } else if (open_ == Kind::kMessage) {
    const json part = {{"type", "output_text"}, {"text", text_}, {"annotations", json::array()}};
    Event(
        reply, "response.output_text.done",
        {{"item_id", item_["id"]}, {"output_index", index}, {"content_index", 0}, {"text", text_}});
    Event(
        reply, "response.content_part.done",
        {{"item_id", item_["id"]}, {"output_index", index}, {"content_index", 0}, {"part", part}});
    item_["content"] = json::array({part});
    item_["status"] = "completed";
  } else {
    Event(reply, "response.function_call_arguments.done",
          {{"item_id", item_["id"]}, {"output_index", index}, {"arguments", text_}});
    item_["arguments"] = text_;
    item_["status"] = "completed";
  }
  Event(reply, "response.output_item.done", {{"output_index", index}, {"item", item_}});
  output_.push_back(item_);
  open_ = Kind::kNone;
}

void ResponsesEncoder::Delta(HttpReply& reply, const chat::OutputDelta& d) {
  // The open call's last arguments come before what follows it in the same delta.
  size_t first_new = 0;
  for (; first_new < d.tool_calls.size() && d.tool_calls[first_new].id.empty(); ++first_new) {
    const chat::ToolCallDelta& t = d.tool_calls[first_new];
    if (open_ != Kind::kCall || t.arguments.empty()) continue;
    text_ += t.arguments;
    Event(reply, "response.function_call_arguments.delta",
          {{"item_id", item_["id"]}, {"output_index", output_.size()}, {"delta", t.arguments}});
  }
  if (!d.reasoning.empty()) {
    if (open_ != Kind::kReasoning) Open(reply, Kind::kReasoning, nullptr);
    text_ += d.reasoning;
    Event(reply, "response.reasoning_text.delta",
          {{"item_id", item_["id"]},
           {"output_index", output_.size()},
           {"content_index", 0},
           {"delta", d.reasoning}});
  }
  if (!d.content.empty()) {
    if (open_ != Kind::kMessage) Open(reply, Kind::kMessage, nullptr);
    text_ += d.content;
    Event(reply, "response.output_text.delta",
          {{"item_id", item_["id"]},
           {"output_index", output_.size()},
           {"content_index", 0},
           {"delta", d.content},
           {"logprobs", json::array()}});
  }
  for (size_t i = first_new; i < d.tool_calls.size(); ++i) {
    const chat::ToolCallDelta& t = d.tool_calls[i];
    if (!t.id.empty()) Open(reply, Kind::kCall, &t);
    if (t.arguments.empty() || open_ != Kind::kCall) continue;
    text_ += t.arguments;
    Event(reply, "response.function_call_arguments.delta",
          {{"item_id", item_["id"]}, {"output_index", output_.size()}, {"delta", t.arguments}});
  }
}

void ResponsesEncoder::Finish(HttpReply& reply, const ChatResult& r, bool streaming) {
  usage_ = Usage(r);
  if (streaming) {
    Close(reply);
  } else {
    if (!r.reasoning.empty()) {
      output_.push_back(
          {{"type", "reasoning"},
           {"id", RandomHex("rs_", 32)},
           {"summary", json::array()},
           {"content", json::array({{{"type", "reasoning_text"}, {"text", r.reasoning}}})}});
    }
    if (!r.content.empty() || r.tool_calls.empty()) {
      output_.push_back({{"type", "message"},
                         {"id", RandomHex("msg_", 32)},
                         {"status", "completed"},
                         {"role", "assistant"},
                         {"content", json::array({{{"type", "output_text"},
                                                   {"text", r.content},
                                                   {"annotations", json::array()}}})}});
    }
    for (const chat::ToolCall& t : r.tool_calls) {
      output_.push_back({{"type", "function_call"},
                         {"id", RandomHex("fc_", 32)},
                         {"call_id", t.id},
                         {"name", t.name},
                         {"arguments", t.arguments},
                         {"status", "completed"}});
    }
  }
  const bool complete = r.finish_reason != "length";
  json response = Response(complete ? "completed" : "incomplete");
  if (!complete) response["incomplete_details"] = {{"reason", "max_output_tokens"}};
  if (request_.store && store_) {
    json conversation = request_.conversation;
    json turn = {{"role", "assistant"}, {"content", r.content}};
    if (!r.reasoning.empty()) turn["reasoning_content"] = r.reasoning;
    if (!r.tool_calls.empty()) {
      turn["tool_calls"] = json::array();
      for (const chat::ToolCall& t : r.tool_calls) {
        turn["tool_calls"].push_back(
            {{"id", t.id},
             {"type", "function"},
             {"function", {{"name", t.name}, {"arguments", t.arguments}}}});
      }
    }
    conversation.push_back(std::move(turn));
    store_->Put(tenant_, id_, {std::move(conversation), response});
  }
  if (streaming) {
    Event(reply, complete ? "response.completed" : "response.incomplete", {{"response", response}});
  } else {
    reply.Send({200, "application/json", Dump(response), {}});
  }
}

void ResponsesEncoder::Fail(HttpReply& reply, const Status& s, bool streaming) {
  if (!streaming) return reply.Send(Error(s, ""));
  json response = Response("failed");
  response["error"] = {{"code", "server_error"}, {"message", s.message()}};
  Event(reply, "error", {{"code", nullptr}, {"message", s.message()}, {"param", nullptr}});
  Event(reply, "response.failed", {{"response", response}});
}

}  // namespace inflight::frontends
