// Speculative decoding in the in-flight executor: draft tokens (prompt lookup, or a client's
// own) verified in one forward pass. Greedy output never changes, with speculating and
// non-speculating requests sharing steps; seeded sampling keeps its distribution (rejection
// sampling); rejected drafts leave no KV block behind.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <limits>
#include <map>
#include <random>
#include <thread>

#include "base/thread_pool.h"
#include "chi_square.h"
#include "engine/executor.h"
#include "engine/generate.h"
#include "engine_test_util.h"
#include "model/random_model.h"
#include "test_util.h"

namespace inflight {
namespace {

using std::chrono::milliseconds;

class SpeculativeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    path_ = testing::WriteTinyModel("inflight_speculative_test");
    auto m = Model::Load(path_);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(m).value().release();
    // The draft: the same file's first layer (of two), which agrees with the model often but
    // not always.
    auto d = Model::Load(path_, {.num_layers = 1});
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    draft_ = std::move(d).value().release();
    // One compute thread: the tiny model's steps are a few microseconds of work between
    // barriers, and two such processes under ctest -j2 on two cores spend their time waiting
    // for each other's preempted workers. Thread counts never change results (executor_test).
    pool_ = new ThreadPool(1);
  }
  static void TearDownTestSuite() {
    delete draft_;
    delete model_;
    delete pool_;
    std::filesystem::remove(path_);
  }

  static std::vector<int32_t> Alone(const std::vector<int32_t>& prompt, int32_t max_tokens,
                                    DType kv_dtype = DType::kF16) {
    return testing::GreedyAlone(*model_, *pool_, prompt, max_tokens, kv_dtype);
  }

  static std::unique_ptr<Executor> Make(ExecutorConfig c, const Model* draft = nullptr) {
    c.num_threads = 1;
    auto e = Executor::Create(*model_, c, draft);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? std::move(e).value() : nullptr;
  }

  static std::vector<Result> Collect(Executor& e, RequestId id) {
    return testing::CollectResults(e, id);
  }

  static Result RunOne(Executor& e, Request r) {
    auto id = e.Enqueue(std::move(r));
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    if (!id.ok()) return Result{};
    std::vector<Result> rs = Collect(e, *id);
    return rs.empty() ? Result{} : rs.back();
  }

  static void ExpectNoLeaks(const Executor& e) { testing::ExpectNoKvLeaks(e); }

  static Model* model_;
  static Model* draft_;
  static ThreadPool* pool_;
  static std::string path_;
};

Model* SpeculativeTest::model_ = nullptr;
Model* SpeculativeTest::draft_ = nullptr;
ThreadPool* SpeculativeTest::pool_ = nullptr;
std::string SpeculativeTest::path_;

Request Greedy(std::vector<int32_t> prompt, int32_t max_tokens) {
  Request r;
  r.prompt_ids = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  r.exclude_input_in_output = true;
  return r;
}

// A prompt that repeats itself (as code, lists and quoted text do), so prompt lookup finds
// its n-grams; its continuation on a random-weight model is whatever the model says.
std::vector<int32_t> RepetitivePrompt(std::mt19937& rng, int len) {
  std::vector<int32_t> phrase(4 + rng() % 12);
  for (auto& t : phrase) t = static_cast<int32_t>(3 + rng() % 256);
  std::vector<int32_t> p;
  while (static_cast<int>(p.size()) < len) {
    p.insert(p.end(), phrase.begin(), phrase.end());
    if (rng() % 3 == 0) p.push_back(static_cast<int32_t>(3 + rng() % 256));  // a variation
  }
  p.resize(len);
  return p;
}

struct SpecCase {
  CapacityPolicy policy;
  bool chunked;
  bool reuse;
  SpeculativeMode mode;
  DType kv_dtype = DType::kF16;  // the 8-bit cache verifies drafts the same way
};

class SpeculativeInvarianceTest : public SpeculativeTest,
                                  public ::testing::WithParamInterface<SpecCase> {};

