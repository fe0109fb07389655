// Serving-core unit tests: config.pbtxt parsing and parameters, the packed word lists, the
// generate extension's request mapping, and the streaming detokenizer of the postprocessing
// model run through the serving core with real tokenizers.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "backends/llm/llm_backend.h"
#include "frontends/kserve_json.h"
#include "serving/model_config_util.h"
#include "serving/server.h"
#include "serving/word_list.h"
#include "test_util.h"

namespace inflight::serving {
namespace {

namespace fs = std::filesystem;

TEST(ModelConfigTest, ParsesTextFormatAndNamesTheBadField) {
  auto ok = ParseModelConfigText(R"(
    name: "m" backend: "tensorrtllm" max_batch_size: 8
    model_transaction_policy { decoupled: true }
    input [ { name: "input_ids" data_type: TYPE_INT32 dims: [ -1 ] allow_ragged_batch: true } ]
    output [ { name: "x" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "x" data_type: TYPE_INT32 dims: [ 1 ] } ]
    parameters { key: "enable_kv_cache_reuse" value { string_value: "${enable_kv_cache_reuse}" } }
    parameters { key: "enable_chunked_context" value { string_value: "TRUE" } }
    parameters { key: "max_num_tokens" value { string_value: "512" } }
    parameters { key: "batch_scheduler_policy" value { string_value: "yes please" } }
  )");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_TRUE(IsDecoupled(*ok));
  EXPECT_EQ(ok->output_size(), 2);  // the reference ensemble declares an output twice
  EXPECT_FALSE(GetParameter(*ok, "enable_kv_cache_reuse").has_value())
      << "an unfilled template is unset";
  EXPECT_TRUE(GetBoolParameter(*ok, "enable_kv_cache_reuse", true));
  EXPECT_FALSE(GetBoolParameter(*ok, "enable_kv_cache_reuse", false));
  EXPECT_TRUE(GetBoolParameter(*ok, "enable_chunked_context", false));
  EXPECT_EQ(GetIntParameter(*ok, "max_num_tokens", 0), 512);
  EXPECT_EQ(GetIntParameter(*ok, "batch_scheduler_policy", 7), 7);
  EXPECT_FALSE(ParseBoolValue("yes").has_value());

  auto bad = ParseModelConfigText("name: \"m\"\nmax_batch_sise: 8\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("max_batch_sise"), std::string::npos)
      << bad.status().message();
  EXPECT_NE(bad.status().message().find("line 2"), std::string::npos) << bad.status().message();
  auto bad_type = ParseModelConfigText("input [ { name: \"a\" data_type: TYPE_NOPE } ]");
  ASSERT_FALSE(bad_type.ok());
  EXPECT_NE(bad_type.status().message().find("TYPE_NOPE"), std::string::npos)
      << bad_type.status().message();
}

TEST(WordListTest, PacksAndUnpacksTheReferenceFormat) {
  InferTensor t = PackWordLists("stop", {{{5, 6}, {7}}, {{9}}});
  EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 2, 3}));
  auto ids = t.AsInt64();
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int64_t>{5, 6, 7, 2, 3, -1, 9, 0, 0, 1, -1, -1}));
  auto row0 = WordListRow(t, 0), row1 = WordListRow(t, 1);
  ASSERT_TRUE(row0.ok() && row1.ok());
  EXPECT_EQ(*row0, (WordList{{5, 6}, {7}}));
  EXPECT_EQ(*row1, (WordList{{9}}));
  // Non-increasing offsets, offsets past the ids and values after -1 are refused.
  for (const std::vector<int32_t>& bad :
       {std::vector<int32_t>{5, 6, 2, 1}, {5, 6, 3, -1}, {5, 6, 7, 1, -1, 3}}) {
    InferTensor b =
        InferTensor::Int32("stop_words_list", {1, 2, static_cast<int64_t>(bad.size() / 2)}, bad);
    EXPECT_FALSE(WordListRow(b, 0).ok());
  }
  InferTensor odd = InferTensor::Int32("stop_words_list", {1, 3}, {1, 2, 3});
  EXPECT_FALSE(WordListRow(odd, 0).ok());
}

