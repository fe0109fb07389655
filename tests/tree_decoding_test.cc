// Tree verification in one forward pass (the base of Medusa, EAGLE and lookahead decoding):
// a chunk of draft tokens shaped as a tree, each at the position of its depth and attending to
// its own branch, gives every token the logits of its branch run alone after the prompt (bit
// for bit for a chain, within rounding for a branched tree); a chunk that is not a tree in
// order, or a model with sliding-window layers, is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <tuple>

#include "base/thread_pool.h"
#include "engine/executor_config.h"
#include "engine/model_runner.h"
#include "kvcache/kv_storage.h"
#include "model/model.h"
#include "test_util.h"

namespace inflight {
namespace {

constexpr int32_t kTokensPerBlock = 16;

// A model with a KV pool of its own.
struct Runner {
  explicit Runner(const Model& m)
      : model(m), storage(KvStorageConfigFor(m, KvCacheSizes{64, 0}, [] {
          ExecutorConfig c;
          c.tokens_per_block = kTokensPerBlock;
          return c;
        }())) {
    view.layers = storage.LayerViews();
    view.num_blocks = 64;
    for (int32_t b = 0; b < 64; ++b) table.push_back(63 - b);  // not in order
  }
  // Runs `tokens` at positions start.. causally; the logits of every token.
  std::vector<float> Run(const std::vector<int32_t>& tokens, int32_t start,
                         const uint64_t* tree = nullptr, const int32_t* depth = nullptr,
                         bool exact = false) {
    SequenceChunk c;
    c.token_ids = tokens.data();
    c.num_tokens = static_cast<int32_t>(tokens.size());
    c.start_pos = start;
    c.block_table = table.data();
    c.num_blocks = static_cast<int32_t>(table.size());
    c.num_logits = c.num_tokens;
    c.tree = tree, c.tree_depth = depth;
    if (exact) {  // the blocks past the chunk's are free
      const int32_t used = (start + c.num_tokens + kTokensPerBlock - 1) / kTokensPerBlock;
      c.tree_scratch = table.data() + used;
      c.num_tree_scratch = static_cast<int32_t>(table.size()) - used;
      c.num_blocks = used;
    }
    BatchPlan plan;
    plan.chunks.push_back(c);
    std::vector<float> logits(tokens.size() * model.config().vocab_size);
    status = model.Forward(plan, view, scratch, pool, logits.data());
    return logits;
  }
  const Model& model;
  KvStorage storage;
  KvCacheView view;
  ForwardScratch scratch;
  ThreadPool pool{2};
  std::vector<int32_t> table;
  Status status;
};

struct Tree {
  std::vector<int32_t> parent, depth, tokens;
  std::vector<uint64_t> bits;
};

// n tokens, each a child of an earlier one (token 0 the root; a chain: of the one before),
// random ids.
Tree RandomTree(int32_t n, int32_t vocab, bool chain, std::mt19937& rng) {
  Tree t;
  for (int32_t i = 0; i < n; ++i) {
    const int32_t p = i == 0 ? -1 : (chain ? i - 1 : static_cast<int32_t>(rng() % i));
    t.parent.push_back(p);
    t.depth.push_back(p < 0 ? 0 : t.depth[p] + 1);
    t.bits.push_back((p < 0 ? 0 : t.bits[p]) | (uint64_t{1} << i));
    t.tokens.push_back(static_cast<int32_t>(3 + rng() % (vocab - 3)));
  }
  return t;
}

// Each tree token's logits against its branch run alone (the prompt, then the branch, in a
// pool of its own). A chain (every token the child of the one before) is a causal chunk and
// must match bit for bit, and so must every tree with scratch blocks (each branch copied to
// consecutive positions). Masked in place, a branched tree reads its branch from slots with
// gaps: the softmax sums the same terms, but in other SIMD lanes and 128-position spans, so the
// rounding differs; on these random-weight models the layers grow that to a few hundredths of
// a logit.
void ExpectTreeEqualsBranches(const std::string& path, bool chain, bool exact) {
  REQUIRE_SHARED_FILE(path);
  auto model = Model::Load(path);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const int32_t vocab = (*model)->config().vocab_size;
  std::mt19937 rng(5);
  std::vector<int32_t> prompt(37);
  for (int32_t& t : prompt) t = static_cast<int32_t>(3 + rng() % (vocab - 3));
  const Tree tree = RandomTree(20, vocab, chain, rng);
  Runner runner(**model);
  runner.Run(prompt, 0);
  ASSERT_TRUE(runner.status.ok()) << runner.status.ToString();
  const std::vector<float> got = runner.Run(tree.tokens, static_cast<int32_t>(prompt.size()),
                                            tree.bits.data(), tree.depth.data(), exact);
  ASSERT_TRUE(runner.status.ok()) << runner.status.ToString();
  float worst = 0;
  for (int32_t i = 0; i < static_cast<int32_t>(tree.tokens.size()); ++i) {
    std::vector<int32_t> whole = prompt;
    const size_t branch_at = whole.size();
    for (int32_t j = i; j >= 0; j = tree.parent[j])
      whole.insert(whole.begin() + static_cast<std::ptrdiff_t>(branch_at), tree.tokens[j]);
    Runner alone(**model);
    const std::vector<float> want = alone.Run(whole, 0);
    ASSERT_TRUE(alone.status.ok());
    const float* a = got.data() + static_cast<int64_t>(i) * vocab;
    const float* b = want.data() + static_cast<int64_t>(whole.size() - 1) * vocab;
    std::vector<float> top(b, b + vocab);
    std::partial_sort(top.begin(), top.begin() + 2, top.end(), std::greater<float>());
    for (int32_t v = 0; v < vocab; ++v) {
      worst = std::max(worst, std::fabs(a[v] - b[v]));
      if (chain || exact) ASSERT_EQ(a[v], b[v]) << "token " << i << " logit " << v;
    }
    if (top[0] - top[1] > 0.1f) {
      EXPECT_EQ(std::max_element(a, a + vocab) - a, std::max_element(b, b + vocab) - b)
          << "token " << i;
    }
  }
  std::printf("%s %s%s: largest logit difference from the branches alone %.2g\n", path.c_str(),
              chain ? "chain" : "tree", exact ? " with scratch blocks" : "", worst);
  EXPECT_LT(worst, 0.05f);
}

TEST(TreeForwardTest, EveryTokenGetsItsBranchsLogits) {
  const std::string demo = testing::SourceDir() + "/models/demo/inflight-demo-q8_0.gguf";
  for (bool chain : {true, false}) {
    for (bool exact : {false, true}) ExpectTreeEqualsBranches(demo, chain, exact);
  }
}

// Learned positions (GPT-2) and a mixture of experts (Qwen3-MoE): each token's position is its
// depth.
TEST(TreeForwardTest, LearnedPositionsAndExperts) {
  for (bool chain : {true, false}) {
    for (bool exact : {false, true}) {
      ExpectTreeEqualsBranches(testing::SharedDir() + "/golden/gpt2-f16.gguf", chain, exact);
      ExpectTreeEqualsBranches(testing::SharedDir() + "/golden/arch/qwen3moe-f16.gguf", chain,
                               exact);
    }
  }
}

TEST(TreeForwardTest, ChunksThatAreNotTreesAndWindowedModelsAreRefused) {
  const std::string demo = testing::SourceDir() + "/models/demo/inflight-demo-q8_0.gguf";
  auto model = Model::Load(demo);
  ASSERT_TRUE(model.ok());
  Runner runner(**model);
  const std::vector<int32_t> tokens = {5, 6, 7};
  const std::vector<int32_t> depth = {0, 1, 1};
  for (const std::vector<uint64_t>& bits :
       {std::vector<uint64_t>{1, 3, 6},     // token 2 without its own root
        std::vector<uint64_t>{1, 2, 5},     // token 1 without its parent: depth says 1
        std::vector<uint64_t>{3, 3, 5}}) {  // token 0 sees a later token
    runner.Run(tokens, 0, bits.data(), depth.data());
    EXPECT_EQ(runner.status.code(), StatusCode::kInvalidArgument) << runner.status.ToString();
  }
  const std::vector<uint64_t> good = {1, 3, 5};
  runner.Run(tokens, 0, good.data(), nullptr);
  EXPECT_EQ(runner.status.code(), StatusCode::kInvalidArgument) << "no depths";
  runner.Run(tokens, 0, nullptr, depth.data());
  EXPECT_EQ(runner.status.code(), StatusCode::kInvalidArgument) << "depths without a tree";
  const std::vector<uint64_t> past_the_end = {1 | uint64_t{1} << 50, 3, 5};
  runner.Run(tokens, 0, past_the_end.data(), depth.data());
  EXPECT_EQ(runner.status.code(), StatusCode::kInvalidArgument) << "a bit past the chunk";
  runner.Run(tokens, 0, good.data(), depth.data());
  EXPECT_TRUE(runner.status.ok()) << runner.status.ToString();
  // Scratch blocks: as many as the tree needs, none the chunk itself uses.
  SequenceChunk c;
  c.token_ids = tokens.data(), c.num_tokens = 3, c.num_logits = 3;
  c.block_table = runner.table.data(), c.num_blocks = 1;
  c.tree = good.data(), c.tree_depth = depth.data();
  const std::vector<int32_t> overlapping = {runner.table[0], runner.table[5], runner.table[6]},
                             apart = {runner.table[4], runner.table[5], runner.table[6]};
  std::vector<float> logits(3 * (*model)->config().vocab_size);
  const std::vector<int32_t> twice = {runner.table[4], runner.table[5], runner.table[4]};
  for (const auto& [ids, n, ok] : {std::tuple{&apart, 2, false}, std::tuple{&overlapping, 3, false},
                                   std::tuple{&twice, 3, false}, std::tuple{&apart, 3, true}}) {
    c.tree_scratch = ids->data(), c.num_tree_scratch = n;
    BatchPlan plan;
    plan.chunks.push_back(c);
    const Status st =
        (*model)->Forward(plan, runner.view, runner.scratch, runner.pool, logits.data());
    EXPECT_EQ(st.ok(), ok) << st.ToString();
  }

  const std::string gemma = testing::SharedDir() + "/golden/arch/gemma3-f16.gguf";
  REQUIRE_SHARED_FILE(gemma);
  auto windowed = Model::Load(gemma);
  ASSERT_TRUE(windowed.ok());
  Runner w(**windowed);
  w.Run(tokens, 0, good.data(), depth.data());
  EXPECT_EQ(w.status.code(), StatusCode::kInvalidArgument) << w.status.ToString();
}

}  // namespace
}  // namespace inflight
