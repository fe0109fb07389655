// The same-host transport of a disaggregated hand-off: a context instance writes the serialized
// hand-off (kv_handoff.h) to a file of a shared-memory folder (tmpfs: /dev/shm) and answers a
// 48-byte descriptor naming it in place of the bytes; a generation instance configured with
// the same folder reads the file once and removes it. Only the descriptor crosses the router's
// two gRPC hops, so the K/V goes from one process to the other at memory speed.
//
// Names are 128 random bits (a client cannot guess another request's segment); the reader
// takes a segment by unlinking it before it reads, so a descriptor is good once. Segments
// nobody takes expire after `ttl_ms` (any instance sweeping the folder removes them, also
// those a crashed instance left), and the folder holds at most `max_bytes`: past that Write
// declines and the caller sends the bytes inline.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace inflight {

inline constexpr size_t kKvHandoffShmDescriptorBytes = 48;

// True when `data` is a descriptor (its magic), not a hand-off itself.
bool IsKvHandoffShmDescriptor(const uint8_t* data, size_t size);

class KvHandoffShm {
 public:
  // `dir` must exist (the caller confines and creates it).
  static StatusOr<std::unique_ptr<KvHandoffShm>> Open(const std::string& dir, int64_t ttl_ms,
                                                      int64_t max_bytes);
  ~KvHandoffShm();
  KvHandoffShm(const KvHandoffShm&) = delete;
  KvHandoffShm& operator=(const KvHandoffShm&) = delete;

  // A new segment of `size` bytes, which `fill` writes in place (mapped shared memory), and
  // its descriptor; nullopt when the folder already holds max_bytes of live segments or its
  // filesystem is full (send the bytes inline). Another I/O error is a status.
  StatusOr<std::optional<std::string>> Write(size_t size,
                                             const std::function<void(uint8_t*)>& fill);
  StatusOr<std::optional<std::string>> Write(const uint8_t* data, size_t size);

  // A taken segment, mapped read-only until destroyed.
  class Segment {
   public:
    Segment(const uint8_t* data, size_t size) : data_(data), size_(size) {}
    Segment(Segment&& o) noexcept;
    Segment(const Segment&) = delete;
    Segment& operator=(const Segment&) = delete;
    Segment& operator=(Segment&&) = delete;
    ~Segment();
    const uint8_t* data() const { return data_; }
    size_t size() const { return size_; }

   private:
    const uint8_t* data_;
    size_t size_;
  };

  // Claims (removes) and maps the segment `descriptor` names. INVALID_ARGUMENT for a malformed
  // descriptor or a file that is not the segment it announces, NOT_FOUND for a segment that
  // expired or was already taken.
  StatusOr<Segment> Take(const uint8_t* descriptor, size_t size);

  // Removes expired segments; returns the bytes of the live ones.
  int64_t Sweep();

  // What this instance did with segments, for metrics.
  struct Counts {
    int64_t written = 0, taken = 0, expired = 0, declined = 0;  // declined: full, sent inline
    int64_t live_bytes = 0;  // of the folder's live segments at the last sweep
  };
  Counts counts() const;

  const std::string& dir() const { return dir_; }

 private:
  KvHandoffShm(std::string dir, int dir_fd, int64_t ttl_ms, int64_t max_bytes)
      : dir_(std::move(dir)), dir_fd_(dir_fd), ttl_ms_(ttl_ms), max_bytes_(max_bytes) {}

  const std::string dir_;
  const int dir_fd_;
  const int64_t ttl_ms_;
  const int64_t max_bytes_;
  std::mutex sweep_mu_;  // one sweep at a time (the writer's and the periodic one)
  std::atomic<int64_t> written_{0}, taken_{0}, expired_{0}, declined_{0}, live_bytes_{0};
};

}  // namespace inflight
