#include "frontends/openai_frontend.h"

#include <chrono>
#include <functional>
#include <random>

#include "frontends/kserve_json.h"
#include "frontends/messages_api.h"
#include "frontends/openai_chat.h"
#include "frontends/openai_completion.h"
#include "frontends/openai_json.h"
#include "jinja/value.h"
#include "serving/text_model.h"

namespace inflight::frontends {
namespace {

using nlohmann::json;

int64_t NowSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A random id suffix, and a random seed for requests that name none (as OpenAI: unseeded
// sampling differs between requests). Seeds stay below 2^53: they travel as numbers.
uint64_t RandomBits() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng();
}

std::string RandomId(const char* prefix) {
  static const char kHex[] = "0123456789abcdef";
  std::string id = prefix;
  for (uint64_t bits = RandomBits(), i = 0; i < 16; ++i, bits >>= 4) id += kHex[bits & 15];
  return id;
}

// Names the failing field.
Status Reject(std::string* param, Status s, const char* field) {
  *param = field;
  return s;
}

}  // namespace

OpenAiFrontend::OpenAiFrontend(serving::Server* server, OpenAiOptions options, AccessPolicy access)
    : server_(server), options_(std::move(options)), access_(std::move(access)) {}

Status OpenAiFrontend::Init() {
  if (options_.chat_template.empty()) return OkStatus();
  auto t = TemplateFor(options_.chat_template);
  if (!t.ok()) return InvalidArgumentError("--chat-template: " + t.status().message());
  return OkStatus();
}

StatusOr<std::shared_ptr<const jinja::Template>> OpenAiFrontend::TemplateFor(
    const std::string& source) {
  std::lock_guard<std::mutex> lock(templates_mu_);
  auto it = templates_.find(source);
  if (it != templates_.end()) return it->second;
  auto parsed = jinja::Template::Parse(source);
  if (!parsed.ok()) return parsed.status();
  // Templates come from loaded models and the command line; a reload may bring new ones.
  if (templates_.size() >= 64) templates_.clear();
  auto t = std::make_shared<const jinja::Template>(std::move(parsed).value());
  templates_.emplace(source, t);
  return t;
}

void OpenAiFrontend::Handle(const HttpRequest& req, const std::vector<std::string>& seg,
                            const std::string& tenant, std::shared_ptr<HttpReply> reply) {
  auto method = [&](const char* want) {
    if (req.method == want) return true;
    reply->Send({405,
                 "application/json",
                 Dump(OpenAiErrorJson(405, "method " + req.method + " is not allowed here")),
                 {}});
    return false;
  };
  if (seg.size() >= 2 && seg[1] == "models" && seg.size() <= 3) {
    if (method("GET")) Models(seg, reply);
    return;
  }
  if (seg == std::vector<std::string>{"v1", "completions"}) {
    if (method("POST")) Generate(req, false, tenant, std::move(reply));
    return;
  }
  if (seg == std::vector<std::string>{"v1", "chat", "completions"}) {
    if (method("POST")) Generate(req, true, tenant, std::move(reply));
    return;
  }
  if (seg.size() >= 2 && seg[1] == "responses" && seg.size() <= 3) {
    if (seg.size() == 2) {
      if (method("POST")) Responses(req, tenant, std::move(reply));
    } else if (req.method == "GET" || req.method == "DELETE") {
      StoredResponse(req.method, seg[2], tenant, reply);
    } else {
      method("GET");
    }
    return;
  }
  if (seg == std::vector<std::string>{"v1", "messages"} ||
      seg == std::vector<std::string>{"v1", "messages", "count_tokens"}) {
    if (req.method != "POST") {
      return reply->Send(
          AnthropicError(InvalidArgumentError("method " + req.method + " is not allowed here")));
    }
    return Messages(req, seg.size() == 3, tenant, std::move(reply));
  }
  if (seg.size() == 1 || (seg.size() == 2 && seg[0] == "v1")) {
    const std::string& last = seg.back();
    if (last == "tokenize" || last == "detokenize") {
      if (method("POST")) Tokenize(req, last == "detokenize", reply);
      return;
    }
  }
  reply->Send(
      {404, "application/json", Dump(OpenAiErrorJson(404, "no such endpoint: " + req.path)), {}});
}

void OpenAiFrontend::Models(const std::vector<std::string>& seg,
                            const std::shared_ptr<HttpReply>& reply) {
  // vLLM's fields beside OpenAI's: the context length clients size their requests by, and the
  // LLM model a pipeline runs on.
  auto entry = [](const std::string& name, const serving::TextModel& m) {
    return json{{"id", name},
                {"object", "model"},
                {"created", NowSeconds()},
                {"owned_by", "inflight"},
                {"root", m.llm_model},
                {"parent", nullptr},
                {"max_model_len", m.context_length > 0 ? json(m.context_length) : json()}};
  };
  if (seg.size() == 3) {
    auto m = serving::ResolveTextModel(*server_, seg[2]);
    if (!m.ok()) return reply->Send(OpenAiError(m.status(), "model"));
    return reply->Send({200, "application/json", Dump(entry(seg[2], *m)), {}});
  }
  // Every ready model that can serve text: ensembles, BLS and LLM models with a tokenizer.
  json data = json::array();
  for (const auto& e : server_->RepositoryIndex(/*ready_only=*/true)) {
    if (auto m = serving::ResolveTextModel(*server_, e.name); m.ok())
      data.push_back(entry(e.name, *m));
  }
  reply->Send({200, "application/json", Dump(json{{"object", "list"}, {"data", data}}), {}});
}

Status OpenAiFrontend::Prepare(CompletionSetup* setup, std::string* param) {
  const OpenAiRequest& r = setup->request;
  const bool chat = r.chat;
  auto model = serving::ResolveTextModel(*server_, r.model);
  if (!model.ok()) {
    if (model.status().code() == StatusCode::kNotFound) {
      return Reject(param, NotFoundError("The model '" + r.model + "' does not exist"), "model");
    }
    return Reject(param, model.status(), "model");
  }
  setup->model = std::move(model).value();
  const Tokenizer& tok = *setup->model.tokenizer;
  if (r.echo && r.logprobs) {
    return Reject(
        param,
        UnimplementedError("echo with logprobs (log-probabilities of the prompt) is not supported"),
        "echo");
  }
  for (const auto& [id, bias] : r.logit_bias) {
    if (id >= tok.vocab_size()) {
      return Reject(
          param,
          InvalidArgumentError("logit_bias names token " + std::to_string(id) +
                               ", past the vocabulary of " + std::to_string(tok.vocab_size())),
          "logit_bias");
    }
  }
  if (chat) {
    const std::string& source =
        options_.chat_template.empty() ? tok.spec().chat_template : options_.chat_template;
    if (source.empty()) {
      return Reject(
          param,
          InvalidArgumentError("model '" + r.model +
                               "' has no chat template (give the server one with --chat-template)"),
          "messages");
    }
    auto tmpl = TemplateFor(source);
    if (!tmpl.ok())
      return Reject(param,
                    InvalidArgumentError("the model's chat template: " + tmpl.status().message()),
                    "messages");
    if (Status s = PrepareChat(source, **tmpl, setup, param); !s.ok()) return s;
  } else {
    for (const OpenAiPrompt& p : r.prompts) {
      if (p.is_ids) {
        std::vector<int32_t> ids;
        for (int64_t id : p.ids) {
          if (id < 0 || id >= tok.vocab_size()) {
            return Reject(param,
                          InvalidArgumentError("prompt token id " + std::to_string(id) +
                                               " is outside the vocabulary"),
                          "prompt");
          }
          ids.push_back(static_cast<int32_t>(id));
        }
        setup->prompt_texts.push_back(tok.Decode(ids, setup->model.skip_special_tokens));
        setup->prompt_ids.push_back(std::move(ids));
      } else {
        setup->prompt_ids.push_back(tok.Encode(p.text, setup->model.add_special_tokens));
        setup->prompt_texts.push_back(p.text);
      }
    }
  }
  return OkStatus();
}

void OpenAiFrontend::Generate(const HttpRequest& req, bool chat, const std::string& tenant,
                              std::shared_ptr<HttpReply> reply) {
  std::string param;
  auto parsed = ParseOpenAiRequest(req.body, chat, &param);
  if (!parsed.ok()) return reply->Send(OpenAiError(parsed.status(), param));
  Run(std::move(parsed).value(), tenant, std::move(reply), nullptr);
}

void OpenAiFrontend::Run(OpenAiRequest request, const std::string& tenant,
                         std::shared_ptr<HttpReply> reply, std::shared_ptr<ChatEncoder> encoder) {
  const bool chat = request.chat;
  auto reject = [&](const Status& s, const std::string& param) {
    reply->Send(encoder ? encoder->Error(s, param) : OpenAiError(s, param));
  };
  std::string param;
  CompletionSetup setup;
  setup.request = std::move(request);
  const OpenAiRequest& r = setup.request;
  const serving::RequestLimits& limits = access_.request_limits;
  auto too_many = [&](const char* field, int64_t limit) {
    reject(InvalidArgumentError("'" + std::string(field) + "' is limited to " +
                                std::to_string(limit) + " on this server"),
           field);
  };
  if (limits.max_n > 0 && r.n > limits.max_n) return too_many("n", limits.max_n);
  if (limits.max_logprobs > 0 && r.top_logprobs > limits.max_logprobs) {
    return too_many(chat ? "top_logprobs" : "logprobs", limits.max_logprobs);
  }
  if (limits.max_stop_words > 0 && static_cast<int64_t>(r.stop.size()) > limits.max_stop_words) {
    return too_many("stop", limits.max_stop_words);
  }
  if (Status s = Prepare(&setup, &param); !s.ok()) return reject(s, param);
  int64_t longest = 0;
  for (const auto& ids : setup.prompt_ids) {
    if (ids.empty())
      return reject(InvalidArgumentError("the prompt is empty"), chat ? "messages" : "prompt");
    longest = std::max<int64_t>(longest, static_cast<int64_t>(ids.size()));
  }
  if (limits.max_prompt_tokens > 0 && longest > limits.max_prompt_tokens) {
    return reject(InvalidArgumentError("the prompt is " + std::to_string(longest) +
                                       " tokens; this server takes at most " +
                                       std::to_string(limits.max_prompt_tokens)),
                  chat ? "messages" : "prompt");
  }
  const int64_t context = setup.model.context_length;
  if (context > 0 && longest >= context) {
    return reject(InvalidArgumentError("the prompt is " + std::to_string(longest) +
                                       " tokens; this model's context is " +
                                       std::to_string(context) + " tokens"),
                  chat ? "messages" : "prompt");
  }
  if (context > 0 && r.max_tokens && longest + *r.max_tokens > context) {
    return reject(InvalidArgumentError(
                      "This model's maximum context length is " + std::to_string(context) +
                      " tokens. However, you requested " + std::to_string(longest + *r.max_tokens) +
                      " tokens (" + std::to_string(longest) + " in the prompt, " +
                      std::to_string(*r.max_tokens) + " for the completion)."),
                  "max_tokens");
  }
  // Without max_tokens: 16 for completions (OpenAI's default), the rest of the context for chat.
  int64_t max_tokens = r.max_tokens.value_or(chat ? (context > 0 ? context - longest : 4096) : 16);
  if (context > 0) max_tokens = std::min(max_tokens, context - longest);
  setup.max_tokens = static_cast<int32_t>(std::max<int64_t>(1, max_tokens));
  setup.seed = r.seed.value_or(RandomBits() >> 11);
  setup.id = encoder ? encoder->id() : RandomId(chat ? "chatcmpl-" : "cmpl-");
  setup.created = NowSeconds();
  // The tenant's admission last: a request refused for its content takes no slot.
  serving::InferRequest probe;
  if (!r.cache_salt.empty()) probe.parameters["cache_salt"] = r.cache_salt;
  Admitted admitted = AdmitInference(access_, tenant, &probe);
  if (!admitted.ticket) {
    return reply->Send(encoder ? encoder->RateLimited(admitted.reason, admitted.retry_after_s)
                               : OpenAiRateLimited(admitted.reason, admitted.retry_after_s));
  }
  setup.ticket = std::move(admitted.ticket);
  setup.tenant = probe.tenant;
  if (auto it = probe.parameters.find("cache_salt"); it != probe.parameters.end()) {
    setup.cache_salt = std::get<std::string>(it->second);
  }
  if (encoder) setup.parse_output = true;  // its API has reasoning and tool-call fields
  auto completion = std::make_shared<Completion>(std::move(setup), reply, std::move(encoder));
  completion->Start(server_);
}

}  // namespace inflight::frontends
