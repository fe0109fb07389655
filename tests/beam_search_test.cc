// Beam search in the in-flight executor against a naive beam search written here: every beam
// re-runs its whole sequence through the model (teacher-forced logits, no KV cache, the full
// vocabulary ranked in double precision) and the next beams are chosen among all (beam,
// token) pairs. Beam requests share steps with each other and with plain requests, under both
// capacity policies; beams share KV blocks (counts asserted) and leave none behind. On the
// mixture-of-experts and sliding-window files of ../shared/golden/arch, beams in a batch equal
// the same request's beams alone, bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <numeric>
#include <random>

#include "base/thread_pool.h"
#include "engine/executor.h"
#include "engine/generate.h"
#include "engine_test_util.h"
#include "test_util.h"

namespace inflight {
namespace {

struct BeamCase {
  std::vector<int32_t> prompt;
  int32_t width = 1;
  int32_t max_tokens = 10;
  int32_t end_id = -1;
  int32_t min_tokens = 0;
  float length_penalty = 0.0f;
  int32_t early_stopping = 1;
  float diversity = 0.0f;
  std::vector<std::vector<int32_t>> stop_words;
  int32_t num_return = 0;  // 0: width
};

struct RefHypothesis {
  std::vector<int32_t> tokens;
  double cum = 0;
  double score = 0;
  FinishReason finish = FinishReason::kNotFinished;
  double end_log_prob = 0;  // of the end token, in cum and score but not output
};

class BeamSearchTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    path_ = testing::WriteTinyModel("inflight_beam_search_test");
    auto m = Model::Load(path_);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(m).value().release();
    pool_ = new ThreadPool(1);  // see speculative_test: one thread for the tiny model
  }
  static void TearDownTestSuite() {
    delete model_;
    delete pool_;
    std::filesystem::remove(path_);
  }

  static std::unique_ptr<Executor> Make(ExecutorConfig c) {
    c.num_threads = 1;
    if (c.max_beam_width == 1) c.max_beam_width = 4;
    auto e = Executor::Create(*model_, c);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? std::move(e).value() : nullptr;
  }

  // Log-softmax of the last position's logits of `ids` (with `banned` left out), in double
  // precision.
  static std::vector<double> LastLogProbs(const std::vector<int32_t>& ids, int32_t banned) {
    auto all = AllLogits(*model_, ids, kv_dtype_, *pool_);
    EXPECT_TRUE(all.ok());
    const int32_t vocab = model_->config().vocab_size;
    std::vector<float> row(all->begin() + static_cast<long>((ids.size() - 1) * vocab),
                           all->begin() + static_cast<long>(ids.size() * vocab));
    if (banned >= 0) row[banned] = -std::numeric_limits<float>::infinity();
    double mx = -1e300;
    for (int32_t i = 0; i < vocab; ++i) mx = std::max(mx, static_cast<double>(row[i]));
    double sum = 0;
    for (int32_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(row[i]) - mx);
    std::vector<double> lp(vocab);
    for (int32_t i = 0; i < vocab; ++i) lp[i] = static_cast<double>(row[i]) - mx - std::log(sum);
    return lp;
  }

  static double Penalised(double cum, int32_t length, float penalty) {
    return penalty == 0 ? cum : cum / std::pow(static_cast<double>(std::max(length, 1)), penalty);
  }

