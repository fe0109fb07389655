// Medusa heads (model/medusa.h) and Medusa decoding in the executor: the heads file is checked
// against its model (hidden size, vocabulary, its own config.json) with the field named;
// medusa_choices are checked; greedy output with Medusa trees is exactly the output without,
// for requests in flight; sampling keeps its distribution.
#include "model/medusa.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "base/thread_pool.h"
#include "chi_square.h"
#include "engine/executor.h"
#include "engine_test_util.h"
#include "medusa_writer.h"
#include "model/random_model.h"
#include "test_util.h"

namespace inflight {
namespace {

namespace fs = std::filesystem;

// Heads for `m` in `dir` (model/medusa.h's writer): copy_output, each head's projection is
// the model's own; else random. The overrides write random heads of another shape.
void WriteHeads(const Model& m, ThreadPool& pool, const std::string& dir, int num_heads,
                bool copy_output, int64_t hidden_override = 0, int64_t vocab_override = 0) {
  if (hidden_override == 0 && vocab_override == 0) {
    ASSERT_TRUE(WriteMedusaHeads(dir, m, num_heads, copy_output, pool).ok());
    return;
  }
  testing::WriteMedusaHeads(dir, num_heads,
                            hidden_override ? hidden_override : m.config().hidden_size,
                            vocab_override ? vocab_override : m.config().vocab_size);
}

class MedusaTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    path_ = new std::string(testing::WriteTinyModel("inflight_medusa_test"));
    auto m = Model::Load(*path_);
    ASSERT_TRUE(m.ok());
    model_ = std::move(m).value().release();
    pool_ = new ThreadPool(1);
    dir_ = new std::string(fs::temp_directory_path() /
                           ("inflight_medusa_test_" + std::to_string(getpid())));
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    fs::remove(*path_);
    delete model_;
    delete pool_;
    delete path_;
    delete dir_;
  }
  static Model* model_;
  static ThreadPool* pool_;
  static std::string *path_, *dir_;
};
Model* MedusaTest::model_ = nullptr;
ThreadPool* MedusaTest::pool_ = nullptr;
std::string* MedusaTest::path_ = nullptr;
std::string* MedusaTest::dir_ = nullptr;

TEST_F(MedusaTest, HeadsThatDoNotMatchTheirModelAreRefusedWithTheFieldNamed) {
  const std::string good = *dir_ + "/good";
  WriteHeads(*model_, *pool_, good, 3, false);
  auto heads = MedusaHeads::Load(good, model_->config());
  ASSERT_TRUE(heads.ok()) << heads.status().ToString();
  EXPECT_EQ((*heads)->num_heads(), 3);
  EXPECT_EQ((*heads)->num_layers(), 1);
  // The file alone loads too.
  EXPECT_TRUE(MedusaHeads::Load(good + "/medusa_lm_head.safetensors", model_->config()).ok());

  const int64_t H = model_->config().hidden_size, V = model_->config().vocab_size;
  const std::string wide = *dir_ + "/wide";
  WriteHeads(*model_, *pool_, wide, 2, false, H * 2);
  auto st = MedusaHeads::Load(wide, model_->config()).status();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("hidden size is " + std::to_string(H)), std::string::npos)
      << st.message();

  const std::string vocab = *dir_ + "/vocab";
  WriteHeads(*model_, *pool_, vocab, 2, false, 0, V + 7);
  st = MedusaHeads::Load(vocab, model_->config()).status();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("vocabulary is " + std::to_string(V)), std::string::npos)
      << st.message();

  // Its own config.json disagreeing with the file, or with the model.
  std::ofstream(good + "/config.json") << "{\"medusa_num_heads\": 5, \"medusa_num_layers\": 1}";
  st = MedusaHeads::Load(good, model_->config()).status();
  EXPECT_NE(st.message().find("medusa_num_heads 5"), std::string::npos) << st.message();
  std::ofstream(good + "/config.json") << "{\"medusa_num_heads\": 3, \"hidden_size\": 4096}";
  st = MedusaHeads::Load(good, model_->config()).status();
  EXPECT_NE(st.message().find("hidden_size 4096"), std::string::npos) << st.message();
  std::ofstream(good + "/config.json") << "[1, 2";
  st = MedusaHeads::Load(good, model_->config()).status();
  EXPECT_NE(st.message().find("not a JSON object"), std::string::npos) << st.message();

  // A missing tensor, and no heads at all.
  testing::WriteSafetensors(*dir_ + "/partial.safetensors",
                            {{"0.0.linear.weight", {H, H}, std::vector<float>(H * H)}});
  st = MedusaHeads::Load(*dir_ + "/partial.safetensors", model_->config()).status();
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_NE(st.message().find("0.0.linear.bias"), std::string::npos) << st.message();
  testing::WriteSafetensors(*dir_ + "/none.safetensors", {{"x", {1}, {0.0f}}});
  EXPECT_EQ(MedusaHeads::Load(*dir_ + "/none.safetensors", model_->config()).status().code(),
            StatusCode::kNotFound);
}