// 64 greedy requests of mixed lengths in flight: a third plain, a third with the executor's
// drafts (prompt lookup or the draft model), a third with a client's drafts (right, partly
// right, or wrong) on top. Every request's output is exactly what it gets alone without
// speculation.
TEST_P(SpeculativeInvarianceTest, GreedyOutputIsExactlyTheOutputWithoutSpeculation) {
  const SpecCase sc = GetParam();
  std::mt19937 rng(77);
  const int n = 64;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int32_t> max_tokens;
  for (int i = 0; i < n; ++i) {
    const int len = 1 + static_cast<int>(rng() % 400);
    if (i % 2 == 0) {
      prompts.push_back(RepetitivePrompt(rng, len));
    } else {
      std::vector<int32_t> p(len);
      for (auto& t : p) t = static_cast<int32_t>(3 + rng() % 256);
      prompts.push_back(p);
    }
    max_tokens.push_back(1 + static_cast<int32_t>(rng() % 48));
  }
  std::vector<std::vector<int32_t>> expected;
  for (int i = 0; i < n; ++i) expected.push_back(Alone(prompts[i], max_tokens[i], sc.kv_dtype));

  ExecutorConfig c;
  c.policy = sc.policy;
  c.enable_chunked_context = sc.chunked;
  c.enable_kv_cache_reuse = sc.reuse;
  c.tokens_per_block = 16;
  c.max_batch_size = 16;
  c.max_num_tokens = sc.chunked ? 128 : 512;
  c.max_tokens_in_paged_kv_cache = sc.policy == CapacityPolicy::kMaxUtilization ? 1400 : 8192;
  c.speculative_mode = sc.mode;
  c.kv_dtype = sc.kv_dtype;
  c.max_draft_tokens = 5;
  // The latency budget cuts prompt chunks by measured step costs: a client's drafts then find
  // no room in the last chunk depending on timing (a CI run lost a right draft that way), and
  // the assertions below about them need the chunks max_num_tokens gives. The budget with
  // speculation: executor_test's LatencyBudget test.
  c.max_inter_token_latency_ms = -1;
  auto e = Make(c, sc.mode == SpeculativeMode::kDraftModel ? draft_ : nullptr);
  // The executor keeps its last 1000 steps' stats: drain them as the run goes.
  std::vector<IterationStats> stats;
  std::atomic<bool> done{false};
  std::thread poller([&] {
    while (!done.load()) {
      for (IterationStats& s : e->GetLatestIterationStats()) stats.push_back(s);
      std::this_thread::sleep_for(milliseconds(2));
    }
  });
  std::vector<RequestId> ids(n);
  for (int i = 0; i < n; ++i) {
    Request r = Greedy(prompts[i], max_tokens[i]);
    if (i % 3 == 0) r.num_draft_tokens = 0;  // no speculation for this one
    if (i % 3 == 2) {
      // The client's guess of the first tokens: right, wrong from the third on, or all wrong.
      r.draft_tokens.assign(expected[i].begin(),
                            expected[i].begin() + std::min<size_t>(6, expected[i].size()));
      if (i % 9 == 5 && r.draft_tokens.size() > 2)
        r.draft_tokens[2] = (r.draft_tokens[2] + 1) % 259;
      if (i % 9 == 8)
        for (auto& t : r.draft_tokens) t = (t + 7) % 259;
    }
    auto id = e->Enqueue(std::move(r));
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    ids[i] = *id;
    if (i >= 8) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
  }
  int64_t drafts = 0, accepted = 0, spec_steps = 0;
  int right_draft_requests = 0, right_drafts_accepted = 0;
  for (int i = 0; i < n; ++i) {
    std::vector<Result> rs = Collect(*e, ids[i]);
    ASSERT_FALSE(rs.empty());
    const Result& res = rs.back();
    ASSERT_TRUE(res.error.ok()) << res.error.ToString();
    EXPECT_EQ(res.output_token_ids, expected[i])
        << "request " << i << " (prompt " << prompts[i].size() << ", max_tokens " << max_tokens[i]
        << ")";
    EXPECT_EQ(res.finish_reason, FinishReason::kLength);
    EXPECT_LE(res.stats.num_accepted_draft_tokens, res.stats.num_draft_tokens);
    if (i % 3 == 0) {
      EXPECT_EQ(res.stats.num_draft_tokens, 0) << i;
    }
    // A client's right drafts are accepted. Counted over those requests, not each: a step's
    // token budget also holds the other sequences' decode rows, so whether a prompt's last
    // chunk leaves room for its drafts depends on timing (a TSan run had none for one).
    if (i % 9 == 2 && max_tokens[i] > 1) {
      ++right_draft_requests;
      right_drafts_accepted += res.stats.num_accepted_draft_tokens > 0;
    }
    drafts += res.stats.num_draft_tokens;
    accepted += res.stats.num_accepted_draft_tokens;
  }
  done.store(true);
  poller.join();
  for (IterationStats& s : e->GetLatestIterationStats()) stats.push_back(s);
  int32_t peak = 0;
  for (const IterationStats& s : stats) {
    spec_steps += s.num_draft_tokens > 0;
    peak = std::max(peak, s.num_scheduled_context + s.num_scheduled_generation);
  }
  std::printf("drafts %lld, accepted %lld (%.0f%%), steps with drafts %lld, peak batch %d\n",
              static_cast<long long>(drafts), static_cast<long long>(accepted),
              drafts ? 100.0 * accepted / drafts : 0.0, static_cast<long long>(spec_steps), peak);
  EXPECT_GE(2 * right_drafts_accepted, right_draft_requests)
      << right_drafts_accepted << " of " << right_draft_requests
      << " requests with right client drafts had them accepted";
  EXPECT_GT(peak, 4) << "requests must share steps";
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, drafts) << "some drafts must be rejected for the test to mean anything";
  ExpectNoLeaks(*e);
}

