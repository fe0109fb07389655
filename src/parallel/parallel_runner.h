// Tensor and pipeline parallel execution of one model over MPI (TensorRT-LLM's leader /
// orchestrator communication modes). The leader (rank 0 of the model's communicator) owns the
// executor: it schedules, samples and serves; each step it broadcasts the plan (and the KV
// block copies made since the last one) and runs its own shard like every follower.
//
// Inside a step, each pipeline stage runs the plan's micro-batches in order, receiving the
// hidden states of each from the stage before and sending its own to the stage after without
// waiting, so stage s works on micro-batch i + 1 while stage s + 1 works on i. The last
// stage's TP rank 0 sends each micro-batch's logits to the leader. The KV cache of a rank
// holds its stage's layers and its K/V heads under the block ids the leader's block manager
// hands out, so prefix reuse, copy-on-write and pauses work unchanged.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "engine/model_runner.h"
#include "parallel/wire.h"

namespace inflight::parallel {

struct ParallelConfig {
  int32_t tp_size = 1;
  int32_t pp_size = 1;
  int32_t micro_batches = 0;  // per step under pipeline parallelism; 0: pp_size
  // Expert parallelism inside each TP group: moe_ep_size x moe_tp_size = tp_size. 0 derives
  // one from the other; both 0 is moe_tp_size = tp_size (every rank a slice of every expert).
  int32_t moe_ep_size = 0;
  int32_t moe_tp_size = 0;
  int64_t heartbeat_ms = 200;
  int64_t failure_timeout_ms = 3000;
  // Compute threads per rank: the host's cores shared among the ranks on it (else the
  // executor's num_threads: ranks whose threads outnumber the cores wait on each other at
  // every all-gather for a scheduler tick).
  bool share_host_cores = true;
  // INVALID_ARGUMENT naming the field.
  Status Validate() const;
  int32_t ResolvedMoeEpSize() const;
};

// Time and bytes of the tensor-parallel all-gathers and the pipeline transfers of the steps
// run so far on this rank.
struct CommStats {
  int64_t steps = 0;
  int64_t collectives = 0;
  int64_t bytes = 0;      // sent by this rank
  double comm_ms = 0;     // waiting for collectives and transfers
  double forward_ms = 0;  // the whole shard forward, communication included
};

class ShardExecutor;

// Engine-thread only, except Health(), which is thread-safe (serving threads ask it for
// readiness).
class ParallelModelRunner : public ModelRunner {
 public:
  // Leader side: sends the load request over `comm`, loads its own shard, and agrees with the
  // followers (RunFollower on every other rank) on the KV pool size. An error names the rank
  // that failed to load, or what the ranks disagree on (model file, layout).
  static StatusOr<std::unique_ptr<ParallelModelRunner>> Create(MPI_Comm comm,
                                                               const std::string& model_path,
                                                               const ExecutorConfig& config,
                                                               const ParallelConfig& parallel);
  // Tells the followers to stop (when the group is healthy).
  ~ParallelModelRunner() override;

  int32_t vocab_size() const override;
  int32_t context_length() const override;
  int32_t num_kv_blocks() const override;
  int32_t num_window_kv_blocks() const override;
  int32_t kv_window() const override;
  int32_t num_layers() const override;
  int32_t hidden_size() const override;
  // UNAVAILABLE once a rank has failed (and for every step after).
  Status Forward(const BatchPlan& plan, float* logits) override;
  void CopyBlockPrefix(int32_t group, int32_t src, int32_t dst, int32_t num_tokens) override;
  ThreadPool* pool() override;
  Status Health() const override;

  // The leader's shard: the whole model's config and its tokenizer.
  const Model& model() const;
  CommStats comm_stats() const;

 private:
  ParallelModelRunner() = default;
  std::unique_ptr<ShardExecutor> shard_;
  std::vector<parallel::BlockCopy> pending_copies_;
};

// A follower: waits for the leader's load request on `comm`, loads its shard, then runs the
// leader's steps until the leader stops the model. Then it waits for the next load request
// (one_model: returns), until the leader dismisses it (OK) or the group fails (UNAVAILABLE,
// naming the rank that failed).
Status RunFollower(MPI_Comm comm, bool one_model = false);
// Leader: tells followers waiting in RunFollower that no model follows.
void SendDismissal(MPI_Comm comm);

}  // namespace inflight::parallel
