// Decides what runs in each step: the capacity policy (which sequences may hold KV blocks)
// and the micro-batch (which run now under max_batch_size and the max_num_tokens budget),
// allocating the blocks the step needs. Engine-thread only.
//
// Each step: (1) running sequences, decoding ones first (one token each, so chunked prompts
// never stall generation), then mid-prompt ones; when a block cannot be had, max_utilization
// pauses the most recently started sequence (its blocks are freed; it is recomputed later),
// guaranteed_no_evict cannot run short by construction. (2) If nothing was paused, waiting
// sequences in priority-then-arrival order, stopping at the first that does not fit (no
// skipping ahead, so nobody starves): guaranteed_no_evict admits only when every block the
// request could ever need is free beside what running requests have reserved; max_utilization
// when this step's blocks are free. Static batching admits only when nothing is running.
//
// The latency budget (engine/step_budget.h; in-flight batching only): once the step's decode
// rows are scheduled, prompt chunks (running ones first, then admissions, oldest first) get
// only the tokens the target leaves after the decode rows' predicted cost, cut anywhere (not
// on block boundaries), and never fewer than StepBudget::kMinPromptTokens for the step's first
// prompt. A prompt held back or cut short counts as waiting_for_latency_budget.
//
// The capacity policy is an object (engine/capacity_policy.h) the scheduler calls at
// admission, when a running sequence is short of blocks, and for draft tokens.
//
// KV cache groups (a model with sliding-window layers, kvcache/kv_storage.h): each sequence
// has a second block table, index for index with its first, in the window group. A step
// allocates a block in both groups; after the step the window-group blocks that no later
// token's window can see go back to the pool, so a window layer holds about window /
// tokens_per_block blocks per sequence however long it runs. Between steps a sequence holds at
// most WindowBlocksPerSequence - 2 window blocks and a step adds at most one block per
// sequence beyond its chunk's tokens, so guaranteed_no_evict admits a request when every
// admitted request's live sequences times WindowBlocksPerSequence, plus one step's tokens
// (WindowBlocksPerStep), fit the group: steps never run short of window blocks.
// max_utilization pauses for window blocks as for full ones. Prefix reuse takes a cached
// prefix only as far as the window group still caches the blocks its window sees.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "engine/capacity_policy.h"
#include "engine/executor_config.h"
#include "engine/sequence.h"
#include "engine/step_budget.h"
#include "kvcache/block_manager.h"
#include "kvcache/kv_disk_reader.h"

namespace inflight {

// The window group's reservations: blocks one sequence may hold during a step beyond its
// share of the step's tokens (the blocks of its last window - 1 positions, the partly filled
// block its chunk starts in, a partial-block copy's source), and the blocks of one step's
// tokens.
int32_t WindowBlocksPerSequence(int32_t window, int32_t tokens_per_block);
int32_t WindowBlocksPerStep(const ExecutorConfig& config);

// The first block a sequence that has computed num_computed tokens still needs in the window
// group: the first one the window of its next token (position num_computed) sees.
inline int64_t FirstWindowBlock(int64_t num_computed, int32_t window, int32_t tokens_per_block) {
  return std::max<int64_t>(0, num_computed - window + 1) / tokens_per_block;
}

struct ScheduledChunk {
  Sequence* seq = nullptr;
  int32_t num_tokens = 0;  // computed this step, from seq->num_computed
  int32_t num_draft = 0;   // the sequence's first num_draft draft tokens run after them
};

struct ScheduleOutput {
  int64_t step = 0;
  std::vector<ScheduledChunk> chunks;
  std::vector<Sequence*> paused;  // paused in this step (their blocks are already released)
  int32_t num_reused_blocks = 0;
  int32_t num_disk_reused_blocks = 0;       // of those, read back from the lower tier
  int32_t num_partially_reused_tokens = 0;  // slots copied from a partly matching cached block
  int32_t waiting_for_kv_cache = 0;
  int32_t waiting_for_max_num_tokens = 0;
  int32_t waiting_for_max_batch_size = 0;
  int32_t waiting_for_static_batch = 0;
  int32_t waiting_for_latency_budget = 0;  // prompts held back (or cut short) by the budget
  int32_t waiting_for_kv_disk_reads = 0;   // prefixes being read from the lower tier
  double latency_target_ms = 0;  // the target the step's prompt tokens were budgeted to; 0: none
};

class Scheduler {
 public:
  // window_blocks: the window group's blocks and `window` its sliding window in tokens; null
  // when the cache has no window group.
  // budget: the latency budget of prompt tokens beside decode rows (engine/step_budget.h);
  // null: prompts are limited by max_num_tokens only.
  Scheduler(const ExecutorConfig& config, KvBlockManager& blocks,
            KvBlockManager* window_blocks = nullptr, int32_t window = 0,
            StepBudget* budget = nullptr);