INSTANTIATE_TEST_SUITE_P(
    Configurations, SpeculativeInvarianceTest,
    ::testing::Values(
        SpecCase{CapacityPolicy::kGuaranteedNoEvict, false, false, SpeculativeMode::kPromptLookup},
        SpecCase{CapacityPolicy::kGuaranteedNoEvict, true, true, SpeculativeMode::kPromptLookup},
        SpecCase{CapacityPolicy::kMaxUtilization, true, true, SpeculativeMode::kPromptLookup},
        SpecCase{CapacityPolicy::kMaxUtilization, false, false, SpeculativeMode::kPromptLookup},
        SpecCase{CapacityPolicy::kGuaranteedNoEvict, true, true, SpeculativeMode::kDraftModel},
        SpecCase{CapacityPolicy::kMaxUtilization, true, true, SpeculativeMode::kDraftModel},
        SpecCase{CapacityPolicy::kMaxUtilization, false, false, SpeculativeMode::kDraftModel},
        SpecCase{CapacityPolicy::kGuaranteedNoEvict, true, true, SpeculativeMode::kPromptLookup,
                 DType::kI8},
        SpecCase{CapacityPolicy::kMaxUtilization, true, true, SpeculativeMode::kDraftModel,
                 DType::kI8},
        SpecCase{CapacityPolicy::kGuaranteedNoEvict, false, false, SpeculativeMode::kLookahead},
        SpecCase{CapacityPolicy::kMaxUtilization, true, true, SpeculativeMode::kLookahead},
        SpecCase{CapacityPolicy::kGuaranteedNoEvict, true, true, SpeculativeMode::kLookahead,
                 DType::kI8}),
    [](const ::testing::TestParamInfo<SpecCase>& info) {
      const SpecCase& c = info.param;
      return std::string(c.mode == SpeculativeMode::kDraftModel  ? "DraftModel_"
                         : c.mode == SpeculativeMode::kLookahead ? "Lookahead_"
                                                                 : "PromptLookup_") +
             (c.policy == CapacityPolicy::kGuaranteedNoEvict ? "NoEvict" : "MaxUtil") +
             (c.chunked ? "_Chunked" : "_Whole") + (c.reuse ? "_Reuse" : "_NoReuse") +
             (c.kv_dtype == DType::kI8 ? "_Int8Kv" : "");
    });

ExecutorConfig SmallConfig() {
  ExecutorConfig c;
  c.max_tokens_in_paged_kv_cache = 4096;
  c.tokens_per_block = 16;
  c.enable_chunked_context = true;
  c.max_num_tokens = 64;
  c.speculative_mode = SpeculativeMode::kPromptLookup;
  return c;
}

const std::vector<int32_t> kPrompt = {1,  40, 41, 42, 43, 44, 45, 46, 47, 48,
                                      49, 50, 51, 52, 53, 54, 55, 56, 57};