  // The naive beam search: the best num_return hypotheses, best first.
  static std::vector<RefHypothesis> Naive(const BeamCase& c) {
    struct Beam {
      std::vector<int32_t> tokens;  // whole sequence
      double cum = 0;
    };
    const int32_t prompt_len = static_cast<int32_t>(c.prompt.size());
    std::vector<Beam> beams{{c.prompt, 0}};
    std::vector<RefHypothesis> hyps;
    auto ends_with_stop = [&](const std::vector<int32_t>& seq) {
      for (const auto& w : c.stop_words) {
        if (w.size() <= seq.size() - prompt_len &&
            std::equal(w.begin(), w.end(), seq.end() - static_cast<long>(w.size())))
          return true;
      }
      return false;
    };
    auto kept_worst = [&] {
      std::vector<double> s;
      for (const auto& h : hyps) s.push_back(h.score);
      std::sort(s.rbegin(), s.rend());
      return s[c.width - 1];
    };
    for (int32_t g = 1; g <= c.max_tokens; ++g) {
      struct Cand {
        double rank;
        int32_t beam, r, token;
        double lp;
      };
      std::vector<Cand> cands;
      for (int32_t b = 0; b < static_cast<int32_t>(beams.size()); ++b) {
        std::vector<double> lp =
            LastLogProbs(beams[b].tokens, c.end_id >= 0 && g - 1 < c.min_tokens ? c.end_id : -1);
        std::vector<int32_t> order(lp.size());
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(),
                         [&](int32_t x, int32_t y) { return lp[x] > lp[y]; });
        for (int32_t r = 0; r < static_cast<int32_t>(order.size()); ++r) {
          if (std::isinf(lp[order[r]])) break;
          cands.push_back(
              {beams[b].cum + lp[order[r]] - c.diversity * r, b, r, order[r], lp[order[r]]});
        }
      }
      std::stable_sort(cands.begin(), cands.end(),
                       [](const Cand& x, const Cand& y) { return x.rank > y.rank; });
      std::vector<Beam> next;
      for (size_t i = 0; i < cands.size() && static_cast<int32_t>(next.size()) < c.width; ++i) {
        const Cand& k = cands[i];
        Beam nb{beams[k.beam].tokens, beams[k.beam].cum + k.lp};
        nb.tokens.push_back(k.token);
        FinishReason ends = FinishReason::kNotFinished;
        if (k.token == c.end_id)
          ends = FinishReason::kEndId;
        else if (g >= c.min_tokens && ends_with_stop(nb.tokens))
          ends = FinishReason::kStopWords;
        if (ends != FinishReason::kNotFinished) {
          if (static_cast<int32_t>(i) < c.width) {
            RefHypothesis h;
            h.tokens.assign(nb.tokens.begin() + prompt_len,
                            nb.tokens.end() - (ends == FinishReason::kEndId ? 1 : 0));
            h.cum = nb.cum;
            h.score = Penalised(nb.cum, g, c.length_penalty);
            h.finish = ends;
            if (ends == FinishReason::kEndId) h.end_log_prob = k.lp;
            hyps.push_back(h);
          }
          continue;
        }
        next.push_back(nb);
      }
      bool done = next.empty();
      if (!done && static_cast<int32_t>(hyps.size()) >= c.width) {
        if (c.early_stopping == 1) {
          done = true;
        } else {
          double best = -1e300;
          for (const Beam& b : next) best = std::max(best, b.cum);
          const int32_t len = c.early_stopping > 1 && c.length_penalty > 0 ? c.max_tokens : g;
          done = kept_worst() >= Penalised(best, len, c.length_penalty);
        }
      }
      if (!done && g == c.max_tokens) {
        for (const Beam& b : next) {
          RefHypothesis h;
          h.tokens.assign(b.tokens.begin() + prompt_len, b.tokens.end());
          h.cum = b.cum;
          h.score = Penalised(b.cum, g, c.length_penalty);
          h.finish = FinishReason::kLength;
          hyps.push_back(h);
        }
        done = true;
      }
      if (done) break;
      beams = std::move(next);
    }
    std::stable_sort(hyps.begin(), hyps.end(), [](const RefHypothesis& x, const RefHypothesis& y) {
      return x.score > y.score;
    });
    hyps.resize(std::min<size_t>(hyps.size(), c.num_return > 0 ? c.num_return : c.width));
    return hyps;
  }

  static Request ToRequest(const BeamCase& c) {
    Request r;
    r.prompt_ids = c.prompt;
    r.max_tokens = c.max_tokens;
    r.sampling.temperature = 0;
    r.beam_width = c.width;
    r.num_return_sequences = c.num_return > 0 ? c.num_return : c.width;
    r.end_id = c.end_id;
    r.min_tokens = c.min_tokens;
    r.length_penalty = c.length_penalty;
    r.early_stopping = c.early_stopping;
    r.beam_search_diversity_rate = c.diversity;
    r.stop_words = c.stop_words;
    r.exclude_input_in_output = true;
    r.return_log_probs = true;
    return r;
  }

  // The executor's beams as hypotheses (width 1 runs the plain greedy path: one sequence).
  static std::vector<RefHypothesis> FromResult(const Result& res) {
    std::vector<RefHypothesis> out;
    if (res.beams.empty()) {
      out.push_back({res.output_token_ids, res.cum_log_prob, res.cum_log_prob, res.finish_reason});
      return out;
    }
    for (const BeamOutput& b : res.beams) {
      out.push_back({b.output_token_ids, b.cum_log_prob, b.score, b.finish_reason});
      const float sum = std::accumulate(b.log_probs.begin(), b.log_probs.end(), 0.0f);
      // The log-probs are the output tokens' (an end token's is only in cum_log_prob).
      if (b.finish_reason != FinishReason::kEndId) {
        EXPECT_NEAR(sum, b.cum_log_prob, 1e-3);
      }
      EXPECT_EQ(b.log_probs.size(), b.output_token_ids.size());
    }
    return out;
  }

  // Width 1 is plain greedy decoding, whose cum_log_prob leaves out an end token.
  static void ExpectSame(const std::vector<RefHypothesis>& want,
                         const std::vector<RefHypothesis>& got, const std::string& what,
                         bool greedy = false) {
    ASSERT_EQ(want.size(), got.size()) << what;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(want[i].tokens, got[i].tokens) << what << " beam " << i;
      const double end = greedy ? want[i].end_log_prob : 0.0;
      EXPECT_NEAR(want[i].cum - end, got[i].cum, 2e-3) << what << " beam " << i;
      EXPECT_NEAR(want[i].score - end, got[i].score, 2e-3) << what << " beam " << i;
      EXPECT_EQ(want[i].finish, got[i].finish) << what << " beam " << i;
    }
  }

  // Runs every case in one executor at once (with a plain greedy request beside each);
  // checks each against the naive search.
  static std::vector<std::vector<RefHypothesis>> RunAgainstNaive(const std::vector<BeamCase>& cases,
                                                                 ExecutorConfig config,
                                                                 bool expect_pauses = false) {
    std::vector<std::vector<RefHypothesis>> out;
    RunInto(cases, config, expect_pauses, &out);
    return out;
  }
  static void RunInto(const std::vector<BeamCase>& cases, ExecutorConfig config, bool expect_pauses,
                      std::vector<std::vector<RefHypothesis>>* out) {
    auto e = Make(config);
    ASSERT_NE(e, nullptr);
    std::vector<RequestId> ids, plain_ids;
    for (const BeamCase& c : cases) {
      auto id = e->Enqueue(ToRequest(c));
      ASSERT_TRUE(id.ok()) << id.status().ToString();
      ids.push_back(*id);
      Request p;
      p.prompt_ids = c.prompt;
      p.max_tokens = c.max_tokens;
      p.sampling.temperature = 0;
      p.exclude_input_in_output = true;
      auto pid = e->Enqueue(p);
      ASSERT_TRUE(pid.ok());
      plain_ids.push_back(*pid);
    }
    for (size_t i = 0; i < cases.size(); ++i) {
      const std::vector<Result> rs = testing::CollectResults(*e, ids[i]);
      ASSERT_FALSE(rs.empty());
      ASSERT_TRUE(rs.back().error.ok()) << rs.back().error.ToString();
      out->push_back(FromResult(rs.back()));
      ExpectSame(Naive(cases[i]), out->back(),
                 "case " + std::to_string(i) + " width " + std::to_string(cases[i].width),
                 cases[i].width == 1);
      const std::vector<Result> ps = testing::CollectResults(*e, plain_ids[i]);
      ASSERT_FALSE(ps.empty());
      EXPECT_EQ(ps.back().output_token_ids, testing::GreedyAlone(*model_, *pool_, cases[i].prompt,
                                                                 cases[i].max_tokens, kv_dtype_))
          << "plain " << i;
    }
    if (expect_pauses) {
      EXPECT_GT(e->LastIterationStats().num_paused_total, 0) << "the cache was meant to run short";
    }
    testing::ExpectNoKvLeaks(*e);
  }

  static std::vector<int32_t> RandomPrompt(std::mt19937& rng, int len) {
    std::vector<int32_t> p(len);
    for (auto& t : p) t = static_cast<int32_t>(3 + rng() % 256);
    return p;
  }

  // 20 prompts of 3-70 tokens; the end id of every other one is a token its greedy output
  // reaches early, so beams end at different steps.
  static std::vector<BeamCase> TwentyCases(int32_t width) {
    std::mt19937 rng(5);
    std::vector<BeamCase> cases;
    for (int i = 0; i < 20; ++i) {
      BeamCase c;
      c.prompt = RandomPrompt(rng, 3 + static_cast<int>(rng() % 68));
      c.width = width;
      c.max_tokens = 4 + static_cast<int32_t>(rng() % 10);
      if (i % 2 == 1) c.end_id = testing::GreedyAlone(*model_, *pool_, c.prompt, 3)[1 + i % 2];
      cases.push_back(c);
    }
    return cases;
  }

  static Model* model_;
  static ThreadPool* pool_;
  static std::string path_;
  static DType kv_dtype_;  // of the naive search and the plain requests' reference
};

