// libFuzzer target for what agents send and what models answer them. The first byte (mod 8)
// picks the mode; the rest is the input:
//   0 completions   an OpenAI /v1/completions body through the request parser, then the error
//   1 chat          a /v1/chat/completions body, its messages through the bundled demo model's
//                   chat template as the server renders them, then the error object
//   2 responses     a /v1/responses body (a store that holds tenant "t"'s "resp_1", so
//                   previous_response_id resolves), then the encoder's error bodies
//   3 messages      an Anthropic /v1/messages body, as a request and as count_tokens, then
//                   Anthropic's error body
//   4 chat formats  a chat body with tools: the family detection, the forced-call structural
//                   tags of every tool syntax (compiled as the guide would be) and the generic
//                   tool prompt
//   5 hermes output   model output for chat::OutputParser (Hermes calls, <think> reasoning)
//   6 llama3/mistral  model output (Llama 3 JSON calls or Mistral [TOOL_CALLS])
//   7 harmony output  model output (gpt-oss channels)
// The output modes read: a flags byte (bit 0: 6 picks Mistral, 5 starts inside <think>; bit 1:
// the syntax's forced-call prefix is read first), a count byte (mod 16) and that many piece
// sizes (each mod 32), then the output. The output is parsed whole and again streamed in those
// pieces (cycled; one byte at a time when none are given): the deltas must add up to the whole
// result and number the calls densely, each call's first delta carrying its id and name and no
// later one (tests/chat_output_test.cc checks the same). A difference aborts.
// Nothing may crash, hang or grow without bound.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/chat_format.h"
#include "chat/output_parser.h"
#include "frontends/kserve_json.h"
#include "frontends/messages_api.h"
#include "frontends/openai_json.h"
#include "frontends/responses_api.h"
#include "guided/regex_dfa.h"
#include "guided/structural_tag.h"
#include "jinja/template.h"

namespace {

using namespace inflight;
using namespace inflight::frontends;

const jinja::Template* DemoTemplate() {
  static const jinja::Template* t = [] {
    std::ifstream in(std::string(INFLIGHT_SOURCE_DIR) + "/models/demo/chat_template.jinja");
    const std::string source((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
    auto parsed = jinja::Template::Parse(source);
    return parsed.ok() ? new jinja::Template(std::move(parsed).value()) : nullptr;
  }();
  return t;
}

void RenderDemo(const OpenAiRequest& r) {
  if (!DemoTemplate()) return;
  nlohmann::json ctx = r.template_kwargs;
  ctx["messages"] = r.messages;
  ctx["add_generation_prompt"] = r.add_generation_prompt;
  ctx["bos_token"] = "<s>";
  ctx["eos_token"] = "</s>";
  auto value = jinja::ValueFromJson(Dump(ctx));
  if (!value.ok()) return;
  jinja::RenderLimits limits;
  limits.max_output_bytes = 1 << 16;
  limits.max_steps = 20000;
  (void)DemoTemplate()->Render(*value, limits);
}

void OpenAi(std::string_view body, bool chat) {
  std::string param;
  auto r = ParseOpenAiRequest(body, chat, &param);
  if (!r.ok()) {
    (void)Dump(OpenAiErrorJson(400, r.status().message(), param));
    return;
  }
  if (chat) RenderDemo(*r);
}

// Tenant "t" holds one stored response, "resp_1": a turn with a call and its result.
std::shared_ptr<ResponseStore> Store() {
  static const std::shared_ptr<ResponseStore> store = [] {
    auto s = std::make_shared<ResponseStore>();
    ResponseStore::Entry e;
    e.conversation = nlohmann::ordered_json::parse(R"([
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
      {"role": "assistant", "content": "It is sunny."}])");
    e.response = {{"id", "resp_1"}, {"object", "response"}, {"status", "completed"}};
    s->Put("t", "resp_1", std::move(e));
    return s;
  }();
  return store;
}

void Responses(std::string_view body) {
  std::string param;
  auto r = ParseResponsesRequest(body, *Store(), "t", &param);
  if (!r.ok()) {
    // As the server answers a refused request.
    ResponsesEncoder errors(ResponsesRequest{}, nullptr, "t");
    (void)errors.Error(r.status(), param);
    return;
  }
  RenderDemo(r->chat);
  ResponsesEncoder encoder(std::move(r).value(), Store(), "t");
  (void)encoder.Error(NotFoundError("Previous response with id 'resp_2' not found."),
                      "previous_response_id");
  (void)encoder.Error(InvalidArgumentError("bad"), "max_tokens");
}

void Messages(std::string_view body) {
  for (bool count_tokens : {false, true}) {
    auto r = ParseMessagesRequest(body, count_tokens);
    if (!r.ok()) {
      (void)AnthropicError(r.status());
    } else if (!count_tokens) {
      RenderDemo(*r);
    }
  }
}

chat::ChatFormat Format(chat::ToolSyntax tools) {
  chat::ChatFormat f;
  f.tools = tools;
  f.reasoning = tools == chat::ToolSyntax::kHarmony ? chat::ReasoningSyntax::kHarmony
                                                    : chat::ReasoningSyntax::kThinkTags;
  return f;
}

constexpr chat::ToolSyntax kSyntaxes[] = {chat::ToolSyntax::kHermes, chat::ToolSyntax::kLlama3,
                                          chat::ToolSyntax::kMistral, chat::ToolSyntax::kHarmony};

// The guide the server would compile from a forced call's structural tag.
void CompileTag(const nlohmann::ordered_json& tag) {
  auto regex = guided::StructuralTagToRegex(Dump(tag));
  if (!regex.ok() || regex->size() > (size_t{1} << 16)) return;
  (void)guided::RegexDfa::Compile(*regex);
}

void ChatFormats(std::string_view body) {
  static const char* const kTemplates[] = {
      "{{ '<tool_call>' }}{{ '<think>' }} tools",
      "<|python_tag|> tools",
      "{% if message.role == 'ipython' %}{\"name\": ..., \"parameters\": ...}{% endif %}",
      "[TOOL_CALLS] tools <think>",
      "<|start|>assistant<|channel|>analysis<|message|> tools",
      "{{ messages }}",
  };
  for (const char* t : kTemplates) {
    const chat::ChatFormat f = chat::DetectChatFormat(t);
    (void)chat::PromptOpensReasoning(f, body);
  }
  std::string param;
  auto r = ParseOpenAiRequest(body, /*chat=*/true, &param);
  if (!r.ok() || r->tools.empty()) return;
  (void)chat::GenericToolPrompt(r->tools);
  // tool_choice "required" (all tools, parallel or not) and a named function (one tool).
  const nlohmann::ordered_json one = nlohmann::ordered_json::array({r->tools[0]});
  for (chat::ToolSyntax syntax : kSyntaxes) {
    for (const nlohmann::ordered_json* tools : {&std::as_const(r->tools), &one}) {
      for (bool parallel : {true, false}) {
        auto forced = chat::ForceCalls(Format(syntax), *tools, parallel);
        if (forced.ok()) CompileTag(forced->structural_tag);
      }
    }
  }
}

struct Call {
  std::string name, arguments;
};

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "output parser contract broken: %s\n", what);
  std::abort();
}