// Streaming, log-probs and generation logits with drafts: a step that accepts drafts streams
// several tokens at once; everything equals the non-speculative run.
TEST_F(SpeculativeTest, StreamingLogProbsAndLogitsEqualTheRunWithoutDrafts) {
  auto e = Make(SmallConfig());
  const std::vector<int32_t> alone = Alone(kPrompt, 24);
  Request plain = Greedy(kPrompt, 24);
  plain.num_draft_tokens = 0;
  plain.return_log_probs = true;
  plain.return_generation_logits = true;
  const Result want = RunOne(*e, plain);
  ASSERT_EQ(want.output_token_ids, alone);
  Request spec = plain;
  spec.num_draft_tokens = -1;
  spec.draft_tokens.assign(alone.begin(),
                           alone.begin() + 8);  // all right: 9 tokens in the first step
  spec.streaming = true;
  auto id = e->Enqueue(spec);
  ASSERT_TRUE(id.ok());
  std::vector<Result> parts = Collect(*e, *id);
  std::vector<int32_t> ids;
  std::vector<float> lps, logits;
  size_t most = 0;
  for (const Result& p : parts) {
    ids.insert(ids.end(), p.output_token_ids.begin(), p.output_token_ids.end());
    lps.insert(lps.end(), p.log_probs.begin(), p.log_probs.end());
    logits.insert(logits.end(), p.generation_logits.begin(), p.generation_logits.end());
    most = std::max(most, p.output_token_ids.size());
  }
  EXPECT_EQ(ids, alone);
  EXPECT_GE(most, 9u)
      << "the first step should stream the 8 accepted drafts and the token after them";
  EXPECT_EQ(lps, want.log_probs);
  EXPECT_EQ(logits, want.generation_logits);
  EXPECT_EQ(parts.back().stats.num_draft_tokens >= 8, true);
  EXPECT_GE(parts.back().stats.num_accepted_draft_tokens, 8);
  ExpectNoLeaks(*e);
}

// An end id, a stop word or max_tokens inside a run of accepted drafts ends the sequence
// there, as without drafts.
TEST_F(SpeculativeTest, EndIdStopWordsAndMaxTokensInsideAcceptedDrafts) {
  auto e = Make(SmallConfig());
  const std::vector<int32_t> alone = Alone(kPrompt, 12);
  Request r = Greedy(kPrompt, 12);
  r.draft_tokens.assign(alone.begin(), alone.begin() + 10);
  r.return_generation_logits = true;
  Request end = r;
  end.end_id = alone[3];
  Result res = RunOne(*e, end);
  EXPECT_EQ(res.finish_reason, FinishReason::kEndId);
  EXPECT_EQ(res.output_token_ids, std::vector<int32_t>(alone.begin(), alone.begin() + 3));
  EXPECT_EQ(res.generation_logits.size(), 3u * res.vocab_size);
  Request stop = r;
  stop.stop_words = {{alone[4], alone[5]}};
  res = RunOne(*e, stop);
  EXPECT_EQ(res.finish_reason, FinishReason::kStopWords);
  EXPECT_EQ(res.output_token_ids, std::vector<int32_t>(alone.begin(), alone.begin() + 6));
  EXPECT_EQ(res.generation_logits.size(), 6u * res.vocab_size);
  Request shortr = r;
  shortr.max_tokens = 4;  // 10 drafts offered, 3 fit (the 4th token comes from the last row)
  res = RunOne(*e, shortr);
  EXPECT_EQ(res.finish_reason, FinishReason::kLength);
  EXPECT_EQ(res.output_token_ids, std::vector<int32_t>(alone.begin(), alone.begin() + 4));
  EXPECT_EQ(res.stats.num_draft_tokens, 3);
  ExpectNoLeaks(*e);
}

TEST_F(SpeculativeTest, BadDraftsAreRefused) {
  auto e = Make(SmallConfig());
  Request r = Greedy(kPrompt, 4);
  r.draft_tokens = {5, 100000};
  auto id = e->Enqueue(r);
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.status().message().find("draft token id 100000"), std::string::npos)
      << id.status().ToString();
  r.draft_tokens.assign(kMaxDraftTokens + 1, 5);
  id = e->Enqueue(r);
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.status().message().find("at most"), std::string::npos);
  r.draft_tokens.clear();
  r.num_draft_tokens = kMaxDraftTokens + 1;
  EXPECT_FALSE(e->Enqueue(r).ok());
  ExecutorConfig bad = SmallConfig();
  bad.max_draft_tokens = -1;
  EXPECT_FALSE(bad.Validate().ok());
}

using testing::ChiSquareCritical999;
using testing::ChiSquareTwoSample;