Model* BeamSearchTest::model_ = nullptr;
DType BeamSearchTest::kv_dtype_ = DType::kF16;
ThreadPool* BeamSearchTest::pool_ = nullptr;
std::string BeamSearchTest::path_;

ExecutorConfig SmallBlocks() {
  ExecutorConfig c;
  c.tokens_per_block = 8;
  c.max_tokens_in_paged_kv_cache = 8 * 512;
  return c;
}

TEST_F(BeamSearchTest, WidthsOneTwoAndFourEqualTheNaiveBeamSearch) {
  std::vector<BeamCase> cases;
  for (int32_t w : {1, 2, 4}) {
    for (BeamCase& c : TwentyCases(w)) cases.push_back(c);
  }
  const auto got = RunAgainstNaive(cases, SmallBlocks());
  // The cases reach what they are meant to: beams that end on the end id and at max_tokens,
  // and a best beam that is not the greedy output.
  int ended = 0, at_length = 0, not_greedy = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    for (const RefHypothesis& h : got[i]) {
      ended += h.finish == FinishReason::kEndId;
      at_length += h.finish == FinishReason::kLength;
    }
    if (cases[i].width == 4 && cases[i].end_id < 0) {
      not_greedy += got[i][0].tokens !=
                    testing::GreedyAlone(*model_, *pool_, cases[i].prompt, cases[i].max_tokens);
    }
  }
  EXPECT_GT(ended, 5);
  EXPECT_GT(at_length, 5);
  EXPECT_GT(not_greedy, 0);
}

