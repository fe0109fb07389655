// Template source -> tokens: text runs, tag delimiters and the expression tokens inside
// tags, with jinja2's whitespace control ("-", "+") and Hugging Face's trim_blocks /
// lstrip_blocks; comments dropped, raw blocks kept as text (internal to the module).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace inflight::jinja {

struct Token {
  enum class Kind {
    kText,
    kVarBegin,
    kVarEnd,
    kBlockBegin,
    kBlockEnd,
    kName,
    kString,
    kInt,
    kFloat,
    kOp,
    kEnd
  };
  Kind kind;
  std::string text;  // text, name, string value, operator
  int64_t int_value = 0;
  double float_value = 0;
  int line = 0;
};

// Throws TemplateError on an unclosed tag, comment or string, or a character no token starts
// with. `source` has "\n" newlines.
std::vector<Token> Tokenize(std::string source);

}  // namespace inflight::jinja
