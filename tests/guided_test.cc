// Guided decoding's automata against references: the regex engine against std::regex, the
// integer-range regexes against arithmetic, the JSON recognizer against nlohmann::json's
// parser, and token masks against stepping each token's bytes one by one.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>

#include "guided/grammar.h"
#include "guided/guide.h"
#include "guided/json_matcher.h"
#include "guided/json_schema.h"
#include "guided/regex_dfa.h"
#include "guided/token_trie.h"

namespace inflight::guided {
namespace {

bool DfaMatches(RegexDfa& dfa, const std::string& s) {
  int32_t st = dfa.start();
  for (char c : s) {
    st = dfa.Next(st, static_cast<uint8_t>(c));
    if (st == RegexDfa::kDead) return false;
  }
  return dfa.Accepting(st);
}

// A random string the DFA accepts (a random walk that stops at an accepting state).
std::string RandomMatch(RegexDfa& dfa, std::mt19937& rng, const std::string& alphabet,
                        int max_len = 40) {
  for (int attempt = 0; attempt < 200; ++attempt) {
    std::string s;
    int32_t st = dfa.start();
    for (int i = 0; i < max_len; ++i) {
      if (dfa.Accepting(st) && rng() % 4 == 0) return s;
      std::vector<char> next;
      for (char c : alphabet) {
        if (dfa.Next(st, static_cast<uint8_t>(c)) != RegexDfa::kDead) next.push_back(c);
      }
      if (next.empty()) break;
      const char c = next[rng() % next.size()];
      s += c;
      st = dfa.Next(st, static_cast<uint8_t>(c));
    }
    if (dfa.Accepting(st)) return s;
  }
  return "";
}

TEST(RegexDfaTest, AgreesWithStdRegexOnRandomAndMatchingStrings) {
  const std::vector<std::string> patterns = {"abc",
                                             "a|b|c",
                                             "a*",
                                             "(ab)+",
                                             "a?b?c?",
                                             "[a-c]{2,4}",
                                             "[^a]b",
                                             "(a|bc)*d",
                                             "\\d{3}-\\d{4}",
                                             "\\w+@\\w+\\.com",
                                             "x{0,3}y{2}",
                                             "(a(b(c)?)?)+",
                                             "[a-z]*[0-9]+",
                                             "(foo|foobar)(bar)?",
                                             "-?(0|[1-9][0-9]*)(\\.[0-9]+)?",
                                             "[.]+\\.",
                                             "(\\s|,)+",
                                             "[\\[\\]]{1,3}",
                                             "a.c",
                                             "(?:ab|cd){2}",
                                             "[A-Fa-f0-9]{2}(:[A-Fa-f0-9]{2}){0,2}",
                                             "\\(\\)",
                                             "(true|false|null)",
                                             "[^\"\\\\]*",
                                             "\\x41\\u0042c",
                                             "ab{2,}c",
                                             "((a|b)(c|d))*",
                                             "[-+]?[0-9]{1,3}",
                                             "\\D\\W\\S",
                                             "^start(.)*end$"};
  const std::string alphabet = "abcdxyzfor0123456789-.@ ,:[]()\"\\ABCDEFtuelnsm_";
  std::mt19937 rng(1);
  for (const std::string& p : patterns) {
    auto dfa = RegexDfa::Compile(p);
    ASSERT_TRUE(dfa.ok()) << p << ": " << dfa.status().ToString();
    std::string ecma = p;
    if (ecma.rfind("^", 0) == 0) ecma = ecma.substr(1);
    if (!ecma.empty() && ecma.back() == '$') ecma.pop_back();
    std::regex ref(ecma, std::regex::ECMAScript);
    int matched = 0;
    for (int i = 0; i < 400; ++i) {
      std::string s;
      if (i % 2 == 0) {
        s = RandomMatch(**dfa, rng, alphabet);
      } else {
        const int len = static_cast<int>(rng() % 8);
        for (int k = 0; k < len; ++k) s += alphabet[rng() % alphabet.size()];
      }
      const bool want = std::regex_match(s, ref);
      matched += want;
      EXPECT_EQ(DfaMatches(**dfa, s), want) << "pattern " << p << " on '" << s << "'";
    }
    EXPECT_GT(matched, 0) << p;
  }
}

TEST(RegexDfaTest, MatchesUtf8CodePointsNotBytes) {
  auto dfa = RegexDfa::Compile("[^a]{2}");
  ASSERT_TRUE(dfa.ok());
  EXPECT_TRUE(DfaMatches(**dfa, "\xc3\xa9\xe2\x82\xac"));  // é€: two code points
  EXPECT_FALSE(DfaMatches(**dfa, "\xc3\xa9"));             // one
  EXPECT_FALSE(DfaMatches(**dfa, "\xc3\x28\x41"));         // invalid UTF-8
  auto dot = RegexDfa::Compile(".");
  ASSERT_TRUE(dot.ok());
  EXPECT_TRUE(DfaMatches(**dot, "\xf0\x9f\x98\x80"));  // one 4-byte code point
  EXPECT_FALSE(DfaMatches(**dot, "\xed\xa0\x80"));     // a surrogate is not UTF-8
  EXPECT_FALSE(DfaMatches(**dot, "\n"));
}

TEST(RegexDfaTest, BadPatternsAreRefusedWithTheirPosition) {
  for (const char* p :
       {"(a", "a)", "[a", "a{2,1}", "*a", "a{99999}", "\\q", "(?<n>a)", "a^b", "[z-a]"}) {
    auto dfa = RegexDfa::Compile(p);
    ASSERT_FALSE(dfa.ok()) << p;
    EXPECT_EQ(dfa.status().code(), StatusCode::kInvalidArgument) << p;
    EXPECT_NE(dfa.status().message().find("regex:"), std::string::npos) << dfa.status().message();
  }
  // Too large: nested bounded repeats multiply.
  auto big = RegexDfa::Compile("((((a{100}){100}){100}){100})");
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("too large"), std::string::npos);
}

TEST(IntegerRangeRegexTest, MatchesExactlyTheRange) {
  std::mt19937 rng(2);
  std::vector<std::pair<int64_t, int64_t>> ranges = {
      {0, 0},    {0, 9},    {1, 1000}, {-5, 5},  {-1234, -17}, {37, 2024},
      {99, 101}, {-100, 0}, {7, 7},    {10, 99}, {100, 999999}};
  for (int i = 0; i < 30; ++i) {
    int64_t a = static_cast<int64_t>(rng() % 200000) - 100000,
            b = a + static_cast<int64_t>(rng() % 5000);
    ranges.emplace_back(a, b);
  }
  for (const auto& [lo, hi] : ranges) {
    const std::string re = IntegerRangeRegex(lo, hi);
    auto dfa = RegexDfa::Compile(re);
    ASSERT_TRUE(dfa.ok()) << re;
    for (int64_t v = lo - 60; v <= hi + 60; v += (hi - lo > 3000 ? 7 : 1)) {
      EXPECT_EQ(DfaMatches(**dfa, std::to_string(v)), v >= lo && v <= hi)
          << "[" << lo << ", " << hi << "] " << v << " " << re;
    }
    EXPECT_FALSE(DfaMatches(**dfa, "-0"));
    EXPECT_FALSE(
        DfaMatches(**dfa, "0" + std::to_string(std::max<int64_t>(lo, 1))));  // no leading zeros
  }
}

// Random JSON texts (a container at the root), compact or spaced.
nlohmann::json RandomJson(std::mt19937& rng, int depth) {
  const int kind = depth == 0 ? static_cast<int>(rng() % 2) + 4 : static_cast<int>(rng() % 6);
  switch (kind) {
    case 0:
      return nlohmann::json(static_cast<int>(rng() % 2000) - 1000);
    case 1:
      return nlohmann::json(static_cast<double>(rng() % 100000) / 64.0 - 700.0);
    case 2: {
      static const char* kPieces[] = {"a",  "b",    " ", "\"",     "\\",     "/",         "\n",
                                      "\t", "\x01", "z", "\u00e9", "\u20ac", "\U0001F600"};
      std::string s;
      for (int i = 0, n = static_cast<int>(rng() % 6); i < n; ++i) s += kPieces[rng() % 13];
      return nlohmann::json(s);
    }
    case 3:
      return rng() % 3 == 0 ? nlohmann::json(nullptr) : nlohmann::json(rng() % 2 == 0);
    case 4: {
      nlohmann::json a = nlohmann::json::array();
      if (depth < 4)
        for (int i = 0, n = static_cast<int>(rng() % 4); i < n; ++i)
          a.push_back(RandomJson(rng, depth + 1));
      return a;
    }
    default: {
      nlohmann::json o = nlohmann::json::object();
      if (depth < 4)
        for (int i = 0, n = static_cast<int>(rng() % 4); i < n; ++i)
          o["k\u00e9y" + std::to_string(i)] = RandomJson(rng, depth + 1);
      return o;
    }
  }
}

bool RecognizerAccepts(const std::string& text, bool* done) {
  JsonState st;
  for (char c : text) {
    if (!st.Step(static_cast<uint8_t>(c))) return false;
  }
  *done = st.Done();
  return true;
}

TEST(JsonRecognizerTest, AgreesWithNlohmannOnTextsAndCorruptions) {
  std::mt19937 rng(3);
  int rejected_corruptions = 0;
  for (int i = 0; i < 3000; ++i) {
    const nlohmann::json j = RandomJson(rng, 0);
    std::string text = j.dump(i % 3 == 0 ? 2 : -1);
    bool done = false;
    ASSERT_TRUE(RecognizerAccepts(text, &done)) << text;
    EXPECT_TRUE(done) << text;
    // Every proper prefix is accepted and not complete.
    const size_t cut = rng() % text.size();
    ASSERT_TRUE(RecognizerAccepts(text.substr(0, cut), &done)) << text.substr(0, cut);
    EXPECT_FALSE(done);
    // One byte changed: accepted as complete JSON only if nlohmann accepts it too.
    std::string bad = text;
    const std::string noise = "{}[]\",:0-.eE tfnx\\\x01";
    bad[rng() % bad.size()] = noise[rng() % noise.size()];
    const bool valid = nlohmann::json::accept(bad);
    bool bad_done = false;
    const bool accepted = RecognizerAccepts(bad, &bad_done) && bad_done;
    if (accepted) {
      EXPECT_TRUE(valid) << "recognizer accepted invalid JSON: " << bad;
    }
    if (valid && !accepted) {
      // Only what the recognizer's bounds exclude: a scalar root, a 3-digit exponent.
      const nlohmann::json parsed = nlohmann::json::parse(bad);
      const bool scalar_root = !parsed.is_object() && !parsed.is_array();
      const bool long_exponent = std::regex_search(bad, std::regex("[eE][+-]?[0-9]{3}"));
      EXPECT_TRUE(scalar_root || long_exponent) << "recognizer rejected valid JSON: " << bad;
    }
    rejected_corruptions += !valid;
  }
  EXPECT_GT(rejected_corruptions, 1000);
  bool done;
  EXPECT_FALSE(RecognizerAccepts("\"root string\"", &done)) << "the root is an object or an array";
  EXPECT_FALSE(RecognizerAccepts("{} ", &done)) << "nothing follows the root";
  EXPECT_FALSE(RecognizerAccepts(std::string(40, '['), &done)) << "depth is bounded";
  EXPECT_FALSE(RecognizerAccepts("[" + std::string(40, '1') + "]", &done))
      << "number length is bounded";
}

// Masks equal stepping every token's bytes through the automaton one by one.
TEST(TokenMaskTest, MasksEqualSteppingEachToken) {
  std::vector<std::string> vocab = {"",     "{",        "}",    "\"",  "a",   "ab",   "\"a",
                                    "\":",  ": ",       "1",    "12",  "-",   ",",    " ",
                                    "[",    "]",        "true", "tru", "e",   "null", "\xc3",
                                    "\xa9", "\xc3\xa9", "{\"",  "\"}", "0.5", "x"};
  auto v = std::make_shared<GuideVocabulary>(vocab);
  const int32_t V = static_cast<int32_t>(vocab.size());
  for (
      const auto& [type, text] : std::vector<std::pair<GuideType, std::string>>{
          {GuideType::kJson, ""},
          {GuideType::kRegex, "\\{\"a\": (1|12|true)\\}"},
          {GuideType::kEbnf,
           "root ::= \"{\" (\"\\\"a\\\": \" (\"1\" [0-9]? | \"true\") (\", \" [a-z]+)?)? \"}\""},
          {GuideType::kJsonSchema,
           R"({"type": "object", "properties": {"a": {"type": "integer", "minimum": -5, "maximum": 20}}})"}}) {
    auto g = Guide::Compile(type, text, v);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    std::mt19937 rng(4);
    for (int trial = 0; trial < 30; ++trial) {
      auto c = (*g)->NewConstraint();
      std::string out;
      for (int step = 0; step < 20 && !c->Terminated(); ++step) {
        std::vector<float> logits(V, 1.0f);
        const int32_t allowed = c->Mask(logits.data(), V, -1);
        std::vector<int32_t> ok;
        for (int32_t t = 0; t < V; ++t) {
          if (logits[t] != 1.0f) continue;
          ok.push_back(t);
        }
        EXPECT_EQ(allowed, static_cast<int32_t>(ok.size()));
        // The reference: a copy of the constraint advanced by the token stays alive (a fresh
        // constraint fed the whole output, then the token).
        for (int32_t t = 1; t < V; ++t) {
          auto probe = (*g)->NewConstraint();
          JsonState js;
          bool alive = true;
          std::string bytes = out + vocab[t];
          if (type == GuideType::kJson) {
            for (char ch : bytes) alive = alive && js.Step(static_cast<uint8_t>(ch));
          } else if (type == GuideType::kEbnf) {
            auto grammar = Grammar::Parse(text);
            GrammarState gs(grammar->get());
            for (char ch : bytes) alive = alive && gs.Step(static_cast<uint8_t>(ch));
          } else {
            auto dfa =
                RegexDfa::Compile(type == GuideType::kRegex ? text : *JsonSchemaToRegex(text));
            int32_t s = (*dfa)->start();
            for (char ch : bytes) {
              if (s != RegexDfa::kDead) s = (*dfa)->Next(s, static_cast<uint8_t>(ch));
            }
            alive = s != RegexDfa::kDead;
          }
          EXPECT_EQ(alive, std::find(ok.begin(), ok.end(), t) != ok.end())
              << "token '" << vocab[t] << "' after '" << out << "'";
        }
        if (ok.empty()) break;
        const int32_t pick = ok[rng() % ok.size()];
        out += vocab[pick];
        c->Advance(pick);
      }
    }
  }
}

bool GrammarMatches(const Grammar& g, const std::string& s) {
  GrammarState st(&g);
  for (char c : s) {
    if (!st.Step(static_cast<uint8_t>(c))) return false;
  }
  return st.Accepting();
}

// Arithmetic over digits, + - * / and parentheses: the test's own recursive-descent checker.
bool ArithOk(const std::string& s) {
  size_t i = 0;
  std::function<bool()> expr, term, factor;
  factor = [&]() {
    if (i < s.size() && s[i] == '(') {
      ++i;
      if (!expr() || i >= s.size() || s[i] != ')') return false;
      ++i;
      return true;
    }
    const size_t start = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    return i > start;
  };
  term = [&]() {
    if (!factor()) return false;
    while (i < s.size() && (s[i] == '*' || s[i] == '/')) {
      ++i;
      if (!factor()) return false;
    }
    return true;
  };
  expr = [&]() {
    if (!term()) return false;
    while (i < s.size() && (s[i] == '+' || s[i] == '-')) {
      ++i;
      if (!term()) return false;
    }
    return true;
  };
  return expr() && i == s.size();
}

const char* kArithGrammar = R"G(# arithmetic
root   ::= expr
expr   ::= term (("+" | "-") term)*
term   ::= factor (("*" | "/") factor)*
factor ::= [0-9]+ | "(" expr ")"
)G";