  // A new or paused sequence; kept in (priority desc, arrival asc) order.
  void AddWaiting(Sequence* seq);
  // A sequence that already holds its blocks (a fork of a running sequence).
  void AddRunning(Sequence* seq);
  // Drops a finished or cancelled sequence from the lists and releases its blocks.
  void Remove(Sequence* seq);

  const ScheduleOutput& Step();

  const std::vector<Sequence*>& running() const { return running_; }
  const std::vector<Sequence*>& waiting() const { return waiting_; }
  int64_t num_paused_total() const { return num_paused_total_; }

  // Runs the partial-block copies this step's admissions asked for: copy(group, src, dst,
  // tokens) before the forward pass; then drops the hold on each source block.
  void FinishCopies(const std::function<void(int32_t, int32_t, int32_t, int32_t)>& copy);

  // After its step ran: commits the sequence's newly filled blocks for prefix reuse, and
  // returns the window-group blocks no window sees any more to the pool.
  void CommitFullBlocks(Sequence* seq);

  // Releases every block the sequence holds (all groups) and resets it to nothing computed.
  void DropBlocks(Sequence* seq);

  // `to` takes a reference to the first `count` blocks of `from` in every group (a fork or a
  // beam continuing another); its window_first follows.
  void ShareBlocks(const Sequence& from, Sequence* to, size_t count);

  // Copy-on-write of the sequence's last block, in each group where another sequence shares
  // it: a fresh block gets its first `used` slots through copy(group, src, dst, used). false
  // (nothing changed) when a group has no free block.
  bool CopyLastBlock(Sequence* seq, int32_t used,
                     const std::function<void(int32_t, int32_t, int32_t, int32_t)>& copy);

  bool has_window_group() const { return window_blocks_ != nullptr; }

  // A tier below the pool (the disk): at admission, the prefix continues past the pool's
  // blocks with blocks `load` puts into fresh blocks (committed for reuse); each block a
  // sequence fills is offered to `store`, with its window group's block (-1: none). With a
  // window group, `load_window` puts the window group's part of a block `load` just loaded
  // into a fresh window block (for the blocks the prefix's window sees), and `done` ends the
  // admission (what load kept for load_window is dropped). Blocks are named as in
  // KvBlockManager. With `ready`,
  // a sequence whose prefix continues in the tier is admitted only once `ready` says the
  // tier's blocks past the pool's (keys, parents, tokens) are read: until then it waits while
  // the others run (the reads are the tier's, off the engine thread).
  struct LowerTier {
    std::function<bool(uint64_t key)> has;
    std::function<bool(uint64_t key, uint64_t parent, const int32_t* tokens, int32_t block)> load;
    std::function<void(uint64_t key, uint64_t parent, const int32_t* tokens, int32_t block,
                       int32_t window_block)>
        store;
    std::function<bool(const std::vector<KvDiskReader::Block>& chain)> ready;
    std::function<bool(uint64_t key, int32_t window_block)> load_window;
    std::function<void()> done;
  };
  void SetLowerTier(LowerTier tier) { lower_ = std::move(tier); }

  // Disaggregated serving: writes a hand-off block's K/V into pool block `block` (false: the
  // runner cannot). A generation-only sequence's admission takes its prompt's whole blocks
  // from its hand-off through it instead of the prefix cache.
  void SetBlockImporter(std::function<bool(int32_t block, const uint8_t* kv)> import) {
    import_block_ = std::move(import);
  }

