// The agent-facing endpoints of OpenAiFrontend: the Responses API, the Messages API and
// count_tokens, and vLLM's /tokenize and /detokenize. Each parses its API's request into a
// chat request and runs it as the chat completions endpoint does (OpenAiFrontend::Run).
#include "frontends/kserve_json.h"
#include "frontends/messages_api.h"
#include "frontends/openai_frontend.h"
#include "frontends/responses_api.h"
#include "tokenizer/tokenizer.h"

namespace inflight::frontends {

using nlohmann::json;

void OpenAiFrontend::Responses(const HttpRequest& req, const std::string& tenant,
                               std::shared_ptr<HttpReply> reply) {
  std::string param;
  auto parsed = ParseResponsesRequest(req.body, *responses_, tenant, &param);
  if (!parsed.ok()) {
    ResponsesEncoder errors(ResponsesRequest{}, nullptr, tenant);
    return reply->Send(errors.Error(parsed.status(), param));
  }
  OpenAiRequest chat = parsed->chat;
  auto encoder = std::make_shared<ResponsesEncoder>(std::move(parsed).value(), responses_, tenant);
  Run(std::move(chat), tenant, std::move(reply), std::move(encoder));
}

void OpenAiFrontend::StoredResponse(const std::string& method, const std::string& id,
                                    const std::string& tenant,
                                    const std::shared_ptr<HttpReply>& reply) {
  const Status gone = NotFoundError("Response with id '" + id.substr(0, 128) + "' not found.");
  if (method == "DELETE") {
    if (!responses_->Delete(tenant, id)) return reply->Send(OpenAiError(gone, "response_id"));
    return reply->Send({200,
                        "application/json",
                        Dump(json{{"id", id}, {"object", "response.deleted"}, {"deleted", true}}),
                        {}});
  }
  auto entry = responses_->Get(tenant, id);
  if (!entry) return reply->Send(OpenAiError(gone, "response_id"));
  reply->Send({200, "application/json", Dump(entry->response), {}});
}

void OpenAiFrontend::Messages(const HttpRequest& req, bool count_tokens, const std::string& tenant,
                              std::shared_ptr<HttpReply> reply) {
  auto parsed = ParseMessagesRequest(req.body, count_tokens);
  if (!parsed.ok()) return reply->Send(AnthropicError(parsed.status()));
  if (!count_tokens) {
    auto encoder = std::make_shared<MessagesEncoder>(parsed->model);
    return Run(std::move(parsed).value(), tenant, std::move(reply), std::move(encoder));
  }
  CompletionSetup setup;
  setup.request = std::move(parsed).value();
  std::string param;
  if (Status s = Prepare(&setup, &param); !s.ok()) {
    MessagesEncoder errors(setup.request.model);
    return reply->Send(errors.Error(s, param));
  }
  reply->Send({200,
               "application/json",
               Dump(json{{"input_tokens", static_cast<int64_t>(setup.prompt_ids[0].size())}}),
               {}});
}

// vLLM's /tokenize ({"model", "prompt"} or {"model", "messages", ...} rendered with the chat
// template) and /detokenize ({"model", "tokens"}).
void OpenAiFrontend::Tokenize(const HttpRequest& req, bool detokenize,
                              const std::shared_ptr<HttpReply>& reply) {
  auto body = ParseJsonBounded(req.body);
  if (!body.ok() || !body->is_object()) {
    return reply->Send(
        OpenAiError(InvalidArgumentError("the request body must be a JSON object"), ""));
  }
  if (!body->contains("model") || !(*body)["model"].is_string())
    return reply->Send(OpenAiError(InvalidArgumentError("'model' must be a string"), "model"));
  if (detokenize) {
    auto model = serving::ResolveTextModel(*server_, (*body)["model"]);
    if (!model.ok()) return reply->Send(OpenAiError(model.status(), "model"));
    const json& tokens = body->value("tokens", json());
    if (!tokens.is_array())
      return reply->Send(OpenAiError(InvalidArgumentError("'tokens' must be a list"), "tokens"));
    std::vector<int32_t> ids;
    for (const json& t : tokens) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 ||
          t.get<int64_t>() >= model->tokenizer->vocab_size()) {
        return reply->Send(OpenAiError(
            InvalidArgumentError("'tokens' must hold token ids of the vocabulary"), "tokens"));
      }
      ids.push_back(t.get<int32_t>());
    }
    return reply->Send({200,
                        "application/json",
                        Dump(json{{"prompt", model->tokenizer->Decode(ids, false)}}),
                        {}});
  }
  const bool chat = body->contains("messages");
  json request = *body;
  request.erase("add_special_tokens");
  request["max_tokens"] = 1;
  std::string param;
  auto parsed = ParseOpenAiRequest(Dump(request), chat, &param);
  if (!parsed.ok()) return reply->Send(OpenAiError(parsed.status(), param));
  CompletionSetup setup;
  setup.request = std::move(parsed).value();
  if (Status s = Prepare(&setup, &param); !s.ok()) return reply->Send(OpenAiError(s, param));
  const std::vector<int32_t>& ids = setup.prompt_ids[0];
  reply->Send(
      {200,
       "application/json",
       Dump(json{
           {"count", ids.size()}, {"max_model_len", setup.model.context_length}, {"tokens", ids}}),
       {}});
}

}  // namespace inflight::frontends
