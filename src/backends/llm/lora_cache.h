// LoRA adapters of one model by lora_task_id (TensorRT-LLM's PEFT cache): a request's first
// use sends the weights with the id, later ones the id alone. Bounded by bytes
// (lora_cache_host_memory_bytes) with least-recently-used eviction; an adapter a running
// request holds stays alive until it ends. Thread-safe.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "base/status.h"
#include "model/lora.h"

namespace inflight::serving {

class LoraCache {
 public:
  explicit LoraCache(size_t max_bytes) : max_bytes_(max_bytes) {}

  // NOT_FOUND with the reference's message when the id is not cached.
  StatusOr<std::shared_ptr<const LoraAdapter>> Get(uint64_t task_id);
  // Caches (or replaces) the adapter of task_id; RESOURCE_EXHAUSTED when it alone exceeds
  // the cache.
  Status Put(uint64_t task_id, std::shared_ptr<const LoraAdapter> adapter);
  size_t bytes() const;
  size_t size() const;

 private:
  void Touch(uint64_t task_id);

  const size_t max_bytes_;
  mutable std::mutex mu_;
  size_t bytes_ = 0;
  std::list<uint64_t> lru_;  // most recent first
  struct Entry {
    std::shared_ptr<const LoraAdapter> adapter;
    std::list<uint64_t>::iterator pos;
  };
  std::unordered_map<uint64_t, Entry> entries_;
};

}  // namespace inflight::serving