// The whole parse against the same output streamed in pieces of `sizes` (cycled).
void Output(const chat::ChatFormat& format, const chat::ParserOptions& options,
            std::string_view text, const std::vector<size_t>& sizes) {
  const chat::ParsedOutput whole = chat::ParseOutput(format, options, text);
  chat::OutputParser p(format, options);
  std::string content, reasoning;
  std::vector<Call> calls;
  std::vector<std::string> ids;
  auto take = [&](const chat::OutputDelta& d) {
    content += d.content;
    reasoning += d.reasoning;
    for (const chat::ToolCallDelta& t : d.tool_calls) {
      if (t.index < 0 || t.index > static_cast<int32_t>(calls.size()))
        Fail("a delta's tool-call index skips ahead");
      if (t.index == static_cast<int32_t>(calls.size())) {
        if (t.name.empty() || t.id.empty()) Fail("a call's first delta lacks its name or id");
        calls.push_back({t.name, ""});
        ids.push_back(t.id);
      } else if (!t.name.empty() || !t.id.empty()) {
        Fail("a call's name or id is sent twice");
      }
      calls[static_cast<size_t>(t.index)].arguments += t.arguments;
    }
  };
  size_t from = 0;
  for (size_t i = 0; from < text.size(); ++i) {
    const size_t n = sizes.empty() ? 1 : sizes[i % sizes.size()];
    take(p.Add(text.substr(from, n)));
    from += std::min(n, text.size() - from);
  }
  take(p.Finish());
  if (content != whole.content) Fail("streamed content differs from the whole parse");
  if (reasoning != whole.reasoning) Fail("streamed reasoning differs from the whole parse");
  if (calls.size() != whole.tool_calls.size()) Fail("streamed calls differ in number");
  if (p.tool_calls().size() != calls.size()) Fail("tool_calls() differs from the deltas");
  for (size_t i = 0; i < calls.size(); ++i) {
    if (calls[i].name != whole.tool_calls[i].name) Fail("a streamed call's name differs");
    if (calls[i].arguments != whole.tool_calls[i].arguments)
      Fail("a streamed call's arguments differ");
    if (ids[i] != p.tool_calls()[i].id) Fail("a streamed call's id differs");
  }
}

void ModelOutput(int mode, std::string_view in) {
  if (in.size() < 2) return;
  const uint8_t flags = static_cast<uint8_t>(in[0]);
  size_t count = static_cast<uint8_t>(in[1]) % 16;
  in.remove_prefix(2);
  count = std::min(count, in.size());
  std::vector<size_t> sizes;
  bool any = false;
  for (size_t i = 0; i < count; ++i) {
    sizes.push_back(static_cast<uint8_t>(in[i]) % 32);
    any = any || sizes.back() > 0;
  }
  if (!any) sizes.clear();  // pieces of one byte
  in.remove_prefix(count);

  chat::ChatFormat format;
  if (mode == 5) {
    format = Format(chat::ToolSyntax::kHermes);
  } else if (mode == 6) {
    format = Format(flags & 1 ? chat::ToolSyntax::kMistral : chat::ToolSyntax::kLlama3);
    format.reasoning = chat::ReasoningSyntax::kNone;
  } else {
    format = Format(chat::ToolSyntax::kHarmony);
  }
  chat::ParserOptions options;
  options.tools = true;
  options.tool_names = {"get_weather", "search", "get_time"};
  options.starts_in_reasoning = mode == 5 && (flags & 1);
  if (flags & 2) {
    static const nlohmann::ordered_json kTool = nlohmann::ordered_json::parse(
        R"({"type": "function", "function": {"name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}})");
    auto forced =
        chat::ForceCalls(format, nlohmann::ordered_json::array({kTool}), /*parallel=*/true);
    if (forced.ok()) options.output_prefix = forced->prompt_suffix;
  }
  Output(format, options, in, sizes);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int mode = data[0] % 8;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (mode) {
    case 0:
    case 1:
      OpenAi(body, mode == 1);
      break;
    case 2:
      Responses(body);
      break;
    case 3:
      Messages(body);
      break;
    case 4:
      ChatFormats(body);
      break;
    default:
      ModelOutput(mode, body);
      break;
  }
  return 0;
}
