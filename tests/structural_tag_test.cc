// Structural tags (xgrammar's format) through the regex automaton: accepted and refused
// outputs for every format, the free-text groups (?~...) and (?*...) against a brute-force
// reference, every bad input refused with its place, and a whole guide over a small vocabulary
// that can only write a valid tool call.
#include "guided/structural_tag.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "guided/guide.h"
#include "guided/regex_dfa.h"

namespace inflight::guided {
namespace {

using json = nlohmann::ordered_json;

bool DfaMatches(RegexDfa& dfa, const std::string& s) {
  int32_t st = dfa.start();
  for (char c : s) {
    st = dfa.Next(st, static_cast<uint8_t>(c));
    if (st == RegexDfa::kDead) return false;
  }
  return dfa.Accepting(st);
}

std::unique_ptr<RegexDfa> CompileTag(const json& format) {
  const json guide = {{"type", "structural_tag"}, {"format", format}};
  auto regex = StructuralTagToRegex(guide.dump());
  EXPECT_TRUE(regex.ok()) << regex.status().ToString();
  if (!regex.ok()) return nullptr;
  auto dfa = RegexDfa::Compile(*regex);
  EXPECT_TRUE(dfa.ok()) << dfa.status().ToString() << "\n" << *regex;
  return dfa.ok() ? std::move(dfa).value() : nullptr;
}

json Tag(const std::string& begin, json content, const std::string& end) {
  return {{"type", "tag"}, {"begin", begin}, {"content", std::move(content)}, {"end", end}};
}
json Const(const std::string& value) { return {{"type", "const_string"}, {"value", value}}; }
json AnyText() { return {{"type", "any_text"}}; }
json Schema(const std::string& key) {
  return {
      {"type", "json_schema"},
      {"json_schema",
       {{"type", "object"}, {"properties", {{key, {{"type", "string"}}}}}, {"required", {key}}}}};
}

// Hermes-style tool calls: get_weather(city) and get_time(timezone).
json HermesCall(const std::string& name, const std::string& key) {
  return Tag("<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": ", Schema(key),
             "}\n</tool_call>");
}
json Hermes(bool at_least_one, bool stop_after_first) {
  return {{"type", "tags_with_separator"},
          {"separator", "\n"},
          {"at_least_one", at_least_one},
          {"stop_after_first", stop_after_first},
          {"tags", {HermesCall("get_weather", "city"), HermesCall("get_time", "timezone")}}};
}
const std::string kWeather =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
const std::string kTime =
    "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"timezone\": \"UTC\"}}\n</tool_call>";

json Triggered(bool at_least_one, bool stop_after_first) {
  const json schema = Schema("city");
  return {{"type", "triggered_tags"},
          {"triggers", {"<function="}},
          {"tags",
           {Tag("<function=get_weather>", schema, "</function>"),
            Tag("<function=get_time>", Schema("timezone"), "</function>")}},
          {"at_least_one", at_least_one},
          {"stop_after_first", stop_after_first}};
}
const std::string kFnWeather = "<function=get_weather>{\"city\": \"SF\"}</function>";
const std::string kFnTime = "<function=get_time>{\"timezone\": \"PST\"}</function>";

struct Case {
  std::string name;
  json format;
  std::vector<std::string> accept, reject;
};

TEST(StructuralTagTest, EachFormatAcceptsExactlyItsLanguage) {
  const std::string meta = "a|b(c)[d]{e}*+?.^$\\/-\"'<>\n\t\x01 é中😀";
  const std::vector<Case> cases = {
      {"const_string", Const(meta), {meta}, {"", "a", meta + "x", "a|b"}},
      {"json_schema",
       Schema("city"),
       {"{\"city\": \"Oslo\"}", "{\"city\":\"\"}"},
       {"{}", "{\"city\": 5}", "{\"town\": \"x\"}", "{\"city\": \"a\"} "}},
      {"regex anchors",
       {{"type", "regex"}, {"pattern", "^[A-Z]{3}-[0-9]{4}$"}},
       {"ABC-1234"},
       {"ABC-123", "abc-1234", "ABC-12345"}},
      {"sequence",
       {{"type", "sequence"},
        {"elements", {Const("Answer: "), {{"type", "regex"}, {"pattern", "yes|no"}}, Const(".")}}},
       {"Answer: yes.", "Answer: no."},
       {"Answer: yes", "yes.", "Answer: maybe."}},
      {"or",
       {{"type", "or"}, {"elements", {Const("yes"), Const("no")}}},
       {"yes", "no"},
       {"", "yesno"}},
      {"tag", Tag("<<[", Const("x"), "]>>"), {"<<[x]>>"}, {"<<[x]>", "<<[]>>"}},
      {"hermes: one or more calls",
       Hermes(true, false),
       {kWeather, kTime, kWeather + "\n" + kTime, kTime + "\n" + kTime + "\n" + kWeather},
       {"", "Sure! " + kWeather, kWeather + " ", kWeather + kTime, kWeather + "\n",
        "<tool_call>\n{\"name\": \"get_wether\", \"arguments\": {\"city\": "
        "\"Paris\"}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": 1}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"timezone\": \"UTC\"}}\n"
        "</tool_call>"}},
      {"hermes: at most one call",
       Hermes(false, true),
       {"", kWeather, kTime},
       {kWeather + "\n" + kTime}},
      {"hermes: exactly one call", Hermes(true, true), {kWeather}, {"", kWeather + "\n" + kTime}},
      {"tags_with_separator: zero or more",
       Hermes(false, false),
       {"", kTime + "\n" + kWeather},
       {"\n"}},
      {"any_text in a tag: through the first end",
       Tag("<think>", AnyText(), "</think>"),
       {"<think></think>", "<think>a < b </ think> </think>", "<think>é中 \n</think>"},
       {"<think>x</think>y", "<think>x</think></think>", "<think>\xff</think>", "<think>x"}},
      {"any_text: the end's first occurrence, overlaps included",
       Tag("[", AnyText(), "aa"),
       {"[aa", "[xaa", "[abaa"},
       {"[aaa", "[aaxaa"}},
      {"any_text: metacharacters in the end",
       Tag("(", AnyText(), "|)*"),
       {"(x|)*", "(|)*", "(a|b)|)*"},
       {"(|)*|)*", "(x|)"}},
      {"any_text at the output's end",
       {{"type", "sequence"}, {"elements", {Const("A:"), AnyText()}}},
       {"A:", "A: anything </x> at all"},
       {"B:", "A:\xc3"}},
      {"triggered_tags",
       Triggered(false, false),
       {"", "hello", "I will call " + kFnWeather + " and " + kFnTime + " done",
        kFnWeather + kFnTime, "text <function",
        "<function" + std::string("<function=get_time>") + "{\"timezone\": \"x\"}</function>"},
       {"<function=foo>", "hi <function=get_weather>{\"city\": 1}</function>",
        "hi <function=get_weather>{\"city\": \"x\"}", "x <function=get_weather"}},
      {"triggered_tags: at_least_one starts with a tag",
       Triggered(true, false),
       {kFnWeather, kFnWeather + " then " + kFnTime + " end"},
       {"", "hello " + kFnWeather}},
      {"triggered_tags: stop_after_first",
       Triggered(false, true),
       {"", "text only", "first " + kFnWeather},
       {"first " + kFnWeather + " more", kFnWeather + kFnTime}},
      {"triggered_tags: exactly one tag", Triggered(true, true), {kFnTime}, {"", kFnTime + " x"}},
      {"triggered_tags in a tag stop at its end",
       Tag("<answer>", Triggered(false, false), "</answer>"),
       {"<answer></answer>", "<answer>hi " + kFnTime + " bye</answer>"},
       {"<answer>hi</answer> more", "<answer>x</answer></answer>", "<answer>x"}},
      {"reasoning, then text with calls",
       {{"type", "sequence"},
        {"elements", {Tag("<think>", AnyText(), "</think>"), Triggered(false, false)}}},
       {"<think>hmm</think>", "<think>a</think>ok " + kFnWeather},
       {"no think", "<think>a</think>" + std::string("<function=nope>")}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto dfa = CompileTag(c.format);
    ASSERT_NE(dfa, nullptr);
    for (const std::string& s : c.accept) EXPECT_TRUE(DfaMatches(*dfa, s)) << "'" << s << "'";
    for (const std::string& s : c.reject) EXPECT_FALSE(DfaMatches(*dfa, s)) << "'" << s << "'";
  }
}

bool ValidUtf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<uint8_t>(s[i]);
    const size_t n = b < 0x80 ? 1 : (b >> 5) == 6 && b >= 0xC2 ? 2 : (b >> 4) == 14 ? 3 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<uint8_t>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    if (n == 3 && ((b == 0xE0 && static_cast<uint8_t>(s[i + 1]) < 0xA0) ||
                   (b == 0xED && static_cast<uint8_t>(s[i + 1]) > 0x9F))) {
      return false;
    }
    i += n;
  }
  return true;
}