// Rejection sampling keeps the distribution: the first two tokens of many seeded samples with
// drafts (right and wrong guesses, and prompt lookup) against as many without, a two-sample
// chi-square test over the (token, token) pairs.
TEST_F(SpeculativeTest, SeededSamplingKeepsItsDistribution) {
  auto e = Make(SmallConfig());
  const std::vector<int32_t> alone = Alone(kPrompt, 2);
  const int draws = 1500;
  auto sample = [&](bool speculate, int seed_base) {
    std::map<std::pair<int32_t, int32_t>, int> counts;
    std::vector<RequestId> ids;
    for (int i = 0; i < draws; ++i) {
      Request r;
      r.prompt_ids = kPrompt;
      r.max_tokens = 2;
      r.exclude_input_in_output = true;
      r.sampling.temperature = 1.5f;
      r.sampling.top_k = 4;
      r.sampling.seed = static_cast<uint64_t>(seed_base + i);
      r.num_draft_tokens = 0;
      // The greedy pair as the guess half the time, a pair outside the top-k the other half.
      if (speculate) r.draft_tokens = i % 2 ? alone : std::vector<int32_t>{200, 201};
      auto id = e->Enqueue(std::move(r));
      EXPECT_TRUE(id.ok());
      ids.push_back(*id);
    }
    for (RequestId id : ids) {
      std::vector<Result> rs = Collect(*e, id);
      const auto& t = rs.back().output_token_ids;
      EXPECT_EQ(t.size(), 2u);
      if (t.size() == 2) counts[{t[0], t[1]}]++;
    }
    return counts;
  };
  const auto plain = sample(false, 1000);
  const auto spec = sample(true, 900000);
  const auto [chi2, df] = ChiSquareTwoSample(plain, spec);
  ASSERT_GE(df, 3) << "too few outcomes for the test to mean anything";
  const double critical = ChiSquareCritical999(df);
  std::printf("chi2 %.1f over %d degrees of freedom (99.9%% critical %.1f)\n", chi2, df, critical);
  EXPECT_LT(chi2, critical);
  ExpectNoLeaks(*e);
}

// Lookahead on text it predicts: 48 greedy requests in flight (chunked prompts, prefix reuse,
// a small cache under max_utilization, some without drafts) give exactly their output alone,
// with branches off the tree's first path accepted (their K/V moved to their positions).
TEST_F(SpeculativeTest, LookaheadOnPredictableTextIsExact) {
  std::unique_ptr<Model> bigram = testing::NearBigramModel(path_ + ".bigram.gguf", 0.15f);
  ASSERT_TRUE(bigram);
  std::filesystem::remove(path_ + ".bigram.gguf");
  std::mt19937 rng(11);
  const int n = 48;
  std::vector<std::vector<int32_t>> prompts, expected;
  std::vector<int32_t> max_tokens;
  // Half the prompts hold the model's own text, then a copy with every fourth token wrong:
  // the pool's newest n-grams after a token are then often wrong and older ones right (a
  // branch off the first path), and the Jacobi window finds the rest.
  const std::vector<int32_t> text = testing::GreedyAlone(*bigram, *pool_, kPrompt, 96, DType::kF16);
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> p(1 + rng() % (i % 2 ? 300 : 60));
    for (auto& t : p) t = static_cast<int32_t>(3 + rng() % 256);
    if (i % 2 == 0) {
      // The text, a wrong copy of its second half, then its first half again: the model goes
      // on with the second half, whose newest n-grams are the wrong copy's.
      p.insert(p.end(), text.begin(), text.end());
      for (size_t k = 48; k < text.size(); ++k)
        p.push_back(k % 4 == 3 ? static_cast<int32_t>(3 + rng() % 256) : text[k]);
      p.insert(p.end(), text.begin(), text.begin() + 48);
    }
    prompts.push_back(p);
    max_tokens.push_back(1 + static_cast<int32_t>(rng() % 64));
    expected.push_back(testing::GreedyAlone(*bigram, *pool_, p, max_tokens.back(), DType::kF16));
  }
  ExecutorConfig c = testing::TreeDraftingConfig(SpeculativeMode::kLookahead);
  c.lookahead = {4, 3, 4};
  auto made = Executor::Create(*bigram, c);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  Executor& e = **made;
  std::vector<RequestId> ids;
  for (int i = 0; i < n; ++i) {
    Request r = Greedy(prompts[i], max_tokens[i]);
    if (i % 6 == 0) r.num_draft_tokens = 0;
    if (i % 6 == 1) r.lookahead = {2, 2, 2};  // a request's own, smaller configuration
    auto id = e.Enqueue(std::move(r));
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    ids.push_back(*id);
  }
  int64_t drafts = 0, accepted = 0;
  for (int i = 0; i < n; ++i) {
    std::vector<Result> rs = Collect(e, ids[i]);
    ASSERT_FALSE(rs.empty());
    ASSERT_TRUE(rs.back().error.ok()) << rs.back().error.ToString();
    EXPECT_EQ(rs.back().output_token_ids, expected[i]) << "request " << i;
    if (i % 6 == 0) {
      EXPECT_EQ(rs.back().stats.num_draft_tokens, 0);
    }
    drafts += rs.back().stats.num_draft_tokens;
    accepted += rs.back().stats.num_accepted_draft_tokens;
  }
  std::printf("drafts %lld, accepted %lld, K/V slots moved %lld\n", static_cast<long long>(drafts),
              static_cast<long long>(accepted), static_cast<long long>(e.num_tree_kv_moves()));
  EXPECT_GT(accepted, 0);
  EXPECT_GT(e.num_tree_kv_moves(), 0) << "no branch off the tree's first path was accepted";
  ExpectNoLeaks(e);
}

