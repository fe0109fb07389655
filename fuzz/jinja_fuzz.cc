// libFuzzer target: a chat template and a request's variables (template bytes, a NUL, then
// the context as JSON) through the Jinja parser and renderer with small limits. Nothing may
// crash, recurse without bound or run past the limits.
#include <cstddef>
#include <cstdint>
#include <string>

#include "jinja/template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string source = input.substr(0, nul);
  const std::string json = nul == std::string::npos
                               ? R"({"messages": [{"role": "user", "content": "hi"}]})"
                               : input.substr(nul + 1);
  auto context = inflight::jinja::ValueFromJson(json);
  auto tmpl = inflight::jinja::Template::Parse(source);
  if (!tmpl.ok() || !context.ok()) return 0;
  inflight::jinja::RenderLimits limits;
  limits.max_output_bytes = 1 << 16;
  limits.max_steps = 20000;
  limits.max_call_depth = 16;
  (void)tmpl->Render(*context, limits);
  return 0;
}