TEST_F(BeamSearchTest, LengthPenaltyEarlyStoppingDiversityStopWordsAndMinTokens) {
  std::mt19937 rng(9);
  std::vector<BeamCase> cases;
  for (int i = 0; i < 12; ++i) {
    BeamCase c;
    c.prompt = RandomPrompt(rng, 5 + static_cast<int>(rng() % 40));
    c.width = 2 + i % 3;
    c.max_tokens = 8 + i % 5;
    const std::vector<int32_t> greedy = testing::GreedyAlone(*model_, *pool_, c.prompt, 4);
    c.end_id = greedy[1 + i % 3];
    c.length_penalty = (i % 4 == 0) ? 0.0f : (i % 4 == 1 ? 1.0f : (i % 4 == 2 ? -0.5f : 2.0f));
    c.early_stopping = i % 3;  // 0 heuristic, 1 at beam_width hypotheses, 2 never early
    if (i % 2 == 0) c.diversity = 0.7f;
    if (i % 5 == 1) c.stop_words = {{greedy[0], greedy[1]}, {greedy[3]}};
    if (i % 4 == 3) c.min_tokens = 3;
    if (i % 3 == 2) c.num_return = 1 + i % c.width;
    cases.push_back(c);
  }
  RunAgainstNaive(cases, SmallBlocks());
}

TEST_F(BeamSearchTest, ChunkedPromptsAndPrefixReuseKeepTheBeams) {
  ExecutorConfig c = SmallBlocks();
  c.enable_chunked_context = true;
  c.enable_kv_cache_reuse = true;
  c.max_num_tokens = 24;
  std::vector<BeamCase> cases = TwentyCases(3);
  // Shared prefixes: the second ten repeat the first ten's prompts.
  for (int i = 10; i < 20; ++i) cases[i].prompt = cases[i - 10].prompt;
  RunAgainstNaive(cases, c);
}

