// The latency budget of a step: how many prompt tokens may join a step that also decodes for
// running sequences, so every running sequence gets its next token within the target
// (ExecutorConfig::max_inter_token_latency_ms). On a CPU a prompt token costs about what a
// decode row costs, so a 256-token chunk beside 8 decoding sequences makes their step ~10x
// slower; the budget spends only the time the target leaves after the decode rows.
//
// Rules: no decode rows in the step -> no limit (prompts run at full speed); the step's oldest
// prompt always gets at least kMinPromptTokens, so it makes progress even when the target
// leaves less than that (a cut chunk may end inside a KV block); a target the decode rows alone
// exceed cannot be met -> no limit (today's behaviour) and one warning per episode; until the
// cost model has seen both kinds of step -> no limit.
#pragma once

#include <cstdint>
#include <limits>

#include "engine/step_cost.h"

namespace inflight {

class StepBudget {
 public:
  // The least the step's oldest prompt gets: ~1/4 of a decode step's time on a CPU, where a
  // prompt token costs about a decode row and a decode step ~10-30 rows' worth.
  static constexpr int32_t kMinPromptTokens = 8;

  // target_ms: the target time between a running sequence's tokens; <= 0 is auto, twice the
  // decode rows' own step (a step with prompt tokens costs at most one more decode step).
  // min_tokens: the least the step's oldest prompt gets.
  explicit StepBudget(double target_ms, int32_t min_tokens = kMinPromptTokens)
      : target_ms_(target_ms), min_tokens_(min_tokens) {}

  StepCostModel& cost() { return cost_; }
  const StepCostModel& cost() const { return cost_; }

  // Starts a step whose decode rows have the given shape; returns the milliseconds left for
  // prompt tokens (+inf: no limit).
  double Begin(const StepShape& decode);
  // Prompt tokens of a chunk starting at `start_pos` that fit `ms` (at least min_tokens when
  // `first` -- the step's oldest prompt -- and at most `want`).
  int32_t TokensFor(double ms, int64_t start_pos, int32_t want, bool first) const;
  // The time those tokens cost.
  double CostMs(int64_t start_pos, int32_t tokens) const;
  // A step's time outside its forward pass (scheduling, sampling, handing results out): part
  // of every gap between a sequence's tokens.
  void ObserveOverhead(double ms);
  double overhead_ms() const { return overhead_ms_; }

  // The target this step used (ms; 0 before the first step with decode rows).
  double effective_target_ms() const { return effective_target_ms_; }
  // Whether the last step could not meet the target (decode rows alone cost more).
  bool unmet() const { return unmet_; }

  static constexpr double kNoLimit = std::numeric_limits<double>::infinity();

 private:
  double target_ms_;
  int32_t min_tokens_;
  StepCostModel cost_;
  double effective_target_ms_ = 0;
  double overhead_ms_ = 0;
  bool unmet_ = false;
};

}  // namespace inflight
