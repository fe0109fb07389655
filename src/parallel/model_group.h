// The ranks that run one model together over MPI: tensor-parallel groups inside pipeline
// stages. Rank r of the group is stage r / tp, TP rank r % tp; rank 0 (stage 0, TP rank 0)
// is the leader, which schedules and samples, and the others follow its step messages.
//
// No MPI call here blocks without a way out: every operation is non-blocking and waited for
// by polling, and a heartbeat thread on each rank watches the others (messages every
// heartbeat_ms, and the process ids of ranks on this host). A rank that dies or falls silent
// for failure_timeout_ms marks the group failed; every wait then returns UNAVAILABLE at
// once, and the group is never used again.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "model/shard.h"

namespace inflight::parallel {

struct GroupOptions {
  int32_t tp_size = 1;
  int32_t pp_size = 1;
  int64_t heartbeat_ms = 200;
  int64_t failure_timeout_ms = 3000;
};

// Wait, the TP group and the counters: one thread at a time (the engine thread, or a
// follower's main thread). failed(), failure(), Fail() and StopWatching(): thread-safe.
class ModelGroup {
 public:
  // Takes a communicator of exactly tp_size * pp_size ranks (duplicated; the caller keeps
  // its own). Collective over `comm`: every rank calls it with the same sizes.
  static StatusOr<std::unique_ptr<ModelGroup>> Create(MPI_Comm comm, const GroupOptions& options);
  ~ModelGroup();
  ModelGroup(const ModelGroup&) = delete;
  ModelGroup& operator=(const ModelGroup&) = delete;

  int32_t rank() const { return rank_; }
  int32_t size() const { return size_; }
  int32_t tp_size() const { return options_.tp_size; }
  int32_t pp_size() const { return options_.pp_size; }
  int32_t stage() const { return rank_ / options_.tp_size; }
  int32_t tp_rank() const { return rank_ % options_.tp_size; }
  // The group rank of (stage, tp_rank).
  int32_t RankOf(int32_t stage, int32_t tp_rank) const {
    return stage * options_.tp_size + tp_rank;
  }
  MPI_Comm comm() const { return comm_; }
  // This stage's TP group, for the model's all-gathers.
  TensorParallelGroup* tensor_group() { return tensor_group_.get(); }

  // Waits for a non-blocking operation; UNAVAILABLE (and the request abandoned) once the group
  // has failed. A thread waiting long (a follower between steps) backs off to short sleeps.
  Status Wait(MPI_Request* request);
  bool failed() const { return failed_.load(); }
  // Why the group failed ("rank 1 (pid 1234 on host) exited"), or empty.
  std::string failure() const;
  // Marks the group failed (also called by the heartbeat thread).
  void Fail(const std::string& why);
  // Stops watching the other ranks (before a planned shutdown, when they stop answering).
  void StopWatching();

  // The TP all-gathers so far (engine thread): count, bytes this rank sent, time waited.
  struct TensorCounters {
    int64_t collectives = 0;
    int64_t bytes = 0;
    double wait_ms = 0;
  };
  TensorCounters& tensor_counters() { return tensor_counters_; }

 private:
  ModelGroup() = default;
  void HeartbeatLoop();

  GroupOptions options_;
  int32_t rank_ = 0, size_ = 1;
  MPI_Comm comm_ = MPI_COMM_NULL;       // step messages, hidden states, logits
  MPI_Comm tp_comm_ = MPI_COMM_NULL;    // this stage's TP all-gathers
  MPI_Comm beat_comm_ = MPI_COMM_NULL;  // heartbeats only
  std::unique_ptr<TensorParallelGroup> tensor_group_;
  TensorCounters tensor_counters_;
  std::vector<int32_t> pids_;       // per rank
  std::vector<std::string> hosts_;  // per rank
  std::atomic<bool> failed_{false};
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::string failure_;
  std::thread heartbeat_;
};

}  // namespace inflight::parallel
