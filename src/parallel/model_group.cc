#include "parallel/model_group.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>

#include "base/logging.h"
#include "parallel/mpi_process.h"

namespace inflight::parallel {
namespace {

constexpr int kBeatTag = 7;
const int kBeat = 1;  // the heartbeat's payload; static, so sends need not be waited for

using Clock = std::chrono::steady_clock;

std::atomic<bool> any_group_failed{false};

// The TP all-gathers of one stage over its communicator, waited for by the group.
class MpiTensorGroup : public TensorParallelGroup {
 public:
  MpiTensorGroup(ModelGroup* group, MPI_Comm comm, int32_t rank, int32_t size)
      : group_(group), comm_(comm), rank_(rank), size_(size) {}
  int32_t size() const override { return size_; }
  int32_t rank() const override { return rank_; }
  Status AllGather(const float* send, int64_t n, float* recv) override {
    return Collective(send, n, recv, /*all=*/true);
  }
  Status Gather(const float* send, int64_t n, float* recv) override {
    return Collective(send, n, recv, /*all=*/false);
  }

 private:
  Status Collective(const float* send, int64_t n, float* recv, bool all) {
    if (n > INT_MAX)
      return InvalidArgumentError("a gather of " + std::to_string(n) +
                                  " floats is too large for one MPI message");
    const auto start = Clock::now();
    MPI_Request request;
    const int count = static_cast<int>(n);
    const int rc =
        all ? MPI_Iallgather(send, count, MPI_FLOAT, recv, count, MPI_FLOAT, comm_, &request)
            : MPI_Igather(send, count, MPI_FLOAT, recv, count, MPI_FLOAT, 0, comm_, &request);
    if (rc != MPI_SUCCESS) {
      group_->Fail(all ? "MPI_Iallgather failed" : "MPI_Igather failed");
      return UnavailableError(group_->failure());
    }
    const Status status = group_->Wait(&request);
    ModelGroup::TensorCounters& counters = group_->tensor_counters();
    ++counters.collectives;
    counters.bytes += n * static_cast<int64_t>(sizeof(float));
    counters.wait_ms += std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    return status;
  }

  ModelGroup* group_;
  MPI_Comm comm_;
  int32_t rank_, size_;
};

}  // namespace

StatusOr<std::unique_ptr<ModelGroup>> ModelGroup::Create(MPI_Comm comm,
                                                         const GroupOptions& options) {
  int size = 0, rank = 0;
  MPI_Comm_size(comm, &size);
  MPI_Comm_rank(comm, &rank);
  if (options.tp_size < 1 || options.pp_size < 1 || options.tp_size * options.pp_size != size) {
    return InvalidArgumentError("tensor_parallel_size " + std::to_string(options.tp_size) +
                                " x pipeline_parallel_size " + std::to_string(options.pp_size) +
                                " needs " + std::to_string(options.tp_size * options.pp_size) +
                                " ranks, but the MPI job has " + std::to_string(size));
  }
  std::unique_ptr<ModelGroup> g(new ModelGroup());
  g->options_ = options;
  g->rank_ = rank;
  g->size_ = size;
  MPI_Comm_dup(comm, &g->comm_);
  MPI_Comm_set_errhandler(g->comm_, MPI_ERRORS_RETURN);
  MPI_Comm_split(g->comm_, g->stage(), g->tp_rank(), &g->tp_comm_);
  MPI_Comm_set_errhandler(g->tp_comm_, MPI_ERRORS_RETURN);
  MPI_Comm_dup(g->comm_, &g->beat_comm_);
  MPI_Comm_set_errhandler(g->beat_comm_, MPI_ERRORS_RETURN);
  g->tensor_group_ =
      std::make_unique<MpiTensorGroup>(g.get(), g->tp_comm_, g->tp_rank(), options.tp_size);

  // Who is where: a rank on this host is also watched through its process id.
  const int32_t pid = static_cast<int32_t>(::getpid());
  g->pids_.resize(size);
  MPI_Allgather(&pid, 1, MPI_INT, g->pids_.data(), 1, MPI_INT, g->comm_);
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  std::vector<char> hosts(static_cast<size_t>(size) * sizeof(host));
  MPI_Allgather(host, sizeof(host), MPI_CHAR, hosts.data(), sizeof(host), MPI_CHAR, g->comm_);
  for (int r = 0; r < size; ++r) g->hosts_.emplace_back(hosts.data() + r * sizeof(host));
  g->heartbeat_ = std::thread([raw = g.get()] { raw->HeartbeatLoop(); });
  return g;
}

void ModelGroup::StopWatching() {
  stop_ = true;
  if (heartbeat_.joinable()) heartbeat_.join();
}

ModelGroup::~ModelGroup() {
  StopWatching();
  // A failed group's communicators may have operations pending with a dead rank: leave them.
  if (!failed_.load()) {
    for (MPI_Comm* c : {&tp_comm_, &beat_comm_, &comm_}) {
      if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
    }
  }
}

std::string ModelGroup::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

void ModelGroup::Fail(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.empty()) return;
    failure_ = why;
  }
  failed_ = true;
  any_group_failed = true;
  INFLIGHT_LOG(kError) << "parallel group (rank " << rank_ << " of " << size_
                       << ") failed: " << why;
}

