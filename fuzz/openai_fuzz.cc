// libFuzzer target: an OpenAI request body (the first byte picks chat or completions) through
// the request parser, and a chat request's messages through the bundled demo model's chat
// template as the server renders them, then the error object. Nothing may crash, hang or
// grow without bound.
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>

#include "frontends/kserve_json.h"
#include "frontends/openai_json.h"
#include "jinja/template.h"

namespace {

const inflight::jinja::Template* DemoTemplate() {
  static const inflight::jinja::Template* t = [] {
    std::ifstream in(std::string(INFLIGHT_SOURCE_DIR) + "/models/demo/chat_template.jinja");
    const std::string source((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
    auto parsed = inflight::jinja::Template::Parse(source);
    return parsed.ok() ? new inflight::jinja::Template(std::move(parsed).value()) : nullptr;
  }();
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool chat = data[0] & 1;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string param;
  auto r = inflight::frontends::ParseOpenAiRequest(body, chat, &param);
  if (!r.ok()) {
    (void)inflight::frontends::Dump(
        inflight::frontends::OpenAiErrorJson(400, r.status().message(), param));
    return 0;
  }
  if (chat && DemoTemplate()) {
    nlohmann::json ctx = r->template_kwargs;
    ctx["messages"] = r->messages;
    ctx["add_generation_prompt"] = r->add_generation_prompt;
    ctx["bos_token"] = "<s>";
    ctx["eos_token"] = "</s>";
    auto value = inflight::jinja::ValueFromJson(inflight::frontends::Dump(ctx));
    if (!value.ok()) return 0;
    inflight::jinja::RenderLimits limits;
    limits.max_output_bytes = 1 << 16;
    limits.max_steps = 20000;
    (void)DemoTemplate()->Render(*value, limits);
  }
  return 0;
}
