// KV cache events for a router in front of many replicas (TensorRT-LLM's KVCacheEvent): a
// block was stored (it became reusable under its hash, after its parent's hash, holding these
// tokens) or removed (evicted). Each event has a dense sequence number; the log keeps the last
// `capacity` events in a ring, so a consumer that stops reading costs nothing: it later finds a
// gap (events dropped, counted) and resyncs from a snapshot of the cache's blocks, taken with
// the id of the last event it reflects.
// Record: the engine thread (O(1), never blocks on a reader for long). Since/counters: any
// thread.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

namespace inflight {

// Tiers: cache_level 0 is the memory pool, 1 the disk tier (kvcache/kv_disk_store.h). A block
// held in both is reported at level 0. stored: the block is held now, at cache_level (a stored
// event for a block held at another level moves it there); removed: it is held nowhere;
// updated: it moved to cache_level (TensorRT-LLM's KVCacheUpdatedData: evicted from memory,
// kept on disk).
struct KvCacheEvent {
  enum class Type { kStored, kRemoved, kUpdated };
  uint64_t id = 0;  // 1, 2, 3, ...
  Type type = Type::kStored;
  int32_t group = 0;            // the KV group (0: full attention; windowed groups after it)
  uint64_t block_hash = 0;      // the prefix key of the block (kvcache/block_manager.h)
  uint64_t parent_hash = 0;     // stored: the key of the prefix before it (a root for the first)
  std::vector<int32_t> tokens;  // stored: the block's token ids
  int32_t priority = 0;         // stored: the block's retention priority (0..100)
  int32_t cache_level = 0;      // 0: the memory pool, 1: the disk tier
};

// A cache's reusable blocks at one moment, and the last event reflected in it.
struct KvCacheSnapshot {
  uint64_t last_event_id = 0;
  std::vector<KvCacheEvent> blocks;  // as stored events (id 0)
};

class KvEventLog {
 public:
  explicit KvEventLog(size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}

  // Appends `e` with the next id (returned); the oldest event goes when the ring is full.
  uint64_t Record(KvCacheEvent e);

  struct Read {
    std::vector<KvCacheEvent> events;  // ids after `after_id`, ascending, at most `max`
    bool gap = false;  // events after `after_id` were dropped (or after_id is not of this log:
                       // past its newest id): resync from a snapshot
    uint64_t last_id = 0;
  };
  Read Since(uint64_t after_id, size_t max) const;

  uint64_t last_id() const;
  uint64_t num_dropped() const;  // events that left the ring

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::deque<KvCacheEvent> ring_;
  uint64_t next_id_ = 1;
  uint64_t dropped_ = 0;
};

}  // namespace inflight