Status ModelGroup::Wait(MPI_Request* request) {
  int64_t sleep_us = 10;
  for (int64_t polls = 0;; ++polls) {
    int done = 0;
    if (MPI_Test(request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      Fail("an MPI operation failed");
      return UnavailableError("the model's parallel group failed: " + failure());
    }
    if (done) return OkStatus();
    if (failed_.load(std::memory_order_relaxed))
      return UnavailableError("the model's parallel group failed: " + failure());
    // Inside a step peers answer within microseconds; a follower between steps may wait for
    // hours, and should not hold a core meanwhile. The leader's serving threads may share
    // this core: yield to them while polling.
    // Past a few milliseconds of spinning, sleeps double up to 1 ms: an idle follower then
    // wakes 1000 times a second instead of stealing the other ranks' cores.
    if (polls > 20000) {
      std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
      sleep_us = std::min<int64_t>(1000, 2 * sleep_us);
    } else if (polls % 64 == 63) {
      std::this_thread::yield();
    }
  }
}

void ModelGroup::HeartbeatLoop() {
  std::vector<int> inbox(size_);
  std::vector<MPI_Request> receives(size_, MPI_REQUEST_NULL);
  std::vector<Clock::time_point> last_seen(size_, Clock::now());
  for (int p = 0; p < size_; ++p) {
    if (p != rank_) MPI_Irecv(&inbox[p], 1, MPI_INT, p, kBeatTag, beat_comm_, &receives[p]);
  }
  Clock::time_point next_beat = Clock::now();
  while (!stop_.load() && !failed_.load()) {
    const Clock::time_point now = Clock::now();
    if (now >= next_beat) {
      for (int p = 0; p < size_; ++p) {
        if (p == rank_) continue;
        MPI_Request send;
        if (MPI_Isend(&kBeat, 1, MPI_INT, p, kBeatTag, beat_comm_, &send) == MPI_SUCCESS)
          MPI_Request_free(&send);
      }
      next_beat = now + std::chrono::milliseconds(options_.heartbeat_ms);
    }
    for (int p = 0; p < size_ && !failed_.load(); ++p) {
      if (p == rank_) continue;
      for (int done = 1; done;) {
        done = 0;
        if (MPI_Test(&receives[p], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
          Fail("heartbeats from rank " + std::to_string(p) + " failed");
          break;
        }
        if (done) {
          last_seen[p] = now;
          MPI_Irecv(&inbox[p], 1, MPI_INT, p, kBeatTag, beat_comm_, &receives[p]);
        }
      }
      const std::string who = "rank " + std::to_string(p) + " (pid " + std::to_string(pids_[p]) +
                              " on " + hosts_[p] + ")";
      if (hosts_[p] == hosts_[rank_] && ::kill(pids_[p], 0) != 0 && errno == ESRCH) {
        Fail(who + " exited");
      } else if (now - last_seen[p] > std::chrono::milliseconds(options_.failure_timeout_ms)) {
        Fail(who + " sent no heartbeat for " + std::to_string(options_.failure_timeout_ms) + " ms");
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!failed_.load()) {
    for (MPI_Request& r : receives) {
      if (r == MPI_REQUEST_NULL) continue;
      MPI_Cancel(&r);
      MPI_Request_free(&r);
    }
  }
}

bool AnyGroupFailed() { return any_group_failed.load(); }

}  // namespace inflight::parallel