// Lookahead decoding's trees keep the distribution too: each node offers its first child as
// the draft and follows whichever child the draw matches. On a near-bigram model (its text
// predictable from its own earlier text, as a pool needs), the second to fourth tokens (the
// first comes from the prompt's pass) of many seeded samples against as many without.
TEST_F(SpeculativeTest, SeededSamplingWithLookaheadKeepsItsDistribution) {
  std::unique_ptr<Model> bigram = testing::NearBigramModel(path_ + ".bigram.gguf", 0.15f);
  ASSERT_TRUE(bigram);
  std::filesystem::remove(path_ + ".bigram.gguf");
  ExecutorConfig c = SmallConfig();
  c.num_threads = 1;
  c.speculative_mode = SpeculativeMode::kLookahead;
  c.adaptive_draft_length = false;  // a tree every step
  c.lookahead = {3, 3, 4};
  auto made = Executor::Create(*bigram, c);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  c.speculative_mode = SpeculativeMode::kNone;
  auto made_plain = Executor::Create(*bigram, c);
  ASSERT_TRUE(made_plain.ok());
  // The prompt ends with the model's own greedy text: the pool holds its likely n-grams.
  std::vector<int32_t> prompt = kPrompt;
  const std::vector<int32_t> greedy =
      testing::GreedyAlone(*bigram, *pool_, kPrompt, 64, DType::kF16);
  prompt.insert(prompt.end(), greedy.begin(), greedy.end());
  testing::ExpectSamplingKept(**made_plain, **made, prompt, /*min_accepted=*/750);
  ExpectNoLeaks(**made);
}