// The end of the first occurrence of any literal (npos: none).
size_t FirstEnd(const std::string& s, const std::vector<std::string>& literals) {
  size_t best = std::string::npos;
  for (const std::string& l : literals) {
    const size_t at = s.find(l);
    if (at != std::string::npos) best = std::min(best, at + l.size());
  }
  return best;
}

// (?~...) and (?*...) against their definitions, on random byte strings over an alphabet
// with overlapping literals and a two-byte character split into its bytes.
TEST(StructuralTagTest, FreeTextGroupsAgreeWithTheirDefinitions) {
  const std::vector<std::vector<std::string>> sets = {{"ab"},      {"aa"},      {"aba", "b<"},
                                                      {"<a", "a"}, {"é", "ab"}, {"a<b", "<", "bb"}};
  const std::string alphabet = "ab<\xc3\xa9";
  std::mt19937 rng(7);
  for (const auto& literals : sets) {
    std::string body;
    for (size_t i = 0; i < literals.size(); ++i) {
      if (i > 0) body += '|';
      body += RegexEscape(literals[i]);
    }
    auto avoid = RegexDfa::Compile("(?~" + body + ")");
    ASSERT_TRUE(avoid.ok()) << avoid.status().ToString();
    auto until = RegexDfa::Compile("(?*" + body + ")");
    for (int trial = 0; trial < 3000; ++trial) {
      std::string s;
      const int len = static_cast<int>(rng() % 9);
      for (int k = 0; k < len; ++k) s += alphabet[rng() % alphabet.size()];
      if (trial % 3 == 0) s += literals[0];
      const size_t first = FirstEnd(s, literals);
      EXPECT_EQ(DfaMatches(**avoid, s), ValidUtf8(s) && first == std::string::npos) << s;
      if (!until.ok()) continue;
      const bool want = ValidUtf8(s) && first == s.size() && s.ends_with(literals[0]);
      EXPECT_EQ(DfaMatches(**until, s), want) << body << " on '" << s << "'";
    }
  }
  // "ab" always meets "a" first: the exit can never be reached.
  auto never = RegexDfa::Compile("(?*ab|a)");
  ASSERT_FALSE(never.ok());
  EXPECT_NE(never.status().message().find("matches no text"), std::string::npos);
  auto in_json = RegexDfa::Compile("\"(?J:(?~x))\"");
  ASSERT_FALSE(in_json.ok());
  EXPECT_NE(in_json.status().message().find("cannot be used in a JSON string"), std::string::npos);
}

