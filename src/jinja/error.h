// Inside the Jinja module, evaluation errors travel as this exception and become a Status at
// the Template API (no exception leaves the module).
#pragma once

#include <string>

namespace inflight::jinja {

struct TemplateError {
  std::string message;
};

[[noreturn]] inline void Fail(std::string message) { throw TemplateError{std::move(message)}; }

// A render limit was hit (steps, output or value size): RESOURCE_EXHAUSTED at the API.
struct LimitError {
  std::string message;
};

}  // namespace inflight::jinja