// The 8-bit cache: beams share and copy its blocks (copy-on-write of a partial block, prefix
// reuse) as they do F16 ones, and equal the naive search over the same cache type.
TEST_F(BeamSearchTest, Int8CacheKeepsTheBeams) {
  ExecutorConfig c = SmallBlocks();
  c.tokens_per_block = 16;
  c.kv_dtype = DType::kI8;
  c.enable_chunked_context = true;
  c.enable_kv_cache_reuse = true;
  c.max_num_tokens = 32;
  std::vector<BeamCase> cases = TwentyCases(3);
  for (int i = 10; i < 20; ++i) cases[i].prompt = cases[i - 10].prompt;
  kv_dtype_ = DType::kI8;
  RunAgainstNaive(cases, c);
  kv_dtype_ = DType::kF16;
}

// A cache too small for all beams of all requests at once: max_utilization pauses requests
// (beams among them) and beams recompute; the output does not change.
TEST_F(BeamSearchTest, MaxUtilizationPausesAndRecomputesBeams) {
  ExecutorConfig c = SmallBlocks();
  c.policy = CapacityPolicy::kMaxUtilization;
  c.max_tokens_in_paged_kv_cache = 8 * 64;
  std::vector<BeamCase> cases = TwentyCases(4);
  cases.resize(10);
  for (BeamCase& k : cases) k.max_tokens = 14;
  RunAgainstNaive(cases, c, /*expect_pauses=*/true);
}

// Beams share the prompt's blocks and the blocks of what they generated in common: a 4-beam
// request over a 100-token prompt never holds more than the prompt's 12 full blocks once plus
// each beam's own blocks, and a beam that continues another copies only the partial block.
TEST_F(BeamSearchTest, BeamsShareBlocksCopyOnWrite) {
  ExecutorConfig c = SmallBlocks();
  auto e = Make(c);
  ASSERT_NE(e, nullptr);
  std::mt19937 rng(3);
  BeamCase k;
  k.prompt = RandomPrompt(rng, 100);
  k.width = 4;
  k.max_tokens = 20;
  e->GetLatestIterationStats();
  auto id = e->Enqueue(ToRequest(k));
  ASSERT_TRUE(id.ok());
  const std::vector<Result> rs = testing::CollectResults(*e, *id);
  ASSERT_TRUE(rs.back().error.ok());
  ExpectSame(Naive(k), FromResult(rs.back()), "100-token prompt");
  const int32_t tpb = c.tokens_per_block;
  int32_t most = 0;
  for (const IterationStats& s : e->GetLatestIterationStats())
    most = std::max(most, s.kv_blocks_used);
  const int32_t full_prompt = 100 / tpb;                                        // 12
  const int32_t per_beam = (100 + k.max_tokens + tpb - 1) / tpb - full_prompt;  // 3
  EXPECT_GT(most, full_prompt);
  EXPECT_LE(most, full_prompt + k.width * per_beam) << "beams do not share the prompt's blocks";
  EXPECT_LT(most, k.width * (full_prompt + per_beam) / 2);
  // Allocated over the request: the prompt's 13 blocks, then per step at most one copy or new
  // block per beam.
  EXPECT_LE(rs.back().stats.num_allocated_blocks, full_prompt + 1 + k.width * k.max_tokens);
  testing::ExpectNoKvLeaks(*e);
}

TEST_F(BeamSearchTest, StreamingSendsProvisionalBeamsAndTheSameFinalBeams) {
  auto e = Make(SmallBlocks());
  ASSERT_NE(e, nullptr);
  std::mt19937 rng(21);
  BeamCase k;
  k.prompt = RandomPrompt(rng, 30);
  k.width = 3;
  k.max_tokens = 9;
  Request r = ToRequest(k);
  r.streaming = true;
  auto id = e->Enqueue(r);
  ASSERT_TRUE(id.ok());
  const std::vector<Result> rs = testing::CollectResults(*e, *id);
  ASSERT_GE(rs.size(), 2u);
  for (size_t i = 0; i + 1 < rs.size(); ++i) {
    EXPECT_FALSE(rs[i].is_final);
    ASSERT_EQ(rs[i].beams.size(), 3u);
    // Provisional beams hold every token generated so far, best first.
    EXPECT_EQ(rs[i].beams[0].output_token_ids.size(), i + 1);
    EXPECT_GE(rs[i].beams[0].cum_log_prob, rs[i].beams[2].cum_log_prob);
  }
  EXPECT_TRUE(rs.back().is_final);
  ExpectSame(Naive(k), FromResult(rs.back()), "streamed");
  testing::ExpectNoKvLeaks(*e);
}

