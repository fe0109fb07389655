// The bundled demo model (models/demo, made by tools/demo-model/make-demo-model.sh) loads,
// stays within its 8 MB budget, and writes English for a simple prompt.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

#include "base/thread_pool.h"
#include "engine/generate.h"
#include "jinja/template.h"
#include "test_util.h"

namespace inflight {
namespace {

TEST(DemoModel, WritesEnglishForASimplePrompt) {
  const std::string path = testing::SourceDir() + "/models/demo/inflight-demo-q8_0.gguf";
  ASSERT_TRUE(std::filesystem::exists(path)) << path;
  EXPECT_LE(std::filesystem::file_size(path), 8u << 20);
  auto model = Model::Load(path);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const Tokenizer* tok = (*model)->tokenizer();
  ASSERT_NE(tok, nullptr);
  ThreadPool pool(2);
  GenerateParams gp;
  gp.max_new_tokens = 40;
  gp.sampling.temperature = 0;
  auto r = Generate(**model, tok->Encode("Once upon a time"), gp, pool, nullptr);
  ASSERT_TRUE(r.ok());
  const std::string text = tok->Decode(r->generated_ids);
  for (char c : text) EXPECT_TRUE(c == '\n' || (c >= 32 && c < 127)) << text;
  // Most words are everyday English words.
  static const std::set<std::string> kCommon = {
      "a",   "the",  "and",    "was",  "to",  "there", "named", "lived", "in",
      "he",  "she",  "his",    "her",  "it",  "they",  "said",  "liked", "eat",
      "day", "went", "wanted", "with", "saw", "under", "tree",  "time"};
  std::istringstream words(text);
  std::string w;
  int total = 0, common = 0;
  while (words >> w) {
    while (!w.empty() && std::ispunct(static_cast<unsigned char>(w.back()))) w.pop_back();
    for (char& c : w) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    ++total;
    common += kCommon.count(w) ? 1 : 0;
  }
  EXPECT_GE(total, 15) << text;
  EXPECT_GE(common * 3, total) << text;  // a third or more of the words are among these 26
  std::printf("demo: Once upon a time%s\n", text.c_str());
}

// The chat template stored in the file (tokenizer.chat_template) is
// models/demo/chat_template.jinja, and renders a conversation with the tokenizer's special
// tokens as its text says.
TEST(DemoModel, CarriesItsChatTemplate) {
  auto model = Model::Load(testing::SourceDir() + "/models/demo/inflight-demo-q8_0.gguf");
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const Tokenizer& tok = *(*model)->tokenizer();
  std::ifstream in(testing::SourceDir() + "/models/demo/chat_template.jinja");
  const std::string source((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(source.empty());
  EXPECT_EQ(tok.spec().chat_template, source);
  auto tmpl = jinja::Template::Parse(tok.spec().chat_template);
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().ToString();
  auto messages = jinja::ValueFromJson(R"([{"role": "system", "content": "Be kind. "},
      {"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello!"},
      {"role": "user", "content": [{"type": "text", "text": "Tell me"}, {"type": "text", "text": "a story"}]}])");
  ASSERT_TRUE(messages.ok());
  const jinja::Value context =
      jinja::Value::Dict({{"messages", *messages},
                          {"add_generation_prompt", jinja::Value(true)},
                          {"bos_token", jinja::Value(tok.TokenText(tok.bos_id()))},
                          {"eos_token", jinja::Value(tok.TokenText(tok.eos_id()))}});
  auto prompt = tmpl->Render(context);
  ASSERT_TRUE(prompt.ok()) << prompt.status().ToString();
  EXPECT_EQ(
      *prompt,
      "<s>Be kind.\n\nUser: Hi there\nAssistant: Hello!</s>\nUser: Tell me a story\nAssistant:");
  // The rendered prompt's special tokens are the model's BOS / EOS ids.
  const std::vector<int32_t> ids = tok.Encode(*prompt, /*add_special=*/false);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), tok.bos_id());
  EXPECT_EQ(std::count(ids.begin(), ids.end(), tok.eos_id()), 1);
}

}  // namespace
}  // namespace inflight
