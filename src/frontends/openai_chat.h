// Chat requests on a model: the prompt rendered with the model's chat template (tools,
// tool calls and results, reasoning settings), and how the output is parsed (answer,
// reasoning, tool calls) and, for a forced tool_choice, constrained. Shared by the chat
// completions, Responses and Messages APIs. Thread-safe (pure functions).
#pragma once

#include <string>

#include "base/status.h"
#include "frontends/openai_completion.h"
#include "jinja/template.h"

namespace inflight::frontends {

// Renders setup->request (chat; setup->model resolved) with `tmpl` (whose text is `source`)
// into setup->prompt_ids / prompt_texts, and fills the output parsing and guide fields.
// INVALID_ARGUMENT with *param naming the field.
Status PrepareChat(const std::string& source, const jinja::Template& tmpl, CompletionSetup* setup,
                   std::string* param);

}  // namespace inflight::frontends
