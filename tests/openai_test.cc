// The OpenAI API of the real inflight-server on the bundled demo model: outputs against the
// KServe path of the same server, streaming against whole responses, the chat template against
// a hand-rendered prompt, stop strings, n/seed, logprobs, logit_bias, echo, usage, OpenAI
// error objects for bad input, cancellation on disconnect; and the official OpenAI Node SDK
// (npm `openai`) against the same server. Then a model with sliding-window layers (Gemma 3)
// in its own server: its window group of KV blocks in the metrics and on the dashboard.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>

#include "format/gguf.h"
#include "frontends/openai_json.h"
#include "server_harness.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace inflight {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::ServerProcess;
using testing::SseEvents;

std::string DemoModel() { return testing::SourceDir() + "/models/demo/inflight-demo-q8_0.gguf"; }

class OpenAiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    repo_ = new fs::path(fs::temp_directory_path() /
                         ("inflight_openai_repo_" + std::to_string(getpid())));
    fs::remove_all(*repo_);
    const std::string cmd = std::string(INFLIGHT_BINARY_DIR) +
                            "/apps/inflight-server init-repo --model " + DemoModel() + " --out " +
                            repo_->string() + " > /dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
    server_ = ServerProcess::Start({"--model-repository", repo_->string()}).release();
    auto gguf = GgufFile::Open(DemoModel());
    ASSERT_TRUE(gguf.ok());
    auto tok = Tokenizer::FromGguf(**gguf);
    ASSERT_TRUE(tok.ok());
    tok_ = tok->release();
  }

  static void TearDownTestSuite() {
    if (server_ && ::testing::UnitTest::GetInstance()->failed_test_count() > 0) {
      std::fprintf(stderr, "--- inflight-server log ---\n%s\n", server_->log().c_str());
    }
    delete server_;
    server_ = nullptr;
    delete tok_;
    fs::remove_all(*repo_);
    delete repo_;
  }

  void SetUp() override {
    if (!server_) GTEST_SKIP() << "the server did not start";
  }

  static httplib::Result Post(const std::string& path, const json& body) {
    httplib::Client c("127.0.0.1", server_->http_port);
    c.set_read_timeout(120);
    return c.Post(path, body.dump(), "application/json");
  }

  // POST and parse; fails the test unless the status is `status`.
  static json PostJson(const std::string& path, const json& body, int status = 200) {
    auto r = Post(path, body);
    EXPECT_TRUE(r) << path;
    if (!r) return json();
    EXPECT_EQ(r->status, status) << path << " " << body.dump() << " -> " << r->body;
    return json::parse(r->body, nullptr, false);
  }

  // The stream's data events (the final "[DONE]" checked and dropped).
  static std::vector<json> Stream(const std::string& path, json body) {
    body["stream"] = true;
    auto r = Post(path, body);
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
    if (!r) return {};
    EXPECT_NE(r->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
    const std::string done = "data: [DONE]\n\n";
    EXPECT_TRUE(r->body.size() >= done.size() &&
                r->body.compare(r->body.size() - done.size(), done.size(), done) == 0)
        << r->body;
    return SseEvents(r->body.substr(0, r->body.size() - done.size()));
  }

  // KServe generate on the ensemble: the generated text alone (greedy).
  static std::string KServeText(const std::string& prompt, int max_tokens) {
    json j = PostJson(
        "/v2/models/ensemble/generate",
        {{"text_input", prompt}, {"max_tokens", max_tokens}, {"exclude_input_in_output", true}});
    return j.value("text_output", "<missing>");
  }

  static inline ServerProcess* server_ = nullptr;
  static inline fs::path* repo_ = nullptr;
  static inline Tokenizer* tok_ = nullptr;
};

// The sum of every sample of `metric` for the tensorrt_llm model (failures carry a reason
// label); 0 when there is none yet.
double LlmCounter(int metrics_port, const std::string& metric) {
  std::istringstream in(testing::MetricsText(metrics_port));
  std::string line;
  double sum = 0;
  while (std::getline(in, line)) {
    if (line.rfind(metric + "{", 0) == 0 &&
        line.find("model=\"tensorrt_llm\"") != std::string::npos) {
      sum += std::stod(line.substr(line.rfind(' ') + 1));
    }
  }
  return sum;
}

const char* kPrompts[] = {"Once upon a time", "The little dog ran to the",
                          "Lily and Ben went to the park. They saw"};

TEST_F(OpenAiTest, ModelsListsTheModelsThatServeText) {
  httplib::Client c("127.0.0.1", server_->http_port);
  auto r = c.Get("/v1/models");
  ASSERT_TRUE(r && r->status == 200);
  json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "list");
  std::set<std::string> ids;
  for (const json& m : j["data"]) {
    ids.insert(m["id"].get<std::string>());
    EXPECT_EQ(m["object"], "model");
  }
  EXPECT_EQ(ids, (std::set<std::string>{"ensemble", "tensorrt_llm", "tensorrt_llm_bls"}));
  r = c.Get("/v1/models/ensemble");
  ASSERT_TRUE(r && r->status == 200);
  EXPECT_EQ(json::parse(r->body)["id"], "ensemble");
  r = c.Get("/v1/models/nope");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(json::parse(r->body)["error"]["type"], "not_found_error");
}

