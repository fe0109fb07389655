// A model's output text split, as it streams, into the answer, the reasoning and tool calls,
// in the syntax of its family (chat_format.h). Text arrives in pieces of any size; what can
// still become a marker waits for the next piece, so the deltas concatenate to the same
// result however the text was cut. Under tool_choice "auto" only exactly the family's call
// syntax naming an offered function becomes a call; anything else stays text. A call whose
// header ({"name": "f", "arguments": ) is seen streams its arguments as they come; one written
// another way is parsed whole when it closes.
// Not thread-safe (one per choice).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/chat_format.h"

namespace inflight::chat {

struct ToolCallDelta {
  int32_t index = 0;
  std::string id;    // the call's first delta only
  std::string name;  // the call's first delta only
  std::string arguments;
};

struct OutputDelta {
  std::string content;
  std::string reasoning;
  std::vector<ToolCallDelta> tool_calls;
  bool empty() const { return content.empty() && reasoning.empty() && tool_calls.empty(); }
};

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text, as the model wrote it
};

struct ParserOptions {
  bool tools = false;                        // tools were offered and tool_choice is not "none"
  std::vector<std::string> tool_names;       // a call to another name stays text
  bool reasoning = true;                     // <think> sections become reasoning (else text)
  bool starts_in_reasoning = false;          // PromptOpensReasoning
  std::string output_prefix;                 // ForcedCalls::prompt_suffix: read before the output
  std::function<std::string()> new_call_id;  // default: "call_0", "call_1", ...
};

class OutputParser {
 public:
  OutputParser(ChatFormat format, ParserOptions options);
  ~OutputParser();
  OutputParser(const OutputParser&) = delete;
  OutputParser& operator=(const OutputParser&) = delete;

  // The next piece of the output.
  OutputDelta Add(std::string_view text);
  // The output has ended: what was held back is decided (an unclosed call is a call when its
  // header was seen, else text).
  OutputDelta Finish();

  const std::vector<ToolCall>& tool_calls() const;
  // Byte ranges of the output (as given to Add) that were reasoning, markers included.
  const std::vector<std::pair<size_t, size_t>>& reasoning_ranges() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// All of `text` through a parser: for whole responses and tests.
struct ParsedOutput {
  std::string content;
  std::string reasoning;
  std::vector<ToolCall> tool_calls;
};
ParsedOutput ParseOutput(const ChatFormat& format, const ParserOptions& options,
                         std::string_view text);

}  // namespace inflight::chat
