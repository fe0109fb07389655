#include "frontends/openai_json.h"

#include <cmath>
#include <limits>
#include <set>

#include "base/json_depth.h"
#include "frontends/kserve_json.h"

namespace inflight::frontends {
namespace {

using nlohmann::json;

// Reads optional fields of a request object, remembering which field failed.
class Fields {
 public:
  Fields(const json& body, std::string* param) : body_(body), param_(param) {}

  bool Has(const char* key) const { return body_.contains(key) && !body_[key].is_null(); }
  const json& Get(const char* key) const { return body_[key]; }

  Status Fail(const char* key, const std::string& message) const {
    *param_ = key;
    return InvalidArgumentError(message);
  }

  // A number in [lo, hi] (null or absent: left as is).
  Status Number(const char* key, double lo, double hi, double* out) const {
    if (!Has(key)) return OkStatus();
    const json& v = Get(key);
    if (!v.is_number()) return Fail(key, std::string("'") + key + "' must be a number");
    const double x = v.get<double>();
    if (!(x >= lo && x <= hi)) {
      return Fail(key, std::string("'") + key + "' must be in [" + Short(lo) + ", " + Short(hi) +
                           "], got " + Short(x));
    }
    *out = x;
    return OkStatus();
  }

  Status Integer(const char* key, int64_t lo, int64_t hi, int64_t* out) const {
    if (!Has(key)) return OkStatus();
    const json& v = Get(key);
    if (!v.is_number_integer() &&
        !(v.is_number_float() && std::floor(v.get<double>()) == v.get<double>())) {
      return Fail(key, std::string("'") + key + "' must be an integer");
    }
    const double x = v.get<double>();
    if (!(x >= static_cast<double>(lo) && x <= static_cast<double>(hi))) {
      return Fail(key, std::string("'") + key + "' must be in [" + std::to_string(lo) + ", " +
                           std::to_string(hi) + "], got " + Short(x));
    }
    *out = v.is_number_integer() ? v.get<int64_t>() : static_cast<int64_t>(x);
    return OkStatus();
  }

  Status Bool(const char* key, bool* out) const {
    if (!Has(key)) return OkStatus();
    if (!Get(key).is_boolean()) return Fail(key, std::string("'") + key + "' must be a boolean");
    *out = Get(key).get<bool>();
    return OkStatus();
  }

 private:
  static std::string Short(double x) {
    if (std::floor(x) == x && std::fabs(x) < 1e15) return std::to_string(static_cast<int64_t>(x));
    return std::to_string(x);
  }

