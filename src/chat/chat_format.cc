#include "chat/chat_format.h"

namespace inflight::chat {
namespace {

using json = nlohmann::ordered_json;

bool Has(std::string_view text, std::string_view what) {
  return text.find(what) != std::string_view::npos;
}

// A JSON string literal (the call headers quote function names as JSON does).
std::string Quoted(const std::string& s) {
  return json(s).dump(-1, ' ', false, json::error_handler_t::replace);
}

// One call of `tool` in the syntax: begin, the arguments' schema, end.
json CallTag(const std::string& begin, const json& tool, const std::string& end) {
  const json& fn = tool["function"];
  json schema = fn.contains("parameters") && !fn["parameters"].is_null() ? fn["parameters"]
                                                                         : json{{"type", "object"}};
  return {{"type", "tag"},
          {"begin", begin},
          {"content", {{"type", "json_schema"}, {"json_schema", schema}}},
          {"end", end}};
}

std::string Name(const json& tool) { return tool["function"]["name"].get<std::string>(); }

json Separated(json tags, const std::string& separator, bool parallel) {
  return {{"type", "tags_with_separator"},
          {"tags", std::move(tags)},
          {"separator", separator},
          {"at_least_one", true},
          {"stop_after_first", !parallel}};
}

}  // namespace

ChatFormat DetectChatFormat(std::string_view t) {
  ChatFormat f;
  f.template_renders_tools = Has(t, "tools");
  if (Has(t, "<|channel|>")) {
    f.family = "harmony";
    f.tools = ToolSyntax::kHarmony;
    f.reasoning = ReasoningSyntax::kHarmony;
    f.markers = {"<|start|>", "<|channel|>", "<|message|>", "<|constrain|>",
                 "<|end|>",   "<|call|>",    "<|return|>"};
    return f;
  }
  if (Has(t, "<think>")) {
    f.reasoning = ReasoningSyntax::kThinkTags;
    f.markers = {"<think>", "</think>"};
  }
  if (Has(t, "[TOOL_CALLS]")) {
    f.family = "mistral";
    f.tools = ToolSyntax::kMistral;
    f.markers.insert(f.markers.end(), {"[TOOL_CALLS]", "[ARGS]"});
  } else if (Has(t, "<tool_call>")) {
    f.family = "hermes";
    f.tools = ToolSyntax::kHermes;
    f.markers.insert(f.markers.end(), {"<tool_call>", "</tool_call>"});
  } else if (Has(t, "<|python_tag|>") || (Has(t, "ipython") && Has(t, "\"parameters\""))) {
    f.family = "llama3";
    f.tools = ToolSyntax::kLlama3;
  } else {
    f.family = "generic";
    f.tools = ToolSyntax::kHermes;
    f.template_renders_tools = false;
  }
  return f;
}

std::string GenericToolPrompt(const json& tools) {
  std::string out =
      "# Tools\n\nYou may call one or more functions to assist with the user query. The "
      "functions are described in JSON below:\n<tools>\n";
  for (const json& t : tools) out += t.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  out +=
      "</tools>\n\nTo call functions, write each call on its own, with nothing else:\n"
      "<tool_call>\n{\"name\": <function name>, \"arguments\": <arguments as a JSON object>}\n"
      "</tool_call>";
  return out;
}

bool PromptOpensReasoning(const ChatFormat& format, std::string_view prompt) {
  if (format.reasoning != ReasoningSyntax::kThinkTags) return false;
  // Only the generation prompt's end counts (a user may write "<think>" in a message).
  while (!prompt.empty() && (prompt.back() == '\n' || prompt.back() == ' ' ||
                             prompt.back() == '\t' || prompt.back() == '\r')) {
    prompt.remove_suffix(1);
  }
  constexpr std::string_view kOpen = "<think>";
  return prompt.size() >= kOpen.size() && prompt.substr(prompt.size() - kOpen.size()) == kOpen;
}

StatusOr<ForcedCalls> ForceCalls(const ChatFormat& format, const json& tools, bool parallel) {
  ForcedCalls out;
  json tags = json::array();
  switch (format.tools) {
    case ToolSyntax::kHermes:
      for (const json& t : tools)
        tags.push_back(CallTag("<tool_call>\n{\"name\": " + Quoted(Name(t)) + ", \"arguments\": ",
                               t, "}\n</tool_call>"));
      out.structural_tag = Separated(std::move(tags), "\n", parallel);
      break;
    case ToolSyntax::kLlama3:
      for (const json& t : tools)
        tags.push_back(CallTag("{\"name\": " + Quoted(Name(t)) + ", \"parameters\": ", t, "}"));
      out.structural_tag = Separated(std::move(tags), "; ", parallel);
      break;
    case ToolSyntax::kMistral:
      out.prompt_suffix = "[TOOL_CALLS]";
      for (const json& t : tools)
        tags.push_back(CallTag("{\"name\": " + Quoted(Name(t)) + ", \"arguments\": ", t, "}"));
      out.structural_tag = {{"type", "sequence"},
                            {"elements",
                             {{{"type", "const_string"}, {"value", "["}},
                              Separated(std::move(tags), ", ", parallel),
                              {{"type", "const_string"}, {"value", "]"}}}}};
      break;
    case ToolSyntax::kHarmony: {
      if (tools.size() != 1) {
        return InvalidArgumentError(
            "this model's format (harmony) names the function in control tokens, so the server "
            "can force only one named function: give tool_choice a function, or offer one tool");
      }
      out.prompt_suffix =
          "<|channel|>commentary to=functions." + Name(tools[0]) + " <|constrain|>json<|message|>";
      const json& fn = tools[0]["function"];
      out.structural_tag = {{"type", "json_schema"},
                            {"json_schema", fn.contains("parameters") && !fn["parameters"].is_null()
                                                ? fn["parameters"]
                                                : json{{"type", "object"}}}};
      break;
    }
  }
  out.structural_tag = {{"type", "structural_tag"}, {"format", std::move(out.structural_tag)}};
  return out;
}

}  // namespace inflight::chat
