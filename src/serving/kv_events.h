// KV cache events as the core passes them from an LLM model to a router (TensorRT-LLM's
// KVCacheEvent: stored / removed blocks by hash), without an engine type.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace inflight::serving {

struct KvEventRecord {
  uint64_t id = 0;       // the event's sequence number (0 in a snapshot's block list)
  bool stored = true;    // else removed, or updated
  bool updated = false;  // the block moved to cache_level (TensorRT-LLM's updated event)
  int32_t group = 0;     // 0: full-attention blocks, 1: the sliding-window group's
  uint64_t block_hash = 0;
  uint64_t parent_hash = 0;     // stored: the prefix before the block
  std::vector<int32_t> tokens;  // stored: the block's token ids
  int32_t priority = 0;
  int32_t cache_level = 0;  // 0: memory, 1: the disk tier
};

struct KvEventsPage {
  std::vector<KvEventRecord> events;  // after the asked id, ascending
  bool gap = false;      // events after the asked id were dropped: resync from a snapshot
  uint64_t last_id = 0;  // the newest event's id
  uint64_t dropped = 0;  // events dropped from the bounded buffer since the model loaded
};

struct KvCacheListing {
  uint64_t last_event_id = 0;  // the newest event reflected in `blocks`
  std::vector<KvEventRecord> blocks;
};

}  // namespace inflight::serving