  const json& body_;
  std::string* param_;
};

Status ParsePrompts(const Fields& f, OpenAiRequest* r) {
  if (!f.Has("prompt")) return f.Fail("prompt", "'prompt' is required");
  const json& p = f.Get("prompt");
  auto ids = [&](const json& list, OpenAiPrompt* out) -> Status {
    for (const json& id : list) {
      if (!id.is_number_integer()) return f.Fail("prompt", "a token-id prompt must hold integers");
      out->ids.push_back(id.get<int64_t>());
    }
    out->is_ids = true;
    return OkStatus();
  };
  if (p.is_string()) {
    r->prompts.push_back({p.get<std::string>(), {}, false});
  } else if (p.is_array() && !p.empty() && p[0].is_number()) {
    OpenAiPrompt one;
    RETURN_IF_ERROR(ids(p, &one));
    r->prompts.push_back(std::move(one));
  } else if (p.is_array() && !p.empty()) {
    if (static_cast<int64_t>(p.size()) > kOpenAiMaxChoices) {
      return f.Fail("prompt",
                    "at most " + std::to_string(kOpenAiMaxChoices) + " prompts per request");
    }
    for (const json& item : p) {
      OpenAiPrompt one;
      if (item.is_string()) {
        one.text = item.get<std::string>();
      } else if (item.is_array()) {
        RETURN_IF_ERROR(ids(item, &one));
      } else {
        return f.Fail("prompt", "'prompt' must be a string, a list of strings, or token ids");
      }
      r->prompts.push_back(std::move(one));
    }
  } else {
    return f.Fail("prompt", "'prompt' must be a non-empty string, a list of strings, or token ids");
  }
  for (const OpenAiPrompt& one : r->prompts) {
    if (one.is_ids && one.ids.empty())
      return f.Fail("prompt", "a token-id prompt must not be empty");
  }
  return OkStatus();
}

// An assistant message's tool_calls: [{"id", "type": "function", "function": {"name",
// "arguments" (a JSON string, as OpenAI sends it back)}}].
Status CheckToolCalls(const Fields& f, const json& calls, const std::string& where,
                      std::set<std::string>* ids) {
  if (!calls.is_array() || static_cast<int>(calls.size()) > kOpenAiMaxTools)
    return f.Fail("messages", where + ".tool_calls must be a list of at most " +
                                  std::to_string(kOpenAiMaxTools) + " calls");
  for (size_t k = 0; k < calls.size(); ++k) {
    const json& c = calls[k];
    const std::string at = where + ".tool_calls[" + std::to_string(k) + "]";
    if (!c.is_object() || !c.contains("id") || !c["id"].is_string())
      return f.Fail("messages", at + ".id must be a string");
    if (!c.contains("function") || !c["function"].is_object() || !c["function"].contains("name") ||
        !c["function"]["name"].is_string())
      return f.Fail("messages", at + ".function.name must be a string");
    if (c["function"].contains("arguments") && !c["function"]["arguments"].is_string() &&
        !c["function"]["arguments"].is_object())
      return f.Fail("messages", at + ".function.arguments must be a JSON string");
    // The string is parsed for the template: it is bounded as a body is.
    if (c["function"].contains("arguments") && c["function"]["arguments"].is_string() &&
        JsonNestingDepth(c["function"]["arguments"].get_ref<const std::string&>()) > 64)
      return f.Fail("messages", at + ".function.arguments nests deeper than 64 levels");
    ids->insert(c["id"].get<std::string>());
  }
  return OkStatus();
}

// Chat messages: each {"role", "content"} with content a string, null (assistant) or a list
// of {"type": "text", "text"} parts. Other part types (images, audio) are refused by name.
Status CheckMessages(const Fields& f, OpenAiRequest* r) {
  if (!f.Has("messages") || !f.Get("messages").is_array())
    return f.Fail("messages", "'messages' must be a list");
  const json& messages = f.Get("messages");
  if (messages.empty()) return f.Fail("messages", "'messages' must not be empty");
  if (static_cast<int64_t>(messages.size()) > kOpenAiMaxMessages) {
    return f.Fail("messages",
                  "at most " + std::to_string(kOpenAiMaxMessages) + " messages per request");
  }
  static const char* kRoles[] = {"system", "developer", "user", "assistant", "tool"};
  std::set<std::string> call_ids;  // of the assistant's tool calls so far
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return f.Fail("messages", where + " must be an object");
    if (!m.contains("role") || !m["role"].is_string())
      return f.Fail("messages", where + ".role must be a string");
    const std::string role = m["role"].get<std::string>();
    bool known = false;
    for (const char* k : kRoles) known = known || role == k;
    if (!known) {
      return f.Fail("messages", where + ".role '" + role +
                                    "' is not one of system, developer, user, assistant, tool");
    }
    if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
      if (role != "assistant")
        return f.Fail("messages", where + ": only the assistant makes tool calls");
      RETURN_IF_ERROR(CheckToolCalls(f, m["tool_calls"], where, &call_ids));
    }
    if (role == "tool") {
      if (!m.contains("tool_call_id") || !m["tool_call_id"].is_string())
        return f.Fail("messages", where + ".tool_call_id must be a string (the call it answers)");
      const std::string id = m["tool_call_id"].get<std::string>();
      if (!call_ids.count(id)) {
        return f.Fail("messages", where + ".tool_call_id '" + id.substr(0, 64) +
                                      "' matches no tool call of an earlier assistant message");
      }
    }
    const json content = m.contains("content") ? m["content"] : json();
    if (content.is_null()) {
      if (role != "assistant")
        return f.Fail("messages", where + ".content is required for role '" + role + "'");
    } else if (content.is_array()) {
      for (const json& part : content) {
        if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
          return f.Fail("messages", where + ".content parts must be objects with a 'type'");
        }
        const std::string type = part["type"].get<std::string>();
        if (type != "text")
          return f.Fail("messages",
                        where + ": content of type '" + type + "' is not supported (text only)");
        if (!part.contains("text") || !part["text"].is_string()) {
          return f.Fail("messages", where + ": a text part needs a string 'text'");
        }
      }
    } else if (!content.is_string()) {
      return f.Fail("messages", where + ".content must be a string or a list of parts");
    }
  }
  r->messages = messages;
  return OkStatus();
}

