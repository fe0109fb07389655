// Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens): system prompt,
// text / tool_use / tool_result / thinking blocks, custom tools with input schemas,
// tool_choice (auto, any, tool, none), stop sequences, the thinking switch, and streaming in
// its own events (message_start, content_block_*, message_delta, message_stop). A request
// runs as a one-choice chat completion (openai_frontend.h) whose output this encoder writes;
// errors come in Anthropic's shape ({"type": "error", "error": {"type", "message"}}).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/status.h"
#include "frontends/chat_encoder.h"
#include "frontends/openai_json.h"

namespace inflight::frontends {

// INVALID_ARGUMENT naming the field (in the message: Anthropic's errors carry no param).
// count_tokens: max_tokens is not required.
StatusOr<OpenAiRequest> ParseMessagesRequest(std::string_view body, bool count_tokens);

// Anthropic's error body and status for `s`.
HttpResponse AnthropicError(const Status& s);

class MessagesEncoder : public ChatEncoder {
 public:
  explicit MessagesEncoder(std::string model);
  const std::string& id() const override { return id_; }
  HttpResponse Error(const Status& s, const std::string& param) const override;
  HttpResponse RateLimited(const std::string& message, int64_t retry_after_s) const override;
  void StartStream(HttpReply& reply, int64_t prompt_tokens) override;
  void Delta(HttpReply& reply, const chat::OutputDelta& delta) override;
  void Finish(HttpReply& reply, const ChatResult& result, bool streaming) override;
  void Fail(HttpReply& reply, const Status& s, bool streaming) override;

 private:
  enum class Kind { kNone, kThinking, kText, kToolUse };
  void Event(HttpReply& reply, const char* type, nlohmann::ordered_json data);
  void Open(HttpReply& reply, Kind kind, const chat::ToolCallDelta* call);
  void Close(HttpReply& reply);

  std::string model_;
  std::string id_;
  Kind open_ = Kind::kNone;
  int index_ = -1;  // the open content block's index
};

}  // namespace inflight::frontends
