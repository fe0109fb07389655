// One OpenAI completion in flight: each choice is one request to the LLM model (so a choice
// that meets a stop string is cancelled alone), detokenized incrementally, matched against the
// stop strings (text past a match is never sent), and encoded as OpenAI chunks or one response.
// Everything but Start runs on the connection's strand (responses are posted there), so the
// state needs no lock.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "chat/output_parser.h"
#include "frontends/chat_encoder.h"
#include "frontends/http_server.h"
#include "frontends/openai_json.h"
#include "serving/server.h"
#include "serving/tenancy.h"
#include "serving/text_model.h"

namespace inflight::frontends {

// An OpenAI error response for `s` (404, 400, 503 with Retry-After, ...).
HttpResponse OpenAiError(const Status& s, const std::string& param);
// 429 with Retry-After: a tenant's concurrency or token rate limit.
HttpResponse OpenAiRateLimited(const std::string& message, int64_t retry_after_s);

struct CompletionSetup {
  OpenAiRequest request;
  serving::TextModel model;
  std::vector<std::vector<int32_t>> prompt_ids;  // per prompt
  std::vector<std::string> prompt_texts;         // per prompt (echo)
  int32_t max_tokens = 16;
  uint64_t seed = 0;  // choice j of a prompt samples with seed + j
  std::string id;     // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;
  std::string cache_salt;  // the effective salt ("" none)
  std::string tenant;      // every choice's request and its `stop` carry it
  // The tenant's admission: held until the completion is gone; its meter counts the tokens.
  std::shared_ptr<serving::TenantLimits::Ticket> ticket;
  // Chat output split into the answer, reasoning and tool calls (chat/output_parser.h).
  bool parse_output = false;
  chat::ChatFormat format;
  chat::ParserOptions parser;
  // Control tokens that are the format's markers: kept in the text the parser reads.
  std::vector<int32_t> marker_ids;
  bool forced_tools = false;  // a guide forces calls: its compile errors are the tools' fault
};

class Completion : public std::enable_shared_from_this<Completion> {
 public:
  // `encoder`: another API's shape (one choice); null: OpenAI's completions and chat.
  Completion(CompletionSetup setup, std::shared_ptr<HttpReply> reply,
             std::shared_ptr<ChatEncoder> encoder = nullptr);
  ~Completion();
  // Submits every choice; the reply is sent when they have ended.
  void Start(serving::Server* server);

 private:
  struct LogprobEntry {
    int32_t id;
    float logprob;
    std::vector<std::pair<int32_t, float>> top;
    size_t text_offset;
  };
  struct Choice;

  serving::InferRequest BuildRequest(size_t prompt, int64_t j) const;
  void OnResponse(size_t index, serving::InferResponse&& resp);
  // Appends new tokens to the choice's text; ends it on a stop string.
  void AddTokens(Choice& c, const serving::InferResponse& resp);
  // Ends the choice when its text holds a stop string (the text is cut before it).
  void CheckStops(Choice& c, size_t new_from);
  void Fail(const Status& error);
  void StartStream();
  void SendChunk(Choice& c);
  void Finish();
  // Counts the request for the model the client named when that is not the LLM model itself.
  void Record(const Status& result);
  nlohmann::json LogprobsJson(const std::vector<LogprobEntry>& entries) const;
  nlohmann::json ChoiceJson(const Choice& c) const;
  // The chat delta of parsed output: content, reasoning_content, tool_calls.
  nlohmann::json ChatDelta(const chat::OutputDelta& d) const;
  // Feeds the choice's text from `from` (all when the choice is done) to its parser.
  chat::OutputDelta ParseMore(Choice& c, size_t from, size_t to);
  int64_t ReasoningTokens(const Choice& c) const;
  ChatResult Result(const Choice& c) const;
  nlohmann::json Usage() const;
  nlohmann::json Envelope(const char* object) const;

  CompletionSetup s_;
  serving::Server* server_ = nullptr;
  std::shared_ptr<HttpReply> reply_;
  std::shared_ptr<ChatEncoder> encoder_;
  std::vector<std::unique_ptr<Choice>> choices_;
  size_t max_stop_bytes_ = 0;
  int num_done_ = 0;
  bool streaming_ = false;  // the SSE stream has started
  bool failed_ = false;
  std::string gone_reason_;  // set when the server gave up on the client
  std::chrono::steady_clock::time_point arrival_ = std::chrono::steady_clock::now();
  std::optional<std::chrono::steady_clock::time_point> first_response_;
};

}  // namespace inflight::frontends