TEST(GrammarTest, RegularGrammarsAgreeWithStdRegex) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"G(root ::= "a" [b-d]* ("x" | "yz")?)G", R"(a[b-d]*(x|yz)?)"},
      {"root ::= digit+ (\".\" digit{1,3})?\ndigit ::= [0-9]", R"([0-9]+(\.[0-9]{1,3})?)"},
      {R"G(root ::= ("ab" | "c"){2,3} [^a-c]?)G", "(ab|c){2,3}[^a-c]?"},
      {R"G(root ::= "\"" ([^"\\] | "\\" ["\\n])* "\"")G", R"("([^"\\]|\\["\\n])*")"},
      {"root ::= \"x\"\n  | \"y\" \"z\"*  # a comment\n", "x|yz*"},
  };
  const std::string alphabet = "abcdxyz0123456789.\"\\n";
  std::mt19937 rng(6);
  for (const auto& [grammar, pattern] : cases) {
    auto g = Grammar::Parse(grammar);
    ASSERT_TRUE(g.ok()) << grammar << ": " << g.status().ToString();
    auto dfa = RegexDfa::Compile(pattern);
    ASSERT_TRUE(dfa.ok()) << pattern;
    const std::regex ref(pattern);
    int matched = 0;
    for (int i = 0; i < 600; ++i) {
      std::string str;
      if (i % 2 == 0) {
        str = RandomMatch(**dfa, rng, alphabet);
      } else {
        for (int k = 0, n = static_cast<int>(rng() % 7); k < n; ++k)
          str += alphabet[rng() % alphabet.size()];
      }
      const bool want = std::regex_match(str, ref);
      matched += want;
      EXPECT_EQ(GrammarMatches(**g, str), want) << grammar << " on '" << str << "'";
    }
    EXPECT_GT(matched, 10) << grammar;
  }
}

