#include "frontends/openai_completion.h"

#include <algorithm>

#include "frontends/kserve_json.h"
#include "serving/word_list.h"
#include "tokenizer/tokenizer.h"

namespace inflight::frontends {

using nlohmann::json;
using serving::InferRequest;
using serving::InferResponse;
using serving::InferTensor;

struct Completion::Choice {
  size_t index = 0;  // OpenAI's choice index: prompt * n + j
  size_t prompt = 0;
  std::shared_ptr<serving::CancelToken> cancel;
  std::unique_ptr<IncrementalDetokenizer> detok;
  std::string text;  // the choice's text so far (echo: the prompt first)
  size_t sent = 0;   // bytes of text already streamed
  bool done = false;
  std::string finish_reason;
  int64_t num_tokens = 0;
  int64_t cached_tokens = 0;           // prompt tokens the prefix cache served
  std::vector<LogprobEntry> logprobs;  // whole response: all; streaming: not yet sent
  // Parsed chat output (SetupParse): the parser, each token's start in `text` (reasoning tokens
  // are counted from them), and the whole response's parts.
  std::unique_ptr<chat::OutputParser> parser;
  std::vector<uint32_t> token_offsets;
  std::string content, reasoning;
  size_t parsed = 0;  // bytes of text given to the parser
  std::string stop;   // the stop string that ended the text
};

namespace {

int HttpStatusOf(const Status& s) {
  switch (s.code()) {
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kUnavailable:
    case StatusCode::kResourceExhausted:
      return 503;
    case StatusCode::kUnimplemented:
      return 501;
    case StatusCode::kCancelled:
      return 499;
    case StatusCode::kInternal:
    case StatusCode::kDataLoss:
      return 500;
    default:
      return 400;
  }
}

std::string Sse(const json& j) { return "data: " + Dump(j) + "\n\n"; }

}  // namespace

HttpResponse OpenAiError(const Status& s, const std::string& param) {
  const int status = HttpStatusOf(s);
  HttpResponse r{status, "application/json", Dump(OpenAiErrorJson(status, s.message(), param)), {}};
  if (status == 503) r.headers.emplace_back("Retry-After", "1");
  return r;
}

HttpResponse OpenAiRateLimited(const std::string& message, int64_t retry_after_s) {
  HttpResponse r{429, "application/json", Dump(OpenAiErrorJson(429, message)), {}};
  r.headers.emplace_back("Retry-After", std::to_string(retry_after_s));
  return r;
}

Completion::Completion(CompletionSetup setup, std::shared_ptr<HttpReply> reply,
                       std::shared_ptr<ChatEncoder> encoder)
    : s_(std::move(setup)), reply_(std::move(reply)), encoder_(std::move(encoder)) {
  for (const std::string& stop : s_.request.stop)
    max_stop_bytes_ = std::max(max_stop_bytes_, stop.size());
  const int64_t n = s_.request.n;
  for (size_t p = 0; p < s_.prompt_ids.size(); ++p) {
    for (int64_t j = 0; j < n; ++j) {
      auto c = std::make_unique<Choice>();
      c->index = p * static_cast<size_t>(n) + static_cast<size_t>(j);
      c->prompt = p;
      c->cancel = std::make_shared<serving::CancelToken>();
      // The output continues the prompt: its first piece keeps its leading space.
      c->detok = std::make_unique<IncrementalDetokenizer>(s_.model.tokenizer.get(),
                                                          s_.model.skip_special_tokens, true);
      if (s_.request.echo) c->text = s_.prompt_texts[p];
      if (s_.parse_output) c->parser = std::make_unique<chat::OutputParser>(s_.format, s_.parser);
      choices_.push_back(std::move(c));
    }
  }
}

Completion::~Completion() = default;

InferRequest Completion::BuildRequest(size_t p, int64_t j) const {
  const OpenAiRequest& q = s_.request;
  const Tokenizer& tok = *s_.model.tokenizer;
  const std::vector<int32_t>& ids = s_.prompt_ids[p];
  const int64_t len = static_cast<int64_t>(ids.size());
  // [1, ...] with the batch dimension the LLM model's config declares, none without one.
  auto shape = [&](std::vector<int64_t> dims) {
    if (s_.model.batch_dim) dims.insert(dims.begin(), 1);
    return dims;
  };
  auto scalar_f = [&](const char* name, double v) {
    return InferTensor::FromDoubles(name, inference::TYPE_FP32, shape({1}), {v});
  };
  auto scalar_i = [&](const char* name, int64_t v) {
    return InferTensor::FromDoubles(name, inference::TYPE_INT32, shape({1}),
                                    {static_cast<double>(v)});
  };
  InferRequest r;
  r.model_name = s_.model.llm_model;
  r.inputs.push_back(InferTensor::Int32("input_ids", shape({len}), ids));
  r.inputs.push_back(scalar_i("input_lengths", len));
  r.inputs.push_back(scalar_i("request_output_len", s_.max_tokens));
  if (tok.eos_id() >= 0) r.inputs.push_back(scalar_i("end_id", tok.eos_id()));
  const int32_t pad = tok.spec().pad_id >= 0 ? tok.spec().pad_id : tok.eos_id();
  if (pad >= 0) r.inputs.push_back(scalar_i("pad_id", pad));
  // Streamed from the LLM model when the client streams, and when stop strings may end a
  // choice early (its request is then cancelled instead of running to max_tokens).
  if ((q.stream || !q.stop.empty()) && s_.model.streaming) {
    r.inputs.push_back(
        InferTensor::FromDoubles("streaming", inference::TYPE_BOOL, shape({1}), {1.0}));
  }
  const int64_t min_tokens =
      q.ignore_eos ? s_.max_tokens : std::min<int64_t>(q.min_tokens, s_.max_tokens);
  if (min_tokens > 0) r.inputs.push_back(scalar_i("min_tokens", min_tokens));
  r.inputs.push_back(scalar_f("temperature", q.temperature));
  // The LLM model decodes greedily without top-k and top-p: top_p is always sent (1 = off).
  r.inputs.push_back(scalar_f("runtime_top_p", q.top_p));
  if (q.top_k > 0) r.inputs.push_back(scalar_i("runtime_top_k", q.top_k));
  if (q.repetition_penalty != 1.0)
    r.inputs.push_back(scalar_f("repetition_penalty", q.repetition_penalty));
  if (q.presence_penalty != 0.0)
    r.inputs.push_back(scalar_f("presence_penalty", q.presence_penalty));
  if (q.frequency_penalty != 0.0)
    r.inputs.push_back(scalar_f("frequency_penalty", q.frequency_penalty));
  r.inputs.push_back(
      InferTensor::FromDoubles("seed", inference::TYPE_UINT64, shape({1}),
                               {static_cast<double>(s_.seed + static_cast<uint64_t>(j))}));
  r.inputs.push_back(
      InferTensor::FromDoubles("exclude_input_in_output", inference::TYPE_BOOL, shape({1}), {1.0}));
  if (q.logprobs)
    r.inputs.push_back(
        InferTensor::FromDoubles("return_log_probs", inference::TYPE_BOOL, shape({1}), {1.0}));
  // Other end-of-generation tokens (Llama 3's <|eot_id|>) end the text like EOS.
  serving::WordList extra_eos;
  for (int32_t id : tok.spec().extra_eos_ids) {
    if (id != tok.eos_id()) extra_eos.push_back({id});
  }
  if (!extra_eos.empty()) {
    InferTensor t = serving::PackWordLists("stop_words_list", {extra_eos});
    if (!s_.model.batch_dim) t.shape.erase(t.shape.begin());
    r.inputs.push_back(std::move(t));
  }
  if (!q.logit_bias.empty()) {
    std::vector<float> bias(static_cast<size_t>(tok.vocab_size()), 0.0f);
    for (const auto& [id, b] : q.logit_bias) bias[static_cast<size_t>(id)] += static_cast<float>(b);
    r.inputs.push_back(InferTensor::Float32("embedding_bias", shape({tok.vocab_size()}), bias));
  }
  if (!q.guide_type.empty()) {
    r.inputs.push_back(
        InferTensor::Strings("guided_decoding_guide_type", shape({1}), {q.guide_type}));
    if (!q.guide.empty())
      r.inputs.push_back(InferTensor::Strings("guided_decoding_guide", shape({1}), {q.guide}));
  }
  if (q.min_p > 0.0) r.parameters["min_p"] = q.min_p;
  if (q.top_logprobs > 0) r.parameters["num_top_logprobs"] = q.top_logprobs;
  r.parameters["return_finish_reason"] = true;
  // The executor's priority (0..1, higher first; 0.5 the default) from vLLM's (lower first).
  if (q.priority != 0) r.parameters["priority"] = 0.5 - static_cast<double>(q.priority) / 2002.0;
  if (!s_.cache_salt.empty()) r.parameters["cache_salt"] = s_.cache_salt;
  if (s_.ticket) r.usage = s_.ticket->usage();
  r.tenant = s_.tenant;
  // The id a `stop` request names to end this choice early (a stop string matched).
  r.id = s_.id + "-" + std::to_string(p * static_cast<size_t>(q.n) + static_cast<size_t>(j));
  r.cancel = choices_[p * static_cast<size_t>(q.n) + static_cast<size_t>(j)]->cancel;
  return r;
}

void Completion::Start(serving::Server* server) {
  server_ = server;
  auto self = shared_from_this();
  std::vector<std::shared_ptr<serving::CancelToken>> cancels;
  for (const auto& c : choices_) cancels.push_back(c->cancel);
  // A client that leaves (or reads too slowly) cancels every choice: their KV blocks are freed.
  reply_->OnClientGone([self, cancels](const std::string& reason) {
    self->reply_->Post([self, reason] { self->gone_reason_ = reason; });
    for (const auto& c : cancels) c->Cancel();
  });
  for (size_t p = 0; p < s_.prompt_ids.size(); ++p) {
    for (int64_t j = 0; j < s_.request.n; ++j) {
      const size_t index = p * static_cast<size_t>(s_.request.n) + static_cast<size_t>(j);
      server->Infer(BuildRequest(p, j), [self, index](InferResponse&& r) {
        auto resp = std::make_shared<InferResponse>(std::move(r));
        self->reply_->Post([self, index, resp] {
          // Nothing a model writes may take an I/O thread down.
          try {
            self->OnResponse(index, std::move(*resp));
          } catch (const std::exception& e) {
            if (!self->failed_)
              self->Fail(InternalError(std::string("internal error: ") + e.what()));
          }
        });
      });
    }
  }
}

void Completion::OnResponse(size_t index, InferResponse&& resp) {
  Choice& c = *choices_[index];
  if (failed_ || c.done) return;  // e.g. the cancelled rest of a choice that met a stop string
  if (!resp.error.ok())
    return Fail(gone_reason_.empty() ? resp.error : CancelledError(gone_reason_));
  if (!first_response_) first_response_ = std::chrono::steady_clock::now();
  AddTokens(c, resp);
  if (failed_) return;
  if (!c.done && resp.final) {
    const size_t before = c.text.size();
    c.text += c.detok->Flush();
    CheckStops(c, before);
    if (!c.done) {
      auto it = resp.parameters.find("finish_reason");
      const std::string* why =
          it == resp.parameters.end() ? nullptr : std::get_if<std::string>(&it->second);
      c.finish_reason = why && *why == "length" ? "length" : "stop";
      if (auto cached = resp.parameters.find("cached_tokens"); cached != resp.parameters.end()) {
        if (const int64_t* v = std::get_if<int64_t>(&cached->second)) c.cached_tokens = *v;
      }
      c.done = true;
    }
  }
  if (c.done) ++num_done_;
  if (s_.request.stream) {
    if (!streaming_) StartStream();
    SendChunk(c);
  }
  if (num_done_ == static_cast<int>(choices_.size())) Finish();
}

void Completion::AddTokens(Choice& c, const InferResponse& resp) {
  const InferTensor *ids_t = nullptr, *lp_t = nullptr, *top_ids_t = nullptr, *top_lp_t = nullptr;
  for (const InferTensor& t : resp.outputs) {
    if (t.name == "output_ids") ids_t = &t;
    if (t.name == "output_log_probs") lp_t = &t;
    if (t.name == "output_top_logprob_ids") top_ids_t = &t;
    if (t.name == "output_top_logprobs") top_lp_t = &t;
  }
  if (!ids_t) return;
  auto ids = ids_t->AsInt64();
  if (!ids.ok()) return Fail(ids.status());
  std::vector<double> lps, top_lps;
  std::vector<int64_t> top_ids;
  if (lp_t) {
    if (auto v = lp_t->AsDouble(); v.ok()) lps = std::move(v).value();
  }
  if (top_ids_t && top_lp_t) {
    auto i = top_ids_t->AsInt64();
    auto v = top_lp_t->AsDouble();
    if (i.ok() && v.ok() && i->size() == v->size()) {
      top_ids = std::move(i).value();
      top_lps = std::move(v).value();
    }
  }
  const size_t k = ids->empty() || top_ids.empty() ? 0 : top_ids.size() / ids->size();
  const size_t before = c.text.size();
  const int32_t vocab = s_.model.tokenizer->vocab_size();
  for (size_t i = 0; i < ids->size(); ++i) {
    const int64_t id = (*ids)[i];
    if (id < 0 || id >= vocab)
      return Fail(InternalError("the model produced token id " + std::to_string(id)));
    ++c.num_tokens;
    if (c.parser) c.token_offsets.push_back(static_cast<uint32_t>(c.text.size()));
    if (s_.request.logprobs) {
      LogprobEntry e{static_cast<int32_t>(id),
                     i < lps.size() ? static_cast<float>(lps[i]) : 0.0f,
                     {},
                     c.text.size()};
      for (size_t t = 0; t < k && (i + 1) * k <= top_ids.size(); ++t) {
        if (top_ids[i * k + t] >= 0)
          e.top.emplace_back(static_cast<int32_t>(top_ids[i * k + t]),
                             static_cast<float>(top_lps[i * k + t]));
      }
      c.logprobs.push_back(std::move(e));
    }
    if (!s_.marker_ids.empty() &&
        std::find(s_.marker_ids.begin(), s_.marker_ids.end(), id) != s_.marker_ids.end()) {
      // A marker the detokenizer would drop as a control token: the parser reads it.
      c.text += c.detok->Flush();
      c.text += s_.model.tokenizer->TokenText(static_cast<int32_t>(id));
    } else {
      c.text += c.detok->Add(static_cast<int32_t>(id));
    }
  }
  CheckStops(c, before);
}

void Completion::CheckStops(Choice& c, size_t new_from) {
  if (c.done || s_.request.stop.empty()) return;
  const size_t floor =
      s_.request.echo ? s_.prompt_texts[c.prompt].size() : 0;  // the echoed prompt never stops
  size_t cut = std::string::npos;
  for (const std::string& stop : s_.request.stop) {
    const size_t from =
        std::max(floor, new_from >= stop.size() - 1 ? new_from - (stop.size() - 1) : 0);
    const size_t at = c.text.find(stop, from);
    if (at < cut) {
      cut = at;
      c.stop = stop;
    }
  }
  if (cut == std::string::npos) return;
  c.text.resize(cut);
  // Tokens whose text starts past the cut are not part of the answer.
  while (!c.logprobs.empty() && c.logprobs.back().text_offset >= cut && c.logprobs.size() > 1)
    c.logprobs.pop_back();
  c.done = true;
  c.finish_reason = "stop";
  // The LLM model stops generating for this choice: a `stop` request ends it as complete (a
  // cancellation would count as a failed request in the statistics).
  InferRequest stop =
      BuildRequest(c.prompt, static_cast<int64_t>(c.index % static_cast<size_t>(s_.request.n)));
  stop.cancel = std::make_shared<serving::CancelToken>();
  stop.inputs.push_back(InferTensor::FromDoubles(
      "stop", inference::TYPE_BOOL,
      s_.model.batch_dim ? std::vector<int64_t>{1, 1} : std::vector<int64_t>{1}, {1.0}));
  server_->Infer(std::move(stop), [](InferResponse&&) {});
}

void Completion::Record(const Status& result) {
  if (s_.model.name != s_.model.llm_model)
    server_->RecordTextRequest(s_.model.name, arrival_, first_response_, result);
}

void Completion::Fail(const Status& error) {
  failed_ = true;
  Record(error);
  for (const auto& c : choices_) c->cancel->Cancel();
  // A forced call's guide is built from the tools' schemas: a schema it cannot take is theirs.
  const std::string param =
      s_.forced_tools && error.code() == StatusCode::kInvalidArgument ? "tools" : "";
  if (encoder_) {
    encoder_->Fail(*reply_, error, streaming_);
    if (streaming_) reply_->EndStream();
    return;
  }
  if (!streaming_) return reply_->Send(OpenAiError(error, param));
  const int status = HttpStatusOf(error);
  reply_->Write(Sse(OpenAiErrorJson(status, error.message())), /*force=*/true);
  reply_->Write("data: [DONE]\n\n", /*force=*/true);
  reply_->EndStream();
}

json Completion::Envelope(const char* object) const {
  return {{"id", s_.id}, {"object", object}, {"created", s_.created}, {"model", s_.request.model}};
}

void Completion::StartStream() {
  streaming_ = true;
  reply_->StartStream(200, "text/event-stream; charset=utf-8");
  if (encoder_) {
    return encoder_->StartStream(*reply_, static_cast<int64_t>(s_.prompt_ids[0].size()));
  }
  if (!s_.request.chat) return;
  // Chat streams open each choice with the assistant's role.
  json chunk = Envelope("chat.completion.chunk");
  chunk["choices"] = json::array();
  for (const auto& c : choices_) {
    chunk["choices"].push_back({{"index", c->index},
                                {"delta", {{"role", "assistant"}, {"content", ""}}},
                                {"logprobs", nullptr},
                                {"finish_reason", nullptr}});
  }
  reply_->Write(Sse(chunk));
}

void Completion::SendChunk(Choice& c) {
  // Text that may be the start of a stop string waits until it is known not to be one.
  size_t end = c.text.size();
  if (!c.done && max_stop_bytes_ > 1) {
    end = c.text.size() > c.sent + (max_stop_bytes_ - 1) ? c.text.size() - (max_stop_bytes_ - 1)
                                                         : c.sent;
    while (end > c.sent && (static_cast<unsigned char>(c.text[end]) & 0xC0) == 0x80)
      --end;  // whole characters
  }
  const std::string delta = c.text.substr(c.sent, end - c.sent);
  if (delta.empty() && c.logprobs.empty() && !c.done) return;
  c.sent = end;
  json choice = {{"index", c.index}, {"finish_reason", c.done ? json(c.finish_reason) : json()}};
  if (c.parser) {
    const chat::OutputDelta parsed = ParseMore(c, c.parsed, end);
    if (encoder_) {
      c.content += parsed.content;
      c.reasoning += parsed.reasoning;
      if (!parsed.empty()) encoder_->Delta(*reply_, parsed);
      return;
    }
    if (parsed.empty() && c.logprobs.empty() && !c.done) return;
    choice["delta"] = ChatDelta(parsed);
    if (c.done && !c.parser->tool_calls().empty() && c.finish_reason == "stop")
      choice["finish_reason"] = "tool_calls";
  } else if (s_.request.chat) {
    choice["delta"] = delta.empty() ? json::object() : json{{"content", delta}};
  }
  choice["logprobs"] =
      s_.request.logprobs && !c.logprobs.empty() ? LogprobsJson(c.logprobs) : json();
  c.logprobs.clear();
  if (!s_.request.chat) choice["text"] = delta;
  json chunk = Envelope(s_.request.chat ? "chat.completion.chunk" : "text_completion");
  chunk["choices"] = json::array({choice});
  if (s_.request.include_usage) chunk["usage"] = nullptr;
  reply_->Write(Sse(chunk));
}

chat::OutputDelta Completion::ParseMore(Choice& c, size_t from, size_t to) {
  chat::OutputDelta d = c.parser->Add(std::string_view(c.text).substr(from, to - from));
  c.parsed = to;
  if (c.done) {
    chat::OutputDelta rest = c.parser->Finish();
    d.content += rest.content;
    d.reasoning += rest.reasoning;
    for (chat::ToolCallDelta& t : rest.tool_calls) {
      if (!d.tool_calls.empty() && d.tool_calls.back().index == t.index) {
        d.tool_calls.back().arguments += t.arguments;
      } else {
        d.tool_calls.push_back(std::move(t));
      }
    }
  }
  return d;
}

json Completion::ChatDelta(const chat::OutputDelta& d) const {
  json delta = json::object();
  if (!d.content.empty()) delta["content"] = d.content;
  if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
  if (!d.tool_calls.empty()) {
    json calls = json::array();
    for (const chat::ToolCallDelta& t : d.tool_calls) {
      json call = {{"index", t.index}};
      json fn = {{"arguments", t.arguments}};
      if (!t.id.empty()) {
        call["id"] = t.id;
        call["type"] = "function";
        fn["name"] = t.name;
      }
      call["function"] = std::move(fn);
      calls.push_back(std::move(call));
    }
    delta["tool_calls"] = std::move(calls);
  }
  return delta;
}

int64_t Completion::ReasoningTokens(const Choice& c) const {
  if (!c.parser) return 0;
  // Both lists ascend: one pass.
  int64_t n = 0;
  const auto& ranges = c.parser->reasoning_ranges();
  size_t r = 0;
  for (uint32_t at : c.token_offsets) {
    while (r < ranges.size() && ranges[r].second <= at) ++r;
    if (r == ranges.size()) break;
    if (at >= ranges[r].first) ++n;
  }
  return n;
}

json Completion::LogprobsJson(const std::vector<LogprobEntry>& entries) const {
  const Tokenizer& tok = *s_.model.tokenizer;
  if (s_.request.chat) {
    json content = json::array();
    for (const LogprobEntry& e : entries) {
      const std::string bytes = tok.TokenBytes(e.id);
      json top = json::array();
      for (const auto& [id, lp] : e.top) {
        const std::string b = tok.TokenBytes(id);
        top.push_back({{"token", b}, {"logprob", FiniteLogprob(lp)}, {"bytes", TokenBytesJson(b)}});
      }
      content.push_back({{"token", bytes},
                         {"logprob", FiniteLogprob(e.logprob)},
                         {"bytes", TokenBytesJson(bytes)},
                         {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(),
       offsets = json::array();
  for (const LogprobEntry& e : entries) {
    tokens.push_back(tok.TokenBytes(e.id));
    token_logprobs.push_back(FiniteLogprob(e.logprob));
    json top = json::object();
    for (const auto& [id, lp] : e.top) top[tok.TokenBytes(id)] = FiniteLogprob(lp);
    top_logprobs.push_back(s_.request.top_logprobs > 0 ? top : json());
    offsets.push_back(e.text_offset);
  }
  return {{"tokens", tokens},
          {"token_logprobs", token_logprobs},
          {"top_logprobs", top_logprobs},
          {"text_offset", offsets}};
}

json Completion::Usage() const {
  int64_t prompt = 0, completion = 0;
  for (const auto& ids : s_.prompt_ids) prompt += static_cast<int64_t>(ids.size());
  for (const auto& c : choices_) completion += c->num_tokens;
  // Each prompt counts its cached tokens once (its choices share the prompt).
  int64_t cached = 0;
  const size_t n = static_cast<size_t>(s_.request.n);
  for (size_t p = 0; p < s_.prompt_ids.size(); ++p) {
    int64_t most = 0;
    for (size_t j = 0; j < n; ++j) most = std::max(most, choices_[p * n + j]->cached_tokens);
    cached += std::min<int64_t>(most, static_cast<int64_t>(s_.prompt_ids[p].size()));
  }
  json usage = {{"prompt_tokens", prompt},
                {"completion_tokens", completion},
                {"total_tokens", prompt + completion},
                {"prompt_tokens_details", {{"cached_tokens", cached}}}};
  if (s_.parse_output) {
    int64_t reasoning = 0;
    for (const auto& c : choices_) reasoning += ReasoningTokens(*c);
    usage["completion_tokens_details"] = {{"reasoning_tokens", reasoning}};
  }
  return usage;
}

json Completion::ChoiceJson(const Choice& c) const {
  json choice = {{"index", c.index}, {"finish_reason", c.finish_reason}};
  choice["logprobs"] = s_.request.logprobs ? LogprobsJson(c.logprobs) : json();
  if (c.parser) {
    const std::vector<chat::ToolCall>& calls = c.parser->tool_calls();
    json message = {{"role", "assistant"},
                    {"content", c.content.empty() && !calls.empty() ? json() : json(c.content)}};
    if (!c.reasoning.empty()) message["reasoning_content"] = c.reasoning;
    if (!calls.empty()) {
      json list = json::array();
      for (const chat::ToolCall& t : calls) {
        list.push_back({{"id", t.id},
                        {"type", "function"},
                        {"function", {{"name", t.name}, {"arguments", t.arguments}}}});
      }
      message["tool_calls"] = std::move(list);
      if (c.finish_reason == "stop") choice["finish_reason"] = "tool_calls";
    }
    choice["message"] = std::move(message);
  } else if (s_.request.chat) {
    choice["message"] = {{"role", "assistant"}, {"content", c.text}};
  } else {
    choice["text"] = c.text;
  }
  return choice;
}

ChatResult Completion::Result(const Choice& c) const {
  ChatResult r;
  r.content = c.content;
  r.reasoning = c.reasoning;
  if (c.parser) r.tool_calls = c.parser->tool_calls();
  r.finish_reason =
      !r.tool_calls.empty() && c.finish_reason == "stop" ? "tool_calls" : c.finish_reason;
  r.stop_sequence = c.stop;
  const json usage = Usage();
  r.prompt_tokens = usage["prompt_tokens"];
  r.completion_tokens = usage["completion_tokens"];
  r.cached_tokens = usage["prompt_tokens_details"]["cached_tokens"];
  r.reasoning_tokens = ReasoningTokens(c);
  return r;
}

void Completion::Finish() {
  Record(OkStatus());
  // Every choice has ended: the tenant's slot and tokens are settled before the client hears.
  s_.ticket.reset();
  if (encoder_) {
    Choice& c = *choices_[0];
    if (!streaming_ && c.parser) {
      const chat::OutputDelta d = ParseMore(c, 0, c.text.size());
      c.content = d.content;
      c.reasoning = d.reasoning;
    }
    encoder_->Finish(*reply_, Result(c), streaming_);
    if (streaming_) reply_->EndStream();
    return;
  }
  if (s_.request.stream) {
    if (s_.request.include_usage) {
      json chunk = Envelope(s_.request.chat ? "chat.completion.chunk" : "text_completion");
      chunk["choices"] = json::array();
      chunk["usage"] = Usage();
      reply_->Write(Sse(chunk), /*force=*/true);
    }
    reply_->Write("data: [DONE]\n\n", /*force=*/true);
    reply_->EndStream();
    return;
  }
  for (const auto& c : choices_) {
    if (!c->parser) continue;
    const chat::OutputDelta d = ParseMore(*c, 0, c->text.size());
    c->content = d.content;
    c->reasoning = d.reasoning;
  }
  json body = Envelope(s_.request.chat ? "chat.completion" : "text_completion");
  body["choices"] = json::array();
  for (const auto& c : choices_) body["choices"].push_back(ChoiceJson(*c));
  body["usage"] = Usage();
  reply_->Send({200, "application/json", Dump(body), {}});
}

}  // namespace inflight::frontends