// tools: [{"type": "function", "function": {"name", "description"?, "parameters"?, "strict"?}}]
// and tool_choice: "none" | "auto" | "required" | {"type": "function", "function": {"name"}}.
Status ParseTools(const Fields& f, std::string_view body, OpenAiRequest* r) {
  if (f.Has("tools")) {
    const json& tools = f.Get("tools");
    if (!tools.is_array()) return f.Fail("tools", "'tools' must be a list");
    if (static_cast<int>(tools.size()) > kOpenAiMaxTools)
      return f.Fail("tools", "at most " + std::to_string(kOpenAiMaxTools) + " tools per request");
    if (tools.dump().size() > kOpenAiMaxToolsBytes)
      return f.Fail("tools", "the tools are larger than " +
                                 std::to_string(kOpenAiMaxToolsBytes / 1024) + " KiB");
    std::set<std::string> names;
    for (size_t i = 0; i < tools.size(); ++i) {
      const json& t = tools[i];
      const std::string at = "tools[" + std::to_string(i) + "]";
      if (!t.is_object() || !t.contains("type") || t["type"] != "function")
        return f.Fail("tools", at + ".type must be 'function'");
      if (!t.contains("function") || !t["function"].is_object())
        return f.Fail("tools", at + ".function must be an object");
      const json& fn = t["function"];
      if (!fn.contains("name") || !fn["name"].is_string())
        return f.Fail("tools", at + ".function.name must be a string");
      const std::string name = fn["name"].get<std::string>();
      if (name.empty() || name.size() > 64 ||
          name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"
                                 ".") != std::string::npos) {
        return f.Fail("tools", at + ".function.name '" + name.substr(0, 64) +
                                   "' must be 1-64 letters, digits, '_', '-' or '.'");
      }
      if (!names.insert(name).second)
        return f.Fail("tools", at + ": two tools are named '" + name + "'");
      if (fn.contains("description") && !fn["description"].is_string() &&
          !fn["description"].is_null())
        return f.Fail("tools", at + ".function.description must be a string");
      if (fn.contains("parameters") && !fn["parameters"].is_object() && !fn["parameters"].is_null())
        return f.Fail("tools", at + ".function.parameters must be a JSON schema object");
    }
    const nlohmann::ordered_json o = nlohmann::ordered_json::parse(body, nullptr, false);
    r->tools = o["tools"];
  }
  if (f.Has("tool_choice")) {
    const json& c = f.Get("tool_choice");
    if (c.is_string()) {
      r->tool_choice = c.get<std::string>();
      if (r->tool_choice != "none" && r->tool_choice != "auto" && r->tool_choice != "required")
        return f.Fail("tool_choice",
                      "'tool_choice' must be 'none', 'auto', 'required' or a function");
    } else if (c.is_object() && c.contains("type") && c["type"] == "function" &&
               c.contains("function") && c["function"].is_object() &&
               c["function"].contains("name") && c["function"]["name"].is_string()) {
      r->tool_choice = "function";
      r->tool_choice_name = c["function"]["name"].get<std::string>();
      bool found = false;
      for (const auto& t : r->tools) found = found || t["function"]["name"] == r->tool_choice_name;
      if (!found) {
        return f.Fail("tool_choice", "tool_choice names function '" +
                                         r->tool_choice_name.substr(0, 64) +
                                         "', which is not among the tools");
      }
    } else {
      return f.Fail("tool_choice",
                    "'tool_choice' must be 'none', 'auto', 'required' or {\"type\": \"function\", "
                    "\"function\": {\"name\": ...}}");
    }
    if (r->tool_choice == "required" && r->tools.empty())
      return f.Fail("tool_choice", "tool_choice 'required' needs 'tools'");
  }
  RETURN_IF_ERROR(f.Bool("parallel_tool_calls", &r->parallel_tool_calls));
  if (f.Has("reasoning_effort")) {
    const json& e = f.Get("reasoning_effort");
    if (!e.is_string() || (e != "low" && e != "medium" && e != "high" && e != "minimal"))
      return f.Fail("reasoning_effort",
                    "'reasoning_effort' must be 'minimal', 'low', 'medium' or 'high'");
    r->reasoning_effort = e.get<std::string>();
  }
  return OkStatus();
}

