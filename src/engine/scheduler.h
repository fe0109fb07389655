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
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/executor_config.h"
#include "engine/sequence.h"
#include "kvcache/block_manager.h"

namespace inflight {

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
  int32_t num_partially_reused_tokens = 0;  // slots copied from a partly matching cached block
  int32_t waiting_for_kv_cache = 0;
  int32_t waiting_for_max_num_tokens = 0;
  int32_t waiting_for_max_batch_size = 0;
  int32_t waiting_for_static_batch = 0;
};

class Scheduler {
 public:
  Scheduler(const ExecutorConfig& config, KvBlockManager& blocks);

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

  // Runs the partial-block copies this step's admissions asked for: copy(src, dst, tokens)
  // before the forward pass; then drops the hold on each source block.
  void FinishCopies(const std::function<void(int32_t, int32_t, int32_t)>& copy);

  // Commits the sequence's newly filled blocks for prefix reuse (after its step ran).
  void CommitFullBlocks(Sequence* seq);

  // Drops a running sequence's blocks and queues it to be recomputed (a beam that found no
  // block for its copy-on-write copy).
  void Requeue(Sequence* seq);

  // Releases the blocks past the sequence's tokens (slots of rejected draft tokens).
  void TrimBlocks(Sequence* seq);

 private:
  int32_t ChunkSize(const Sequence& seq, int32_t budget) const;
  bool EnsureBlocks(Sequence* seq, int64_t num_tokens);
  void Pause(Sequence* seq);
  Sequence* PickVictim(const Sequence* exclude) const;
  void ScheduleRunning(int32_t& budget);
  void AdmitWaiting(int32_t& budget);
  void TakePrefix(Sequence* seq);
  void DropBlocks(Sequence* seq);
  void Schedule(Sequence* seq, int32_t n, int32_t& budget);
  int32_t FitDrafts(Sequence* seq, int32_t n, int32_t budget);

  ExecutorConfig config_;
  KvBlockManager& blocks_;
  std::vector<Sequence*> running_;  // in start order
  std::vector<Sequence*> waiting_;
  std::vector<Sequence*> order_scratch_;
  ScheduleOutput out_;
  int64_t step_ = 0;
  int64_t num_paused_total_ = 0;
};

}  // namespace inflight
