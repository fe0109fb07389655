// Scheduler scenarios with a fake model: each step's chunks are "computed" by advancing
// num_computed, and a sequence that caught up appends token 7. Tables of expected
// running / paused / chunk sizes per step.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "kvcache/kv_storage.h"

namespace inflight {
namespace {

class FakeEngine {
 public:
  // window_blocks > 0: a window group of that many blocks for a sliding window of `window`.
  FakeEngine(ExecutorConfig config, int32_t num_blocks, int32_t window_blocks = 0,
             int32_t window = 0, StepBudget* budget = nullptr)
      : config_(config),
        blocks_({num_blocks, config.tokens_per_block, config.enable_kv_cache_reuse}),
        window_(window_blocks > 0
                    ? std::make_unique<KvBlockManager>(BlockManagerConfig{
                          window_blocks, config.tokens_per_block, config.enable_kv_cache_reuse})
                    : nullptr),
        scheduler_(config_, blocks_, window_.get(), window, budget) {}

  // Adds a request named `name` with a prompt of `prompt` tokens (ids 100.. unless given).
  Sequence* Add(const std::string& name, int32_t prompt, int32_t max_tokens,
                float priority = 0.5f) {
    auto rs = std::make_unique<RequestState>();
    rs->request.max_tokens = max_tokens;
    rs->request.priority = priority;
    for (int32_t i = 0; i < prompt; ++i) rs->request.prompt_ids.push_back(100 + i);
    auto seq = std::make_unique<Sequence>(rs.get(), 0, SamplingParams{});
    seq->order = order_++;
    seq->tokens = rs->request.prompt_ids;
    seq->prompt_len = prompt;
    rs->forked = true;
    Sequence* raw = seq.get();
    names_[raw] = name;
    rs->sequences.push_back(std::move(seq));
    scheduler_.AddWaiting(raw);
    requests_.push_back(std::move(rs));
    return raw;
  }

  // One step; returns "A:8 B:1" (chunks in schedule order) and fills paused names.
  std::string Step(std::string* paused = nullptr) {
    const ScheduleOutput& out = scheduler_.Step();
    scheduler_.FinishCopies([&](int32_t group, int32_t src, int32_t dst, int32_t n) {
      if (group != kFullGroup) copies_ += "w";
      copies_ += std::to_string(src) + "->" + std::to_string(dst) + ":" + std::to_string(n) + " ";
    });
    last_ = out;
    std::string s;
    for (const ScheduledChunk& c : out.chunks)
      s += (s.empty() ? "" : " ") + names_[c.seq] + ":" + std::to_string(c.num_tokens);
    if (paused) {
      paused->clear();
      for (Sequence* p : out.paused) *paused += names_[p];
    }
    for (const ScheduledChunk& c : out.chunks) {
      Sequence* seq = c.seq;
      seq->num_computed += c.num_tokens;
      scheduler_.CommitFullBlocks(seq);
      if (seq->num_computed == static_cast<int32_t>(seq->tokens.size())) {
        seq->tokens.push_back(7);
        if (seq->num_generated() >= seq->request->request.max_tokens) {
          scheduler_.Remove(seq);
          seq->request->num_finished++;
        }
      }
    }
    EXPECT_EQ(blocks_.CheckInvariants(), "");
    if (window_) {
      EXPECT_EQ(window_->CheckInvariants(), "");
      for (Sequence* q : scheduler_.running()) CheckWindowTable(*q);
    }
    return s;
  }

  std::string Running() const {
    std::string s;
    for (Sequence* q : scheduler_.running()) s += names_.at(q);
    return s;
  }
  std::string Waiting() const {
    std::string s;
    for (Sequence* q : scheduler_.waiting()) s += names_.at(q);
    return s;
  }
  const ScheduleOutput& last() const { return last_; }
  KvBlockManager& blocks() { return blocks_; }
  KvBlockManager& window_blocks() { return *window_; }
  Scheduler& scheduler() { return scheduler_; }

