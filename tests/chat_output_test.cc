// The tool-call and reasoning parsers of each model family (src/chat) over outputs written by
// hand from each family's documented format: Hermes/Qwen <tool_call> JSON, Llama 3.1 JSON
// calls, Mistral [TOOL_CALLS] (list and [ARGS] forms), gpt-oss harmony channels, <think>
// reasoning; parallel calls, nested JSON arguments, braces and markers inside strings, and
// near-misses that must stay text. Every case is parsed whole and streamed in pieces of every
// size (and at random cuts): the deltas must add up to the whole result, and every streamed
// call must carry its index, its id and name once, then argument fragments.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "chat/chat_format.h"
#include "chat/output_parser.h"

namespace inflight::chat {
namespace {

struct Call {
  std::string name;
  std::string arguments;
};

struct Case {
  std::string name;
  std::string output;
  std::string content;
  std::vector<Call> calls;
  std::string reasoning;
  bool starts_in_reasoning = false;
};

ChatFormat Format(ToolSyntax tools, ReasoningSyntax reasoning) {
  ChatFormat f;
  f.tools = tools;
  f.reasoning = reasoning;
  return f;
}

ParserOptions Options(const Case& c) {
  ParserOptions o;
  o.tools = true;
  o.tool_names = {"get_weather", "search", "get_time"};
  o.starts_in_reasoning = c.starts_in_reasoning;
  return o;
}

// Streams `c.output` cut at `cuts` and checks the deltas against the whole parse.
void ExpectStreamMatches(const ChatFormat& f, const Case& c, const std::vector<size_t>& cuts,
                         const ParsedOutput& whole) {
  OutputParser p(f, Options(c));
  std::string content, reasoning;
  std::vector<Call> calls;
  std::vector<std::string> ids;
  auto take = [&](const OutputDelta& d) {
    content += d.content;
    reasoning += d.reasoning;
    for (const ToolCallDelta& t : d.tool_calls) {
      ASSERT_GE(t.index, 0);
      ASSERT_LE(t.index, static_cast<int32_t>(calls.size())) << "indices are dense";
      if (t.index == static_cast<int32_t>(calls.size())) {
        ASSERT_FALSE(t.name.empty()) << "a call's first delta names it";
        ASSERT_FALSE(t.id.empty()) << "a call's first delta carries its id";
        calls.push_back({t.name, ""});
        ids.push_back(t.id);
      } else {
        EXPECT_TRUE(t.name.empty() && t.id.empty()) << "name and id are sent once";
      }
      calls[static_cast<size_t>(t.index)].arguments += t.arguments;
    }
  };
  size_t from = 0;
  for (size_t cut : cuts) {
    take(p.Add(std::string_view(c.output).substr(from, cut - from)));
    from = cut;
  }
  take(p.Add(std::string_view(c.output).substr(from)));
  take(p.Finish());
  EXPECT_EQ(content, whole.content);
  EXPECT_EQ(reasoning, whole.reasoning);
  ASSERT_EQ(calls.size(), whole.tool_calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(calls[i].name, whole.tool_calls[i].name);
    EXPECT_EQ(calls[i].arguments, whole.tool_calls[i].arguments);
    EXPECT_EQ(ids[i], p.tool_calls()[i].id);
  }
}

void RunCases(const ChatFormat& f, const std::vector<Case>& cases) {
  std::mt19937 rng(7);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const ParsedOutput whole = ParseOutput(f, Options(c), c.output);
    EXPECT_EQ(whole.content, c.content);
    EXPECT_EQ(whole.reasoning, c.reasoning);
    ASSERT_EQ(whole.tool_calls.size(), c.calls.size());
    for (size_t i = 0; i < c.calls.size(); ++i) {
      EXPECT_EQ(whole.tool_calls[i].name, c.calls[i].name);
      // Arguments compare as JSON: a call parsed whole is re-serialized.
      const auto got = nlohmann::json::parse(whole.tool_calls[i].arguments, nullptr, false);
      const auto want = nlohmann::json::parse(c.calls[i].arguments, nullptr, false);
      if (want.is_discarded()) {  // a call cut off: its text as written
        EXPECT_EQ(whole.tool_calls[i].arguments, c.calls[i].arguments);
      } else {
        EXPECT_FALSE(got.is_discarded()) << whole.tool_calls[i].arguments;
        EXPECT_EQ(got, want) << whole.tool_calls[i].arguments;
      }
    }
    for (size_t step : {1, 2, 3, 5, 8, 13}) {
      std::vector<size_t> cuts;
      for (size_t at = step; at < c.output.size(); at += step) cuts.push_back(at);
      SCOPED_TRACE("pieces of " + std::to_string(step));
      ExpectStreamMatches(f, c, cuts, whole);
    }
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<size_t> cuts;
      for (size_t at = 0; at < c.output.size(); at += 1 + rng() % 9) cuts.push_back(at);
      ExpectStreamMatches(f, c, cuts, whole);
    }
  }
}

