// One thread that runs posted tasks in order. Post never blocks the caller on the work
// itself (the engine thread hands results over with it); Stop runs what is queued, then
// joins. Thread-safe.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace inflight {

class SerialWorker {
 public:
  SerialWorker();
  ~SerialWorker();
  SerialWorker(const SerialWorker&) = delete;
  SerialWorker& operator=(const SerialWorker&) = delete;

  // Queues fn; after Stop it runs on the calling thread instead (nothing is dropped).
  void Post(std::function<void()> fn);
  // Runs every queued task, then ends the thread. Idempotent.
  void Stop();

 private:
  void Loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace inflight
