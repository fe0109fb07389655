// Guided decoding in the in-flight executor on a random-weight model with Llama 2's 32,000-
// token vocabulary: 50 JSON schemas and 20 regular expressions, sampled, in flight together
// with unguided requests. Every output ends complete and validates: the schemas with Python's
// jsonschema (the reference validator), the regexes with std::regex, free-form JSON with
// nlohmann::json; the unguided requests keep their greedy output.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "base/thread_pool.h"
#include "engine/executor.h"
#include "engine_test_util.h"
#include "guided/guide.h"
#include "model/random_model.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace inflight {
namespace {

using json = nlohmann::json;

class GuidedDecodingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string tok =
        testing::SharedDir() + "/models/tokenizers/llama2-sentencepiece/tokenizer.model";
    REQUIRE_SHARED_FILE(tok);
    if (model_ != nullptr) return;
    auto spec = Tokenizer::SpecFromSentencePieceModel(tok);
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    auto config = PresetConfig(Architecture::kLlama, "tiny");
    ASSERT_TRUE(config.ok());
    RandomModelParams params;
    params.config = *config;
    params.dtype = DType::kQ8_0;
    params.seed = 5;
    path_ = (std::filesystem::temp_directory_path() /
             ("inflight_guided_" + std::to_string(getpid()) + ".gguf"))
                .string();
    ASSERT_TRUE(WriteRandomGguf(params, *spec, path_).ok());
    auto m = Model::Load(path_);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(m).value().release();
    vocab_ = new std::shared_ptr<const guided::GuideVocabulary>(
        guided::GuideVocabulary::FromTokenizer(*model_->tokenizer()));
  }
  static void TearDownTestSuite() {
    delete model_;
    delete vocab_;
    model_ = nullptr;
    if (!path_.empty()) std::filesystem::remove(path_);
  }

  static std::unique_ptr<Executor> Make() {
    ExecutorConfig c;
    c.num_threads = 1;  // the tiny model (see speculative_test)
    c.max_tokens_in_paged_kv_cache = 32 * 2048;
    auto e = Executor::Create(*model_, c);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? std::move(e).value() : nullptr;
  }

  static std::shared_ptr<const TokenConstraint> Guide(guided::GuideType type,
                                                      const std::string& text) {
    auto g = guided::Guide::Compile(type, text, *vocab_);
    EXPECT_TRUE(g.ok()) << text << ": " << g.status().ToString();
    if (!g.ok()) return nullptr;
    return std::shared_ptr<const TokenConstraint>((*g)->NewConstraint());
  }

  static Request Guided(std::shared_ptr<const TokenConstraint> guide, uint64_t seed) {
    Request r;
    r.prompt_ids = model_->tokenizer()->Encode("Answer: ", true);
    r.max_tokens = 600;
    r.sampling.temperature = 1.0f;
    r.sampling.seed = seed;
    r.end_id = model_->tokenizer()->eos_id();
    r.exclude_input_in_output = true;
    r.guide = std::move(guide);
    return r;
  }

  // The bytes the guide saw (SentencePiece's ▁ as spaces, byte tokens as bytes).
  static std::string Bytes(const std::vector<int32_t>& ids) {
    std::string s;
    for (int32_t id : ids) s += (*vocab_)->bytes(id);
    return s;
  }

  static Model* model_;
  static std::shared_ptr<const guided::GuideVocabulary>* vocab_;
  static std::string path_;
};

Model* GuidedDecodingTest::model_ = nullptr;
std::shared_ptr<const guided::GuideVocabulary>* GuidedDecodingTest::vocab_ = nullptr;
std::string GuidedDecodingTest::path_;

