// Template source -> statements, with the lexer settings Hugging Face's apply_chat_template
// uses (trim_blocks, lstrip_blocks, no kept trailing newline, loop controls). Constructs the
// engine lacks (include, extends, macros' call blocks, ...) fail with their name and line.
#pragma once

#include <string_view>

#include "base/status.h"
#include "jinja/ast.h"

namespace inflight::jinja {

// Nesting of statements and expressions beyond this fails to parse (bounded recursion).
constexpr int kMaxParseDepth = 200;

StatusOr<Body> ParseTemplate(std::string_view source);

}  // namespace inflight::jinja