json Nested(int levels) {
  json f = Const("x");
  for (int i = 0; i < levels; ++i) f = Tag("<", f, ">");
  return f;
}

TEST(StructuralTagTest, BadInputIsRefusedWithItsPlace) {
  const json tag = Tag("<a>", Const("x"), "</a>");
  json long_or = {{"type", "or"}, {"elements", json::array()}};
  for (int i = 0; i < 1025; ++i) long_or["elements"].push_back(Const("x"));
  // Each level writes its inner list twice: 2^15 copies of 1,000 bytes.
  json doubling = Const(std::string(1000, 'x'));
  for (int i = 0; i < 15; ++i) {
    doubling = {
        {"type", "tags_with_separator"}, {"separator", ","}, {"tags", {Tag("", doubling, "")}}};
  }
  const json tws = {{"type", "tags_with_separator"}, {"separator", ","}, {"tags", {tag, tag}}};
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{}", "structural_tag: format is missing"},
      {"[]", "structural_tag: the guide must be a JSON object"},
      {"{not json", "structural_tag: the guide is not valid JSON"},
      {R"({"type": "regex", "format": {}})", "structural_tag: type must be \"structural_tag\""},
      {R"({"format": 5})", "structural_tag: format must be an object"},
      {R"({"format": {}})", "structural_tag: format.type is missing"},
      {R"({"format": {"type": 3}})", "structural_tag: format.type must be a string"},
      {R"({"format": {"type": "foo"}})", "format.type 'foo' is not a structural tag format"},
      {R"({"format": {"type": "grammar", "grammar": "root ::= \"a\""}})",
       "format.type 'grammar' is not supported"},
      {R"({"format": {"type": "const_string"}})", "structural_tag: format.value is missing"},
      {R"({"format": {"type": "const_string", "value": 1}})", "format.value must be a string"},
      {R"({"format": {"type": "sequence", "elements": []}})", "format.elements must not be empty"},
      {R"({"format": {"type": "or", "elements": {}}})", "format.elements must be an array"},
      {json{{"format", long_or}}.dump(), "format.elements has 1025 entries; at most 1024"},
      {R"({"format": {"type": "or", "elements": [{"type": "const_string", "value": "a"}, 7]}})",
       "format.elements[1] must be an object"},
      {R"({"format": {"type": "tags_with_separator", "separator": "", "tags": []}})",
       "format.tags must not be empty"},
      {json{{"format",
             {{"type", "tags_with_separator"},
              {"separator", ","},
              {"tags", {tag, {{"begin", 5}, {"content", Const("x")}, {"end", ""}}}}}}}
           .dump(),
       "structural_tag: format.tags[1].begin must be a string"},
      {json{{"format",
             {{"type", "tags_with_separator"}, {"separator", ","}, {"tags", {{{"type", "or"}}}}}}}
           .dump(),
       "format.tags[0].type must be \"tag\""},
      {json{{"format", {{"type", "tags_with_separator"}, {"tags", {tag}}}}}.dump(),
       "format.separator is missing"},
      {json{{"format",
             {{"type", "tags_with_separator"},
              {"separator", ","},
              {"tags", {tag}},
              {"at_least_one", "yes"}}}}
           .dump(),
       "format.at_least_one must be a boolean"},
      {R"({"format": {"type": "tag", "begin": "<a>", "end": "</a>"}})",
       "format.content is missing"},
      {R"({"format": {"type": "tag", "begin": "<a>", "content": {"type": "any_text"}, "end": ["</a>"]}})",
       "format.end must be a string (token and list forms are not supported)"},
      {json{{"format", Tag("<a>", AnyText(), "")}}.dump(),
       "format.end must not be empty: it ends the any_text at format.content"},
      {json{{"format", Tag("<a>", {{"type", "any_text"}, {"excludes", {"x"}}}, "</a>")}}.dump(),
       "format.content.excludes is not supported"},
      {json{{"format", {{"type", "sequence"}, {"elements", {AnyText(), Const("x")}}}}}.dump(),
       "format.elements[0]: any_text must end the output or a tag's content"},
      {json{{"format", {{"type", "sequence"}, {"elements", {Triggered(false, false), Const("x")}}}}}
           .dump(),
       "format.elements[0]: triggered_tags must end the output or a tag's content"},
      {R"({"format": {"type": "json_schema", "json_schema": {"type": "array", "uniqueItems": true}}})",
       "format.json_schema: json schema: keyword 'uniqueItems' is not supported"},
      {R"({"format": {"type": "json_schema", "json_schema": "x"}})",
       "format.json_schema must be an object"},
      {R"({"format": {"type": "json_schema", "json_schema": {}, "style": "qwen_xml"}})",
       "format.style: only \"json\" is supported"},
      {R"({"format": {"type": "regex", "pattern": "[0-9"}})",
       "format.pattern: regex: unterminated ["},
      {R"({"format": {"type": "regex", "pattern": "a)|(b"}})",
       "format.pattern: regex: unexpected ')'"},
      {R"({"format": {"type": "regex", "pattern": "a$$"}})", "format.pattern: regex: anchors"},
      {R"({"format": {"type": "triggered_tags", "triggers": ["<f"], "tags": [{"begin": "<g>",
          "content": {"type": "const_string", "value": "x"}, "end": "</g>"}]}})",
       "format.tags[0].begin must start with one of format.triggers"},
      {R"({"format": {"type": "triggered_tags", "triggers": [""], "tags": []}})",
       "format.triggers[0] must not be empty"},
      {json{{"format", Tag("<a>",
                           {{"type", "triggered_tags"},
                            {"triggers", {"<"}},
                            {"tags", {Tag("<x>", Const("x"), "</x>")}}},
                           "</a>")}}
           .dump(),
       "format.content: its text can never reach the end \"</a>\" (format.end): a trigger occurs"},
      {json{{"format", Nested(33)}}.dump(), "nests formats deeper than 32 levels"},
      {std::string(300, '[') + std::string(300, ']'), "nests arrays and objects deeper than 256"},
      {json{{"format", Const(std::string(70000, 'x'))}}.dump(),
       "the strings of the guide hold over 65536 bytes (at format.value)"},
      {json{{"format", doubling}}.dump(), "bytes of regular expression"},
      {json{{"format", Tag("<a>", AnyText(), std::string(5000, 'e'))}}.dump(),
       "format.end ends the any_text at format.content and holds 5000 bytes; at most 4096"},
  };
  for (const auto& [guide, message] : cases) {
    auto r = StructuralTagToRegex(guide);
    ASSERT_FALSE(r.ok()) << guide.substr(0, 300);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(message), std::string::npos)
        << r.status().message() << "\nwanted: " << message;
  }
  EXPECT_TRUE(StructuralTagToRegex(json{{"format", Nested(32)}}.dump()).ok());
  EXPECT_TRUE(StructuralTagToRegex(json{{"format", tws}}.dump()).ok());
}

