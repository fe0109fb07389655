#include "frontends/openai_chat.h"

#include <functional>
#include <random>

#include "base/json_depth.h"
#include "chat/chat_format.h"
#include "frontends/kserve_json.h"
#include "jinja/value.h"
#include "tokenizer/tokenizer.h"

namespace inflight::frontends {
namespace {

uint64_t RandomBits() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng();
}

using ordered_json = nlohmann::ordered_json;

// Appends `text` to a message's content (a string, null, or a list of text parts).
void AppendText(ordered_json& m, const std::string& text) {
  ordered_json& content = m["content"];
  if (content.is_array()) {
    content.push_back({{"type", "text"}, {"text", text}});
  } else {
    content = (content.is_string() ? content.get<std::string>() : std::string()) + text;
  }
}

// The messages as templates expect them: a call's arguments as an object (OpenAI sends them
// as a JSON string; templates write them with tojson), and for a template that knows no tools
// (the generic format, docs/agents.md) the tools described in the system message, calls
// written as <tool_call> text and results as user messages in <tool_response>.
ordered_json TemplateMessages(const OpenAiRequest& r, const chat::ChatFormat& format,
                              bool offer_tools) {
  ordered_json messages = ordered_json::array();
  const bool generic = !format.template_renders_tools;
  bool merging_results = false;  // the last message holds tool results (generic)
  for (const auto& in : r.messages) {
    ordered_json m = in;
    // An assistant's null content (beside its tool calls) is empty text, as vLLM passes it:
    // templates test it with `in` and string filters.
    if (!m.contains("content") || m["content"].is_null()) m["content"] = "";
    if (m.contains("tool_calls") && m["tool_calls"].is_array()) {
      for (auto& call : m["tool_calls"]) {
        auto& args = call["function"]["arguments"];
        if (args.is_string() && JsonNestingDepth(args.get_ref<const std::string&>()) <= 64) {
          ordered_json parsed = ordered_json::parse(args.get<std::string>(), nullptr, false);
          if (parsed.is_object()) args = std::move(parsed);
        }
      }
      if (generic) {
        for (const auto& call : m["tool_calls"]) {
          const ordered_json body = {
              {"name", call["function"]["name"]},
              {"arguments", call["function"].value("arguments", ordered_json::object())}};
          AppendText(m, "<tool_call>\n" + Dump(body) + "\n</tool_call>");
        }
        m.erase("tool_calls");
      }
    }
    if (generic && m["role"] == "tool") {
      const std::string result =
          m["content"].is_string() ? m["content"].get<std::string>() : Dump(m["content"]);
      const std::string block = "<tool_response>\n" + result + "\n</tool_response>";
      // Results of parallel calls are one user turn (templates may demand alternating roles).
      if (merging_results && !messages.empty()) {
        AppendText(messages.back(), "\n" + block);
        continue;
      }
      m = {{"role", "user"}, {"content", block}};
      merging_results = true;
    } else {
      merging_results = false;
    }
    messages.push_back(std::move(m));
  }
  if (generic && offer_tools) {
    const std::string tools = chat::GenericToolPrompt(r.tools);
    if (!messages.empty() && messages[0]["role"] == "system") {
      AppendText(messages[0], "\n\n" + tools);
    } else {
      messages.insert(messages.begin(), ordered_json{{"role", "system"}, {"content", tools}});
    }
  }
  return messages;
}

// The chat template's variables: the messages, add_generation_prompt, the tokenizer's BOS/EOS
// text, the tools (when offered and the template renders them), reasoning_effort, and the
// request's chat_template_kwargs (e.g. Qwen3's enable_thinking).
StatusOr<jinja::Value> TemplateContext(const OpenAiRequest& r, const Tokenizer& tok,
                                       const chat::ChatFormat& format, bool offer_tools) {
  ordered_json ctx = ordered_json::object();
  if (offer_tools && format.template_renders_tools) ctx["tools"] = r.tools;
  if (!r.reasoning_effort.empty()) ctx["reasoning_effort"] = r.reasoning_effort;
  for (const auto& [k, v] : r.template_kwargs.items()) ctx[k] = v;
  ctx["messages"] = TemplateMessages(r, format, offer_tools);
  ctx["add_generation_prompt"] = r.add_generation_prompt;
  ctx["bos_token"] = tok.bos_id() >= 0 ? tok.TokenText(tok.bos_id()) : "";
  ctx["eos_token"] = tok.eos_id() >= 0 ? tok.TokenText(tok.eos_id()) : "";
  return jinja::ValueFromJson(Dump(ctx));
}

// Call ids: Mistral's templates take exactly 9 letters and digits, the rest OpenAI's shape.
std::function<std::string()> CallIds(const chat::ChatFormat& format) {
  const size_t len = format.tools == chat::ToolSyntax::kMistral ? 9 : 24;
  const std::string prefix = format.tools == chat::ToolSyntax::kMistral ? "" : "call_";
  return [len, prefix] {
    static const char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    std::string id = prefix;
    while (id.size() < prefix.size() + len) id += kAlnum[RandomBits() % 62];
    return id;
  };
}

// How a chat's output is parsed, and (tool_choice "required" or a function) how calls are
// forced: the prompt's suffix and the structural-tag guide. The error names the field.
Status SetupChatOutput(const std::string& source, const std::string& prompt, const Tokenizer& tok,
                       CompletionSetup* setup, std::string* prompt_suffix, std::string* param) {
  OpenAiRequest& r = setup->request;
  const chat::ChatFormat format = chat::DetectChatFormat(source);
  const bool offer_tools = !r.tools.empty() && r.tool_choice != "none";
  chat::ParserOptions& o = setup->parser;
  o.tools = offer_tools;
  ordered_json allowed = ordered_json::array();
  for (const auto& t : r.tools) {
    const std::string name = t["function"]["name"].get<std::string>();
    if (r.tool_choice == "function" && name != r.tool_choice_name) continue;
    o.tool_names.push_back(name);
    allowed.push_back(t);
  }
  if (r.tool_choice == "required" || r.tool_choice == "function") {
    if (!r.guide_type.empty()) {
      *param = "tool_choice";
      return InvalidArgumentError(
          "a forced tool_choice cannot be combined with response_format or guided_* (both "
          "constrain the output)");
    }
    auto forced =
        chat::ForceCalls(format, allowed, r.tool_choice == "required" && r.parallel_tool_calls);
    if (!forced.ok()) {
      *param = "tool_choice";
      return forced.status();
    }
    r.guide_type = "structural_tag";
    r.guide = Dump(forced->structural_tag);
    // A prompt that opened <think> is closed first: the guide allows calls only.
    const std::string close =
        chat::PromptOpensReasoning(format, prompt) ? "</think>\n\n" : std::string();
    *prompt_suffix = close + forced->prompt_suffix;
    o.output_prefix = *prompt_suffix;
    setup->forced_tools = true;
  }
  o.reasoning = format.reasoning != chat::ReasoningSyntax::kNone;
  o.starts_in_reasoning = chat::PromptOpensReasoning(format, prompt);
  o.new_call_id = CallIds(format);
  setup->parse_output = offer_tools || o.reasoning;
  // Markers are kept in the text only for a parser to read (else they stay dropped).
  for (const std::string& m : setup->parse_output ? format.markers : std::vector<std::string>{}) {
    const int32_t id = tok.Find(m);
    if (id >= 0 && tok.IsControl(id)) setup->marker_ids.push_back(id);
  }
  setup->format = format;
  return OkStatus();
}

}  // namespace

Status PrepareChat(const std::string& source, const jinja::Template& tmpl, CompletionSetup* setup,
                   std::string* param) {
  const OpenAiRequest& r = setup->request;
  const Tokenizer& tok = *setup->model.tokenizer;
  const chat::ChatFormat format = chat::DetectChatFormat(source);
  *param = "messages";
  // The tools are in the prompt even under tool_choice "none" (as vLLM renders them): an
  // agent's turns keep one prefix for the cache, and the model knows what it was offered.
  auto ctx = TemplateContext(r, tok, format, !r.tools.empty());
  if (!ctx.ok()) return ctx.status();
  auto prompt = tmpl.Render(*ctx);
  if (!prompt.ok()) return InvalidArgumentError("chat template: " + prompt.status().message());
  param->clear();
  std::string suffix;
  RETURN_IF_ERROR(SetupChatOutput(source, *prompt, tok, setup, &suffix, param));
  *prompt += suffix;
  // The template writes the special tokens itself (as Hugging Face's apply_chat_template).
  setup->prompt_ids.push_back(tok.Encode(*prompt, /*add_special=*/false, /*parse_special=*/true));
  setup->prompt_texts.push_back(std::move(prompt).value());
  return OkStatus();
}

}  // namespace inflight::frontends
