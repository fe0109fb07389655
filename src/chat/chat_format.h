// How a model family writes tool calls and reasoning in its output, read from its chat
// template, and what the server adds around the template: the generic tool instructions for a
// template that does not render `tools`, and the structural tag (guided decoding) that forces
// calls for tool_choice "required" or a named function.
//
//   hermes   <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>   (Qwen2.5/3, Hermes)
//   llama3   {"name": "f", "parameters": {...}}   at the start of the output, ";" between calls
//            (Llama 3.1+ JSON tool calling; <|python_tag|> before it is a control token)
//   mistral  [TOOL_CALLS][{"name": "f", "arguments": {...}}, ...]   or   [TOOL_CALLS]f[ARGS]{...}
//   harmony  <|channel|>commentary to=functions.f <|constrain|>json<|message|>{...}<|call|>
//            (gpt-oss; "analysis" is reasoning, "final" the answer)
//   generic  the hermes syntax, for a template that knows no tools (the server describes the
//            tools and the syntax in a system message; docs/agents.md)
// Reasoning: <think>...</think> (Qwen3, DeepSeek-R1 distills), harmony's analysis channel.
// Pure functions; thread-safe.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace inflight::chat {

enum class ToolSyntax { kHermes, kLlama3, kMistral, kHarmony };
enum class ReasoningSyntax { kNone, kThinkTags, kHarmony };

struct ChatFormat {
  std::string family;  // "hermes", "llama3", "mistral", "harmony" or "generic"
  ToolSyntax tools = ToolSyntax::kHermes;
  ReasoningSyntax reasoning = ReasoningSyntax::kNone;
  bool template_renders_tools = false;  // else GenericToolPrompt goes into the system message
  // Marker texts that some vocabularies hold as control tokens (which detokenizing drops):
  // the frontend keeps these in the text the parser reads.
  std::vector<std::string> markers;
};

// The family of a chat template (by the markers it writes).
ChatFormat DetectChatFormat(std::string_view chat_template);

// The system-message text that describes `tools` (OpenAI's tools array, already checked) and
// the generic call syntax to a model whose template does not render tools.
std::string GenericToolPrompt(const nlohmann::ordered_json& tools);

// Whether the prompt leaves the model inside a reasoning section (a template that opens
// <think> itself, as DeepSeek-R1's and Qwen3's thinking templates do).
bool PromptOpensReasoning(const ChatFormat& format, std::string_view prompt);

// How the server forces calls (tool_choice "required" or a named function):
//   prompt_suffix   what goes after the rendered generation prompt, for a syntax whose call
//                   markers are control tokens a guide cannot write ("" when none); the output
//                   continues it, so the parser reads it first
//   structural_tag  the guide (xgrammar's structural tag; guided_decoding_guide_type
//                   "structural_tag") whose language is one or more calls (one when !parallel)
//                   to `tools` (OpenAI tool objects, checked) in `format`'s syntax
struct ForcedCalls {
  std::string prompt_suffix;
  nlohmann::ordered_json structural_tag;
};
// INVALID_ARGUMENT when the syntax cannot force this choice (harmony names its function in
// control tokens: it forces one named function only).
StatusOr<ForcedCalls> ForceCalls(const ChatFormat& format, const nlohmann::ordered_json& tools,
                                 bool parallel);

}  // namespace inflight::chat
