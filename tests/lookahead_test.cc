// Lookahead decoding's proposer (engine/lookahead.h): the n-gram pool (newest first, at most G
// per first token, no duplicates), the verification branch as a trie, the window's tree
// (level 0 a chain, each column a chain above it), the Jacobi step, and the configuration's
// bounds. The executor's use of it (exact greedy output, kept distributions) is in
// speculative_test.
#include "engine/lookahead.h"

#include <gtest/gtest.h>

#include <set>

namespace inflight {
namespace {

// Depth of draft j (1: a child of the last token).
int32_t Depth(const std::vector<int32_t>& parent, int32_t j) {
  int32_t d = 0;
  for (; j >= 0; j = parent[j]) ++d;
  return d;
}

TEST(LookaheadTest, ThePoolKeepsTheNewestDistinctNgramsPerFirstToken) {
  LookaheadDecoder la({1, 3, 2}, 1);
  // n-grams (N = 3) keyed by 5: (5 6 7), (5 8 9), (5 6 7) again, (5 1 2).
  la.Observe({5, 6, 7, 5, 8, 9, 5, 6, 7, 5, 1, 2, 5});
  std::vector<int32_t> draft, parent;
  la.Propose({5, 6, 7, 5, 8, 9, 5, 6, 7, 5, 1, 2, 5}, /*with_window=*/false, &draft, &parent);
  // G = 2: the newest two distinct ones, newest first: (1 2), then (6 7) (seen again after
  // (8 9), so newer).
  EXPECT_EQ(draft, (std::vector<int32_t>{1, 2, 6, 7}));
  EXPECT_EQ(parent, (std::vector<int32_t>{-1, 0, -1, 2}));
  EXPECT_EQ(la.window_begin(), 4);
  EXPECT_FALSE(la.window_in_step());
}

TEST(LookaheadTest, TheVerificationBranchMergesSharedPrefixes) {
  LookaheadDecoder la({1, 4, 3}, 1);
  const std::vector<int32_t> text = {9, 1, 2, 3, 9, 1, 2, 4, 9, 1, 5, 6, 9};
  la.Observe(text);
  std::vector<int32_t> draft, parent;
  la.Propose(text, false, &draft, &parent);
  // (1 5 6), (1 2 4), (1 2 3) newest first: one node for 1, one for 1 2.
  EXPECT_EQ(draft, (std::vector<int32_t>{1, 5, 6, 2, 4, 3}));
  EXPECT_EQ(parent, (std::vector<int32_t>{-1, 0, 1, 0, 3, 3}));
}

TEST(LookaheadTest, TheWindowIsATreeOfColumnsOverALevelZeroChain) {
  const LookaheadConfig c{4, 4, 4};  // W 4, N 4 (3 levels), G 4 (each column's n-gram kept)
  LookaheadDecoder la(c, 7);
  const std::vector<int32_t> text = {3, 4, 5, 6, 7, 8, 3, 4, 9, 9, 3};
  la.Observe(text);
  std::vector<int32_t> draft, parent;
  la.Propose(text, true, &draft, &parent);
  const int32_t wb = la.window_begin();
  ASSERT_EQ(static_cast<int32_t>(draft.size()), wb + 3 * 4);
  EXPECT_LE(static_cast<int32_t>(draft.size()), c.MaxDrafts());
  std::set<int32_t> seen(text.begin(), text.end());
  for (int32_t l = 0; l < 3; ++l) {
    for (int32_t i = 0; i < 4; ++i) {
      const int32_t j = wb + l * 4 + i;
      EXPECT_LT(parent[j], j) << "parents come first";
      // Level l of column i sits at position last + 1 + i + l.
      EXPECT_EQ(Depth(parent, j), 1 + i + l) << "level " << l << " column " << i;
      EXPECT_TRUE(seen.count(draft[j])) << "first guesses are the text's tokens";
    }
  }
  // The last level's outputs become the top level; each column gives the pool an n-gram.
  std::vector<int32_t> argmax(draft.size(), -1);
  for (int32_t i = 0; i < 4; ++i) argmax[la.window_last_level() + i] = 100 + i;
  const std::vector<int32_t> level0(draft.begin() + wb, draft.begin() + wb + 4);
  const std::vector<int32_t> level1(draft.begin() + wb + 4, draft.begin() + wb + 8);
  const std::vector<int32_t> level2(draft.begin() + wb + 8, draft.begin() + wb + 12);
  const int64_t before = la.pool_size();
  la.Advance(argmax, static_cast<int32_t>(draft.size()));
  EXPECT_GT(la.pool_size(), before);
  la.Propose(text, true, &draft, &parent);
  const int32_t wb2 = la.window_begin();
  EXPECT_EQ(std::vector<int32_t>(draft.begin() + wb2, draft.begin() + wb2 + 4), level1);
  EXPECT_EQ(std::vector<int32_t>(draft.begin() + wb2 + 4, draft.begin() + wb2 + 8), level2);
  EXPECT_EQ(std::vector<int32_t>(draft.begin() + wb2 + 8, draft.begin() + wb2 + 12),
            (std::vector<int32_t>{100, 101, 102, 103}));
  // Column 0's n-gram (level0[0], level1[0], level2[0], 100) is in the pool under level0[0].
  const std::vector<int32_t> probe = {level0[0]};
  LookaheadDecoder copy = la;
  copy.Propose(probe, false, &draft, &parent);
  bool found = false;
  for (size_t j = 0; j + 2 < draft.size(); ++j) {
    found |= parent[j] == -1 && draft[j] == level1[0] && draft[j + 1] == level2[0] &&
             draft[j + 2] == 100;
  }
  EXPECT_TRUE(found);
}

TEST(LookaheadTest, AWindowCutShortDoesNotMove) {
  LookaheadDecoder la({3, 3, 1}, 3);
  const std::vector<int32_t> text = {1, 2, 3, 4};
  std::vector<int32_t> draft, parent;
  la.Propose(text, true, &draft, &parent);
  const std::vector<int32_t> first = draft;
  la.Advance(std::vector<int32_t>(draft.size(), 50), static_cast<int32_t>(draft.size()) - 1);
  la.Propose(text, true, &draft, &parent);
  EXPECT_EQ(draft, first) << "a branch that did not run whole leaves the window as it was";
}

TEST(LookaheadTest, ConfigurationsAreBounded) {
  EXPECT_TRUE(LookaheadConfig({4, 3, 4}).Validate("lookahead_").ok());
  EXPECT_NE(LookaheadConfig({0, 3, 4})
                .Validate("lookahead_")
                .message()
                .find("lookahead_window_size must be >= 1"),
            std::string::npos);
  EXPECT_NE(LookaheadConfig({4, 1, 4})
                .Validate("lookahead_")
                .message()
                .find("lookahead_ngram_size must be >= 2"),
            std::string::npos);
  EXPECT_NE(LookaheadConfig({4, 3, 0})
                .Validate("lookahead_")
                .message()
                .find("lookahead_verification_set_size must be >= 1"),
            std::string::npos);
  // (W + G) * (N - 1) <= 63, each factor bounded before the product (no overflow).
  EXPECT_TRUE(LookaheadConfig({31, 2, 32}).Validate("").ok());
  EXPECT_FALSE(LookaheadConfig({32, 2, 32}).Validate("").ok());
  EXPECT_FALSE(LookaheadConfig({1 << 30, 1 << 30, 1 << 30}).Validate("").ok());
  const LookaheadConfig model{4, 3, 4};
  EXPECT_TRUE(LookaheadConfig({2, 2, 2}).ValidateWithin(model, "lookahead_").ok());
  EXPECT_EQ(LookaheadConfig({5, 3, 4}).ValidateWithin(model, "lookahead_").message(),
            "lookahead_window_size 5 exceeds the model's 4");
}

}  // namespace
}  // namespace inflight