// 50 schemas: objects, arrays, enums, nested, numbers, patterns, formats, refs, anyOf.
std::vector<std::string> FiftySchemas() {
  std::vector<std::string> s = {
      R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}, "age": {"type": "integer", "minimum": 0, "maximum": 120}}, "required": ["name", "age"]})",
      R"({"type": "array", "items": {"type": "integer", "minimum": -5, "maximum": 5}, "minItems": 1, "maxItems": 4})",
      R"({"enum": ["red", "green", "blue"]})",
      R"({"type": "object", "properties": {"ok": {"type": "boolean"}, "note": {"type": "null"}}})",
      R"({"type": "string", "pattern": "^[a-z]{3}[0-9]{2}$"})",
      R"({"type": "object", "properties": {"point": {"type": "object", "properties": {"x": {"type": "integer", "minimum": 0, "maximum": 99}, "y": {"type": "integer", "minimum": 0, "maximum": 99}}}}})",
      R"({"type": "number", "minimum": 0, "maximum": 10})",
      R"({"type": "integer", "exclusiveMinimum": 10, "exclusiveMaximum": 20})",
      R"({"type": "string", "format": "date"})",
      R"({"type": "string", "format": "uuid"})",
      R"({"type": "string", "format": "email"})",
      R"({"type": "string", "format": "ipv4"})",
      R"({"type": "string", "format": "date-time"})",
      R"({"type": "string", "format": "time"})",
      R"({"const": {"fixed": [1, 2, 3]}})",
      R"({"type": "array", "prefixItems": [{"type": "string", "maxLength": 3}, {"type": "integer", "minimum": 1, "maximum": 9}], "items": false})",
      R"({"anyOf": [{"type": "integer", "minimum": 0, "maximum": 9}, {"type": "string", "enum": ["none"]}]})",
      R"({"type": ["integer", "null"], "minimum": 100, "maximum": 999})",
      R"({"$defs": {"tag": {"type": "string", "pattern": "[A-Z]{2}"}}, "type": "array", "items": {"$ref": "#/$defs/tag"}, "maxItems": 3})",
      R"({"definitions": {"p": {"type": "object", "properties": {"v": {"type": "integer", "minimum": 1, "maximum": 3}}}}, "type": "object", "properties": {"a": {"$ref": "#/definitions/p"}, "b": {"$ref": "#/definitions/p"}}})",
      R"({"type": "object", "properties": {"tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 5}}})",
      R"({"type": "object", "additionalProperties": false})",
      R"({"type": "object", "properties": {"p": {"type": "string", "maxLength": 4}}, "additionalProperties": {"type": "integer"}})",
      R"({"type": "string", "minLength": 2, "maxLength": 6})",
      R"({"type": "boolean"})",
      R"({"type": "null"})",
      R"({"type": "array", "items": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 3}, "maxItems": 2}, "maxItems": 2})",
      R"({"type": "object", "properties": {"id": {"type": "string", "format": "uuid"}, "when": {"type": "string", "format": "date"}}, "required": ["id"]})",
      R"({"type": "integer", "minimum": -1000, "maximum": -10})",
      R"({"type": "number", "minimum": 5})",
      R"({"oneOf": [{"type": "boolean"}, {"type": "null"}]})",
      R"({"allOf": [{"type": "string", "enum": ["only"]}]})",
      R"({"type": "object", "properties": {"level": {"enum": [1, 2, 3, "max"]}}, "required": ["level"]})",
      R"({"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string", "maxLength": 2}}}, "minItems": 2, "maxItems": 2})",
      R"({"type": "string", "pattern": "^(yes|no|maybe)$"})",
      R"({"type": "object", "properties": {"name": {"type": "string", "pattern": "^[A-Z][a-z]{1,5}$"}, "score": {"type": "number", "minimum": 0, "maximum": 1}}})",
      R"({"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "object", "properties": {"c": {"type": "boolean"}}}}}}})",
      R"({"type": "array", "items": {"type": "boolean"}, "minItems": 3, "maxItems": 3})",
      R"({"type": "string", "maxLength": 0})",
      R"({"type": "object", "properties": {"x": {"type": "integer", "minimum": 0, "maximum": 5}}, "required": ["x", "y"], "additionalProperties": true})",
      R"({"enum": [null, true, 0, "zero", [0], {"z": 0}]})",
      R"({"type": "string", "pattern": "^\\d{2}:\\d{2}$"})",
      R"({"type": "integer", "minimum": 0, "maximum": 0})",
      R"({"type": "object", "properties": {"list": {"type": "array", "items": {"type": "string", "format": "date"}, "maxItems": 2}}})",
      R"({"type": "array", "minItems": 0, "maxItems": 0})",
      R"({"type": "object", "title": "Person", "description": "annotations are ignored", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 2, "default": 1}}})",
      R"({"type": "string", "enum": ["a\"quote", "back\\slash", "new\nline"]})",
      R"({"type": "number", "minimum": 1, "maximum": 1})",
      R"({"type": "object", "nullable": true, "properties": {"v": {"type": "integer", "minimum": 0, "maximum": 1}}})",
      R"({"type": "array", "items": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 9}, {"type": "string", "maxLength": 2}]}, "maxItems": 3})",
  };
  return s;
}

