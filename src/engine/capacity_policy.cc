#include "engine/capacity_policy.h"

#include "engine/scheduler.h"

namespace inflight {
namespace {

// Admits a request only when every block it could ever need is free beside what admitted
// requests have reserved: a running sequence never runs short, nobody is ever paused.
class GuaranteedNoEvict final : public KvCapacityPolicy {
 public:
  CapacityPolicy kind() const override { return CapacityPolicy::kGuaranteedNoEvict; }

  int64_t BlocksNeededAtOnce(const Request& r, int64_t prompt_blocks,
                             int64_t lifetime) const override {
    // Every returned sequence grows its own table past the prompt's shared full blocks.
    return lifetime + (r.num_return_sequences - 1) * (lifetime - prompt_blocks);
  }
  bool ReservesWindow() const override { return true; }

  void BeginAdmission(const std::vector<Sequence*>& running, const AdmissionPools& pools) override {
    pools_ = pools;
    reserved_ = 0;
    window_reserved_ = pools.window_per_step;
    for (Sequence* s : running) {
      if (s->request->mark == pools.step) continue;
      s->request->mark = pools.step;
      reserved_ += s->request->OutstandingBlocks(pools.tokens_per_block);
      window_reserved_ += pools.window_per_sequence * s->request->MaxLiveSequences();
    }
  }

  bool MayAdmit(const Sequence& seq) override {
    outstanding_ = seq.request->OutstandingBlocks(pools_.tokens_per_block);
    window_need_ = 0;
    if (outstanding_ > pools_.blocks->NumAvailable() - reserved_) return false;
    if (pools_.window_blocks && seq.request->mark != pools_.step) {
      window_need_ = pools_.window_per_sequence * seq.request->MaxLiveSequences();
      if (window_reserved_ + window_need_ > pools_.window_blocks->config().num_blocks) return false;
    }
    return true;
  }

  void Admitted(Sequence& seq, int64_t newly_held) override {
    reserved_ += outstanding_ - newly_held;
    window_reserved_ += window_need_;
    seq.request->mark = pools_.step;
  }

  bool MakeRoom(Scheduler&, Sequence*) override { return false; }  // cannot happen by construction
  void OutOfRoom(Scheduler&, Sequence*) override {}
  int64_t BlocksKeptFromDrafts(size_t) const override { return 0; }

 private:
  AdmissionPools pools_;
  int64_t reserved_ = 0, window_reserved_ = 0;
  int64_t outstanding_ = 0, window_need_ = 0;  // of the request MayAdmit last looked at
};

// Admits while the next step's blocks are free; when a running sequence runs short, pauses
// the most recently started others (their blocks are freed, they are recomputed later).
class MaxUtilization final : public KvCapacityPolicy {
 public:
  CapacityPolicy kind() const override { return CapacityPolicy::kMaxUtilization; }
  int64_t BlocksNeededAtOnce(const Request&, int64_t, int64_t lifetime) const override {
    return lifetime;  // one sequence: its siblings can wait or be paused
  }
  bool ReservesWindow() const override { return false; }
  void BeginAdmission(const std::vector<Sequence*>&, const AdmissionPools&) override {}
  bool MayAdmit(const Sequence&) override { return true; }  // the step's own blocks decide
  void Admitted(Sequence&, int64_t) override {}
  bool MakeRoom(Scheduler& scheduler, Sequence* seq) override {
    Sequence* victim = scheduler.PickVictim(seq);
    if (victim == nullptr) return false;
    scheduler.Pause(victim);
    return true;
  }
  void OutOfRoom(Scheduler& scheduler, Sequence* seq) override { scheduler.Pause(seq); }
  int64_t BlocksKeptFromDrafts(size_t num_running) const override {
    return static_cast<int64_t>(num_running);
  }
};

}  // namespace

std::unique_ptr<KvCapacityPolicy> KvCapacityPolicy::Create(CapacityPolicy kind) {
  if (kind == CapacityPolicy::kMaxUtilization) return std::make_unique<MaxUtilization>();
  return std::make_unique<GuaranteedNoEvict>();
}

}  // namespace inflight