// A heads file is a client-supplied safetensors file: a shape whose element count overflows
// 64 bits (2^24 x 2^40 x 2^40 wraps to 0, matching 0 data bytes) is refused, not read.
TEST_F(MedusaTest, AShapeThatOverflowsIsRefused) {
  const std::string header =
      R"({"0.0.linear.weight": {"dtype": "F16", "shape": [16777216, 1099511627776, 1099511627776],)"
      R"( "data_offsets": [0, 0]}})";
  const std::string path = *dir_ + "/overflow.safetensors";
  fs::create_directories(*dir_);
  {
    std::ofstream out(path, std::ios::binary);
    const uint64_t n = header.size();
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << header;
  }
  auto st = MedusaHeads::Load(path, model_->config()).status();
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st.ToString();
  EXPECT_NE(st.message().find("too large"), std::string::npos) << st.message();
}

TEST(MedusaChoicesTest, PathsAreCheckedAndOrderedAfterTheirPrefixes) {
  auto ok = ParseMedusaChoices("[[0, 1], [0], [1], [0, 0]]", 3, 63);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(*ok, (std::vector<std::vector<int32_t>>{{0}, {1}, {0, 1}, {0, 0}}));
  auto message = [](const char* text) { return ParseMedusaChoices(text, 2, 4).status().message(); };
  EXPECT_NE(message("[[0], [0, 1, 0]]").find("1 to 2 top-k indices"), std::string::npos);
  EXPECT_NE(message("[[0, 1]]").find("prefix is missing"), std::string::npos);
  EXPECT_NE(message("[[0], [0]]").find("given twice"), std::string::npos);
  EXPECT_NE(message("[[0], [64]]").find("[0, 63]"), std::string::npos);
  EXPECT_NE(message("[[0], [1], [2], [3], [4]]").find("at most 4"), std::string::npos);
  EXPECT_NE(message("{\"a\": 1}").find("JSON list of lists"), std::string::npos);
  EXPECT_NE(message("[[0], [-1]]").find("[0, 63]"), std::string::npos);
  EXPECT_EQ(DefaultMedusaChoices(2).size(), 6u);  // the default cut to what 2 heads make
}

// Greedy requests in flight with Medusa trees give exactly their output alone. On a
// near-bigram model whose heads copy its output projection the guesses hold where its text
// repeats a token, along branches that are not the tree's first path (their K/V move).
TEST_F(MedusaTest, GreedyOutputIsExactlyTheOutputWithoutDrafts) {
  fs::create_directories(*dir_);
  std::unique_ptr<Model> bigram = testing::NearBigramModel(*dir_ + "/bigram.gguf", 0.05f);
  ASSERT_TRUE(bigram);
  for (const bool predictable : {true, false}) {
    const Model& m = predictable ? *bigram : *model_;
    const std::string heads_dir = *dir_ + (predictable ? "/copy" : "/random");
    WriteHeads(m, *pool_, heads_dir, 3, predictable);
    auto heads = MedusaHeads::Load(heads_dir, m.config());
    ASSERT_TRUE(heads.ok()) << heads.status().ToString();
    std::mt19937 rng(5);
    const int n = 40;
    std::vector<std::vector<int32_t>> prompts, expected;
    std::vector<int32_t> max_tokens;
    for (int i = 0; i < n; ++i) {
      std::vector<int32_t> p(1 + rng() % 200);
      for (auto& t : p) t = static_cast<int32_t>(3 + rng() % 256);
      prompts.push_back(p);
      max_tokens.push_back(1 + static_cast<int32_t>(rng() % 48));
      expected.push_back(testing::GreedyAlone(m, *pool_, p, max_tokens.back(), DType::kF16));
    }
    ExecutorConfig c = testing::TreeDraftingConfig(SpeculativeMode::kMedusa);
    c.medusa_heads = std::shared_ptr<MedusaHeads>(std::move(heads).value());
    auto made = Executor::Create(m, c);
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    Executor& e = **made;
    std::vector<RequestId> ids;
    for (int i = 0; i < n; ++i) {
      Request r;
      r.prompt_ids = prompts[i];
      r.max_tokens = max_tokens[i];
      r.sampling.temperature = 0;
      r.exclude_input_in_output = true;
      if (i % 5 == 0) r.num_draft_tokens = 0;
      if (i % 5 == 1) r.num_draft_tokens = 3;  // a cut tree
      auto id = e.Enqueue(std::move(r));
      ASSERT_TRUE(id.ok());
      ids.push_back(*id);
    }
    int64_t drafts = 0, accepted = 0;
    for (int i = 0; i < n; ++i) {
      std::vector<Result> rs = testing::CollectResults(e, ids[i]);
      ASSERT_FALSE(rs.empty());
      ASSERT_TRUE(rs.back().error.ok()) << rs.back().error.ToString();
      EXPECT_EQ(rs.back().output_token_ids, expected[i]) << "request " << i;
      drafts += rs.back().stats.num_draft_tokens;
      accepted += rs.back().stats.num_accepted_draft_tokens;
    }
    std::printf("%s heads: drafts %lld, accepted %lld, K/V slots moved %lld\n",
                predictable ? "copied" : "random", static_cast<long long>(drafts),
                static_cast<long long>(accepted), static_cast<long long>(e.num_tree_kv_moves()));
    EXPECT_GT(drafts, 0);
    if (predictable) {
      EXPECT_GT(accepted, drafts / 20);
      EXPECT_GT(e.num_tree_kv_moves(), 0) << "no branch off the tree's first path was accepted";
    }
    testing::ExpectNoKvLeaks(e);
  }
}