// Speculative sampling with the draft model's distribution (draft_logits): drafts drawn from
// q, kept with probability min(1, p / q), otherwise replaced from max(0, p - q); the first two
// tokens keep the distribution of plain sampling (two-sample chi-square test).
TEST_F(SpeculativeTest, DraftLogitsKeepTheDistribution) {
  auto e = Make(SmallConfig());
  const std::vector<int32_t> alone = Alone(kPrompt, 2);
  const int32_t vocab = model_->config().vocab_size;
  const float temperature = 1.5f;
  // The draft model's logits per position: most mass near the greedy tokens, some elsewhere.
  std::vector<std::vector<float>> logits(2, std::vector<float>(vocab, 0.0f));
  for (int pos = 0; pos < 2; ++pos) {
    logits[pos][alone[pos]] = 8.0f;
    for (int d = 1; d <= 6; ++d) logits[pos][(alone[pos] + 37 * d) % vocab] = 6.0f;
  }
  std::vector<std::discrete_distribution<int32_t>> q;
  for (int pos = 0; pos < 2; ++pos) {
    std::vector<double> w(vocab);
    for (int32_t v = 0; v < vocab; ++v) w[v] = std::exp(logits[pos][v] / temperature);
    q.emplace_back(w.begin(), w.end());
  }
  std::mt19937 rng(5);
  const int draws = 1500;
  int accepted = 0, drafted = 0;
  auto sample = [&](bool speculate, int seed_base) {
    std::map<std::pair<int32_t, int32_t>, int> counts;
    std::vector<RequestId> ids;
    for (int i = 0; i < draws; ++i) {
      Request r;
      r.prompt_ids = kPrompt;
      r.max_tokens = 2;
      r.exclude_input_in_output = true;
      r.sampling.temperature = temperature;
      r.sampling.top_k = 4;
      r.sampling.seed = static_cast<uint64_t>(seed_base + i);
      r.num_draft_tokens = 0;
      if (speculate) {
        r.draft_tokens = {q[0](rng), q[1](rng)};
        for (int pos = 0; pos < 2; ++pos)
          r.draft_logits.insert(r.draft_logits.end(), logits[pos].begin(), logits[pos].end());
      }
      auto id = e->Enqueue(std::move(r));
      EXPECT_TRUE(id.ok()) << id.status().ToString();
      ids.push_back(*id);
    }
    for (RequestId id : ids) {
      std::vector<Result> rs = Collect(*e, id);
      const auto& t = rs.back().output_token_ids;
      EXPECT_EQ(t.size(), 2u);
      if (t.size() == 2) counts[{t[0], t[1]}]++;
      drafted += rs.back().stats.num_draft_tokens;
      accepted += rs.back().stats.num_accepted_draft_tokens;
    }
    return counts;
  };
  const auto plain = sample(false, 1000);
  const auto spec = sample(true, 900000);
  const auto [chi2, df] = ChiSquareTwoSample(plain, spec);
  ASSERT_GE(df, 3) << "too few outcomes for the test to mean anything";
  const double critical = ChiSquareCritical999(df);
  std::printf(
      "draft logits: chi2 %.1f over %d degrees of freedom (99.9%% critical %.1f), %d of %d drafts "
      "accepted\n",
      chi2, df, critical, accepted, drafted);
  EXPECT_LT(chi2, critical);
  EXPECT_GT(accepted, drafted / 10) << "drafts from q near p are mostly kept";
  EXPECT_LT(accepted, drafted) << "and sometimes replaced";
  // Bad logits: the wrong width, or a row with no finite value.
  Request bad;
  bad.prompt_ids = kPrompt;
  bad.max_tokens = 2;
  bad.draft_tokens = {alone[0]};
  bad.draft_logits.assign(vocab - 1, 0.0f);
  auto id = e->Enqueue(bad);
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.status().message().find("draft_logits must be [1, " + std::to_string(vocab) + "]"),
            std::string::npos);
  bad.draft_logits.assign(vocab, -std::numeric_limits<float>::infinity());
  id = e->Enqueue(bad);
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.status().message().find("no finite logit"), std::string::npos);
  ExpectNoLeaks(*e);
}

// The model as its own draft: every draft holds, so each step after the first adds
// max_draft_tokens + 1 tokens; the draft model's blocks all come back.
TEST_F(SpeculativeTest, AModelDraftingForItselfHasEveryDraftAccepted) {
  auto full = Model::Load(path_);
  ASSERT_TRUE(full.ok());
  ExecutorConfig c = SmallConfig();
  c.speculative_mode = SpeculativeMode::kDraftModel;
  c.max_draft_tokens = 4;
  c.adaptive_draft_length = false;  // a draft as costly as the model never pays off
  auto e = Make(c, full->get());
  const std::vector<int32_t> alone = Alone(kPrompt, 41);
  Request r = Greedy(kPrompt, 41);
  r.streaming = true;
  auto id = e->Enqueue(r);
  ASSERT_TRUE(id.ok());
  std::vector<Result> parts = Collect(*e, *id);
  std::vector<int32_t> ids;
  for (const Result& p : parts)
    ids.insert(ids.end(), p.output_token_ids.begin(), p.output_token_ids.end());
  EXPECT_EQ(ids, alone);
  // 1 token from the prompt's step, then 8 steps of 5.
  EXPECT_EQ(parts.back().stats.num_draft_tokens, 32);
  EXPECT_EQ(parts.back().stats.num_accepted_draft_tokens, 32);
  EXPECT_LE(parts.size(), 10u);
  ExpectNoLeaks(*e);
}

TEST_F(SpeculativeTest, ADraftModelMustShareTheVocabulary) {
  ExecutorConfig c = SmallConfig();
  c.speculative_mode = SpeculativeMode::kDraftModel;
  EXPECT_FALSE(Executor::Create(*model_, c, nullptr).ok());
  auto config = PresetConfig(Architecture::kLlama, "tiny");
  ASSERT_TRUE(config.ok());
  RandomModelParams params;
  params.config = *config;
  const std::string other = path_ + ".other.gguf";
  ASSERT_TRUE(WriteRandomGguf(params, testing::ByteFallbackVocab({"extra", "words"}), other).ok());
  auto m = Model::Load(other);
  ASSERT_TRUE(m.ok());
  auto e = Executor::Create(*model_, c, m->get());
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("vocabulary"), std::string::npos) << e.status().ToString();
  std::filesystem::remove(other);
}