std::vector<std::string> TwentyRegexes() {
  return {"[0-9]{3}-[0-9]{4}",
          "(cat|dog|bird)s?",
          "[A-Z][a-z]{2,8}( [A-Z][a-z]{2,8}){0,2}",
          "\\d{1,3}(\\.\\d{1,3}){3}",
          "(yes|no)",
          "[a-f0-9]{8}",
          "#[0-9a-fA-F]{6}",
          "[a-z]{1,10}@[a-z]{1,10}\\.(com|org|net)",
          "(19|20)[0-9]{2}-[01][0-9]-[0-3][0-9]",
          "\\(\\d{3}\\) \\d{3}-\\d{4}",
          "-?[0-9]{1,4}\\.[0-9]{2}",
          "[ab]{3,6}",
          "(true|false)",
          "[A-Z]{2,3}-[0-9]{1,5}",
          "(Mon|Tue|Wed|Thu|Fri|Sat|Sun)day",
          "x{2}y{0,3}z",
          "[A-Z0-9 ]{1,5}",
          "(a|b)(c|d)(e|f)(g|h)",
          "\"[a-z ]{0,12}\"",
          "[0-9]+(\\.[0-9]+)?"};
}

TEST_F(GuidedDecodingTest, FiftySchemasAndTwentyRegexesInFlightAllValidate) {
  auto e = Make();
  ASSERT_NE(e, nullptr);
  const std::vector<std::string> schemas = FiftySchemas();
  const std::vector<std::string> regexes = TwentyRegexes();
  std::vector<RequestId> schema_ids, regex_ids, plain_ids;
  std::vector<std::vector<int32_t>> plain_prompts;
  for (size_t i = 0; i < schemas.size(); ++i) {
    auto g = Guide(guided::GuideType::kJsonSchema, schemas[i]);
    ASSERT_NE(g, nullptr) << schemas[i];
    auto id = e->Enqueue(Guided(g, i));
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    schema_ids.push_back(*id);
    if (i % 5 == 0) {
      // Unguided requests share the steps.
      Request p;
      p.prompt_ids = model_->tokenizer()->Encode("Plain request " + std::to_string(i), true);
      p.max_tokens = 12;
      p.sampling.temperature = 0;
      p.exclude_input_in_output = true;
      plain_prompts.push_back(p.prompt_ids);
      auto pid = e->Enqueue(p);
      ASSERT_TRUE(pid.ok());
      plain_ids.push_back(*pid);
    }
  }
  for (size_t i = 0; i < regexes.size(); ++i) {
    auto g = Guide(guided::GuideType::kRegex, regexes[i]);
    ASSERT_NE(g, nullptr) << regexes[i];
    Request r = Guided(g, 100 + i);
    if (i % 4 == 0) r.sampling.temperature = 0;  // greedy too
    auto id = e->Enqueue(r);
    ASSERT_TRUE(id.ok());
    regex_ids.push_back(*id);
  }
  // Regexes: std::regex is the reference.
  for (size_t i = 0; i < regexes.size(); ++i) {
    const auto rs = testing::CollectResults(*e, regex_ids[i]);
    ASSERT_FALSE(rs.empty());
    ASSERT_TRUE(rs.back().error.ok());
    const std::string out = Bytes(rs.back().output_token_ids);
    EXPECT_TRUE(std::regex_match(out, std::regex(regexes[i], std::regex::ECMAScript)))
        << regexes[i] << " -> '" << out << "'";
    EXPECT_NE(rs.back().finish_reason, FinishReason::kLength)
        << regexes[i] << " -> '" << out << "'";
  }
  // Schemas: the outputs go to Python's jsonschema in one batch.
  json cases = json::array();
  for (size_t i = 0; i < schemas.size(); ++i) {
    const auto rs = testing::CollectResults(*e, schema_ids[i]);
    ASSERT_FALSE(rs.empty());
    ASSERT_TRUE(rs.back().error.ok());
    const std::string out = Bytes(rs.back().output_token_ids);
    EXPECT_EQ(rs.back().finish_reason, FinishReason::kEndId) << schemas[i] << " -> '" << out << "'";
    cases.push_back({{"schema", json::parse(schemas[i])}, {"output", out}});
  }
  for (size_t i = 0; i < plain_ids.size(); ++i) {
    const auto rs = testing::CollectResults(*e, plain_ids[i]);
    ThreadPool pool(1);
    EXPECT_EQ(rs.back().output_token_ids, testing::GreedyAlone(*model_, pool, plain_prompts[i], 12))
        << "plain request " << i;
  }
  testing::ExpectNoKvLeaks(*e);

  const std::string dir = std::filesystem::temp_directory_path() /
                          ("inflight_guided_cases_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/cases.json") << cases.dump();
  const std::string script =
      "import json, sys\n"
      "try:\n"
      "    import jsonschema\n"
      "except ImportError:\n"
      "    print('NO_JSONSCHEMA'); sys.exit(0)\n"
      "cases = json.load(open(sys.argv[1]))\n"
      "for i, c in enumerate(cases):\n"
      "    try:\n"
      "        cls = jsonschema.validators.validator_for(c['schema'])\n"
      "        cls(c['schema'], "
      "format_checker=cls.FORMAT_CHECKER).validate(json.loads(c['output']))\n"
      "        print('OK', i)\n"
      "    except Exception as e:\n"
      "        print('BAD', i, repr(c['output']), str(e).splitlines()[0])\n";
  std::ofstream(dir + "/validate.py") << script;
  FILE* p = popen(("python3 " + dir + "/validate.py " + dir + "/cases.json 2>&1").c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string report;
  char buf[4096];
  while (fgets(buf, sizeof buf, p)) report += buf;
  pclose(p);
  std::filesystem::remove_all(dir);
  if (report.find("NO_JSONSCHEMA") != std::string::npos) {
    if (testing::InCi())
      FAIL() << "CI=true but Python's jsonschema is missing (scripts/install-deps.sh installs it)";
    GTEST_SKIP() << "Python's jsonschema is missing: the outputs were not validated";
  }
  int ok = 0;
  std::istringstream lines(report);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("OK ", 0) == 0) ++ok;
    if (line.rfind("BAD ", 0) == 0) ADD_FAILURE() << line;
  }
  EXPECT_EQ(ok, static_cast<int>(schemas.size())) << report;
}

