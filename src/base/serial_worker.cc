#include "base/serial_worker.h"

namespace inflight {

SerialWorker::SerialWorker() : thread_([this] { Loop(); }) {}

SerialWorker::~SerialWorker() { Stop(); }

void SerialWorker::Post(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_) {
      tasks_.push_back(std::move(fn));
      cv_.notify_one();
      return;
    }
  }
  fn();
}

void SerialWorker::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    cv_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
}

void SerialWorker::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
    if (tasks_.empty()) return;  // stopping, and everything queued has run
    std::function<void()> fn = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    fn();
    lock.lock();
  }
}

}  // namespace inflight
