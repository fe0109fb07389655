// A fixed pool of compute threads for the work inside one engine step. The calling thread
// takes part as thread 0, so ThreadPool(2) starts one extra thread. Workers spin briefly
// between tasks (a decode step issues hundreds of small parallel matmuls, and a sleeping
// thread takes tens of microseconds to wake), then sleep on a condition variable.
//
// Thread-safety: Run() may be called from one thread at a time (the engine thread).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace inflight {

class ThreadPool {
 public:
  // num_threads >= 1 counts the calling thread.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Runs task(thread_index, num_threads) on every thread and returns when all are done.
  void Run(const std::function<void(int, int)>& task);

  // Runs fn(begin, end) over disjoint ranges covering [0, n), each a whole number of
  // `grain`s (except at n), on all threads; which thread runs which range is not fixed.
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void WorkerLoop(int thread_index);

  const int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  const std::function<void(int, int)>* task_ = nullptr;
};

// Number of hardware threads to use by default (the cores this process may run on).
int DefaultNumThreads();

}  // namespace inflight
