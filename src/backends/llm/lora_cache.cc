#include "backends/llm/lora_cache.h"

namespace inflight::serving {

StatusOr<std::shared_ptr<const LoraAdapter>> LoraCache::Get(uint64_t task_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(task_id);
  if (it == entries_.end()) {
    return NotFoundError("LoRA task " + std::to_string(task_id) +
                         " not found in cache. Please send LoRA weights with request");
  }
  lru_.splice(lru_.begin(), lru_, it->second.pos);
  return it->second.adapter;
}

Status LoraCache::Put(uint64_t task_id, std::shared_ptr<const LoraAdapter> adapter) {
  if (adapter->bytes() > max_bytes_) {
    return ResourceExhaustedError("the LoRA adapter of task " + std::to_string(task_id) +
                                  " takes " + std::to_string(adapter->bytes()) +
                                  " bytes; the cache holds " + std::to_string(max_bytes_) +
                                  " (lora_cache_host_memory_bytes)");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = entries_.find(task_id); it != entries_.end()) {
    bytes_ -= it->second.adapter->bytes();
    lru_.erase(it->second.pos);
    entries_.erase(it);
  }
  while (bytes_ + adapter->bytes() > max_bytes_ && !lru_.empty()) {
    auto victim = entries_.find(lru_.back());
    bytes_ -= victim->second.adapter->bytes();
    entries_.erase(victim);
    lru_.pop_back();
  }
  lru_.push_front(task_id);
  bytes_ += adapter->bytes();
  entries_[task_id] = {std::move(adapter), lru_.begin()};
  return OkStatus();
}

size_t LoraCache::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

size_t LoraCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

}  // namespace inflight::serving
