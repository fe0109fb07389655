// Bytes of one request's output on their way to its client and not there yet: results in the
// engine's output stream, responses waiting on a connection to be encoded, encoded output the
// client has not read. Each stage adds what it holds and releases it when it hands it on, so
// the sum covers the whole chain from the engine to the socket. Past `pause_bytes` the
// engine stops generating for the request (back-pressure) until the client reads enough to
// bring the sum back under it; the listener runs then (it wakes the engine). A request paused
// for longer than `max_stall` with nothing read ends with an error (it holds KV-cache blocks).
// Shared by the rows of one request (or the requests of one gRPC stream). Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>

namespace inflight {

class OutputCredit {
 public:
  using Clock = std::chrono::steady_clock;

  // pause_bytes: 0 = never pauses (only counts). max_stall: zero = a pause never ends the
  // request.
  explicit OutputCredit(int64_t pause_bytes,
                        std::chrono::milliseconds max_stall = std::chrono::milliseconds(0))
      : pause_bytes_(pause_bytes), max_stall_(max_stall) {}

  void Add(int64_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t before = held_.load();
    held_.store(before + bytes);
    if (pause_bytes_ > 0 && before <= pause_bytes_ && before + bytes > pause_bytes_)
      paused_since_ = Clock::now();
  }
  void Release(int64_t bytes) {
    std::function<void()> fn;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const int64_t before = held_.load();
      held_.store(before - bytes);
      if (pause_bytes_ > 0 && before > pause_bytes_ && before - bytes <= pause_bytes_)
        fn = on_resume_;
      // Still over the bound, but the client read: the stall clock counts from its last read
      // (a slow, steady reader is paced, never ended).
      if (pause_bytes_ > 0 && bytes > 0 && before - bytes > pause_bytes_)
        paused_since_ = Clock::now();
    }
    if (fn) fn();  // outside the lock: it takes the engine's
  }
  int64_t held() const { return held_.load(); }
  int64_t pause_bytes() const { return pause_bytes_; }
  std::chrono::milliseconds max_stall() const { return max_stall_; }
  bool paused() const { return pause_bytes_ > 0 && held_.load() > pause_bytes_; }
  // Paused for longer than max_stall since the pause began or the client last read.
  bool stalled(Clock::time_point now) const {
    if (max_stall_.count() <= 0 || !paused()) return false;
    std::lock_guard<std::mutex> lock(mu_);
    return held_.load() > pause_bytes_ && now - paused_since_ > max_stall_;
  }
  // fn runs (on the releasing thread) each time a release ends a pause; one listener.
  void SetOnResume(std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(mu_);
    on_resume_ = std::move(fn);
  }

 private:
  const int64_t pause_bytes_;
  const std::chrono::milliseconds max_stall_;
  mutable std::mutex mu_;
  std::atomic<int64_t> held_{0};
  Clock::time_point paused_since_{};
  std::function<void()> on_resume_;
};

}  // namespace inflight