  // A running sequence's window table between steps: as long as its full table, a block
  // exactly where its next token's window (or a later one) can see, -1 elsewhere.
  void CheckWindowTable(const Sequence& q) const {
    ASSERT_EQ(q.window_blocks.size(), q.blocks.size()) << names_.at(&q);
    const int64_t first = FirstWindowBlock(q.num_computed, window_size(), config_.tokens_per_block);
    for (size_t i = 0; i < q.window_blocks.size(); ++i) {
      if (static_cast<int64_t>(i) < first) {
        EXPECT_EQ(q.window_blocks[i], -1) << names_.at(&q) << " block " << i;
      } else {
        EXPECT_GE(q.window_blocks[i], 0) << names_.at(&q) << " block " << i;
      }
    }
  }
  int32_t window_size() const { return window_size_; }
  void set_window_size(int32_t w) { window_size_ = w; }

 private:
  ExecutorConfig config_;
  KvBlockManager blocks_;
  std::unique_ptr<KvBlockManager> window_;
  int32_t window_size_ = 0;
  Scheduler scheduler_;
  std::vector<std::unique_ptr<RequestState>> requests_;
  std::map<const Sequence*, std::string> names_;
  uint64_t order_ = 0;
  ScheduleOutput last_;

 public:
  std::string copies_;  // partial-block copies made, "src->dst:tokens "
};

ExecutorConfig Config(CapacityPolicy policy, int32_t max_num_tokens = 64, bool chunked = false) {
  ExecutorConfig c;
  c.policy = policy;
  c.tokens_per_block = 4;
  c.max_num_tokens = max_num_tokens;
  c.max_batch_size = 8;
  c.enable_chunked_context = chunked;
  return c;
}

TEST(Scheduler, NoEvictReservesWholeLifetimesAndAdmitsInOrder) {
  FakeEngine f(Config(CapacityPolicy::kGuaranteedNoEvict), 10);
  f.Add("A", 8, 8);  // 16 tokens: 4 blocks for its lifetime
  f.Add("B", 8, 8);
  f.Add("C", 2, 2);  // 1 block
  f.Add("D", 8, 8);
  EXPECT_EQ(f.Step(), "A:8 B:8 C:2");  // 4 + 4 + 1 of 10 reserved; D needs 4
  EXPECT_EQ(f.last().waiting_for_kv_cache, 1);
  EXPECT_EQ(f.Waiting(), "D");
  EXPECT_EQ(f.Step(), "A:1 B:1 C:1");  // C ends (2 tokens); D still waits for A or B
  EXPECT_EQ(f.Waiting(), "D");
  for (int i = 0; i < 6; ++i) EXPECT_EQ(f.Step(), "A:1 B:1");
  EXPECT_EQ(f.Running(), "");  // both finished at 8 tokens
  EXPECT_EQ(f.Step(), "D:8");
  EXPECT_EQ(f.blocks().counts().used, 2);  // blocks follow computed tokens, not reservations
}

TEST(Scheduler, NoEvictStopsAtTheFirstRequestThatDoesNotFit) {
  FakeEngine f(Config(CapacityPolicy::kGuaranteedNoEvict), 6);
  f.Add("A", 8, 8);  // 4 blocks
  f.Add("B", 8, 8);  // 4: does not fit
  f.Add("C", 2, 2);  // 1: would fit but must not overtake B
  EXPECT_EQ(f.Step(), "A:8");
  EXPECT_EQ(f.Waiting(), "BC");
  EXPECT_EQ(f.last().waiting_for_kv_cache, 2);
}

TEST(Scheduler, MaxUtilizationPausesTheNewestAndResumesByRecomputation) {
  FakeEngine f(Config(CapacityPolicy::kMaxUtilization), 6);
  f.Add("A", 8, 10);
  f.Add("B", 8, 10);
  std::string paused;
  EXPECT_EQ(f.Step(&paused), "A:8 B:8");  // 2 + 2 blocks
  EXPECT_EQ(f.Step(&paused), "A:1 B:1");  // position 8: a third block each (6 of 6)
  EXPECT_EQ(paused, "");
  EXPECT_EQ(f.Step(&paused), "A:1 B:1");
  EXPECT_EQ(f.Step(&paused), "A:1 B:1");
  EXPECT_EQ(f.Step(&paused), "A:1 B:1");  // positions 11
  EXPECT_EQ(f.Step(&paused), "A:1");      // position 12: A needs a 4th block, B (newest) is paused
  EXPECT_EQ(paused, "B");
  EXPECT_EQ(f.Waiting(), "B");
  EXPECT_EQ(f.blocks().counts().used, 4);
  EXPECT_EQ(f.Step(&paused), "A:1");  // no admission while short of blocks... A alone
  // A finishes after 10 generated tokens; B resumes by recomputing its 13 tokens.
  std::string s;
  for (int i = 0; i < 10 && f.Running() == "A"; ++i) s = f.Step(&paused);
  EXPECT_EQ(f.Running(), "");
  EXPECT_EQ(f.Step(), "B:13");
}

TEST(Scheduler, ChunkedContextGivesDecodesTheirTokenFirstAndChunksOnBlockBoundaries) {
  FakeEngine f(Config(CapacityPolicy::kGuaranteedNoEvict, 8, true), 32);
  f.Add("A", 3, 20);
  EXPECT_EQ(f.Step(), "A:3");
  f.Add("B", 21, 4);
  EXPECT_EQ(f.Step(), "A:1 B:4");  // budget 8 - 1 = 7, cut to one block (4)
  EXPECT_EQ(f.Step(), "A:1 B:4");
  f.Add("C", 2, 4);
  EXPECT_EQ(f.Step(), "A:1 B:4 C:2");  // the 3 tokens B's block-aligned chunk left over
  f.Add("D", 5, 4);
  EXPECT_EQ(f.Step(), "A:1 C:1 B:4");  // D's 5 tokens: 2 left, chunks are whole blocks
  EXPECT_EQ(f.last().waiting_for_max_num_tokens, 1);
}

TEST(Scheduler, WithoutChunkingAPromptOverTheBudgetWaits) {
  FakeEngine f(Config(CapacityPolicy::kGuaranteedNoEvict, 8, false), 32);
  f.Add("A", 3, 4);
  f.Add("B", 6, 4);
  EXPECT_EQ(f.Step(), "A:3");  // B's 6 tokens do not fit in the 5 left
  EXPECT_EQ(f.last().waiting_for_max_num_tokens, 1);
  EXPECT_EQ(f.Step(), "A:1 B:6");
}

TEST(Scheduler, StaticBatchingLetsNobodyJoinARunningBatch) {
  ExecutorConfig c = Config(CapacityPolicy::kGuaranteedNoEvict);
  c.batching = BatchingStrategy::kStatic;
  FakeEngine f(c, 32);
  f.Add("A", 4, 3);
  f.Add("B", 4, 1);
  EXPECT_EQ(f.Step(), "A:4 B:4");  // B ends at once
  f.Add("C", 2, 1);
  EXPECT_EQ(f.Step(), "A:1");
  EXPECT_EQ(f.last().waiting_for_static_batch, 1);
  EXPECT_EQ(f.Step(), "A:1");
  EXPECT_EQ(f.Step(), "C:2");
}

TEST(Scheduler, StaticBatchFormsBeyondOneStepsTokenBudget) {
  ExecutorConfig c = Config(CapacityPolicy::kGuaranteedNoEvict, 8);
  c.batching = BatchingStrategy::kStatic;
  FakeEngine f(c, 32);
  f.Add("A", 6, 3);
  f.Add("B", 6, 3);
  f.Add("C", 6, 3);
  EXPECT_EQ(f.Step(), "A:6");  // B and C join the batch; their prompts wait for budget
  EXPECT_EQ(f.Running(), "ABC");
  f.Add("D", 2, 1);
  EXPECT_EQ(f.Step(), "A:1 B:6");
  EXPECT_EQ(f.Step(), "A:1 B:1 C:6");  // A ends (3 tokens)
  EXPECT_EQ(f.Step(), "B:1 C:1");
  EXPECT_EQ(f.last().waiting_for_static_batch, 1);  // D waits for the whole batch
  EXPECT_EQ(f.Step(), "C:1");
  EXPECT_EQ(f.Step(), "D:2");
}

TEST(Scheduler, MaxBatchSizeAndPriority) {
  ExecutorConfig c = Config(CapacityPolicy::kGuaranteedNoEvict);
  c.max_batch_size = 2;
  FakeEngine f(c, 32);
  f.Add("A", 2, 3);
  f.Add("B", 2, 3);
  f.Add("C", 2, 3, 0.2f);
  f.Add("D", 2, 3, 0.9f);  // jumps the queue
  EXPECT_EQ(f.Step(), "D:2 A:2");
  EXPECT_EQ(f.last().waiting_for_max_batch_size, 2);
  EXPECT_EQ(f.Waiting(), "BC");
}

TEST(Scheduler, PrefixReuseSkipsCachedBlocksButRecomputesTheLastToken) {
  ExecutorConfig c = Config(CapacityPolicy::kGuaranteedNoEvict);
  c.enable_kv_cache_reuse = true;
  FakeEngine f(c, 32);
  f.Add("A", 9, 1);  // blocks [0..4) [4..8) full, 1 token in a third
  EXPECT_EQ(f.Step(), "A:9");
  f.Add("B", 9, 1);  // same prompt: 2 blocks reused, 1 token computed
  EXPECT_EQ(f.Step(), "B:1");
  EXPECT_EQ(f.last().num_reused_blocks, 2);
  f.Add("C", 8, 1);  // 8 tokens = 2 full blocks, but the last token is recomputed: 1 block
                     // reused, and 3 slots of A's second block copied into a block of C's own
  EXPECT_EQ(f.Step(), "C:1");
  EXPECT_EQ(f.last().num_reused_blocks, 1);
  EXPECT_EQ(f.last().num_partially_reused_tokens, 3);
  EXPECT_EQ(f.copies_, "1->2:3 ");  // A held 0, 1, 2; 2 was freed uncached
}

// KV cache groups: a window layer's table keeps only what its window sees.
TEST(Scheduler, WindowGroupHoldsOnlyTheBlocksTheWindowSees) {
  ExecutorConfig c = Config(CapacityPolicy::kGuaranteedNoEvict, 8, /*chunked=*/true);
  const int32_t window = 8;  // tokens_per_block 4: a window spans at most 3 blocks
  // Per sequence WindowBlocksPerSequence(8, 4) = 5, a step's tokens 2: two sequences fit 12.
  FakeEngine f(c, 64, 12, window);
  f.set_window_size(window);
  Sequence* a = f.Add("A", 30, 40);
  Sequence* b = f.Add("B", 6, 40);
  int32_t most_window = 0, most_full = 0;
  for (int i = 0; i < 80 && !f.Running().empty() + !f.Waiting().empty(); ++i) {
    f.Step();
    most_window = std::max(most_window, f.window_blocks().counts().used);
    most_full = std::max(most_full, f.blocks().counts().used);
  }
  EXPECT_EQ(f.Running(), "");
  EXPECT_EQ(a->num_generated(), 40);
  EXPECT_EQ(b->num_generated(), 40);
  // Between steps each holds the blocks of its last 7 positions: at most 3 (plus none here).
  EXPECT_LE(most_window, 2 * 3);
  EXPECT_GE(most_full, (70 + 46) / 4 - 1);  // the full group holds every position
  EXPECT_EQ(f.window_blocks().counts().used, 0);
  EXPECT_EQ(f.blocks().counts().used, 0);
}

TEST(Scheduler, NoEvictAdmitsByTheWindowGroupsReservation) {
  ExecutorConfig c = Config(CapacityPolicy::kGuaranteedNoEvict, 8, /*chunked=*/true);
  FakeEngine f(c, 64, 11, 8);  // 2 + 5 + 5 > 11: one sequence at a time
  f.set_window_size(8);
  f.Add("A", 4, 4);
  f.Add("B", 4, 4);
  EXPECT_EQ(f.Step(), "A:4");
  EXPECT_EQ(f.Waiting(), "B");
  EXPECT_EQ(f.last().waiting_for_kv_cache, 1);
  for (int i = 0; i < 4; ++i) f.Step();
  EXPECT_EQ(f.Running(), "B");
}

TEST(Scheduler, MaxUtilizationPausesForWindowBlocks) {
  ExecutorConfig c = Config(CapacityPolicy::kMaxUtilization, 64);
  FakeEngine f(c, 64, 4, 8);  // plenty of full blocks, 4 window blocks
  f.set_window_size(8);
  f.Add("A", 12, 6);
  f.Add("B", 4, 6);
  EXPECT_EQ(f.Step(), "A:12 B:4");  // 3 + 1 window blocks; then A's block 0 leaves its window
  std::string paused;
  // A's 13th token takes the last window block; B's 5th finds none and nobody else to pause.
  EXPECT_EQ(f.Step(&paused), "A:1");
  EXPECT_EQ(paused, "B");
  for (int i = 0; i < 16 && !f.Running().empty() + !f.Waiting().empty(); ++i) f.Step();
  EXPECT_EQ(f.Running(), "");
  EXPECT_EQ(f.Waiting(), "");
}

TEST(Scheduler, WindowGroupPrefixReuseNeedsTheBlocksTheWindowSees) {
  ExecutorConfig c = Config(CapacityPolicy::kGuaranteedNoEvict, 64);
  c.enable_kv_cache_reuse = true;
  FakeEngine f(c, 64, 32, 8);  // the step's reservation alone is 16 window blocks
  f.set_window_size(8);
  f.Add("A", 24, 1);
  EXPECT_EQ(f.Step(), "A:24");
  // 23 usable tokens = 5 full blocks; the next token (position 20) sees 13..20: blocks 3, 4
  // of the window group, still cached.
  f.Add("B", 24, 1);
  EXPECT_EQ(f.Step(), "B:1");
  EXPECT_EQ(f.last().num_reused_blocks, 5);
  EXPECT_EQ(f.last().num_partially_reused_tokens, 3);
  EXPECT_EQ(f.copies_, "5->6:3 w5->6:3 ");  // both groups copy the same slots
  EXPECT_EQ(f.Running(), "");
  // Evict every cached window block: the full group still caches the prefix, but what its
  // window sees is gone, so the whole prompt is recomputed.
  std::vector<int32_t> all;
  while (auto blk = f.window_blocks().Allocate()) all.push_back(*blk);
  f.window_blocks().Release(all);
  EXPECT_GT(f.blocks().counts().cached, 5);
  f.Add("C", 24, 1);
  EXPECT_EQ(f.Step(), "C:24");
  EXPECT_EQ(f.last().num_reused_blocks, 0);
}

// A budget whose cost model has learned: 5 ms a step, 1 ms a prompt token, 1 ms a decode row.
std::unique_ptr<StepBudget> TrainedBudget(double target_ms, int32_t min_tokens) {
  auto b = std::make_unique<StepBudget>(target_ms, min_tokens);
  for (int i = 0; i < 40; ++i) {
    b->cost().Observe({16, 0, 0}, 21);
    b->cost().Observe({0, 1, 0}, 6);
    b->cost().Observe({0, 2, 0}, 7);
    b->cost().Observe({8, 2, 0}, 15);
    b->cost().Observe({0, 4, 0}, 9);
  }
  return b;
}

TEST(Scheduler, LatencyBudgetCutsPromptsBesideDecodesOldestFirst) {
  for (CapacityPolicy policy :
       {CapacityPolicy::kGuaranteedNoEvict, CapacityPolicy::kMaxUtilization}) {
    SCOPED_TRACE(CapacityPolicyName(policy));
    auto budget = TrainedBudget(20, 4);
    // Chunked context off: the budget still cuts prompts.
    FakeEngine f(Config(policy, 64, false), 64, 0, 0, budget.get());
    f.Add("A", 3, 20);
    EXPECT_EQ(f.Step(), "A:3");  // nothing decodes: the prompt runs whole
    EXPECT_EQ(f.last().latency_target_ms, 0);
    f.Add("B", 21, 4);
    f.Add("C", 6, 4);
    // A's row: 6 ms of the 20; 14 ms -> 14 tokens of B (a cut chunk may end inside a block).
    // C waits.
    EXPECT_EQ(f.Step(), "A:1 B:14");
    EXPECT_EQ(f.last().latency_target_ms, 20);
    EXPECT_EQ(f.last().waiting_for_latency_budget, 2);
    EXPECT_EQ(f.Waiting(), "C");
    // B's last 7 tokens (7 ms), then C's 6 in the 7 ms left.
    EXPECT_EQ(f.Step(), "A:1 B:7 C:6");
    EXPECT_EQ(f.last().waiting_for_latency_budget, 0);
    EXPECT_EQ(f.Step(), "A:1 B:1 C:1");
  }
}

TEST(Scheduler, LatencyBudgetNeverStarvesAPromptAndYieldsWhenTheTargetCannotBeMet) {
  {
    // 7.5 ms: 1.5 ms left after the decode row, yet the oldest prompt gets 4 tokens a step.
    auto budget = TrainedBudget(7.5, 4);
    FakeEngine f(Config(CapacityPolicy::kGuaranteedNoEvict, 64, false), 64, 0, 0, budget.get());
    f.Add("A", 3, 20);
    EXPECT_EQ(f.Step(), "A:3");
    f.Add("B", 10, 4);
    f.Add("C", 4, 4);
    EXPECT_EQ(f.Step(), "A:1 B:4");
    EXPECT_EQ(f.Step(), "A:1 B:4");
    EXPECT_EQ(f.Step(), "A:1 B:2");  // B's rest; C gets nothing
    EXPECT_EQ(f.last().waiting_for_latency_budget, 1);
    // Two decode rows (7 ms) leave half a prompt token: C, now the oldest prompt, gets 4.
    EXPECT_EQ(f.Step(), "A:1 B:1 C:4");
    EXPECT_EQ(f.last().latency_target_ms, 7.5);
  }
  {
    // 5 ms: the decode row alone costs 6; the target is unmet and prompts run as without it.
    auto budget = TrainedBudget(5, 4);
    FakeEngine f(Config(CapacityPolicy::kGuaranteedNoEvict, 64, false), 64, 0, 0, budget.get());
    f.Add("A", 3, 20);
    EXPECT_EQ(f.Step(), "A:3");
    f.Add("B", 21, 4);
    EXPECT_EQ(f.Step(), "A:1 B:21");
    EXPECT_EQ(f.last().latency_target_ms, 0);
    EXPECT_EQ(f.last().waiting_for_latency_budget, 0);
  }
}

TEST(Scheduler, StaticBatchingIgnoresTheLatencyBudget) {
  auto budget = TrainedBudget(7, 4);
  ExecutorConfig c = Config(CapacityPolicy::kGuaranteedNoEvict, 64, false);
  c.batching = BatchingStrategy::kStatic;
  FakeEngine f(c, 64, 0, 0, budget.get());
  f.Add("A", 3, 2);
  f.Add("B", 21, 2);
  EXPECT_EQ(f.Step(), "A:3 B:21");
  EXPECT_EQ(f.Step(), "A:1 B:1");
}

}  // namespace
}  // namespace inflight