// vLLM's /tokenize and /detokenize, and the context length in /v1/models: the ids are the
// model's tokenizer's (its own encoder, BOS first as the completions path adds it), the text
// comes back whole, max_model_len is the model's; bad input gets OpenAI's error naming the
// field.
TEST_F(OpenAiTest, TokenizeDetokenizeAndTheContextLength) {
  auto gguf = GgufFile::Open(DemoModel());
  ASSERT_TRUE(gguf.ok());
  auto context_key = (*gguf)->GetInt("llama.context_length");
  ASSERT_TRUE(context_key.ok() && context_key->has_value());
  const int64_t context = **context_key;
  httplib::Client c("127.0.0.1", server_->http_port);
  const json models = json::parse(c.Get("/v1/models")->body);
  for (const json& m : models["data"]) EXPECT_EQ(m["max_model_len"], context) << m;
  for (const char* prompt : kPrompts) {
    const json t = PostJson("/tokenize", {{"model", "ensemble"}, {"prompt", prompt}});
    const std::vector<int32_t> ids = t["tokens"].get<std::vector<int32_t>>();
    std::vector<int32_t> want = tok_->Encode(prompt);
    if (tok_->bos_id() >= 0 && (want.empty() || want[0] != tok_->bos_id()))
      want.insert(want.begin(), tok_->bos_id());
    EXPECT_EQ(ids, want) << prompt;
    EXPECT_EQ(t["count"], ids.size());
    EXPECT_EQ(t["max_model_len"], context);
    // As vLLM (the tokenizer's decode, special tokens kept): the BOS shows; the text after it
    // comes back whole.
    const json d = PostJson("/detokenize", {{"model", "ensemble"}, {"tokens", ids}});
    EXPECT_EQ(d["prompt"], "<s> " + std::string(prompt));
    const std::vector<int32_t> text_ids(ids.begin() + 1, ids.end());
    EXPECT_EQ(PostJson("/detokenize", {{"model", "ensemble"}, {"tokens", text_ids}})["prompt"],
              prompt);
  }
  // A chat conversation is rendered with the template first: more tokens than its text.
  const json chat = PostJson(
      "/tokenize",
      {{"model", "ensemble"}, {"messages", {{{"role", "user"}, {"content", "Once upon a time"}}}}});
  EXPECT_GT(chat["count"].get<int64_t>(),
            PostJson("/tokenize", {{"model", "ensemble"}, {"prompt", "Once upon a time"}})["count"]
                .get<int64_t>());
  const json bad_ids = PostJson("/detokenize", {{"model", "ensemble"}, {"tokens", {1, -5}}}, 400);
  EXPECT_EQ(bad_ids["error"]["param"], "tokens");
  const json bad_model = PostJson("/tokenize", {{"model", 7}, {"prompt", "x"}}, 400);
  EXPECT_EQ(bad_model["error"]["param"], "model");
  const json unknown = PostJson("/detokenize", {{"model", "nope"}, {"tokens", {1}}}, 404);
  EXPECT_EQ(unknown["error"]["param"], "model");
}

TEST_F(OpenAiTest, GreedyCompletionEqualsTheKServePathForEveryModelKind) {
  for (const char* prompt : kPrompts) {
    const std::string expected = KServeText(prompt, 24);
    ASSERT_FALSE(expected.empty());
    for (const char* model : {"ensemble", "tensorrt_llm", "tensorrt_llm_bls"}) {
      json j =
          PostJson("/v1/completions",
                   {{"model", model}, {"prompt", prompt}, {"max_tokens", 24}, {"temperature", 0}});
      ASSERT_EQ(j["choices"].size(), 1u);
      EXPECT_EQ(j["object"], "text_completion");
      EXPECT_EQ(j["model"], model);
      EXPECT_EQ(j["choices"][0]["text"], expected) << model << ": " << prompt;
      // The demo model ends some stories before 24 tokens (EOS): "stop" then, else "length".
      const int completion = j["usage"]["completion_tokens"];
      EXPECT_GT(completion, 0);
      EXPECT_LE(completion, 24);
      EXPECT_EQ(j["choices"][0]["finish_reason"], completion == 24 ? "length" : "stop");
      const int prompt_tokens = static_cast<int>(tok_->Encode(prompt, true).size());
      EXPECT_EQ(j["usage"]["prompt_tokens"], prompt_tokens);
      EXPECT_EQ(j["usage"]["total_tokens"], prompt_tokens + completion);
    }
  }
}

TEST_F(OpenAiTest, StreamingEqualsTheWholeResponse) {
  for (bool chat : {false, true}) {
    const std::string path = chat ? "/v1/chat/completions" : "/v1/completions";
    json body = {{"model", "ensemble"}, {"max_tokens", 40}, {"temperature", 0}};
    if (chat)
      body["messages"] = {{{"role", "user"}, {"content", "Tell me about a cat."}}};
    else
      body["prompt"] = kPrompts[0];
    json whole = PostJson(path, body);
    body["stream_options"] = {{"include_usage", true}};
    std::vector<json> events = Stream(path, body);
    ASSERT_GE(events.size(), 3u);
    std::string text;
    std::string finish;
    for (size_t i = 0; i + 1 < events.size(); ++i) {
      const json& e = events[i];
      EXPECT_EQ(e["object"], chat ? "chat.completion.chunk" : "text_completion");
      EXPECT_EQ(e["id"], events[0]["id"]);
      ASSERT_EQ(e["choices"].size(), 1u);
      const json& c = e["choices"][0];
      EXPECT_TRUE(finish.empty()) << "a chunk after the finish";
      if (chat && i == 0) EXPECT_EQ(c["delta"]["role"], "assistant");
      if (chat)
        text += c["delta"].value("content", "");
      else
        text += c["text"].get<std::string>();
      if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
    }
    const json& usage = events.back();
    EXPECT_TRUE(usage["choices"].empty());
    EXPECT_EQ(usage["usage"], whole["usage"]);
    const json& w = whole["choices"][0];
    EXPECT_EQ(text, chat ? w["message"]["content"] : w["text"]);
    EXPECT_EQ(finish, w["finish_reason"]);
  }
}

