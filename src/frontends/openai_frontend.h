// The OpenAI API on the HTTP port: GET /v1/models[/{model}], POST /v1/completions and
// /v1/chat/completions (streamed as SSE ending in "data: [DONE]", or whole). `model` is a
// repository model (ensemble, BLS or LLM); the request runs on that model's LLM model through
// serving::Server, so limits, metrics, model control and cancellation are the KServe
// frontends'. Chat prompts are rendered with the model's chat template (src/jinja).
// Translation only; thread-safe.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "frontends/access.h"
#include "frontends/chat_encoder.h"
#include "frontends/http_server.h"
#include "frontends/openai_completion.h"
#include "frontends/openai_json.h"
#include "frontends/responses_api.h"
#include "jinja/template.h"
#include "serving/server.h"

namespace inflight::frontends {

struct OpenAiOptions {
  std::string chat_template;  // replaces every model's own template when set (--chat-template)
};

class OpenAiFrontend {
 public:
  OpenAiFrontend(serving::Server* server, OpenAiOptions options, AccessPolicy access = {});
  // Parses the template override. INVALID_ARGUMENT naming the construct when it does not parse.
  Status Init();
  // Serves a request whose path starts with /v1 (`seg`: the path's segments) for `tenant`
  // (already authenticated).
  void Handle(const HttpRequest& req, const std::vector<std::string>& seg,
              const std::string& tenant, std::shared_ptr<HttpReply> reply);

  // The parsed template for `source` (parsed once; templates come from loaded models).
  StatusOr<std::shared_ptr<const jinja::Template>> TemplateFor(const std::string& source);

 private:
  void Models(const std::vector<std::string>& seg, const std::shared_ptr<HttpReply>& reply);
  // The Responses API, stored responses (GET / DELETE), the Messages API and count_tokens,
  // /tokenize and /detokenize (openai_agents.cc).
  void Responses(const HttpRequest& req, const std::string& tenant,
                 std::shared_ptr<HttpReply> reply);
  void StoredResponse(const std::string& method, const std::string& id, const std::string& tenant,
                      const std::shared_ptr<HttpReply>& reply);
  void Messages(const HttpRequest& req, bool count_tokens, const std::string& tenant,
                std::shared_ptr<HttpReply> reply);
  void Tokenize(const HttpRequest& req, bool detokenize, const std::shared_ptr<HttpReply>& reply);
  // Resolves the request's model and renders its prompts (chat: with the model's template).
  Status Prepare(CompletionSetup* setup, std::string* param);
  void Generate(const HttpRequest& req, bool chat, const std::string& tenant,
                std::shared_ptr<HttpReply> reply);
  // Runs a parsed request on its model: the reply in OpenAI's shape, or in `encoder`'s (the
  // Responses and Messages APIs, which run as chat completions).
  void Run(OpenAiRequest request, const std::string& tenant, std::shared_ptr<HttpReply> reply,
           std::shared_ptr<ChatEncoder> encoder);

  serving::Server* server_;
  OpenAiOptions options_;
  AccessPolicy access_;
  std::shared_ptr<ResponseStore> responses_ = std::make_shared<ResponseStore>();
  std::mutex templates_mu_;
  std::map<std::string, std::shared_ptr<const jinja::Template>> templates_;
};

}  // namespace inflight::frontends