TEST(ChatOutput, HermesAndQwen) {
  const ChatFormat f = Format(ToolSyntax::kHermes, ReasoningSyntax::kThinkTags);
  RunCases(
      f,
      {
          {"plain text", "The weather is fine.", "The weather is fine.", {}},
          {"one call",
           "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
           "\"Paris\"}}\n</tool_call>",
           "",
           {{"get_weather", R"({"city": "Paris"})"}}},
          {"text, then two parallel calls",
           "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
           "\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
           "{\"city\": \"Rome\", \"days\": 2}}\n</tool_call>",
           "Let me check.\n",
           {{"get_weather", R"({"city": "Paris"})"},
            {"get_weather", R"({"city":"Rome","days":2})"}}},
          {"nested JSON and braces in strings",
           "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"a } b { \\\"c\\\"\", "
           "\"filters\": {\"tags\": [\"x\", {\"y\": [1, 2]}], \"exact\": true}}}\n</tool_call>",
           "",
           {{"search",
             R"({"query": "a } b { \"c\"", "filters": {"tags": ["x", {"y": [1, 2]}], "exact": true}})"}}},
          {"a marker inside an argument string",
           "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"</tool_call> "
           "<tool_call>\"}}"
           "\n</tool_call>",
           "",
           {{"search", R"({"query": "</tool_call> <tool_call>"})"}}},
          {"arguments before the name",
           "<tool_call>\n{\"arguments\": {\"city\": \"Oslo\"}, \"name\": "
           "\"get_weather\"}\n</tool_call>",
           "",
           {{"get_weather", R"({"city": "Oslo"})"}}},
          {"arguments as a JSON string",
           "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": "
           "\\\"Oslo\\\"}\"}\n"
           "</tool_call>",
           "",
           {{"get_weather", R"({"city": "Oslo"})"}}},
          {"no arguments",
           "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
           "",
           {{"get_time", "{}"}}},
          {"near miss: an unknown function stays text",
           "<tool_call>\n{\"name\": \"launch\", \"arguments\": {}}\n</tool_call>",
           "<tool_call>\n{\"name\": \"launch\", \"arguments\": {}}\n</tool_call>",
           {}},
          {"near miss: not JSON stays text",
           "<tool_call>\nget_weather(city=Paris)\n</tool_call> ok",
           "<tool_call>\nget_weather(city=Paris)\n</tool_call> ok",
           {}},
          {"near miss: the tag's look-alike",
           "Use <tool_calls> or <tool_> tags.",
           "Use <tool_calls> or <tool_> tags.",
           {}},
          {"near miss: an unclosed tag without a header",
           "<tool_call> maybe later",
           "<tool_call> maybe later",
           {}},
          {"a call cut off by max_tokens",
           "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par",
           "",
           {{"get_weather", R"({"city": "Par)"}}},
          {"reasoning, then a call",
           "<think>\nThe user wants the weather.\n</think>\n\n<tool_call>\n{\"name\": "
           "\"get_weather\", "
           "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
           "",
           {{"get_weather", R"({"city": "Paris"})"}},
           "\nThe user wants the weather.\n"},
          {"reasoning, then text",
           "<think>\nhmm, <tool_call> is not for now\n</think>\n\nHello!",
           "Hello!",
           {},
           "\nhmm, <tool_call> is not for now\n"},
          {"the prompt opened <think>",
           "I should greet.\n</think>\n\nHi there.",
           "Hi there.",
           {},
           "I should greet.\n",
           true},
          {"unterminated reasoning", "<think>\nstill thinking", "", {}, "\nstill thinking"},
          {"<think> after text is text", "Say <think> twice.", "Say <think> twice.", {}},
          {"text after a call, trailing space dropped",
           "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>\nDone. ",
           "\nDone.",
           {{"get_time", "{}"}}},
          {"unicode",
           "Température: 21 °C 🌤 <tool_call>\n{\"name\": \"search\", \"arguments\": "
           "{\"query\": \"météo 東京\"}}\n</tool_call>",
           "Température: 21 °C 🌤 ",
           {{"search", R"({"query": "météo 東京"})"}}},
      });
}

TEST(ChatOutput, Llama3Json) {
  const ChatFormat f = Format(ToolSyntax::kLlama3, ReasoningSyntax::kNone);
  RunCases(f,
           {
               {"one call",
                "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
                "",
                {{"get_weather", R"({"city": "Paris"})"}}},
               {"leading whitespace",
                "\n\n{\"name\": \"get_time\", \"parameters\": {}}",
                "",
                {{"get_time", "{}"}}},
               {"two calls separated by ;",
                "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}; {\"name\": "
                "\"get_weather\", \"parameters\": {\"city\": \"Rome\"}}",
                "",
                {{"get_weather", R"({"city": "Paris"})"}, {"get_weather", R"({"city": "Rome"})"}}},
               {"\"arguments\" instead of \"parameters\"",
                "{\"name\": \"search\", \"arguments\": {\"query\": \"a;b\"}}",
                "",
                {{"search", R"({"query": "a;b"})"}}},
               {"plain text", "The answer is 4.", "The answer is 4.", {}},
               {"near miss: JSON that is no call", "{\"answer\": 4}", "{\"answer\": 4}", {}},
               {"near miss: a call after text stays text",
                "Sure: {\"name\": \"get_time\", \"parameters\": {}}",
                "Sure: {\"name\": \"get_time\", \"parameters\": {}}",
                {}},
               {"near miss: an unknown function",
                "{\"name\": \"rm\", \"parameters\": {\"path\": \"/\"}}",
                "{\"name\": \"rm\", \"parameters\": {\"path\": \"/\"}}",
                {}},
           });
}

TEST(ChatOutput, Mistral) {
  const ChatFormat f = Format(ToolSyntax::kMistral, ReasoningSyntax::kNone);
  RunCases(f,
           {
               {"a list of one",
                "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]",
                "",
                {{"get_weather", R"({"city": "Paris"})"}}},
               {"a list of two",
                "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, "
                "{\"name\": \"get_time\", \"arguments\": {}}]",
                "",
                {{"get_weather", R"({"city": "Paris"})"}, {"get_time", "{}"}}},
               {"the [ARGS] form",
                "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time[ARGS]{}",
                "",
                {{"get_weather", R"({"city": "Paris"})"}, {"get_time", "{}"}}},
               {"text first",
                "Checking.[TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {}}]",
                "Checking.",
                {{"get_time", "{}"}}},
               {"id before arguments, parsed whole",
                "[TOOL_CALLS][{\"name\": \"get_time\", \"id\": \"abc123xyz\", \"arguments\": {}}]",
                "",
                {{"get_time", "{}"}}},
               {"plain text", "No tools needed [really].", "No tools needed [really].", {}},
               {"near miss: not JSON",
                "[TOOL_CALLS] call get_time please",
                "[TOOL_CALLS] call get_time please",
                {}},
           });
}

TEST(ChatOutput, Harmony) {
  const ChatFormat f = Format(ToolSyntax::kHarmony, ReasoningSyntax::kHarmony);
  RunCases(f,
           {
               {"analysis, then the answer",
                "<|channel|>analysis<|message|>User asks 2+2. Easy.<|end|><|start|>assistant"
                "<|channel|>final<|message|>4",
                "4",
                {},
                "User asks 2+2. Easy."},
               {"analysis, then a call",
                "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>"
                "commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": "
                "\"Paris\"}<|call|>",
                "",
                {{"get_weather", R"({"city": "Paris"})"}},
                "Need weather."},
               {"the recipient before the channel",
                "<|start|>assistant to=functions.get_time<|channel|>commentary json<|message|>{}"
                "<|call|>",
                "",
                {{"get_time", "{}"}}},
               {"a preamble, then a call",
                "<|channel|>commentary<|message|>Looking it up.<|end|><|start|>assistant<|channel|>"
                "commentary to=functions.search <|constrain|>json<|message|>{\"query\": \"a <| b\"}"
                "<|call|>",
                "Looking it up.",
                {{"search", R"({"query": "a <| b"})"}}},
               {"an unknown function's body is text",
                "<|channel|>commentary to=functions.rm <|constrain|>json<|message|>{}<|call|>",
                "{}",
                {}},
               {"a final answer ended by <|return|>",
                "<|channel|>final<|message|>Done.<|return|>",
                "Done.",
                {}},
               {"text without a header", "Just text.", "Just text.", {}},
           });
}

TEST(ChatOutput, ReasoningOffStaysInTheText) {
  const ChatFormat f = Format(ToolSyntax::kHermes, ReasoningSyntax::kThinkTags);
  ParserOptions o;
  o.reasoning = false;
  const ParsedOutput out = ParseOutput(f, o, "<think>x</think>y");
  EXPECT_EQ(out.content, "<think>x</think>y");
  EXPECT_EQ(out.reasoning, "");
}

TEST(ChatOutput, ToolsOffLeavesCallsAsText) {
  const ChatFormat f = Format(ToolSyntax::kHermes, ReasoningSyntax::kNone);
  ParserOptions o;  // tools = false: tool_choice "none"
  const std::string call = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
  const ParsedOutput out = ParseOutput(f, o, call);
  EXPECT_EQ(out.content, call);
  EXPECT_TRUE(out.tool_calls.empty());
}

TEST(ChatOutput, ReasoningRangesCoverTheThinkSection) {
  const ChatFormat f = Format(ToolSyntax::kHermes, ReasoningSyntax::kThinkTags);
  OutputParser p(f, {});
  p.Add("<think>abc</think>\n\nanswer");
  p.Finish();
  ASSERT_EQ(p.reasoning_ranges().size(), 1u);
  EXPECT_EQ(p.reasoning_ranges()[0], (std::pair<size_t, size_t>(0, 18)));
}

TEST(ChatOutput, AForcedPrefixIsReadBeforeTheOutput) {
  const ChatFormat f = Format(ToolSyntax::kHarmony, ReasoningSyntax::kHarmony);
  ParserOptions o;
  o.tools = true;
  o.tool_names = {"get_weather"};
  o.output_prefix = "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>";
  OutputParser p(f, o);
  OutputDelta d = p.Add("{\"city\": ");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].name, "get_weather");
  EXPECT_EQ(d.tool_calls[0].arguments, "{\"city\": ");
  d = p.Add("\"Oslo\"}");
  p.Finish();
  EXPECT_EQ(p.tool_calls()[0].arguments, "{\"city\": \"Oslo\"}");
}

TEST(ChatFormat, OnlyTheGenerationPromptOpensReasoning) {
  const ChatFormat f = Format(ToolSyntax::kHermes, ReasoningSyntax::kThinkTags);
  EXPECT_TRUE(PromptOpensReasoning(f, "<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(PromptOpensReasoning(f, "<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(PromptOpensReasoning(f, "user: say <think> please\n<|im_start|>assistant\n"));
  EXPECT_FALSE(
      PromptOpensReasoning(Format(ToolSyntax::kHermes, ReasoningSyntax::kNone), "<think>\n"));
}

// Headers at the size bound: the same result whole and streamed (found by openai_fuzz).
TEST(ChatOutput, HeadersAtTheBoundParseAlikeWholeAndStreamed) {
  std::vector<std::pair<ChatFormat, std::string>> inputs;
  const ChatFormat hermes = Format(ToolSyntax::kHermes, ReasoningSyntax::kNone);
  const ChatFormat mistral = Format(ToolSyntax::kMistral, ReasoningSyntax::kNone);
  const ChatFormat harmony = Format(ToolSyntax::kHarmony, ReasoningSyntax::kHarmony);
  for (int pad = 4050; pad < 4110; ++pad) {
    inputs.emplace_back(hermes,
                        "<tool_call>" + std::string(pad, ' ') +
                            "{\"name\": \"search\", \"arguments\": {\"q\": 1}}</tool_call>");
    inputs.emplace_back(mistral,
                        "[TOOL_CALLS]" + std::string(pad, ' ') + "get_time[ARGS]{\"a\": 1}");
    inputs.emplace_back(harmony, "<|channel|>final " + std::string(pad, 'x') + "<|message|>Hi");
  }
  for (const auto& [f, text] : inputs) {
    Case c{"bound", text, "", {}};
    const ParsedOutput whole = ParseOutput(f, Options(c), text);
    std::vector<size_t> cuts;
    for (size_t at = 1; at < text.size(); ++at) cuts.push_back(at);
    ExpectStreamMatches(f, c, cuts, whole);
  }
}

TEST(ChatOutput, DeeplyNestedCallsStayText) {
  const ChatFormat f = Format(ToolSyntax::kHermes, ReasoningSyntax::kNone);
  ParserOptions o;
  o.tools = true;
  o.tool_names = {"search"};
  // Written another way (arguments first), so parsed whole: too deep to copy safely.
  const std::string deep = "<tool_call>\n{\"arguments\": {\"q\": " + std::string(100, '[') +
                           std::string(100, ']') + "}, \"name\": \"search\"}\n</tool_call>";
  const ParsedOutput out = ParseOutput(f, o, deep);
  EXPECT_TRUE(out.tool_calls.empty());
  EXPECT_EQ(out.content, deep);
}

TEST(ChatFormat, DetectsTheFamilyFromTheTemplate) {
  EXPECT_EQ(DetectChatFormat("{{ '<tool_call>' }}{{ '<think>' }} tools").family, "hermes");
  EXPECT_EQ(DetectChatFormat("{{ '<tool_call>' }}{{ '<think>' }}").reasoning,
            ReasoningSyntax::kThinkTags);
  EXPECT_EQ(DetectChatFormat("<|python_tag|> tools").family, "llama3");
  EXPECT_EQ(DetectChatFormat("[TOOL_CALLS] tools").family, "mistral");
  EXPECT_EQ(DetectChatFormat("<|channel|> tools").family, "harmony");
  const ChatFormat generic = DetectChatFormat("{{ messages }}");
  EXPECT_EQ(generic.family, "generic");
  EXPECT_FALSE(generic.template_renders_tools);
}

}  // namespace
}  // namespace inflight::chat