TEST_F(OpenAiTest, ChatRendersTheModelsTemplate) {
  // The demo model's template: BOS, the system text, "\n\nUser: ...\nAssistant:"
  // (models/demo/chat_template.jinja).
  json chat = PostJson(
      "/v1/chat/completions",
      {{"model", "ensemble"},
       {"messages",
        {{{"role", "system"}, {"content", "You tell stories."}},
         {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "A story about a fox"}}}}}}},
       {"max_completion_tokens", 20},
       {"temperature", 0}});
  const std::string rendered = "You tell stories.\n\nUser: A story about a fox\nAssistant:";
  json plain = PostJson(
      "/v1/completions",
      {{"model", "ensemble"}, {"prompt", rendered}, {"max_tokens", 20}, {"temperature", 0}});
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(chat["choices"][0]["message"]["content"], plain["choices"][0]["text"]);
  EXPECT_EQ(chat["usage"]["prompt_tokens"], plain["usage"]["prompt_tokens"]);
  // add_generation_prompt false: the template leaves "Assistant:" out, so the prompt is shorter.
  json no_prompt =
      PostJson("/v1/chat/completions", {{"model", "ensemble"},
                                        {"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                                        {"add_generation_prompt", false},
                                        {"max_tokens", 2}});
  json with_prompt =
      PostJson("/v1/chat/completions", {{"model", "ensemble"},
                                        {"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                                        {"max_tokens", 2}});
  EXPECT_LT(no_prompt["usage"]["prompt_tokens"].get<int>(),
            with_prompt["usage"]["prompt_tokens"].get<int>());
}

TEST_F(OpenAiTest, SeededChoicesAreReproducibleAndIndependent) {
  json body = {{"model", "ensemble"}, {"prompt", kPrompts[1]},
               {"max_tokens", 32},    {"temperature", 2.0},
               {"seed", 7},           {"n", 3}};
  json a = PostJson("/v1/completions", body);
  json b = PostJson("/v1/completions", body);
  ASSERT_EQ(a["choices"].size(), 3u);
  std::set<std::string> texts;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(a["choices"][i]["index"], i);
    EXPECT_EQ(a["choices"][i]["text"], b["choices"][i]["text"]);
    texts.insert(a["choices"][i]["text"].get<std::string>());
  }
  EXPECT_GT(texts.size(), 1u) << "three samples at temperature 2 were identical";
  body["n"] = 1;
  json one = PostJson("/v1/completions", body);
  EXPECT_EQ(one["choices"][0]["text"], a["choices"][0]["text"]);
  EXPECT_GT(a["usage"]["completion_tokens"].get<int>(), 3);
  EXPECT_LE(a["usage"]["completion_tokens"].get<int>(), 96);
  // Several prompts: choice index = prompt * n + j.
  json multi = PostJson("/v1/completions", {{"model", "ensemble"},
                                            {"prompt", {kPrompts[0], kPrompts[2]}},
                                            {"max_tokens", 8},
                                            {"temperature", 0},
                                            {"n", 2}});
  ASSERT_EQ(multi["choices"].size(), 4u);
  EXPECT_EQ(multi["choices"][0]["text"], KServeText(kPrompts[0], 8));
  EXPECT_EQ(multi["choices"][3]["text"], KServeText(kPrompts[2], 8));
  EXPECT_EQ(multi["choices"][3]["index"], 3);
}

TEST_F(OpenAiTest, StopStringsEndTheTextBeforeTheMatch) {
  const std::string full = KServeText(kPrompts[0], 40);
  // A stop string from the middle of the greedy text, spanning several tokens.
  const size_t at = full.find(' ', full.size() / 3);
  ASSERT_NE(at, std::string::npos);
  const std::string stop = full.substr(at, 6);
  const std::string expected = full.substr(0, full.find(stop));
  const double failed0 = LlmCounter(server_->metrics_port, "nv_inference_request_failure");
  json body = {{"model", "ensemble"},
               {"prompt", kPrompts[0]},
               {"max_tokens", 40},
               {"temperature", 0},
               {"stop", {"@@never@@", stop}}};
  json j = PostJson("/v1/completions", body);
  EXPECT_EQ(j["choices"][0]["text"], expected) << "stop '" << stop << "' in '" << full << "'";
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_LT(j["usage"]["completion_tokens"].get<int>(), 40);
  // The choice was stopped as complete (a `stop` request), not failed.
  EXPECT_TRUE(testing::WaitLlmIdle(server_->metrics_port, "tensorrt_llm"));
  EXPECT_EQ(LlmCounter(server_->metrics_port, "nv_inference_request_failure"), failed0);
  std::string streamed;
  for (const json& e : Stream("/v1/completions", body)) {
    for (const json& c : e["choices"]) streamed += c["text"].get<std::string>();
  }
  EXPECT_EQ(streamed, expected);
  // A single string works too.
  body["stop"] = stop;
  EXPECT_EQ(PostJson("/v1/completions", body)["choices"][0]["text"], expected);
}

TEST_F(OpenAiTest, LogprobsDescribeTheChosenTokens) {
  json chat = PostJson("/v1/chat/completions",
                       {{"model", "ensemble"},
                        {"messages", {{{"role", "user"}, {"content", "Tell me a story"}}}},
                        {"max_tokens", 12},
                        {"temperature", 0},
                        {"logprobs", true},
                        {"top_logprobs", 3}});
  const json& content = chat["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), chat["usage"]["completion_tokens"].get<size_t>());
  ASSERT_GT(content.size(), 0u);
  std::string joined;
  for (const json& e : content) {
    joined += e["token"].get<std::string>();
    ASSERT_EQ(e["top_logprobs"].size(), 3u);
    // Greedy: the chosen token is the most likely one.
    EXPECT_EQ(e["top_logprobs"][0]["token"], e["token"]);
    EXPECT_FLOAT_EQ(e["top_logprobs"][0]["logprob"].get<float>(), e["logprob"].get<float>());
    double mass = 0;
    for (size_t k = 0; k < 3; ++k) {
      mass += std::exp(e["top_logprobs"][k]["logprob"].get<double>());
      if (k > 0)
        EXPECT_LE(e["top_logprobs"][k]["logprob"].get<double>(),
                  e["top_logprobs"][k - 1]["logprob"].get<double>());
    }
    EXPECT_LE(mass, 1.0 + 1e-5);
    EXPECT_EQ(e["bytes"].size(), e["token"].get<std::string>().size());
  }
  EXPECT_EQ(joined, chat["choices"][0]["message"]["content"]);
  json comp = PostJson("/v1/completions", {{"model", "ensemble"},
                                           {"prompt", kPrompts[2]},
                                           {"max_tokens", 10},
                                           {"temperature", 0},
                                           {"logprobs", 2}});
  const json& lp = comp["choices"][0]["logprobs"];
  const size_t num = comp["usage"]["completion_tokens"];
  ASSERT_GT(num, 0u);
  ASSERT_EQ(lp["tokens"].size(), num);
  ASSERT_EQ(lp["top_logprobs"].size(), num);
  std::string text;
  for (size_t i = 0; i < num; ++i) {
    EXPECT_EQ(lp["text_offset"][i], text.size());
    text += lp["tokens"][i].get<std::string>();
    EXPECT_EQ(lp["top_logprobs"][i].size(), 2u);
    EXPECT_LE(lp["token_logprobs"][i].get<double>(), 0.0);
  }
  EXPECT_EQ(text, comp["choices"][0]["text"]);
  // Without logprobs the field is null.
  EXPECT_TRUE(PostJson("/v1/completions", {{"model", "ensemble"},
                                           {"prompt", "Hi"},
                                           {"max_tokens", 2}})["choices"][0]["logprobs"]
                  .is_null());
}

TEST_F(OpenAiTest, LogitBiasSteersSampling) {
  // +100 on one token makes it every greedy pick; -100 on the greedy pick removes it.
  const int32_t forced = tok_->Find("▁dragon") >= 0 ? tok_->Find("▁dragon") : 300;
  json j = PostJson("/v1/completions", {{"model", "ensemble"},
                                        {"prompt", kPrompts[0]},
                                        {"max_tokens", 3},
                                        {"temperature", 0},
                                        {"logprobs", 0},
                                        {"logit_bias", {{std::to_string(forced), 100}}}});
  for (const json& t : j["choices"][0]["logprobs"]["tokens"])
    EXPECT_EQ(t, tok_->TokenBytes(forced));
  json greedy = PostJson("/v1/completions", {{"model", "ensemble"},
                                             {"prompt", kPrompts[0]},
                                             {"max_tokens", 1},
                                             {"temperature", 0},
                                             {"logprobs", 1}});
  const std::string first = greedy["choices"][0]["logprobs"]["tokens"][0];
  json ban =
      json::object();  // every token that reads as the greedy pick (a piece and its byte token)
  for (int32_t id = 0; id < tok_->vocab_size(); ++id) {
    if (tok_->TokenBytes(id) == first) ban[std::to_string(id)] = -100;
  }
  ASSERT_FALSE(ban.empty());
  json banned = PostJson("/v1/completions", {{"model", "ensemble"},
                                             {"prompt", kPrompts[0]},
                                             {"max_tokens", 1},
                                             {"temperature", 0},
                                             {"logprobs", 1},
                                             {"logit_bias", ban}});
  EXPECT_NE(banned["choices"][0]["logprobs"]["tokens"][0], first);
}

TEST_F(OpenAiTest, EchoPutsThePromptFirst) {
  json j = PostJson("/v1/completions", {{"model", "ensemble"},
                                        {"prompt", kPrompts[1]},
                                        {"max_tokens", 6},
                                        {"temperature", 0},
                                        {"echo", true}});
  EXPECT_EQ(j["choices"][0]["text"], std::string(kPrompts[1]) + KServeText(kPrompts[1], 6));
  // A token-id prompt is echoed as its text.
  std::vector<int32_t> ids = tok_->Encode(kPrompts[1], true);
  json by_ids = PostJson("/v1/completions", {{"model", "tensorrt_llm"},
                                             {"prompt", ids},
                                             {"max_tokens", 6},
                                             {"temperature", 0},
                                             {"echo", true}});
  EXPECT_EQ(by_ids["choices"][0]["text"], j["choices"][0]["text"]);
}

TEST_F(OpenAiTest, BadRequestsGetOpenAiErrors) {
  struct Case {
    std::string path;
    std::string body;
    int status;
    std::string param;
  };
  const std::string big_prompt(8000, 'a');
  const std::vector<Case> cases = {
      {"/v1/completions", "{not json", 400, ""},
      {"/v1/completions", "[1, 2]", 400, ""},
      {"/v1/completions", R"({"model": "nope", "prompt": "Hi"})", 404, "model"},
      {"/v1/completions", R"({"prompt": "Hi"})", 400, "model"},
      {"/v1/completions", R"({"model": "ensemble"})", 400, "prompt"},
      {"/v1/completions", R"({"model": "ensemble", "prompt": "Hi", "n": 0})", 400, "n"},
      {"/v1/completions", R"({"model": "ensemble", "prompt": "Hi", "n": 1000000})", 400, "n"},
      {"/v1/completions", R"({"model": "ensemble", "prompt": "Hi", "max_tokens": -5})", 400,
       "max_tokens"},
      {"/v1/completions", R"({"model": "ensemble", "prompt": "Hi", "max_tokens": 100000})", 400,
       "max_tokens"},
      {"/v1/completions", R"({"model": "ensemble", "prompt": "Hi", "temperature": 3})", 400,
       "temperature"},
      {"/v1/completions", R"({"model": "ensemble", "prompt": "Hi", "top_p": 0})", 400, "top_p"},
      {"/v1/completions", R"({"model": "ensemble", "prompt": "Hi", "stop": 5})", 400, "stop"},
      {"/v1/completions", R"({"model": "ensemble", "prompt": "Hi", "logit_bias": {"abc": 1}})", 400,
       "logit_bias"},
      {"/v1/completions", R"({"model": "ensemble", "prompt": "Hi", "logit_bias": {"99999999": 1}})",
       400, "logit_bias"},
      {"/v1/completions", R"({"model": "ensemble", "prompt": "Hi", "logit_bias": {"5": 1000}})",
       400, "logit_bias"},
      {"/v1/completions", R"({"model": "ensemble", "prompt": [5, -1]})", 400, "prompt"},
      {"/v1/completions",
       R"({"model": "ensemble", "prompt": "Hi", "stream_options": {"include_usage": true}})", 400,
       "stream_options"},
      {"/v1/completions", R"({"model": "preprocessing", "prompt": "Hi"})", 400, "model"},
      {"/v1/completions", R"({"model": "ensemble", "prompt": ")" + big_prompt + R"("})", 400,
       "prompt"},
      {"/v1/chat/completions", R"({"model": "ensemble", "messages": []})", 400, "messages"},
      {"/v1/chat/completions",
       R"({"model": "ensemble", "messages": [{"role": "wizard", "content": "x"}]})", 400,
       "messages"},
      {"/v1/chat/completions", R"({"model": "ensemble", "messages": [{"role": "user"}]})", 400,
       "messages"},
      {"/v1/chat/completions",
       R"({"model": "ensemble", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
       400, "messages"},
      // The demo template raises for the tool role.
      {"/v1/chat/completions",
       R"({"model": "ensemble", "messages": [{"role": "tool", "content": "x"}]})", 400, "messages"},
      {"/v1/chat/completions",
       R"({"model": "ensemble", "messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})",
       400, "top_logprobs"},
  };
  for (const Case& c : cases) {
    httplib::Client client("127.0.0.1", server_->http_port);
    auto r = client.Post(c.path, c.body, "application/json");
    ASSERT_TRUE(r) << c.body.substr(0, 200);
    EXPECT_EQ(r->status, c.status) << c.body.substr(0, 200) << " -> " << r->body;
    json j = json::parse(r->body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << r->body;
    EXPECT_TRUE(j["error"]["message"].is_string() &&
                !j["error"]["message"].get<std::string>().empty());
    EXPECT_TRUE(j["error"]["type"].is_string());
    if (c.param.empty())
      EXPECT_TRUE(j["error"]["param"].is_null());
    else
      EXPECT_EQ(j["error"]["param"], c.param) << c.body.substr(0, 200);
  }
  // The template's own message reaches the client.
  auto r = Post(
      "/v1/chat/completions",
      json::parse(R"({"model": "ensemble", "messages": [{"role": "developer", "content": "x"}]})"));
  ASSERT_TRUE(r);
  EXPECT_NE(r->body.find("not developer"), std::string::npos) << r->body;
  httplib::Client client("127.0.0.1", server_->http_port);
  auto get = client.Get("/v1/completions");
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 405);
  EXPECT_TRUE(testing::WaitLlmIdle(server_->metrics_port, "tensorrt_llm"));
}

TEST_F(OpenAiTest, ADisconnectedStreamFreesItsKvBlocks) {
  // A long stream read for a few events, then the connection closed: the request is cancelled
  // and its blocks return to the pool.
  auto count = [](const char* metric) { return LlmCounter(server_->metrics_port, metric); };
  for (bool chat : {false, true}) {
    const double ok0 = count("nv_inference_request_success"),
                 failed0 = count("nv_inference_request_failure");
    // EOS banned: both choices would run to 400 tokens.
    json body = {{"model", "ensemble"},
                 {"max_tokens", 400},
                 {"temperature", 0},
                 {"stream", true},
                 {"n", 2},
                 {"logit_bias", {{std::to_string(tok_->eos_id()), -100}}}};
    if (chat)
      body["messages"] = {{{"role", "user"}, {"content", "A long story"}}};
    else
      body["prompt"] = kPrompts[0];
    httplib::Client c("127.0.0.1", server_->http_port);
    int events = 0;
    httplib::Request req;
    req.method = "POST";
    req.path = chat ? "/v1/chat/completions" : "/v1/completions";
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      events += static_cast<int>(std::count(data, data + n, '\n'));
      return events < 6;  // false: the client gives up (closes the connection)
    };
    auto r = c.send(req);
    EXPECT_GE(events, 6);
    EXPECT_TRUE(testing::WaitLlmIdle(server_->metrics_port, "tensorrt_llm"))
        << "KV blocks still held after the disconnect";
    // Both choices were cancelled, not run to the end (the counters follow the final responses).
    for (int i = 0; i < 100 && count("nv_inference_request_failure") < failed0 + 2; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_EQ(count("nv_inference_request_failure"), failed0 + 2);
    EXPECT_EQ(count("nv_inference_request_success"), ok0);
  }
}

TEST_F(OpenAiTest, RequestsShowInTheServersMetrics) {
  // Counted for the LLM model (each choice) and for the model the client named (each request).
  auto count = [](const char* model, const char* metric) {
    return testing::MetricValue(testing::MetricsText(server_->metrics_port), metric,
                                {{"model", model}});
  };
  const double llm0 = LlmCounter(server_->metrics_port, "nv_inference_request_success");
  const double ensemble0 = std::max(0.0, count("ensemble", "nv_inference_request_success"));
  const double bls0 = std::max(0.0, count("tensorrt_llm_bls", "nv_inference_request_success"));
  for (int i = 0; i < 3; ++i)
    PostJson("/v1/completions",
             {{"model", "ensemble"}, {"prompt", "Hi"}, {"max_tokens", 2}, {"n", 2}});
  PostJson("/v1/chat/completions", {{"model", "tensorrt_llm_bls"},
                                    {"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                                    {"max_tokens", 2}});
  PostJson("/v1/completions", {{"model", "ensemble"}, {"prompt", "Hi"}, {"n", 0}},
           400);  // refused before it ran
  double llm1 = 0;
  for (int i = 0; i < 50 && llm1 < llm0 + 7; ++i) {
    llm1 = LlmCounter(server_->metrics_port, "nv_inference_request_success");
    if (llm1 < llm0 + 7) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(llm1, llm0 + 7);
  EXPECT_EQ(count("ensemble", "nv_inference_request_success"), ensemble0 + 3);
  EXPECT_EQ(count("tensorrt_llm_bls", "nv_inference_request_success"), bls0 + 1);
  // And in the ensemble's statistics extension.
  httplib::Client c("127.0.0.1", server_->http_port);
  auto stats = c.Get("/v2/models/ensemble/stats");
  ASSERT_TRUE(stats && stats->status == 200);
  EXPECT_GE(
      json::parse(stats->body)["model_stats"][0]["inference_stats"]["success"]["count"].get<int>(),
      3);
}

TEST_F(OpenAiTest, TheOfficialNodeSdkWorksAgainstTheServer) {
  const std::string sdk = testing::SourceDir() + "/tools/oracle/node_modules/openai/package.json";
  if (!fs::exists(sdk)) {
    if (std::getenv("CI") && std::string(std::getenv("CI")) == "true")
      FAIL() << "the OpenAI SDK is not installed: " << sdk;
    GTEST_SKIP() << "npm package openai not installed (bash scripts/install-deps.sh installs it)";
  }
  auto failures = [] { return LlmCounter(server_->metrics_port, "nv_inference_request_failure"); };
  const double failed0 = failures();
  auto [status, out] = testing::RunNode(
      "openai_sdk_test.mjs http://127.0.0.1:" + std::to_string(server_->http_port) + " " +
      std::to_string(tok_->eos_id()));
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("openai sdk: all checks passed"), std::string::npos) << out;
  // The aborted stream in the script was cancelled (the one failure) and freed its blocks.
  EXPECT_TRUE(testing::WaitLlmIdle(server_->metrics_port, "tensorrt_llm"));
  for (int i = 0; i < 100 && failures() < failed0 + 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(failures(), failed0 + 1);
}

// The web page in headless Chromium: the playground streams an answer, the dashboard moves
// under a load from inflight-bench, no console errors (tests/web_test.mjs; screenshots in
// the build folder's web-screenshots/).
TEST_F(OpenAiTest, ThePageStreamsAndTheDashboardMovesUnderLoad) {
  const std::string driver =
      testing::SourceDir() + "/tools/oracle/node_modules/playwright-core/package.json";
  if (!fs::exists(driver) || !fs::exists("/usr/bin/chromium")) {
    if (std::getenv("CI") && std::string(std::getenv("CI")) == "true")
      FAIL() << "chromium or playwright-core is not installed";
    GTEST_SKIP() << "chromium or npm playwright-core not installed (bash scripts/install-deps.sh "
                    "installs both)";
  }
  const std::string shots = std::string(INFLIGHT_BINARY_DIR) + "/web-screenshots";
  auto [status, out] =
      testing::RunNode("web_test.mjs http://127.0.0.1:" + std::to_string(server_->http_port) + " " +
                       INFLIGHT_BINARY_DIR + "/apps/inflight-bench " + DemoModel() + " " + shots);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("web: all checks passed"), std::string::npos) << out;
  EXPECT_TRUE(fs::exists(shots + "/playground.png") && fs::exists(shots + "/dashboard.png"));
  std::printf("%s", out.c_str());
}

TEST_F(OpenAiTest, TheLiveStreamAndThePageAreServed) {
  httplib::Client c("127.0.0.1", server_->http_port);
  auto page = c.Get("/");
  ASSERT_TRUE(page && page->status == 200);
  EXPECT_NE(page->get_header_value("Content-Type").find("text/html"), std::string::npos);
  EXPECT_NE(page->body.find("/inflight/live"), std::string::npos);
  auto snap = c.Get("/inflight/snapshot");
  ASSERT_TRUE(snap && snap->status == 200);
  json j = json::parse(snap->body);
  ASSERT_EQ(j["models"].size(), 1u);
  EXPECT_EQ(j["models"][0]["model"], "tensorrt_llm");
  EXPECT_EQ(j["models"][0]["kv_blocks"]["total"].get<int>(),
            j["models"][0]["kv_blocks"]["used"].get<int>() +
                j["models"][0]["kv_blocks"]["free"].get<int>() +
                j["models"][0]["kv_blocks"]["cached"].get<int>());
  // The demo model has no sliding-window layers: no window group, in the model or its steps.
  EXPECT_FALSE(j["models"][0].contains("window_kv_blocks")) << j["models"][0];
  for (const json& step : j["models"][0]["steps"]) EXPECT_FALSE(step.contains("window_kv_used"));
  // The live stream sends a snapshot at once and then about twice a second.
  httplib::Client live("127.0.0.1", server_->http_port);
  int events = 0;
  const auto start = std::chrono::steady_clock::now();
  live.Get("/inflight/live", [&](const char* data, size_t n) {
    events += static_cast<int>(std::count(data, data + n, '\n')) / 2;
    return events < 4;
  });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(events, 4);
  EXPECT_GE(seconds, 1.0);  // 1 at once + 3 more at 0.5 s each
  EXPECT_LT(seconds, 10.0);
  auto post = c.Post("/inflight/live", "", "text/plain");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 405);
}

// A model with sliding-window layers: Gemma 3 (../shared/golden/arch, random weights; 7 of its
// 8 layers see the last 64 tokens) keeps their K/V in a window group, a pool of blocks of its
// own. The metrics and the dashboard show that group beside the full group, never summed.
class WindowKvGroupTest : public ::testing::Test {
 protected:
  static std::string Model() { return testing::SharedDir() + "/golden/arch/gemma3-f16.gguf"; }

  static void SetUpTestSuite() {
    if (!fs::exists(Model())) return;  // SetUp skips (fails under CI)
    repo_ = new fs::path(fs::temp_directory_path() /
                         ("inflight_window_repo_" + std::to_string(getpid())));
    fs::remove_all(*repo_);
    const std::string cmd = std::string(INFLIGHT_BINARY_DIR) +
                            "/apps/inflight-server init-repo --model " + Model() + " --out " +
                            repo_->string() + " > /dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
    server_ = ServerProcess::Start({"--model-repository", repo_->string()}).release();
  }

  static void TearDownTestSuite() {
    if (server_ && ::testing::UnitTest::GetInstance()->failed_test_count() > 0)
      std::fprintf(stderr, "--- inflight-server log ---\n%s\n", server_->log().c_str());
    delete server_;
    server_ = nullptr;
    if (repo_) fs::remove_all(*repo_);
    delete repo_;
    repo_ = nullptr;
  }

  void SetUp() override {
    REQUIRE_SHARED_FILE(Model());
    if (!server_) GTEST_SKIP() << "the server did not start";
  }

  // 4 choices of a prompt longer than the window (133 tokens), 150 tokens each: for ~150 steps
  // every choice holds window blocks (under a second here).
  static void RunLoad() {
    std::string prompt;
    for (int i = 0; i < 12; ++i) prompt += "the cat sat on the mat and looked at the dog ";
    httplib::Client c("127.0.0.1", server_->http_port);
    c.set_read_timeout(120);
    auto r = c.Post("/v1/completions",
                    json{{"model", "ensemble"},
                         {"prompt", prompt},
                         {"max_tokens", 150},
                         {"ignore_eos", true},
                         {"n", 4}}
                        .dump(),
                    "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
  }

  static inline ServerProcess* server_ = nullptr;
  static inline fs::path* repo_ = nullptr;
};

TEST_F(WindowKvGroupTest, MetricsShowTheWindowGroupBesideTheFullGroup) {
  auto kv = [](const std::string& text, const char* type) {
    return testing::MetricValue(text, "nv_trt_llm_kv_cache_block_metrics",
                                {{"model", "tensorrt_llm"}, {"kv_cache_block_type", type}});
  };
  // One scrape: each group's figures whole (used + free = max), the window group's present.
  // Its window_used.
  auto check = [&](const std::string& m) {
    const double max = kv(m, "max"), used = kv(m, "used"), free = kv(m, "free");
    EXPECT_GT(max, 0);
    EXPECT_EQ(used + free, max);
    const double wmax = kv(m, "window_max"), wused = kv(m, "window_used"),
                 wfree = kv(m, "window_free");
    EXPECT_GT(wmax, 0) << m;
    EXPECT_GE(wused, 0);
    EXPECT_LE(wused, wmax);
    EXPECT_EQ(wused + wfree, wmax);
    EXPECT_NEAR(kv(m, "window_fraction"), wmax > 0 ? wused / wmax : -1, 1e-9);
    EXPECT_EQ(kv(m, "window_tokens"), 64);
    return wused;
  };
  // The stats thread sets the gauges every stats_check_period_ms (100) from the model's load.
  for (int i = 0; i < 100 && kv(testing::MetricsText(server_->metrics_port), "window_max") < 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // Scraped while the load runs.
  std::atomic<bool> done{false};
  std::thread load([&] {
    RunLoad();
    done = true;
  });
  double most_used = 0;
  while (!done) {
    most_used = std::max(most_used, check(testing::MetricsText(server_->metrics_port)));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  load.join();
  EXPECT_GT(most_used, 0) << "the window group never showed a block in use";
  // Idle again: every window block free (cached ones count as free, as in the full group's).
  ASSERT_TRUE(testing::WaitLlmIdle(server_->metrics_port, "tensorrt_llm"));
  const std::string idle = testing::MetricsText(server_->metrics_port);
  EXPECT_EQ(check(idle), 0);
  EXPECT_EQ(kv(idle, "window_free"), kv(idle, "window_max"));
}

TEST_F(WindowKvGroupTest, TheDashboardShowsTheWindowGroupBesideTheFullGroup) {
  RunLoad();
  httplib::Client c("127.0.0.1", server_->http_port);
  auto snap = c.Get("/inflight/snapshot");
  ASSERT_TRUE(snap && snap->status == 200);
  const json m = json::parse(snap->body)["models"][0];
  const json& full = m["kv_blocks"];
  EXPECT_EQ(full["total"].get<int>(),
            full["used"].get<int>() + full["free"].get<int>() + full["cached"].get<int>());
  ASSERT_TRUE(m.contains("window_kv_blocks")) << m;
  const json& w = m["window_kv_blocks"];
  const int total = w["total"].get<int>();
  EXPECT_GT(total, 0);
  EXPECT_EQ(total, w["used"].get<int>() + w["free"].get<int>() + w["cached"].get<int>());
  EXPECT_EQ(w["window"], 64);
  // Every step of the load carries the window group's counts, whole.
  ASSERT_FALSE(m["steps"].empty());
  int most_used = 0;
  for (const json& s : m["steps"]) {
    ASSERT_TRUE(s.contains("window_kv_used")) << s;
    const int used = s["window_kv_used"].get<int>();
    EXPECT_LE(used, total);
    EXPECT_EQ(used + s["window_kv_free"].get<int>() + s["window_kv_cached"].get<int>(), total);
    most_used = std::max(most_used, used);
  }
  EXPECT_GT(most_used, 0);
}

// The page in headless Chromium names both groups and shows the window group's card and chart
// (tests/web_test.mjs --window-group).
TEST_F(WindowKvGroupTest, ThePageNamesBothGroups) {
  const std::string driver =
      testing::SourceDir() + "/tools/oracle/node_modules/playwright-core/package.json";
  if (!fs::exists(driver) || !fs::exists("/usr/bin/chromium")) {
    if (testing::InCi()) FAIL() << "chromium or playwright-core is not installed";
    GTEST_SKIP() << "chromium or npm playwright-core not installed (bash scripts/install-deps.sh "
                    "installs both)";
  }
  const std::string shots = std::string(INFLIGHT_BINARY_DIR) + "/web-screenshots";
  auto [status, out] = testing::RunNode("web_test.mjs --window-group http://127.0.0.1:" +
                                        std::to_string(server_->http_port) + " " + shots);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("web: window group checks passed"), std::string::npos) << out;
}

// The parser alone: the fields the API names, and its bounds.
TEST(OpenAiParseTest, FieldsAndBounds) {
  std::string param;
  auto r = frontends::ParseOpenAiRequest(
      R"({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 5, "temperature": 0.5,
          "top_p": 0.9, "top_k": 40, "min_p": 0.1, "seed": 18446744073709551615, "n": 2, "stop": ["a", ""],
          "presence_penalty": 1, "frequency_penalty": -1, "repetition_penalty": 1.1, "logit_bias": {"7": -100},
          "logprobs": true, "top_logprobs": 4, "stream": true, "stream_options": {"include_usage": true},
          "chat_template_kwargs": {"enable_thinking": false}})",
      true, &param);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(*r->max_tokens, 5);
  EXPECT_EQ(r->top_k, 40);
  EXPECT_EQ(*r->seed, UINT64_MAX);
  EXPECT_EQ(r->stop, std::vector<std::string>{"a"});
  EXPECT_EQ(r->logit_bias.size(), 1u);
  EXPECT_EQ(r->top_logprobs, 4);
  EXPECT_TRUE(r->include_usage);
  EXPECT_EQ(r->template_kwargs["enable_thinking"], false);
  // Deep nesting is refused before it is parsed.
  std::string deep =
      R"({"model": "m", "prompt": )" + std::string(100000, '[') + std::string(100000, ']') + "}";
  EXPECT_FALSE(frontends::ParseOpenAiRequest(deep, false, &param).ok());
  auto many = frontends::ParseOpenAiRequest(R"({"model": "m", "prompt": ["a", "b"], "n": 100})",
                                            false, &param);
  EXPECT_FALSE(many.ok());
  EXPECT_EQ(param, "n");
}

}  // namespace
}  // namespace inflight