TEST_F(BeamSearchTest, CancelledBeamSearchReturnsTheBeamsSoFar) {
  auto e = Make(SmallBlocks());
  ASSERT_NE(e, nullptr);
  std::mt19937 rng(8);
  Request r = ToRequest({RandomPrompt(rng, 20), 4, 400});
  r.streaming = true;
  testing::HeldStream held;  // the engine waits for this thread after the first beams
  r.output = held.stream;
  auto id = e->Enqueue(r);
  ASSERT_TRUE(id.ok());
  // Cancel after the first provisional beams.
  std::vector<Result> got;
  for (int i = 0; i < 6000 && got.empty(); ++i) {
    for (Result& x : held.Take()) got.push_back(std::move(x));
  }
  ASSERT_FALSE(got.empty());
  e->Cancel(*id);
  held.Release();
  for (int i = 0; i < 6000 && !got.back().is_final; ++i) {
    for (Result& x : held.Take()) got.push_back(std::move(x));
    held.Release();
  }
  const Result& last = got.back();
  ASSERT_TRUE(last.is_final);
  ASSERT_EQ(last.beams.size(), 4u);
  for (const BeamOutput& b : last.beams) {
    EXPECT_EQ(b.finish_reason, FinishReason::kCancelled);
    EXPECT_GE(b.output_token_ids.size(), 1u);
    EXPECT_LT(b.output_token_ids.size(), 400u);
  }
  testing::ExpectNoKvLeaks(*e);
}

