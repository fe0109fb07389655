// The latency budget's parts: the inter-token latency histogram (percentiles against the exact
// ones of the same samples), the step cost model (recovers a known linear cost, pins a
// coefficient that cannot be negative) and the budget's rules.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "base/latency_histogram.h"
#include "engine/step_budget.h"
#include "engine/step_cost.h"

namespace inflight {
namespace {

double ExactPercentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size()))) - 1;
  return v[std::min(i, v.size() - 1)];
}

TEST(LatencyHistogram, PercentilesAreWithinOneBucketOfTheExactOnes) {
  std::mt19937 rng(7);
  std::lognormal_distribution<double> dist(std::log(40.0), 0.8);  // ms, a long right tail
  LatencyHistogram h;
  std::vector<double> v;
  for (int i = 0; i < 20000; ++i) {
    const double x = dist(rng);
    v.push_back(x);
    h.Add(x);
  }
  EXPECT_EQ(h.count(), 20000);
  EXPECT_DOUBLE_EQ(h.max_ms(), *std::max_element(v.begin(), v.end()));
  for (double q : {0.5, 0.9, 0.99}) {
    const double exact = ExactPercentile(v, q), est = h.Percentile(q);
    EXPECT_GT(est, exact / 1.34) << q;
    EXPECT_LT(est, exact * 1.34) << q;
  }
  EXPECT_EQ(h.Percentile(1.0), h.max_ms());
}

TEST(LatencyHistogram, MultipleSamplesMergeAndRebucket) {
  LatencyHistogram a, b;
  a.Add(3.0, 4);  // a step that produced 4 tokens 12 ms after the last
  b.Add(700.0);
  b.Add(-1.0);  // ignored
  a.Merge(b);
  EXPECT_EQ(a.count(), 5);
  EXPECT_DOUBLE_EQ(a.sum_ms(), 712.0);
  EXPECT_DOUBLE_EQ(a.max_ms(), 700.0);
  // Prometheus-style bounds (ms): 3 ms lands in <= 5, 700 ms in <= 1000.
  const std::vector<double> counts = a.Rebucket({5, 10, 25, 50, 100, 250, 500, 1000});
  ASSERT_EQ(counts.size(), 9u);
  EXPECT_EQ(counts[0], 4);
  EXPECT_EQ(counts[7], 1);
  EXPECT_EQ(counts[8], 0);
  // Every Prometheus latency bound (5 ms ... 60 s) is one of the histogram's own.
  const auto& bounds = LatencyHistogram::BoundsMs();
  for (double s : {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0}) {
    const bool found = std::any_of(bounds.begin(), bounds.end(),
                                   [&](double b) { return std::fabs(b - s * 1000) < 1e-9 * b; });
    EXPECT_TRUE(found) << s;
  }
}

TEST(StepCostModel, RecoversALinearCostAndPinsNegativeCoefficients) {
  StepCostModel m;
  EXPECT_FALSE(m.ready());
  std::mt19937 rng(1);
  auto cost = [](const StepShape& s) {
    return 20 + 3.5 * s.context_tokens + 1.5 * s.decode_rows + 0.2 * s.decode_positions / 1000 +
           0.4 * s.context_positions / 1000;
  };
  for (int i = 0; i < 200; ++i) {
    StepShape s;
    s.decode_rows = static_cast<double>(rng() % 16);
    s.context_tokens = i % 3 == 0 ? static_cast<double>(rng() % 256) : 0;
    s.decode_positions = s.decode_rows * (rng() % 2048);
    s.context_positions = s.context_tokens * (rng() % 1024);
    m.Observe(s, cost(s));
  }
  ASSERT_TRUE(m.ready());
  // The positions' coefficients are shrunk a little (see step_cost.h); the predictions hold.
  EXPECT_NEAR(m.fixed_ms(), 20, 0.5);
  EXPECT_NEAR(m.ms_per_context_token(), 3.5, 0.07);
  EXPECT_NEAR(m.ms_per_decode_row(), 1.5, 0.1);
  EXPECT_NEAR(m.ms_per_kilo_decode_position(), 0.2, 0.06);
  EXPECT_NEAR(m.ms_per_kilo_context_position(), 0.4, 0.1);
  for (int i = 0; i < 100; ++i) {
    StepShape s;
    s.decode_rows = static_cast<double>(rng() % 16);
    s.context_tokens = static_cast<double>(rng() % 256);
    s.decode_positions = s.decode_rows * (rng() % 2048);
    s.context_positions = s.context_tokens * (rng() % 1024);
    EXPECT_NEAR(m.PredictMs(s), cost(s), 0.03 * cost(s));
  }

  // A cost that falls with the decode rows (noise) is fitted with that coefficient at 0; every
  // budgeted step having one shape still gives the prompt token's cost (as a residual).
  StepCostModel n;
  for (int i = 0; i < 50; ++i) {
    n.Observe({0, 1, 0, 0}, 30);
    n.Observe({0, 8, 0, 0}, 28);
    n.Observe({64, 1, 0, 0}, 253);
  }
  EXPECT_EQ(n.ms_per_decode_row(), 0);
  EXPECT_NEAR(n.fixed_ms(), 29, 0.05);
  EXPECT_NEAR(n.ms_per_context_token(), 3.5, 0.05);
}