TEST_F(GuidedDecodingTest, FreeFormJsonParsesAndSiblingsAndStreamsFollowTheGuide) {
  auto e = Make();
  ASSERT_NE(e, nullptr);
  auto g = Guide(guided::GuideType::kJson, "");
  ASSERT_NE(g, nullptr);
  int complete = 0;
  for (uint64_t seed = 0; seed < 6; ++seed) {
    Request r = Guided(g, seed);
    r.max_tokens = 200;
    r.num_return_sequences = 2;
    r.streaming = seed % 2 == 1;
    auto id = e->Enqueue(r);
    ASSERT_TRUE(id.ok());
    std::map<int32_t, std::vector<int32_t>> ids;
    std::map<int32_t, FinishReason> reason;
    for (const Result& res : testing::CollectResults(*e, *id)) {
      ASSERT_TRUE(res.error.ok());
      ids[res.sequence_index].insert(ids[res.sequence_index].end(), res.output_token_ids.begin(),
                                     res.output_token_ids.end());
      if (res.is_sequence_final) reason[res.sequence_index] = res.finish_reason;
    }
    ASSERT_EQ(ids.size(), 2u);
    for (const auto& [k, v] : ids) {
      const std::string out = Bytes(v);
      if (reason[k] == FinishReason::kEndId) {
        ++complete;
        EXPECT_TRUE(json::accept(out)) << out;
        const json parsed = json::parse(out);
        EXPECT_TRUE(parsed.is_object() || parsed.is_array()) << out;
      } else {
        // Cut by max_tokens: a prefix of valid JSON (the parser fails only at the end).
        try {
          (void)json::parse(out);
          ADD_FAILURE() << "a cut output parsed whole: " << out;
        } catch (const json::parse_error& err) {
          EXPECT_EQ(err.byte, out.size() + 1) << err.what() << " in " << out;
        }
      }
    }
  }
  RecordProperty("complete", complete);
  testing::ExpectNoKvLeaks(*e);
}