TEST(GrammarTest, RecursiveGrammarsAgreeWithARecursiveDescentChecker) {
  auto g = Grammar::Parse(kArithGrammar);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  std::mt19937 rng(7);
  const std::string alphabet = "0123456789+-*/()";
  // Random expressions (valid by construction) and random strings.
  std::function<std::string(int)> gen = [&](int depth) -> std::string {
    std::string out;
    const int terms = 1 + static_cast<int>(rng() % 3);
    for (int t = 0; t < terms; ++t) {
      if (t) out += "+-*/"[rng() % 4];
      if (depth < 4 && rng() % 3 == 0) {
        out += "(" + gen(depth + 1) + ")";
      } else {
        out += std::to_string(rng() % 1000);
      }
    }
    return out;
  };
  int valid = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string str;
    if (i % 2 == 0) {
      str = gen(0);
      if (i % 4 == 0 && !str.empty()) str[rng() % str.size()] = alphabet[rng() % alphabet.size()];
    } else {
      for (int k = 0, n = 1 + static_cast<int>(rng() % 9); k < n; ++k)
        str += alphabet[rng() % alphabet.size()];
    }
    const bool want = ArithOk(str);
    valid += want;
    EXPECT_EQ(GrammarMatches(**g, str), want) << "'" << str << "'";
  }
  EXPECT_GT(valid, 1000);
  // Prefixes of valid texts stay alive; the state is not accepting mid-parenthesis.
  GrammarState st(g->get());
  for (char c : std::string("(1+(2*3)")) ASSERT_TRUE(st.Step(static_cast<uint8_t>(c)));
  EXPECT_FALSE(st.Accepting());
  EXPECT_TRUE(st.Step(')'));
  EXPECT_TRUE(st.Accepting());
  EXPECT_TRUE(st.CanContinue());
}

