// Another API's wire shape for a chat completion: the Responses API (/v1/responses) and
// Anthropic's Messages API (/v1/messages) run as one-choice chat completions whose parsed
// output (answer, reasoning, tool calls) an encoder writes as its own events and objects.
// Called on the connection's strand only (as Completion is); not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "chat/output_parser.h"
#include "frontends/http_server.h"

namespace inflight::frontends {

// A finished choice, as every API reports it.
struct ChatResult {
  std::string content;
  std::string reasoning;
  std::vector<chat::ToolCall> tool_calls;
  std::string finish_reason;  // stop | length | tool_calls
  std::string stop_sequence;  // the stop string that ended the text ("" none)
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
  int64_t reasoning_tokens = 0;
};

class ChatEncoder {
 public:
  virtual ~ChatEncoder() = default;
  // The response's id (its API's prefix).
  virtual const std::string& id() const = 0;
  // A refusal before anything ran, in the API's error shape (`param` names the field).
  virtual HttpResponse Error(const Status& s, const std::string& param) const = 0;
  virtual HttpResponse RateLimited(const std::string& message, int64_t retry_after_s) const = 0;
  // Streaming: the opening events, each parsed delta, then Finish; whole: Finish sends the body.
  // `prompt_tokens`: the rendered prompt's length.
  virtual void StartStream(HttpReply& reply, int64_t prompt_tokens) = 0;
  virtual void Delta(HttpReply& reply, const chat::OutputDelta& delta) = 0;
  virtual void Finish(HttpReply& reply, const ChatResult& result, bool streaming) = 0;
  // A failure after the stream started (the API's error event), or before (an error body).
  virtual void Fail(HttpReply& reply, const Status& s, bool streaming) = 0;
};

}  // namespace inflight::frontends
