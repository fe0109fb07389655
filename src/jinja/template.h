// Chat templates: a Jinja engine covering what the chat templates of Llama 3 / 3.1,
// Qwen2.5 / Qwen3, Gemma 2 / 3, Phi-3 / 4, Mistral / Mixtral, gpt-oss (harmony) and similar
// models use (loops with loop controls, conditionals, set and namespaces, macros, filters,
// tests, string methods with str.format, dict methods, slicing, raise_exception, tojson with
// Hugging Face's arguments), rendered the way Hugging Face's apply_chat_template renders them
// with Python's jinja2 (trim_blocks, lstrip_blocks, a sandbox without mutation). Anything
// else fails with a message naming the construct. Rendering is bounded (output bytes,
// statement steps, macro depth) so a hostile template or message cannot hang or exhaust the
// server. A Template is immutable and safe to render from several threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "jinja/value.h"

namespace inflight::jinja {

struct Node;

struct RenderLimits {
  size_t max_output_bytes = size_t{8} << 20;
  int64_t max_steps = 5'000'000;  // statements run + loop iterations + calls
  int max_call_depth = 64;        // nested macro calls
};

class Template {
 public:
  // INVALID_ARGUMENT naming the line and construct on a syntax error or unsupported tag.
  static StatusOr<Template> Parse(std::string_view source);

  // `context` is a dict of the template's variables (messages, add_generation_prompt,
  // bos_token, ...). INVALID_ARGUMENT with the template's message for raise_exception and
  // for evaluation errors; RESOURCE_EXHAUSTED when a limit is hit.
  StatusOr<std::string> Render(const Value& context, const RenderLimits& limits = {}) const;

 private:
  std::shared_ptr<const std::vector<std::unique_ptr<Node>>> body_;
};

}  // namespace inflight::jinja