  // Drops a running sequence's blocks and queues it to be recomputed (a beam that found no
  // block for its copy-on-write copy).
  void Requeue(Sequence* seq);

  // Releases the blocks past the sequence's tokens (slots of rejected draft tokens).
  void TrimBlocks(Sequence* seq);
  // Gives back the step's tree scratch blocks of every scheduled sequence (after the pass).
  void ReleaseTreeScratch();

  // For the capacity policies (engine/capacity_policy.h): the running sequence to pause for
  // `exclude` (the most recently started one not scheduled this step; null when none), and the
  // pause itself (its blocks are freed; it waits to be recomputed).
  Sequence* PickVictim(const Sequence* exclude) const;
  void Pause(Sequence* seq);

  const KvCapacityPolicy& policy() const { return *policy_; }

 private:
  void TakeHandoff(Sequence* seq);
  void FinishHandoff(Sequence* seq);
  int32_t ChunkSize(const Sequence& seq, int32_t budget) const;
  bool EnsureBlocks(Sequence* seq, int64_t num_tokens);
  // Blocks an allocation in every group can have now.
  int64_t NumAvailable() const;
  void ReleaseBehindWindow(Sequence* seq);
  // The window blocks of a cached prefix of num_blocks blocks (chain keys[i] before block i):
  // acquires those its window sees (from the window group's pool, else for the blocks loaded
  // from the lower tier at or after from_lower, from there); returns the first block it lacks,
  // or num_blocks.
  int32_t AcquireWindowPrefix(Sequence* seq, const std::vector<uint64_t>& keys, int32_t num_blocks,
                              int32_t from_lower);
  void ReleaseWindow(Sequence* seq, size_t from);
  // Blocks for the sequence's next n tokens, making room as the policy allows; false when it
  // could not (the policy has dealt with the sequence).
  bool TakeStepBlocks(Sequence* seq, int32_t n);
  // A prompt chunk under the token budget and the latency budget; *held: the latency budget
  // cut it.
  int32_t PromptChunk(const Sequence& seq, int32_t budget, bool* held) const;
  void ScheduleRunning(int32_t& budget);
  void AdmitWaiting(int32_t& budget);
  void TakePrefix(Sequence* seq);
  // Whether the lower tier may continue the sequence's prefix (not for LoRA requests: their
  // salt is the adapter's task id, which a restart may give to other weights).
  bool LowerTierUsable(const Sequence& seq) const;
  // False while the lower tier's part of the sequence's prefix is still being read.
  bool LowerTierReady(const Sequence& seq);
  void Schedule(Sequence* seq, int32_t n, int32_t& budget);
  int32_t FitDrafts(Sequence* seq, int32_t n, int32_t budget);
  // Scratch blocks for the step's draft trees, from blocks holding nothing (after everything
  // else is scheduled, so they never keep a request out); a tree without room is cut.
  void TakeTreeScratch();

  ExecutorConfig config_;
  KvBlockManager& blocks_;
  KvBlockManager* window_blocks_;
  int32_t window_;
  std::unique_ptr<KvCapacityPolicy> policy_;
  StepBudget* budget_;
  // This step: the decode rows' shape, and the time left for prompt tokens (+inf: no limit).
  StepShape decode_shape_;
  double prompt_ms_ = StepBudget::kNoLimit;
  bool first_prompt_ = true;  // no prompt chunk scheduled yet this step
  std::vector<uint64_t> keys_scratch_;
  std::vector<KvDiskReader::Block> chain_scratch_;
  std::vector<Sequence*> running_;  // in start order
  std::vector<Sequence*> waiting_;
  std::vector<Sequence*> order_scratch_;
  ScheduleOutput out_;
  int64_t step_ = 0;
  int64_t num_paused_total_ = 0;
  LowerTier lower_;
  std::function<bool(int32_t block, const uint8_t* kv)> import_block_;
};

}  // namespace inflight
