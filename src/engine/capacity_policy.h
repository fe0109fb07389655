// The capacity policies (TensorRT-LLM's CapacitySchedulerPolicy): which sequences may hold KV
// blocks. The scheduler and the executor call one of these objects at fixed points and never
// branch on the policy themselves:
//   - accepting a request at all (Executor::Validate): the blocks it needs at once;
//   - admitting a waiting request (Scheduler::AdmitWaiting): BeginAdmission once per step,
//     then MayAdmit / Admitted per request in serve order;
//   - a running sequence short of blocks for its step: MakeRoom until it gives up, then
//     OutOfRoom;
//   - draft tokens: the blocks kept free for running sequences' own next tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/executor_config.h"
#include "engine/sequence.h"
#include "kvcache/block_manager.h"

namespace inflight {

class Scheduler;

// What admission checks against: the groups' pools and the window group's per-sequence and
// per-step reservations (engine/scheduler.h; 0 without a window group).
struct AdmissionPools {
  const KvBlockManager* blocks = nullptr;
  const KvBlockManager* window_blocks = nullptr;
  int64_t window_per_sequence = 0;
  int64_t window_per_step = 0;
  int32_t tokens_per_block = 0;
  int64_t step = 0;
};

class KvCapacityPolicy {
 public:
  virtual ~KvCapacityPolicy() = default;
  static std::unique_ptr<KvCapacityPolicy> Create(CapacityPolicy kind);
  virtual CapacityPolicy kind() const = 0;

  // Full-group blocks a request must be able to hold at once to be served at all, beam search
  // aside (prompt_blocks: its prompt's full blocks; lifetime: blocks of prompt + max_tokens).
  virtual int64_t BlocksNeededAtOnce(const Request& r, int64_t prompt_blocks,
                                     int64_t lifetime) const = 0;
  // Whether the window group's reservation (every sequence's window) must fit the group.
  virtual bool ReservesWindow() const = 0;

  virtual void BeginAdmission(const std::vector<Sequence*>& running,
                              const AdmissionPools& pools) = 0;
  // Whether `seq`'s request may be admitted now; its prefix blocks are already taken.
  virtual bool MayAdmit(const Sequence& seq) = 0;
  // `seq` was admitted, holding `newly_held` blocks more than before its step's allocation.
  virtual void Admitted(Sequence& seq, int64_t newly_held) = 0;

  // `seq` found no blocks for its step: frees some (true: try again) or cannot (false).
  virtual bool MakeRoom(Scheduler& scheduler, Sequence* seq) = 0;
  // MakeRoom gave up on `seq`.
  virtual void OutOfRoom(Scheduler& scheduler, Sequence* seq) = 0;

  // Blocks draft tokens must leave free (for the running sequences' own next tokens).
  virtual int64_t BlocksKeptFromDrafts(size_t num_running) const = 0;
};

}  // namespace inflight