TEST(GrammarTest, AJsonGrammarAgreesWithNlohmann) {
  const char* json_grammar = R"G(
root    ::= object | array
value   ::= object | array | string | number | "true" | "false" | "null"
object  ::= "{" ws ( string ws ":" ws value ws ( "," ws string ws ":" ws value ws )* )? "}"
array   ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
string  ::= "\"" ( [^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\""
number  ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]{1,2} )?
ws      ::= [ \t\n\r]*
)G";
  auto g = Grammar::Parse(json_grammar);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  std::mt19937 rng(8);
  for (int i = 0; i < 1000; ++i) {
    const nlohmann::json j = RandomJson(rng, 0);
    std::string text = j.dump(i % 3 == 0 ? 2 : -1);
    ASSERT_TRUE(GrammarMatches(**g, text)) << text;
    std::string bad = text;
    const std::string noise = "{}[]\",:0-.eE tfnx\\";
    bad[rng() % bad.size()] = noise[rng() % noise.size()];
    const bool valid = nlohmann::json::accept(bad);
    if (GrammarMatches(**g, bad)) {
      EXPECT_TRUE(valid) << bad;
    } else if (valid) {
      const nlohmann::json parsed = nlohmann::json::parse(bad);
      EXPECT_TRUE(!parsed.is_object() && !parsed.is_array() ||
                  std::regex_search(bad, std::regex("[eE][+-]?[0-9]{3}")))
          << bad;
    }
  }
}