// Id 0 is the end token (no bytes); then whole pieces of a call, and every printable
// character but the backslash (no escapes: a random \uD800 is no JSON).
std::shared_ptr<const GuideVocabulary> SmallVocab() {
  std::vector<std::string> v = {
      "",       "<tool_call>",       "<tool_call>\n", "{\"name\": ", "\"get_",          "weather\"",
      "time\"", ", \"arguments\": ", "{\"city\"",     "\"}",         "}\n</tool_call>", "Sure",
      "\n"};
  for (char c = ' '; c <= '~'; ++c) {
    if (c != '\\') v.push_back(std::string(1, c));
  }
  return std::make_shared<GuideVocabulary>(v);
}

TEST(StructuralTagTest, AWholeGuideWritesOnlyValidCalls) {
  auto vocab = SmallVocab();
  const json guide = {{"type", "structural_tag"}, {"format", Hermes(true, true)}};
  ASSERT_TRUE(GuideTypeFromName("structural_tag").ok());
  auto g = Guide::Compile(*GuideTypeFromName("structural_tag"), guide.dump(), vocab);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const int32_t V = vocab->size(), end_id = 0;
  std::mt19937 rng(11);
  for (int trial = 0; trial < 40; ++trial) {
    auto c = (*g)->NewConstraint();
    std::string out;
    bool ended = false;
    for (int step = 0; step < 3000 && !ended && !c->Terminated(); ++step) {
      std::vector<float> logits(V, 1.0f);
      c->Mask(logits.data(), V, end_id);
      std::vector<int32_t> ok;
      for (int32_t t = 0; t < V; ++t) {
        if (logits[t] == 1.0f) ok.push_back(t);
      }
      if (step == 0) {
        // Only the start of "<tool_call>\n": no text before a call, no empty output.
        EXPECT_EQ(ok.size(), 3u);
        for (int32_t t : ok) {
          EXPECT_TRUE(std::string("<tool_call>\n").starts_with(vocab->bytes(t))) << t;
        }
      }
      ASSERT_FALSE(ok.empty()) << "stuck after '" << out << "'";
      const int32_t pick = ok[rng() % ok.size()];
      if (pick == end_id) {
        ended = true;
      } else {
        out += vocab->bytes(pick);
        c->Advance(pick);
      }
    }
    ASSERT_TRUE(ended || c->Terminated()) << out;
    const std::string head = "<tool_call>\n", tail = "\n</tool_call>";
    ASSERT_TRUE(out.starts_with(head) && out.ends_with(tail)) << out;
    const json call = json::parse(out.substr(head.size(), out.size() - head.size() - tail.size()),
                                  nullptr, false);
    ASSERT_TRUE(call.is_object()) << out;
    const std::string name = call["name"].get<std::string>();
    const std::string key = name == "get_weather" ? "city" : "timezone";
    ASSERT_TRUE(name == "get_weather" || name == "get_time") << out;
    ASSERT_TRUE(call["arguments"].is_object() && call["arguments"].size() == 1) << out;
    EXPECT_TRUE(call["arguments"][key].is_string()) << out;
  }
}

TEST(StructuralTagTest, TheAutomatonsBoundsApplyToTheWholeGuide) {
  const json big = {{"format", {{"type", "regex"}, {"pattern", "(\\w{1000}){1000}"}}}};
  auto g = Guide::Compile(GuideType::kStructuralTag, big.dump(), SmallVocab());
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("structural_tag: regex: the pattern is too large"),
            std::string::npos)
      << g.status().message();
  // Repeats of an empty group add states too: bounded, not a billion of them.
  auto empty = RegexDfa::Compile("(((){1000}){1000}){1000}");
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("too large"), std::string::npos);
}

}  // namespace
}  // namespace inflight::guided