Status ParseStop(const Fields& f, OpenAiRequest* r) {
  if (!f.Has("stop")) return OkStatus();
  const json& s = f.Get("stop");
  std::vector<std::string> stops;
  if (s.is_string()) {
    stops.push_back(s.get<std::string>());
  } else if (s.is_array()) {
    for (const json& x : s) {
      if (!x.is_string()) return f.Fail("stop", "'stop' must be a string or a list of strings");
      stops.push_back(x.get<std::string>());
    }
  } else {
    return f.Fail("stop", "'stop' must be a string or a list of strings");
  }
  if (static_cast<int>(stops.size()) > kOpenAiMaxStops) {
    return f.Fail("stop", "at most " + std::to_string(kOpenAiMaxStops) + " stop sequences");
  }
  for (std::string& x : stops) {
    if (x.size() > kOpenAiMaxStopBytes) {
      return f.Fail("stop", "a stop sequence is longer than " +
                                std::to_string(kOpenAiMaxStopBytes) + " bytes");
    }
    if (!x.empty()) r->stop.push_back(std::move(x));
  }
  return OkStatus();
}

Status ParseLogitBias(const Fields& f, OpenAiRequest* r) {
  if (!f.Has("logit_bias")) return OkStatus();
  const json& b = f.Get("logit_bias");
  if (!b.is_object())
    return f.Fail("logit_bias", "'logit_bias' must be an object of token id -> bias");
  if (static_cast<int64_t>(b.size()) > kOpenAiMaxLogitBias) {
    return f.Fail("logit_bias",
                  "at most " + std::to_string(kOpenAiMaxLogitBias) + " logit_bias entries");
  }
  for (const auto& [key, v] : b.items()) {
    int64_t id = -1;
    if (key.empty() || key.size() > 10 ||
        key.find_first_not_of("0123456789") != std::string::npos ||
        (id = std::stoll(key)) > std::numeric_limits<int32_t>::max()) {
      return f.Fail("logit_bias", "logit_bias key '" + key.substr(0, 32) + "' is not a token id");
    }
    if (!v.is_number() || !(v.get<double>() >= -100.0 && v.get<double>() <= 100.0)) {
      return f.Fail("logit_bias",
                    "logit_bias for token " + key + " must be a number in [-100, 100]");
    }
    r->logit_bias.emplace_back(id, v.get<double>());
  }
  return OkStatus();
}

// The schema's text with its keys in the client's order (json sorts them; a schema's
// properties come out in the order they are listed). `body` already parsed within bounds.
std::string OrderedDump(std::string_view body, const std::vector<std::string>& path) {
  const nlohmann::ordered_json o = nlohmann::ordered_json::parse(body, nullptr, false);
  const nlohmann::ordered_json* cur = &o;
  for (const std::string& k : path) {
    if (!cur->is_object() || !cur->contains(k)) return "";
    cur = &(*cur)[k];
  }
  return cur->is_string() ? cur->get<std::string>() : cur->dump();
}