// Balanced parentheses around letters: the test's own checker.
bool BalancedOk(const std::string& s) {
  int depth = 0;
  for (char c : s) {
    if (c == '(')
      ++depth;
    else if (c == ')') {
      if (--depth < 0) return false;
    } else if (c < 'a' || c > 'z') {
      return false;
    }
  }
  return depth == 0 && !s.empty() && s.front() == '(';
}

TEST_F(GuidedDecodingTest, EbnfGrammarsInFlightAllParse) {
  auto e = Make();
  ASSERT_NE(e, nullptr);
  // A bounded grammar (every output must end complete) and a recursive one.
  const std::string sums = R"G(root ::= term (" + " term){0,3}
term ::= [0-9]{1,3} | "(" [0-9]{1,3} (" * " [0-9]{1,3})? ")"
)G";
  const std::string nested = R"G(root ::= "(" inner ")"
inner ::= ( "(" inner ")" | [a-z] ){0,3}
)G";
  const std::regex sums_re(
      R"(([0-9]{1,3}|\([0-9]{1,3}( \* [0-9]{1,3})?\))( \+ ([0-9]{1,3}|\([0-9]{1,3}( \* [0-9]{1,3})?\))){0,3})");
  std::vector<RequestId> sum_ids, nested_ids;
  for (int i = 0; i < 12; ++i) {
    auto g1 = Guide(guided::GuideType::kEbnf, sums);
    auto g2 = Guide(guided::GuideType::kEbnf, nested);
    ASSERT_NE(g1, nullptr);
    ASSERT_NE(g2, nullptr);
    auto a = e->Enqueue(Guided(g1, 300 + i));
    Request r = Guided(g2, 400 + i);
    r.max_tokens = 120;
    auto b = e->Enqueue(r);
    ASSERT_TRUE(a.ok() && b.ok());
    sum_ids.push_back(*a);
    nested_ids.push_back(*b);
  }
  for (RequestId id : sum_ids) {
    const auto rs = testing::CollectResults(*e, id);
    const std::string out = Bytes(rs.back().output_token_ids);
    EXPECT_EQ(rs.back().finish_reason, FinishReason::kEndId) << out;
    EXPECT_TRUE(std::regex_match(out, sums_re)) << "'" << out << "'";
  }
  int complete = 0;
  for (RequestId id : nested_ids) {
    const auto rs = testing::CollectResults(*e, id);
    const std::string out = Bytes(rs.back().output_token_ids);
    if (rs.back().finish_reason == FinishReason::kEndId) {
      ++complete;
      EXPECT_TRUE(BalancedOk(out)) << "'" << out << "'";
    } else {
      // Cut by max_tokens: parentheses open but never closed too early.
      int depth = 0;
      for (char c : out) depth += c == '(' ? 1 : c == ')' ? -1 : 0;
      EXPECT_GT(depth, 0) << "'" << out << "'";
    }
  }
  EXPECT_GT(complete, 0);
  testing::ExpectNoKvLeaks(*e);
}

