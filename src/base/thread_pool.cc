#include "base/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <chrono>

#if defined(__x86_64__)
#include <immintrin.h>
#define INFLIGHT_PAUSE() _mm_pause()
#else
#define INFLIGHT_PAUSE() std::this_thread::yield()
#endif

namespace inflight {

ThreadPool::ThreadPool(int num_threads) : num_threads_(num_threads < 1 ? 1 : num_threads) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::Run(const std::function<void(int, int)>& task) {
  if (num_threads_ == 1) {
    task(0, 1);
    return;
  }
  task_ = &task;
  pending_.store(num_threads_ - 1, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  wake_.notify_all();
  task(0, num_threads_);
  // Spin while the others finish (microseconds in a step); past that, a worker has likely been
  // preempted by another process, and yielding lets it run instead of burning our time slice.
  for (int i = 0; pending_.load(std::memory_order_acquire) != 0; ++i) {
    if (i < 4096)
      INFLIGHT_PAUSE();
    else
      std::this_thread::yield();
  }
  task_ = nullptr;
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  const int64_t num_grains = (n + grain - 1) / grain;
  if (num_threads_ == 1 || num_grains == 1) {
    fn(0, n);
    return;
  }
  // Threads take chunks of about a quarter of their fair share from a shared counter, so a
  // thread that starts late or runs slower (a neighbour on the core, a cold cache) gets less
  // work instead of making the others wait for it.
  const int64_t chunk = std::max<int64_t>(1, num_grains / (4 * num_threads_));
  std::atomic<int64_t> next{0};
  Run([&](int, int) {
    for (;;) {
      const int64_t g0 = next.fetch_add(chunk, std::memory_order_relaxed);
      if (g0 >= num_grains) return;
      const int64_t g1 = std::min(g0 + chunk, num_grains);
      fn(g0 * grain, std::min(g1 * grain, n));
    }
  });
}

void ThreadPool::WorkerLoop(int thread_index) {
  uint64_t seen = 0;
  using Clock = std::chrono::steady_clock;
  for (;;) {
    // Spin for a short while: consecutive tasks in a step arrive microseconds apart.
    const auto spin_until = Clock::now() + std::chrono::microseconds(2000);
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int i = 0; gen == seen; ++i) {
      INFLIGHT_PAUSE();
      if ((i & 255) == 255 && Clock::now() > spin_until) break;
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_.load(std::memory_order_acquire)) return;
    (*task_)(thread_index, num_threads_);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

int DefaultNumThreads() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const unsigned hc = std::thread::hardware_concurrency();
  return hc > 0 ? static_cast<int>(hc) : 1;
}

}  // namespace inflight
