// The OpenAI API's request bodies (/v1/completions, /v1/chat/completions) parsed and checked
// into plain values, and its error object. Parsing only: no model is looked at here (token ids
// in logit_bias and prompts are checked against the vocabulary by the frontend).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace inflight::frontends {

// Bounds on what one request may ask for.
inline constexpr int kOpenAiMaxChoices = 128;  // n x prompts (OpenAI's own limit on n)
inline constexpr int kOpenAiMaxStops = 16;
inline constexpr size_t kOpenAiMaxStopBytes = 1024;
inline constexpr int kOpenAiMaxTopLogprobs = 20;
inline constexpr int kOpenAiMaxMessages = 4096;
inline constexpr int kOpenAiMaxLogitBias = 4096;
inline constexpr int kOpenAiMaxTools = 128;
inline constexpr size_t kOpenAiMaxToolsBytes = 256 * 1024;  // the tools array as JSON text

// One prompt of /v1/completions: text, or token ids.
struct OpenAiPrompt {
  std::string text;
  std::vector<int64_t> ids;
  bool is_ids = false;
};

struct OpenAiRequest {
  bool chat = false;
  std::string model;
  std::vector<OpenAiPrompt> prompts;  // completions
  nlohmann::json messages;            // chat: checked (roles, content as string or text parts)
  nlohmann::json template_kwargs = nlohmann::json::object();  // chat_template_kwargs
  bool add_generation_prompt = true;
  std::optional<int64_t>
      max_tokens;  // absent: 16 for completions, the rest of the context for chat
  double temperature = 1.0;
  double top_p = 1.0;
  int64_t top_k = 0;  // 0 or -1: off
  double min_p = 0.0;
  std::optional<uint64_t> seed;
  int64_t n = 1;
  std::vector<std::string> stop;
  double presence_penalty = 0.0, frequency_penalty = 0.0, repetition_penalty = 1.0;
  std::vector<std::pair<int64_t, double>> logit_bias;
  bool logprobs = false;
  int64_t top_logprobs = 0;
  int64_t min_tokens = 0;   // vLLM's extension: EOS is not taken before this many tokens
  bool ignore_eos = false;  // vLLM's extension: run to max_tokens
  bool echo = false;        // completions
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  std::string user;
  std::string cache_salt;  // prefix-cache blocks are shared only among requests with the same salt
  // Tools (chat): function tools in the client's key order (schemas keep their property order).
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();
  std::string tool_choice = "auto";  // auto | none | required | function
  std::string tool_choice_name;      // tool_choice "function": the function it names
  bool parallel_tool_calls = true;
  std::string reasoning_effort;  // low | medium | high ("" not given)
  // vLLM's request priority: lower is served first, 0 the default (in [-1000, 1000]).
  int64_t priority = 0;
  // Guided decoding from response_format (json_object -> json, json_schema -> its schema) or
  // vLLM's guided_json / guided_regex; empty type: none.
  std::string guide_type;
  std::string guide;
};

// INVALID_ARGUMENT naming the field for a malformed or out-of-range request; *param is set to
// the offending field ("" when the body itself is bad).
StatusOr<OpenAiRequest> ParseOpenAiRequest(std::string_view body, bool chat, std::string* param);

// OpenAI's error body: {"error": {"message", "type", "param", "code"}}.
nlohmann::json OpenAiErrorJson(int status, const std::string& message,
                               const std::string& param = "");

// The log-probability a JSON number can carry (-inf, a masked token, becomes -9999.0 as OpenAI
// reports it).
double FiniteLogprob(float lp);

// The UTF-8 bytes of a token for "bytes" fields, and its text with invalid UTF-8 replaced.
nlohmann::json TokenBytesJson(const std::string& bytes);

}  // namespace inflight::frontends