Status ParseResponseFormat(const Fields& f, std::string_view body, OpenAiRequest* r) {
  if (f.Has("response_format")) {
    const json& rf = f.Get("response_format");
    if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string()) {
      return f.Fail("response_format", "'response_format' must be an object with a string 'type'");
    }
    const std::string type = rf["type"].get<std::string>();
    if (type == "json_object") {
      r->guide_type = "json";
    } else if (type == "json_schema") {
      if (!rf.contains("json_schema") || !rf["json_schema"].is_object() ||
          !rf["json_schema"].contains("schema") ||
          !(rf["json_schema"]["schema"].is_object() || rf["json_schema"]["schema"].is_boolean())) {
        return f.Fail("response_format",
                      "'response_format.json_schema.schema' must be a JSON schema object");
      }
      r->guide_type = "json_schema";
      r->guide = OrderedDump(body, {"response_format", "json_schema", "schema"});
    } else if (type != "text") {
      return f.Fail("response_format",
                    "'response_format.type' must be 'text', 'json_object' or 'json_schema'");
    }
  }
  // vLLM's extensions.
  if (f.Has("guided_json")) {
    if (!r->guide_type.empty())
      return f.Fail("guided_json", "give one of response_format, guided_json, guided_regex");
    const json& g = f.Get("guided_json");
    if (!g.is_object() && !g.is_string())
      return f.Fail("guided_json", "'guided_json' must be a JSON schema (object or string)");
    r->guide_type = "json_schema";
    r->guide = OrderedDump(body, {"guided_json"});
  }
  if (f.Has("guided_regex")) {
    if (!r->guide_type.empty())
      return f.Fail("guided_regex", "give one of response_format, guided_json, guided_regex");
    if (!f.Get("guided_regex").is_string())
      return f.Fail("guided_regex", "'guided_regex' must be a string");
    r->guide_type = "regex";
    r->guide = f.Get("guided_regex").get<std::string>();
  }
  return OkStatus();
}

Status ParseLogprobs(const Fields& f, OpenAiRequest* r) {
  if (r->chat) {
    RETURN_IF_ERROR(f.Bool("logprobs", &r->logprobs));
    RETURN_IF_ERROR(f.Integer("top_logprobs", 0, kOpenAiMaxTopLogprobs, &r->top_logprobs));
    if (r->top_logprobs > 0 && !r->logprobs)
      return f.Fail("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    return OkStatus();
  }
  // Completions: logprobs is the number of alternatives per token (0 = the chosen one only).
  if (!f.Has("logprobs")) return OkStatus();
  int64_t k = 0;
  RETURN_IF_ERROR(f.Integer("logprobs", 0, kOpenAiMaxTopLogprobs, &k));
  r->logprobs = true;
  r->top_logprobs = k;
  return OkStatus();
}

}  // namespace