TEST(GrammarTest, OnlyValidUtf8IsRead) {
  auto g = Grammar::Parse("root ::= [^a]*");
  ASSERT_TRUE(g.ok());
  auto run = [&](const std::string& bytes) {
    GrammarState st(g->get());
    for (char c : bytes) {
      if (!st.Step(static_cast<uint8_t>(c))) return false;
    }
    return true;
  };
  EXPECT_TRUE(run("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"));
  EXPECT_FALSE(run("\xe0\x80"));          // overlong from its second byte
  EXPECT_FALSE(run("\xc0\xaf"));          // overlong lead
  EXPECT_FALSE(run("\xed\xa0\x80"));      // a surrogate
  EXPECT_FALSE(run("\xf4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(run("a"));
}

TEST(GrammarTest, AnAmbiguousGrammarCostsBoundedWork) {
  // 2^40 ways to enter the last rule without reading a character.
  std::string text = "root ::= r0\n";
  for (int i = 0; i < 40; ++i)
    text += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + " | r" +
            std::to_string(i + 1) + "\n";
  text += "r40 ::= \"a\"+\n";
  auto g = Grammar::Parse(text);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  GrammarState st(g->get());
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(st.Step('a'));
  EXPECT_TRUE(st.Accepting());
  // Not a speed test: unbounded, this would not finish at all (2^40 expansions per step).
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30.0);
}

TEST(GrammarTest, BadGrammarsAreRefusedWithTheReason) {
  for (const auto& [text, message] : std::vector<std::pair<std::string, std::string>>{
           {R"(root ::= root "a" | "a")", "left-recursive"},
           {R"(root ::= x "a"
x ::= y?
y ::= root)",
            "left-recursive"},
           {R"(root ::= missing)", "'missing' is used but not defined"},
           {R"(start ::= "a")", "no 'root' rule"},
           {R"(root ::= "abc)", "unterminated string literal"},
           {R"(root ::= [a-)", "unterminated ["},
           {R"(root ::= "a"{5,2})", "m < n"},
           {R"(root ::= "a"
root ::= "b")",
            "defined twice"},
           {R"(root ::= ( "a" )", "unterminated ("},
           {"root ::= " + std::string(100, '(') + "\"a\"" + std::string(100, ')'),
            "groups nested too deeply"},
           {"root ::= \"a\"{1001}", "too large repetition bound"},
       }) {
    auto g = Grammar::Parse(text);
    ASSERT_FALSE(g.ok()) << text;
    EXPECT_NE(g.status().message().find(message), std::string::npos) << g.status().message();
  }
}

