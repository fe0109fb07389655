// P-tuning (prompt_embedding_table) in the executor: virtual tokens vocab_size + i embed as
// row i of the request's table. A table whose rows are real tokens' embeddings gives exactly
// the output of those tokens; different tables never share prefix blocks.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "engine/executor.h"
#include "engine_test_util.h"

namespace inflight {
namespace {

class PtuningTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    path_ = testing::WriteTinyModel("inflight_ptuning_test");
    auto m = Model::Load(path_);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(m).value().release();
  }
  static void TearDownTestSuite() {
    delete model_;
    std::filesystem::remove(path_);
  }

  static std::unique_ptr<Executor> Make(bool reuse) {
    ExecutorConfig c;
    c.num_threads = 1;
    c.tokens_per_block = 4;
    c.enable_kv_cache_reuse = reuse;
    c.max_tokens_in_paged_kv_cache = 4 * 256;
    auto e = Executor::Create(*model_, c);
    EXPECT_TRUE(e.ok());
    return e.ok() ? std::move(e).value() : nullptr;
  }

  // With context logits (which skip prefix reuse) unless `reuse_allowed`.
  static Result RunOne(Executor& e, const std::vector<int32_t>& prompt,
                       std::shared_ptr<const std::vector<float>> table,
                       bool reuse_allowed = false) {
    Request r;
    r.prompt_ids = prompt;
    r.max_tokens = 10;
    r.sampling.temperature = 0;
    r.exclude_input_in_output = true;
    r.return_context_logits = !reuse_allowed;
    r.prompt_table = std::move(table);
    auto id = e.Enqueue(r);
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    if (!id.ok()) return Result{};
    auto rs = testing::CollectResults(e, *id);
    EXPECT_TRUE(rs.back().error.ok()) << rs.back().error.ToString();
    Result last = rs.back();
    if (!rs.front().context_logits.empty()) last.context_logits = rs.front().context_logits;
    return last;
  }

  static Model* model_;
  static std::string path_;
};

Model* PtuningTest::model_ = nullptr;
std::string PtuningTest::path_;

TEST_F(PtuningTest, ATableOfRealEmbeddingsGivesExactlyTheirOutput) {
  const int32_t V = model_->config().vocab_size, H = model_->config().hidden_size;
  const std::vector<int32_t> real = {40, 77, 120, 5, 66};
  auto table = std::make_shared<std::vector<float>>(3 * H);
  for (int i = 0; i < 3; ++i) model_->EmbeddingRow(real[i], table->data() + i * H);
  auto e = Make(false);
  ASSERT_NE(e, nullptr);
  const Result want = RunOne(*e, real, nullptr);
  const Result got = RunOne(*e, {V + 0, V + 1, V + 2, real[3], real[4]}, table);
  EXPECT_EQ(got.output_token_ids, want.output_token_ids);
  EXPECT_EQ(got.context_logits, want.context_logits) << "bit for bit";
  // Rows in another order are other tokens.
  const Result swapped = RunOne(*e, {V + 2, V + 1, V + 0, real[3], real[4]}, table);
  EXPECT_EQ(swapped.output_token_ids,
            RunOne(*e, {real[2], real[1], real[0], real[3], real[4]}, nullptr).output_token_ids);
  testing::ExpectNoKvLeaks(*e);
}

TEST_F(PtuningTest, DifferentTablesNeverShareKvBlocks) {
  const int32_t V = model_->config().vocab_size, H = model_->config().hidden_size;
  std::mt19937 rng(4);
  std::normal_distribution<float> normal(0, 0.5f);
  std::vector<std::shared_ptr<const std::vector<float>>> tables;
  for (int t = 0; t < 3; ++t) {
    auto table = std::make_shared<std::vector<float>>(8 * H);
    for (float& v : *table) v = normal(rng);
    tables.push_back(table);
  }
  // Virtual tokens fill whole blocks (4 tokens each), so reuse would find them.
  std::vector<int32_t> prompt;
  for (int i = 0; i < 8; ++i) prompt.push_back(V + i);
  prompt.insert(prompt.end(), {9, 10, 11});
  std::vector<std::vector<int32_t>> alone;
  for (const auto& t : tables) {
    auto solo = Make(false);
    alone.push_back(RunOne(*solo, prompt, t).output_token_ids);
  }
  EXPECT_NE(alone[0], alone[1]);
  auto e = Make(true);
  ASSERT_NE(e, nullptr);
  for (int round = 0; round < 2; ++round) {
    for (size_t t = 0; t < tables.size(); ++t) {
      const Result r = RunOne(*e, prompt, tables[t], /*reuse_allowed=*/true);
      EXPECT_EQ(r.output_token_ids, alone[t]) << "table " << t << " round " << round;
      if (round == 1) EXPECT_GT(r.stats.num_reused_blocks, 0) << "the same table reuses its blocks";
    }
  }
  testing::ExpectNoKvLeaks(*e);
}

TEST_F(PtuningTest, VirtualTokensBeyondTheTableAreRefused) {
  const int32_t V = model_->config().vocab_size, H = model_->config().hidden_size;
  auto e = Make(false);
  ASSERT_NE(e, nullptr);
  Request r;
  r.prompt_ids = {V + 2, 5};
  r.max_tokens = 2;
  r.prompt_table = std::make_shared<std::vector<float>>(2 * H, 0.1f);
  auto id = e->Enqueue(r);
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.status().message().find("prompt embedding table (2 rows)"), std::string::npos)
      << id.status().message();
  r.prompt_table.reset();
  r.prompt_ids = {V, 5};
  id = e->Enqueue(r);
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.status().message().find("outside the vocabulary"), std::string::npos);
  r.prompt_table = std::make_shared<std::vector<float>>(H + 3, 0.1f);
  id = e->Enqueue(r);
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.status().message().find("must be [rows, " + std::to_string(H) + "]"),
            std::string::npos)
      << id.status().message();
}

}  // namespace
}  // namespace inflight
