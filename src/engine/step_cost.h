// What an engine step costs, learned from the steps the engine runs, so the latency budget
// (engine/step_budget.h) can predict a step before running it. Two fits over recent steps
// (older ones decay):
//   - decode steps (no prompt tokens): fixed + per decode row + per 1,000 K/V positions the
//     rows attend to. The fixed term is what any step costs (streaming the weights once).
//   - steps with prompt tokens: what they cost beyond the decode fit's prediction for their
//     decode rows, per prompt token + per 1,000 positions the prompt tokens attend to (a
//     2,048-token prompt's last chunk attends to ~2k positions per token).
// Fitting the prompt cost as a residual keeps it identifiable when every budgeted step has the
// same shape (one block of prompt beside the same decode rows).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

namespace inflight {

struct StepShape {
  double context_tokens = 0;     // prompt tokens computed this step
  double decode_rows = 0;        // generation tokens (and verified drafts)
  double decode_positions = 0;   // sum over the decode rows of the positions each attends to
  double context_positions = 0;  // the same over the prompt tokens
};

// Positions a run of n tokens from position p attends to: token i sees p + i + 1.
inline double AttendedPositions(double p, double n) { return n * p + n * (n + 1) / 2; }

class StepCostModel {
 public:
  // decay: the weight a step's observation keeps per later step of its kind (0.97: ~30 steps).
  explicit StepCostModel(double decay = 0.97) : decay_(decay) {}

  // The first observation is dropped: a process's first pass pays one-time costs (buffers
  // growing, first touches) that can make prompts look 10-100x dearer on a small model.
  static constexpr int kWarmupSteps = 1;
  void Observe(const StepShape& shape, double forward_ms);
  // True once decode steps were seen. Until a step with prompt tokens was seen too, a prompt
  // token is taken to cost what a decode row does, and at least 1/8 of a step's fixed cost (a
  // CPU computes ~8 rows in the time it streams the weights once; the first budgeted step
  // corrects the guess): the first prompts beside running decodes are budgeted, not let
  // through whole.
  bool ready() const { return decode_.count > 0; }
  double PredictMs(const StepShape& shape) const;
  double DecodeMs(const StepShape& shape) const;  // the step's decode rows and fixed cost only

  double fixed_ms() const { return decode_.coef[0]; }
  double ms_per_decode_row() const { return decode_.coef[1]; }
  double ms_per_kilo_decode_position() const { return decode_.coef[2]; }
  double ms_per_context_token() const {
    return context_.count > 0 ? context_.coef[0] : std::max(decode_.coef[1], decode_.coef[0] / 8);
  }
  double ms_per_kilo_context_position() const { return context_.coef[1]; }

 private:
  // Decayed least squares with non-negative coefficients over N features. `shrink` is a
  // relative ridge per feature, which decides what the data cannot: with every decode step of
  // one row, the fixed cost (not shrunk) takes it all, not half (which would price a row at
  // half a step); and the attended positions, which grow with the rows (or prompt tokens) in
  // most steps, cost something only where the data show it apart from the rows -- else the
  // fit can trade one for the other and price a step of more rows at 3x its cost.
  template <int N>
  struct Fit {
    explicit Fit(const std::array<double, N>& shrink) : shrink(shrink) {}
    std::array<double, N> shrink;
    std::array<std::array<double, N>, N> xtx{};
    std::array<double, N> xty{};
    std::array<double, N> coef{};
    int64_t count = 0;
    void Add(const std::array<double, N>& x, double y, double decay);
  };

  double decay_;
  static constexpr double kRowShrink = 1e-6, kPositionShrink = 0.05;
  Fit<3> decode_{{0, kRowShrink, kPositionShrink}};  // 1, rows, decode positions / 1000
  Fit<2> context_{{kRowShrink, kPositionShrink}};    // tokens, context positions / 1000
  int warmup_left_ = kWarmupSteps;
};

}  // namespace inflight