StatusOr<OpenAiRequest> ParseOpenAiRequest(std::string_view body, bool chat, std::string* param) {
  param->clear();
  auto parsed = ParseJsonBounded(body);
  if (!parsed.ok())
    return InvalidArgumentError("the request body is not valid JSON: " + parsed.status().message());
  if (!parsed->is_object()) return InvalidArgumentError("the request body must be a JSON object");
  const json& b = *parsed;
  Fields f(b, param);
  OpenAiRequest r;
  r.chat = chat;
  if (!f.Has("model") || !f.Get("model").is_string())
    return f.Fail("model", "'model' must be a string");
  r.model = f.Get("model").get<std::string>();
  if (chat) {
    RETURN_IF_ERROR(CheckMessages(f, &r));
    RETURN_IF_ERROR(ParseTools(f, body, &r));
    RETURN_IF_ERROR(f.Bool("add_generation_prompt", &r.add_generation_prompt));
    if (f.Has("chat_template_kwargs")) {
      if (!f.Get("chat_template_kwargs").is_object())
        return f.Fail("chat_template_kwargs", "'chat_template_kwargs' must be an object");
      r.template_kwargs = f.Get("chat_template_kwargs");
    }
  } else {
    RETURN_IF_ERROR(ParsePrompts(f, &r));
    RETURN_IF_ERROR(f.Bool("echo", &r.echo));
  }
  // max_completion_tokens is the chat API's newer name; either may be given.
  int64_t max_tokens = -1;
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (!f.Has(key)) continue;
    RETURN_IF_ERROR(f.Integer(key, 1, std::numeric_limits<int32_t>::max(), &max_tokens));
    r.max_tokens = max_tokens;
  }
  RETURN_IF_ERROR(f.Integer("min_tokens", 0, std::numeric_limits<int32_t>::max(), &r.min_tokens));
  if (r.max_tokens && r.min_tokens > *r.max_tokens)
    return f.Fail("min_tokens", "'min_tokens' must not exceed 'max_tokens'");
  RETURN_IF_ERROR(f.Bool("ignore_eos", &r.ignore_eos));
  RETURN_IF_ERROR(f.Number("temperature", 0.0, 2.0, &r.temperature));
  RETURN_IF_ERROR(f.Number("top_p", 0.0, 1.0, &r.top_p));
  if (r.top_p <= 0.0) return f.Fail("top_p", "'top_p' must be greater than 0");
  RETURN_IF_ERROR(f.Integer("top_k", -1, 1 << 20, &r.top_k));
  RETURN_IF_ERROR(f.Number("min_p", 0.0, 1.0, &r.min_p));
  if (f.Has("seed")) {
    const json& s = f.Get("seed");
    if (!s.is_number_integer()) return f.Fail("seed", "'seed' must be an integer");
    r.seed = s.is_number_unsigned() ? s.get<uint64_t>() : static_cast<uint64_t>(s.get<int64_t>());
  }
  RETURN_IF_ERROR(f.Integer("n", 1, kOpenAiMaxChoices, &r.n));
  RETURN_IF_ERROR(f.Integer("priority", -1000, 1000, &r.priority));
  RETURN_IF_ERROR(ParseStop(f, &r));
  RETURN_IF_ERROR(f.Number("presence_penalty", -2.0, 2.0, &r.presence_penalty));
  RETURN_IF_ERROR(f.Number("frequency_penalty", -2.0, 2.0, &r.frequency_penalty));
  RETURN_IF_ERROR(f.Number("repetition_penalty", 1e-3, 100.0, &r.repetition_penalty));
  RETURN_IF_ERROR(ParseLogitBias(f, &r));
  RETURN_IF_ERROR(ParseLogprobs(f, &r));
  RETURN_IF_ERROR(ParseResponseFormat(f, body, &r));
  RETURN_IF_ERROR(f.Bool("stream", &r.stream));
  if (f.Has("stream_options")) {
    const json& so = f.Get("stream_options");
    if (!so.is_object()) return f.Fail("stream_options", "'stream_options' must be an object");
    if (!r.stream)
      return f.Fail("stream_options", "'stream_options' is only allowed with 'stream': true");
    if (so.contains("include_usage") && !so["include_usage"].is_null()) {
      if (!so["include_usage"].is_boolean())
        return f.Fail("stream_options", "'stream_options.include_usage' must be a boolean");
      r.include_usage = so["include_usage"].get<bool>();
    }
  }
  if (r.n * static_cast<int64_t>(std::max<size_t>(1, r.prompts.size())) > kOpenAiMaxChoices) {
    return f.Fail("n", "n x prompts must be at most " + std::to_string(kOpenAiMaxChoices));
  }
  if (f.Has("best_of") &&
      !(f.Get("best_of").is_number_integer() && f.Get("best_of").get<int64_t>() == r.n)) {
    return f.Fail("best_of", "'best_of' other than n is not supported");
  }
  if (f.Has("user") && f.Get("user").is_string()) r.user = f.Get("user").get<std::string>();
  if (f.Has("cache_salt")) {
    const json& salt = f.Get("cache_salt");
    if (!salt.is_string() || salt.get_ref<const std::string&>().empty() ||
        salt.get_ref<const std::string&>().size() > 1024) {
      return f.Fail("cache_salt", "'cache_salt' must be a non-empty string of at most 1024 bytes");
    }
    r.cache_salt = salt.get<std::string>();
  }
  return r;
}

json OpenAiErrorJson(int status, const std::string& message, const std::string& param) {
  std::string type = "invalid_request_error";
  if (status == 404) type = "not_found_error";
  if (status == 429 || status == 503) type = "server_overloaded";
  if (status >= 500 && status != 503) type = "server_error";
  return {{"error",
           {{"message", message},
            {"type", type},
            {"param", param.empty() ? json() : json(param)},
            {"code", json()}}}};
}

double FiniteLogprob(float lp) { return std::isfinite(lp) ? static_cast<double>(lp) : -9999.0; }

json TokenBytesJson(const std::string& bytes) {
  json out = json::array();
  for (unsigned char c : bytes) out.push_back(static_cast<int>(c));
  return out;
}

}  // namespace inflight::frontends