TEST_F(BeamSearchTest, BadBeamRequestsAreRefused) {
  ExecutorConfig c = SmallBlocks();
  c.max_beam_width = 2;
  auto e = Make(c);
  ASSERT_NE(e, nullptr);
  auto refused = [&](Request r, const std::string& message) {
    auto id = e->Enqueue(std::move(r));
    ASSERT_FALSE(id.ok()) << message;
    EXPECT_EQ(id.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(id.status().message().find(message), std::string::npos) << id.status().ToString();
  };
  Request base;
  base.prompt_ids = {5, 6, 7};
  base.max_tokens = 4;
  Request r = base;
  r.beam_width = 3;
  refused(r, "beam_width 3 exceeds max_beam_width 2");
  r.beam_width = 0;
  refused(r, "beam_width must be >= 1");
  r = base;
  r.beam_width = 2;
  r.num_return_sequences = 3;
  refused(r, "num_return_sequences (3) must not exceed beam_width (2)");
  r.num_return_sequences = 1;
  r.return_generation_logits = true;
  refused(r, "generation logits are not returned with beam search");
  r.return_generation_logits = false;
  r.draft_tokens = {1};
  refused(r, "draft tokens cannot be verified with beam search");
  r.draft_tokens.clear();
  r.beam_search_diversity_rate = -1;
  refused(r, "beam_search_diversity_rate must be >= 0");
  r.beam_search_diversity_rate = 0;
  // 2 beams of 13 blocks each do not fit a 20-block cache (one sequence would).
  ExecutorConfig tiny_cache = SmallBlocks();
  tiny_cache.max_beam_width = 2;
  tiny_cache.max_tokens_in_paged_kv_cache = 8 * 20;
  e = Make(tiny_cache);
  ASSERT_NE(e, nullptr);
  r.max_tokens = 97;
  refused(r, "needs 26 KV cache blocks");
  r.beam_width = 1;
  EXPECT_TRUE(e->Enqueue(r).ok());
  ExecutorConfig bad = SmallBlocks();
  bad.max_beam_width = 0;
  EXPECT_FALSE(bad.Validate().ok());
}

// Beam search on a mixture-of-experts model (qwen3moe: 16 experts, top 4) and a sliding-window
// one (gemma3: windows of 64 on 7 of 8 layers), prompts of 70-110 tokens (beyond the window),
// chunked over steps: each beam request's beams, log-probs and scores in a batch with other
// beam and plain requests are those it gets alone, bit for bit, and no block leaks.
class BeamSearchArchTest : public ::testing::TestWithParam<const char*> {};

TEST_P(BeamSearchArchTest, BeamsInABatchEqualBeamsAlone) {
  const std::string path = testing::SharedDir() + "/golden/arch/" + GetParam() + ".gguf";
  REQUIRE_SHARED_FILE(path);
  auto loaded = Model::Load(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  const Model& model = **loaded;
  ExecutorConfig c;
  c.num_threads = 1;  // a second thread's spinning costs more than it gains on these models
  c.max_beam_width = 3;
  c.tokens_per_block = 16;
  c.max_tokens_in_paged_kv_cache = 16 * 256;
  c.enable_chunked_context = true;
  c.max_num_tokens = 48;  // prompts are split, chunks end inside and beyond the window
  std::mt19937 rng(17);
  auto prompt = [&](int len) {
    std::vector<int32_t> p(len);
    for (auto& t : p) t = static_cast<int32_t>(3 + rng() % 31000);
    return p;
  };
  std::vector<Request> beams;
  for (int i = 0; i < 3; ++i) {
    Request r;
    r.prompt_ids = prompt(70 + 20 * i);
    r.max_tokens = 5 + i;
    r.sampling.temperature = 0;
    r.beam_width = 2 + i % 2;
    r.num_return_sequences = r.beam_width;
    r.exclude_input_in_output = true;
    r.return_log_probs = true;
    beams.push_back(r);
  }
  auto run = [&](const std::vector<Request>& requests, size_t plain) {
    std::vector<Result> out;
    auto e = Executor::Create(model, c);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    if (!e.ok()) return out;
    std::vector<RequestId> ids;
    for (const Request& r : requests) {
      auto id = (*e)->Enqueue(r);
      EXPECT_TRUE(id.ok()) << id.status().ToString();
      ids.push_back(id.ok() ? *id : 0);
    }
    std::vector<RequestId> plain_ids;
    for (size_t i = 0; i < plain; ++i) {
      Request p;
      p.prompt_ids = prompt(30 + 40 * static_cast<int>(i));
      p.max_tokens = 8;
      p.sampling.temperature = 0;
      auto id = (*e)->Enqueue(p);
      EXPECT_TRUE(id.ok());
      if (id.ok()) plain_ids.push_back(*id);
    }
    for (RequestId id : ids) {
      const std::vector<Result> rs = testing::CollectResults(**e, id);
      EXPECT_FALSE(rs.empty());
      if (!rs.empty()) out.push_back(rs.back());
    }
    for (RequestId id : plain_ids) testing::CollectResults(**e, id);
    testing::ExpectNoKvLeaks(**e);
    return out;
  };
  const std::vector<Result> batched = run(beams, 2);
  ASSERT_EQ(batched.size(), beams.size());
  for (size_t i = 0; i < beams.size(); ++i) {
    const std::vector<Result> alone = run({beams[i]}, 0);
    ASSERT_EQ(alone.size(), 1u);
    ASSERT_TRUE(alone[0].error.ok()) << alone[0].error.ToString();
    ASSERT_TRUE(batched[i].error.ok()) << batched[i].error.ToString();
    ASSERT_EQ(alone[0].beams.size(), static_cast<size_t>(beams[i].beam_width));
    ASSERT_EQ(batched[i].beams.size(), alone[0].beams.size());
    for (size_t b = 0; b < alone[0].beams.size(); ++b) {
      const BeamOutput &x = alone[0].beams[b], &y = batched[i].beams[b];
      EXPECT_EQ(x.output_token_ids, y.output_token_ids) << "request " << i << " beam " << b;
      EXPECT_EQ(x.log_probs, y.log_probs) << "request " << i << " beam " << b;
      EXPECT_EQ(x.cum_log_prob, y.cum_log_prob) << "request " << i << " beam " << b;
      EXPECT_EQ(x.score, y.score) << "request " << i << " beam " << b;
      EXPECT_EQ(x.finish_reason, y.finish_reason) << "request " << i << " beam " << b;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, BeamSearchArchTest,
                         ::testing::Values("qwen3moe-f16", "gemma3-f16"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace inflight