// The same with the draft model (the model drafting for itself, greedily: accepted with
// probability p(draft)): the first three tokens, sampled with drafts for tokens 2 and 3,
// against as many samples without.
TEST_F(SpeculativeTest, SeededSamplingWithADraftModelKeepsItsDistribution) {
  auto full = Model::Load(path_);
  ASSERT_TRUE(full.ok());
  ExecutorConfig c = SmallConfig();
  c.speculative_mode = SpeculativeMode::kDraftModel;
  auto e = Make(c, full->get());
  const int draws = 2000;
  auto sample = [&](bool speculate, int seed_base) {
    std::map<std::vector<int32_t>, int> counts;
    std::vector<RequestId> ids;
    int64_t drafts = 0, accepted = 0;
    for (int i = 0; i < draws; ++i) {
      Request r;
      r.prompt_ids = kPrompt;
      r.max_tokens = 3;
      r.exclude_input_in_output = true;
      r.sampling.temperature = 1.5f;
      r.sampling.top_k = 3;
      r.sampling.seed = static_cast<uint64_t>(seed_base + i);
      r.num_draft_tokens = speculate ? -1 : 0;
      auto id = e->Enqueue(std::move(r));
      EXPECT_TRUE(id.ok());
      ids.push_back(*id);
    }
    for (RequestId id : ids) {
      std::vector<Result> rs = Collect(*e, id);
      counts[rs.back().output_token_ids]++;
      drafts += rs.back().stats.num_draft_tokens;
      accepted += rs.back().stats.num_accepted_draft_tokens;
    }
    if (speculate) {
      std::printf("drafts %lld, accepted %lld\n", static_cast<long long>(drafts),
                  static_cast<long long>(accepted));
      EXPECT_GT(accepted, draws / 10);
      EXPECT_LT(accepted, drafts);
    }
    return counts;
  };
  const auto plain = sample(false, 5000);
  const auto spec = sample(true, 700000);
  const auto [chi2, df] = ChiSquareTwoSample(plain, spec);
  ASSERT_GE(df, 5);
  const double critical = ChiSquareCritical999(df);
  std::printf("chi2 %.1f over %d degrees of freedom (99.9%% critical %.1f)\n", chi2, df, critical);
  EXPECT_LT(chi2, critical);
  ExpectNoLeaks(*e);
}

// Adaptive draft length: a draft model that never agrees (another random model of the same
// vocabulary and size) stops drafting after its first failures and only tries again now and
// then; a request that asks for a number of drafts gets them whatever they cost.
TEST_F(SpeculativeTest, AdaptiveDraftLengthStopsDraftsThatFail) {
  auto config = PresetConfig(Architecture::kLlama, "tiny");
  ASSERT_TRUE(config.ok());
  RandomModelParams params;
  params.config = *config;
  params.dtype = DType::kQ8_0;
  params.seed = 12345;
  const std::string other = path_ + ".other-draft.gguf";
  ASSERT_TRUE(WriteRandomGguf(params, testing::ByteFallbackVocab(), other).ok());
  auto stranger = Model::Load(other);
  ASSERT_TRUE(stranger.ok());
  ExecutorConfig c = SmallConfig();
  c.speculative_mode = SpeculativeMode::kDraftModel;
  c.max_draft_tokens = 4;
  auto e = Make(c, stranger->get());
  const std::vector<int32_t> alone = Alone(kPrompt, 80);
  const Result res = RunOne(*e, Greedy(kPrompt, 80));
  EXPECT_EQ(res.output_token_ids, alone);
  std::printf("a draft that never agrees: %d drafts, %d accepted\n", res.stats.num_draft_tokens,
              res.stats.num_accepted_draft_tokens);
  // The draft length weighs the measured cost of a draft pass against a target pass, so a
  // noisy machine (sanitizers, other jobs) can make a failing draft look cheap for a step or
  // two: allow that, not drafting throughout (every step would give ~4 x 80).
  EXPECT_LE(res.stats.num_draft_tokens, 4 + 80 / 8)
      << "a few in the first step, then one tried now and then";
  Request fixed = Greedy(kPrompt, 41);
  fixed.num_draft_tokens = 4;
  const Result forced = RunOne(*e, fixed);
  EXPECT_EQ(forced.output_token_ids, Alone(kPrompt, 41));
  EXPECT_GE(forced.stats.num_draft_tokens, 100)
      << "4 drafts in (nearly) every one of the 40 decode steps";
  e.reset();
  std::filesystem::remove(other);
}

}  // namespace
}  // namespace inflight