// Structural tags in flight over Llama 2's vocabulary: one Hermes-style call forced from the
// first token (tags_with_separator), and a call then free text where more calls may start
// (triggered_tags); the calls are whole and valid, free text never holds a stray trigger.
TEST_F(GuidedDecodingTest, StructuralTagsInFlightWriteOnlyWholeCalls) {
  auto e = Make();
  ASSERT_NE(e, nullptr);
  auto call = [](const std::string& name) {
    return json{{"type", "tag"},
                {"begin", "<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": "},
                {"content",
                 {{"type", "json_schema"},
                  {"json_schema",
                   {{"type", "object"},
                    {"properties", {{"city", {{"type", "string"}, {"maxLength", 12}}}}},
                    {"required", {"city"}}}}}},
                {"end", "}\n</tool_call>"}};
  };
  const json tags = {call("get_weather"), call("get_time")};
  const json forced = {{"type", "structural_tag"},
                       {"format",
                        {{"type", "tags_with_separator"},
                         {"separator", "\n"},
                         {"tags", tags},
                         {"at_least_one", true},
                         {"stop_after_first", true}}}};
  const json optional = {{"type", "structural_tag"},
                         {"format",
                          {{"type", "triggered_tags"},
                           {"triggers", {"<tool_call>"}},
                           {"tags", tags},
                           {"at_least_one", true}}}};
  const std::regex one_call(
      "<tool_call>\n\\{\"name\": \"get_(weather|time)\", \"arguments\": "
      "\\{\"city\": ?\"([^\"\\\\]|\\\\.)*\"\\}\\}\n</tool_call>");
  std::vector<std::pair<RequestId, bool>> ids;
  for (uint64_t seed = 0; seed < 8; ++seed) {
    auto g = Guide(guided::GuideType::kStructuralTag, (seed % 2 ? optional : forced).dump());
    ASSERT_NE(g, nullptr);
    Request r = Guided(g, seed);
    r.max_tokens = 200;
    auto id = e->Enqueue(r);
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    ids.emplace_back(*id, seed % 2 == 0);
  }
  int forced_complete = 0;
  for (const auto& [id, is_forced] : ids) {
    const auto rs = testing::CollectResults(*e, id);
    ASSERT_FALSE(rs.empty());
    ASSERT_TRUE(rs.back().error.ok());
    const std::string out = Bytes(rs.back().output_token_ids);
    if (is_forced) {
      EXPECT_TRUE(out.starts_with("<tool_call>\n")) << out;
      if (rs.back().finish_reason == FinishReason::kLength) continue;
      ++forced_complete;
      EXPECT_TRUE(std::regex_match(out, one_call)) << "'" << out << "'";
    } else {
      // A whole call first (maxLength keeps it within max_tokens); after it, every trigger
      // starts another call (maybe cut by max_tokens).
      const std::string head = "<tool_call>\n{\"name\": \"get_", close = "</tool_call>";
      const size_t rest = out.find(close) + close.size();
      ASSERT_GT(rest, close.size()) << out;
      EXPECT_TRUE(std::regex_match(out.substr(0, rest), one_call)) << "'" << out << "'";
      for (size_t at = out.find("<tool_call>", rest); at != std::string::npos;
           at = out.find("<tool_call>", at + 1)) {
        EXPECT_TRUE(head.starts_with(out.substr(at, head.size()))) << "'" << out << "'";
      }
    }
  }
  EXPECT_GT(forced_complete, 0);
  testing::ExpectNoKvLeaks(*e);
}

TEST_F(GuidedDecodingTest, GuidesRefuseWhatTheyCannotDo) {
  auto e = Make();
  ASSERT_NE(e, nullptr);
  auto g = Guide(guided::GuideType::kRegex, "[0-9]{2}");
  ASSERT_NE(g, nullptr);
  Request r = Guided(g, 1);
  r.draft_tokens = {5};
  auto id = e->Enqueue(r);
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.status().message().find("draft tokens cannot be verified with guided decoding"),
            std::string::npos);
  // A pattern nothing can start (an empty class) is refused at compile time.
  auto none = guided::Guide::Compile(guided::GuideType::kRegex, "[^\\s\\S]", *vocab_);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("allows no token"), std::string::npos);
  // A structural tag without its format is a bad request naming what is missing.
  auto tag = guided::Guide::Compile(guided::GuideType::kStructuralTag, "{}", *vocab_);
  ASSERT_FALSE(tag.ok());
  EXPECT_EQ(tag.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tag.status().message(), "structural_tag: format is missing");
  auto left =
      guided::Guide::Compile(guided::GuideType::kEbnf, "root ::= root \"a\" | \"a\"", *vocab_);
  ASSERT_FALSE(left.ok());
  EXPECT_NE(left.status().message().find("left-recursive"), std::string::npos);
}

}  // namespace
}  // namespace inflight
