// Scheduler scenarios with a fake model: each step's chunks are "computed" by advancing
// num_computed, and a sequence that caught up appends token 7. Tables of expected
// running / paused / chunk sizes per step.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

namespace inflight {
namespace {

class FakeEngine {
 public:
  FakeEngine(ExecutorConfig config, int32_t num_blocks)
      : config_(config),
        blocks_({num_blocks, config.tokens_per_block, config.enable_kv_cache_reuse}),
        scheduler_(config_, blocks_) {}

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
    scheduler_.FinishCopies([&](int32_t src, int32_t dst, int32_t n) {
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

 private:
  ExecutorConfig config_;
  KvBlockManager blocks_;
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

}  // namespace
}  // namespace inflight
