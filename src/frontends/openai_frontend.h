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
#include "frontends/http_server.h"
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
  void Generate(const HttpRequest& req, bool chat, const std::string& tenant,
                std::shared_ptr<HttpReply> reply);

  serving::Server* server_;
  OpenAiOptions options_;
  AccessPolicy access_;
  std::mutex templates_mu_;
  std::map<std::string, std::shared_ptr<const jinja::Template>> templates_;
};

}  // namespace inflight::frontends