// Trees of Medusa guesses keep the sampling distribution: the second to fourth tokens of many
// seeded samples with heads that often guess right, against as many without (chi-square).
TEST_F(MedusaTest, SeededSamplingKeepsItsDistribution) {
  fs::create_directories(*dir_);
  std::unique_ptr<Model> bigram = testing::NearBigramModel(*dir_ + "/bigram15.gguf", 0.15f);
  ASSERT_TRUE(bigram);
  const std::string heads_dir = *dir_ + "/copy15";
  WriteHeads(*bigram, *pool_, heads_dir, 3, true);
  ExecutorConfig c;
  c.num_threads = 1;
  c.tokens_per_block = 16;
  c.max_tokens_in_paged_kv_cache = 4096;
  auto plain = Executor::Create(*bigram, c);
  ASSERT_TRUE(plain.ok());
  c.speculative_mode = SpeculativeMode::kMedusa;
  c.medusa_heads =
      std::shared_ptr<MedusaHeads>(MedusaHeads::Load(heads_dir, bigram->config()).value());
  c.adaptive_draft_length = false;
  auto medusa = Executor::Create(*bigram, c);
  ASSERT_TRUE(medusa.ok()) << medusa.status().ToString();
  testing::ExpectSamplingKept(**plain, **medusa, {1, 40, 41, 42, 43, 44, 45, 46, 47, 48});
  testing::ExpectNoKvLeaks(**medusa);
}

TEST_F(MedusaTest, TheExecutorNeedsHeadsAndChoicesWithinThem) {
  ExecutorConfig c;
  c.speculative_mode = SpeculativeMode::kMedusa;
  auto no_heads = Executor::Create(*model_, c);
  ASSERT_FALSE(no_heads.ok());
  EXPECT_NE(no_heads.status().message().find("needs Medusa heads"), std::string::npos);
  const std::string dir = *dir_ + "/two";
  WriteHeads(*model_, *pool_, dir, 2, false);
  c.medusa_heads = std::shared_ptr<MedusaHeads>(MedusaHeads::Load(dir, model_->config()).value());
  c.medusa_choices = {{0}, {0, 0}, {0, 0, 0}};
  auto too_deep = Executor::Create(*model_, c);
  ASSERT_FALSE(too_deep.ok());
  EXPECT_NE(too_deep.status().message().find("1 to 2 top-k indices"), std::string::npos)
      << too_deep.status().message();
  // Paths given as numbers are checked as the parameter's are: a missing prefix, an index
  // past the top-k.
  c.medusa_choices = {{0, 1}};
  auto no_prefix = Executor::Create(*model_, c);
  ASSERT_FALSE(no_prefix.ok());
  EXPECT_NE(no_prefix.status().message().find("prefix is missing"), std::string::npos);
  c.medusa_choices = {{0}, {70}};
  auto too_far = Executor::Create(*model_, c);
  ASSERT_FALSE(too_far.ok());
  EXPECT_NE(too_far.status().message().find("[0, 63]"), std::string::npos);
}

}  // namespace
}  // namespace inflight