TEST(StepCostModel, OneRowDecodeStepsPriceARowAsLittleNotHalfAStep) {
  // Only one-row decode steps so far (27 ms each): the fixed cost takes them, so a step of 9
  // rows is predicted near 27 ms (a decode row rides on the weights' streaming), not 9 x 13.5.
  StepCostModel m;
  for (int i = 0; i < 30; ++i) m.Observe({0, 1, 300, 0}, 27);
  EXPECT_NEAR(m.fixed_ms(), 27, 0.5);
  EXPECT_LT(m.DecodeMs({0, 9, 2700, 0}), 35);
  // No prompt step seen yet: a prompt token is guessed at 1/8 of the fixed cost.
  EXPECT_NEAR(m.ms_per_context_token(), 27.0 / 8, 0.1);
}

TEST(StepCostModel, PositionsThatGrowWithTheRowsDoNotInflateBiggerSteps) {
  // Decode steps of 1-5 rows, every sequence ~300 tokens deep: positions and rows move
  // together. A step of 10 rows at the same depth costs what the rows say, not 3x.
  StepCostModel m;
  for (int i = 0; i < 60; ++i) {
    const double rows = 1 + i % 5;
    m.Observe({0, rows, rows * 300, 0}, 23 + 2.5 * rows);
  }
  EXPECT_NEAR(m.DecodeMs({0, 10, 3000, 0}), 48, 2.5);
  EXPECT_LT(m.DecodeMs({0, 10, 6000, 0}), 1.25 * 48);
}

TEST(StepCostModel, BeforeAnyPromptStepAPromptTokenCostsADecodeRow) {
  StepCostModel m;
  m.Observe({0, 1, 0, 0}, 100);  // the first pass: dropped (one-time costs)
  EXPECT_FALSE(m.ready());
  for (int i = 0; i < 10; ++i) {
    m.Observe({0, 1, 0, 0}, 6);
    m.Observe({0, 4, 0, 0}, 9);
  }
  ASSERT_TRUE(m.ready());
  EXPECT_NEAR(m.ms_per_context_token(), 1, 0.01);
  EXPECT_NEAR(m.PredictMs({10, 1, 0, 0}), 16, 0.05);
  m.Observe({10, 1, 0, 0}, 36);  // the first prompt step: 3 ms a token beyond the decode row
  EXPECT_NEAR(m.ms_per_context_token(), 3, 0.01);
}

// A budget whose model has learned: 5 ms a step, 1 ms a prompt token, 1 ms a decode row.
StepBudget Trained(double target_ms, int32_t min_tokens) {
  StepBudget b(target_ms, min_tokens);
  for (int i = 0; i < 40; ++i) {
    b.cost().Observe({16, 0, 0}, 21);
    b.cost().Observe({0, 1, 0}, 6);
    b.cost().Observe({0, 2, 0}, 7);
    b.cost().Observe({8, 2, 0}, 15);
    b.cost().Observe({0, 4, 0}, 9);
  }
  return b;
}

TEST(StepBudget, SpendsWhatTheTargetLeavesAfterTheDecodeRows) {
  StepBudget b = Trained(20, 4);
  EXPECT_TRUE(std::isinf(b.Begin({0, 0, 0})));  // nothing decodes: prompts run at full speed
  const double left = b.Begin({0, 1, 0});       // one decode row: 6 ms
  EXPECT_NEAR(left, 14, 0.01);
  EXPECT_EQ(b.TokensFor(left, 0, 100, true), 14);
  EXPECT_EQ(b.TokensFor(left, 0, 9, false), 9);  // all it wants
  EXPECT_EQ(b.TokensFor(0.5, 0, 100, false), 0);
  EXPECT_EQ(b.TokensFor(0.5, 0, 100, true), 4);  // the oldest prompt always gets a block
  EXPECT_EQ(b.TokensFor(0.5, 0, 3, true), 3);
  EXPECT_FALSE(b.unmet());
  EXPECT_NEAR(b.Begin({0, 9, 0, 0}), 6, 0.01);  // 14 of the 20 ms: 6 left, not unmet
  EXPECT_FALSE(b.unmet());

  // A target the decode rows alone exceed cannot be met: no limit.
  StepBudget tight = Trained(5, 4);
  EXPECT_TRUE(std::isinf(tight.Begin({0, 1, 0})));
  EXPECT_TRUE(tight.unmet());
  // Auto: twice the decode rows' step.
  StepBudget automatic = Trained(0, 4);
  EXPECT_NEAR(automatic.Begin({0, 3, 0}), 8, 0.01);
  EXPECT_NEAR(automatic.effective_target_ms(), 16, 0.01);
  // Untrained: no limit.
  StepBudget cold(20, 4);
  EXPECT_TRUE(std::isinf(cold.Begin({0, 3, 0})));
}

}  // namespace
}  // namespace inflight