TEST(GenerateMappingTest, ShapesFollowTheModelInputs) {
  auto config = ParseModelConfigText(R"(
    max_batch_size: 4
    input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
            { name: "max_tokens" data_type: TYPE_INT32 dims: [ 1 ] },
            { name: "stop_words" data_type: TYPE_STRING dims: [ -1 ] optional: true },
            { name: "bad_words" data_type: TYPE_STRING dims: [ -1 ] optional: true },
            { name: "temperature" data_type: TYPE_FP32 dims: [ 1 ] optional: true } ]
  )");
  ASSERT_TRUE(config.ok());
  auto r = frontends::ParseGenerateRequest(
      R"({"id": "7", "text_input": "hi", "stop_words": ["a", "b"], "bad_words": "",
          "parameters": {"max_tokens": 20, "temperature": 0.5, "stream_mode": "x"}, "triton_anything": 1})",
      *config);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->id, "7");
  EXPECT_EQ(std::get<std::string>(r->parameters.at("id")), "7");
  EXPECT_EQ(std::get<std::string>(r->parameters.at("stream_mode")), "x");
  EXPECT_EQ(std::get<int64_t>(r->parameters.at("triton_anything")), 1)
      << "generate forwards triton_ keys";
  auto shape_of = [&](const std::string& name) {
    const InferTensor* t = r->FindInput(name);
    return t ? t->shape : std::vector<int64_t>{};
  };
  EXPECT_EQ(shape_of("text_input"), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(shape_of("max_tokens"), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(shape_of("stop_words"), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(shape_of("bad_words"), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(*r->FindInput("bad_words")->AsStrings(), std::vector<std::string>{""});
  EXPECT_FLOAT_EQ(static_cast<float>((*r->FindInput("temperature")->AsDouble())[0]), 0.5f);

  auto nested =
      frontends::ParseGenerateRequest(R"({"text_input": "hi", "max_tokens": [[1]]})", *config);
  ASSERT_FALSE(nested.ok());
  EXPECT_EQ(nested.status().message(),
            "The schema can not convert input 'max_tokens' to tensor with proper shape");
  auto bad_param = frontends::ParseGenerateRequest(
      R"({"text_input": "hi", "max_tokens": 3, "x": {"a": 1}})", *config);
  ASSERT_FALSE(bad_param.ok());
  EXPECT_EQ(bad_param.status().message(),
            "parameter 'x' has invalid type. It should be either 'int', 'bool', or 'string'.");
  auto wrong_type =
      frontends::ParseGenerateRequest(R"({"text_input": 5, "max_tokens": 3})", *config);
  EXPECT_FALSE(wrong_type.ok());
  auto float_for_int =
      frontends::ParseGenerateRequest(R"({"text_input": "x", "max_tokens": 3.5})", *config);
  EXPECT_FALSE(float_for_int.ok());
}

// Runs the postprocessing model of a one-model repository over `ids`, one token per request
// as in streaming; with `context` the requests share one ensemble request context.
class DetokenizerStreamTest : public ::testing::Test {
 protected:
  std::unique_ptr<Server> MakeServer(const std::string& tokenizer) {
    dir_ = fs::temp_directory_path() / ("inflight_detok_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "postprocessing" / "1");
    std::ofstream(dir_ / "postprocessing" / "config.pbtxt")
        << "backend: \"python\"\nmax_batch_size: 8\n"
           "input [ { name: \"TOKENS_BATCH\" data_type: TYPE_INT32 dims: [ -1, -1 ] },\n"
           "        { name: \"SEQUENCE_LENGTH\" data_type: TYPE_INT32 dims: [ -1 ] } ]\n"
           "output [ { name: \"OUTPUT\" data_type: TYPE_STRING dims: [ -1 ] } ]\n"
           "parameters { key: \"tokenizer_dir\" value { string_value: \""
        << tokenizer << "\" } }\n";
    ServerOptions o;
    o.repository = dir_.string();
    o.backends = LlmBackendFactories();
    o.allowed_model_paths = {
        fs::path(tokenizer).parent_path().string()};  // the tokenizer lies outside the repository
    auto s = Server::Create(o);
    EXPECT_TRUE(s.ok());
    EXPECT_TRUE((*s)->ModelReady("postprocessing", ""));
    return std::move(s).value();
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::vector<std::string> Pieces(Server& s, const std::vector<int32_t>& ids,
                                         bool shared_context) {
    auto context = std::make_shared<RequestContext>();
    std::vector<std::string> pieces;
    for (size_t i = 0; i < ids.size(); ++i) {
      InferRequest r;
      r.model_name = "postprocessing";
      r.inputs.push_back(InferTensor::Int32("TOKENS_BATCH", {1, 1, 1}, {ids[i]}));
      r.inputs.push_back(InferTensor::Int32("SEQUENCE_LENGTH", {1, 1}, {1}));
      if (shared_context) {
        r.context = context;
        r.parameters["upstream_final"] = i + 1 == ids.size();
      }
      s.Infer(std::move(r), [&](InferResponse&& resp) {
        EXPECT_TRUE(resp.error.ok()) << resp.error.message();
        if (!resp.outputs.empty()) pieces.push_back((*resp.outputs[0].AsStrings())[0]);
      });
    }
    return pieces;
  }

  fs::path dir_;
};

constexpr const char* kText = "Hello 世界, café 🎉 naïve 東京タワー 😀!";

TEST_F(DetokenizerStreamTest, SentencePieceStreamIsExact) {
  const std::string model =
      testing::SharedDir() + "/models/tokenizers/llama2-sentencepiece/tokenizer.model";
  REQUIRE_SHARED_FILE(model);
  auto server = MakeServer(model);
  auto spec = Tokenizer::SpecFromSentencePieceModel(model);
  ASSERT_TRUE(spec.ok());
  auto tok = Tokenizer::Create(*spec);
  ASSERT_TRUE(tok.ok());
  const std::vector<int32_t> ids = (*tok)->Encode(kText, /*add_special=*/false);
  std::string joined;
  for (const std::string& p : Pieces(*server, ids, true)) {
    EXPECT_EQ(p.find("\xEF\xBF\xBD"), std::string::npos) << "U+FFFD in a streamed piece";
    joined += p;
  }
  // The pieces continue a prompt, so the SentencePiece word-start space of the first is kept.
  EXPECT_EQ(joined, std::string(" ") + kText);
  // Decoding each response alone (the reference's stateless postprocessing) loses the spaces.
  std::string stateless;
  for (const std::string& p : Pieces(*server, ids, false)) stateless += p;
  EXPECT_NE(stateless, joined);
  EXPECT_EQ(stateless.find(' '), std::string::npos) << stateless;
}

TEST_F(DetokenizerStreamTest, ByteLevelStreamIsExact) {
  const std::string file = testing::SharedDir() + "/models/tokenizers/gpt2-hf/tokenizer.json";
  REQUIRE_SHARED_FILE(file);
  auto server = MakeServer(fs::path(file).parent_path().string());
  auto tok = Tokenizer::FromHuggingFaceFile(file);
  ASSERT_TRUE(tok.ok());
  const std::vector<int32_t> ids = (*tok)->Encode(kText, false);
  std::string joined;
  for (const std::string& p : Pieces(*server, ids, true)) {
    EXPECT_EQ(p.find("\xEF\xBF\xBD"), std::string::npos);
    joined += p;
  }
  EXPECT_EQ(joined, kText);
}

}  // namespace
}  // namespace inflight::serving