TEST(JsonSchemaTest, UnsupportedKeywordsAreRefusedByName) {
  for (
      const auto& [schema, word] : std::vector<std::pair<std::string, std::string>>{
          {R"({"type": "array", "uniqueItems": true})", "uniqueItems"},
          {R"({"type": "object", "patternProperties": {}})", "patternProperties"},
          {R"({"not": {"type": "string"}})", "not"},
          {R"({"$ref": "#/$defs/a", "$defs": {"a": {"type": "array", "items": {"$ref": "#/$defs/a"}}}})",
           "recursive"},
          {R"({"type": "integer", "minimum": 5, "maximum": 1})", "no integer"},
          {R"({"type": "string", "format": "hostname"})", "hostname"},
          {R"({"type": "number", "maximum": 2.5})", "number bounds"},
          {R"(not json)", "not valid JSON"},
          // Counts an integer cannot hold (found by guide_fuzz), negative, fractional.
          {R"({"type": "array", "maxItems": 999999999999999999999999999})", "minItems / maxItems"},
          {R"({"type": "string", "minLength": -1e300})", "minLength / maxLength"},
          {R"({"type": "string", "maxLength": 2.5})", "minLength / maxLength"},
          // An attacker's nesting: 40 levels of arrays.
          {[] {
             std::string t;
             for (int i = 0; i < 40; ++i) t += R"({"type": "array", "items": )";
             return t + R"({"type": "null"})" + std::string(40, '}');
           }(),
           "nested more than 32 levels"}}) {
    auto r = JsonSchemaToRegex(schema);
    ASSERT_FALSE(r.ok()) << schema;
    EXPECT_NE(r.status().message().find(word), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace inflight::guided
