#include "kvcache/block_manager.h"

#include <algorithm>

#include "base/check.h"

namespace inflight {

KvBlockManager::KvBlockManager(const BlockManagerConfig& config) : config_(config) {
  INFLIGHT_CHECK(config.num_blocks >= 0 && config.tokens_per_block > 0);
  blocks_.resize(config.num_blocks);
  free_list_.reserve(config.num_blocks);
  for (int32_t b = config.num_blocks - 1; b >= 0; --b) free_list_.push_back(b);
  num_free_ = config.num_blocks;
}

BlockCounts KvBlockManager::counts() const {
  return {config_.num_blocks, num_free_, num_cached_, config_.num_blocks - num_free_ - num_cached_};
}

std::optional<int32_t> KvBlockManager::Allocate() {
  int32_t b;
  if (!free_list_.empty()) {
    b = free_list_.back();
    free_list_.pop_back();
    --num_free_;
  } else if (!evictable_.empty()) {
    b = std::get<2>(*evictable_.begin());
    Evict(b);
  } else {
    return std::nullopt;
  }
  Block& blk = blocks_[b];
  blk.ref_count = 1;
  blk.last_used = ++clock_;
  return b;
}

void KvBlockManager::Evict(int32_t b) {
  Block& blk = blocks_[b];
  evictable_.erase({blk.priority, blk.last_used, b});
  --num_cached_;
  table_.erase(blk.key);
  for (auto [it, end] = children_.equal_range(blk.parent_key); it != end; ++it) {
    if (it->second == b) {
      children_.erase(it);
      break;
    }
  }
  blk.committed = false;
  blk.tokens.clear();
  blk.priority = kDefaultRetentionPriority;
  if (events_) {
    KvCacheEvent e;
    e.type = KvCacheEvent::Type::kRemoved;
    e.group = event_group_;
    e.block_hash = blk.key;
    if (lower_holds_ && lower_holds_(blk.key)) {  // still held, on disk
      e.type = KvCacheEvent::Type::kUpdated;
      e.cache_level = 1;
    }
    events_->Record(std::move(e));
  }
}

uint64_t KvBlockManager::ChainKey(uint64_t parent_key, const int32_t* tokens) const {
  // FNV-1a over the parent key and the token ids, finished with a 64-bit mixer.
  uint64_t h = 0xcbf29ce484222325ull ^ parent_key;
  for (int32_t i = 0; i < config_.tokens_per_block; ++i) {
    h ^= static_cast<uint32_t>(tokens[i]);
    h *= 0x100000001b3ull;
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

std::vector<int32_t> KvBlockManager::AcquirePrefix(const int32_t* tokens, int64_t num_tokens,
                                                   int32_t max_blocks, uint64_t root_key) {
  std::vector<int32_t> out;
  if (!config_.enable_reuse) return out;
  const int32_t tpb = config_.tokens_per_block;
  uint64_t parent = root_key;
  for (int64_t start = 0;
       start + tpb <= num_tokens && static_cast<int32_t>(out.size()) < max_blocks; start += tpb) {
    const uint64_t key = ChainKey(parent, tokens + start);
    auto it = table_.find(key);
    if (it == table_.end()) break;
    const Block& blk = blocks_[it->second];
    if (blk.parent_key != parent ||
        !std::equal(blk.tokens.begin(), blk.tokens.end(), tokens + start))
      break;
    Acquire(it->second);
    out.push_back(it->second);
    parent = key;
  }
  num_reused_blocks_ += static_cast<int64_t>(out.size());
  return out;
}

uint64_t KvBlockManager::Commit(int32_t b, uint64_t parent_key, const int32_t* tokens,
                                int32_t priority) {
  const uint64_t key = ChainKey(parent_key, tokens);
  Block& blk = blocks_[b];
  INFLIGHT_CHECK(blk.ref_count > 0);
  if (!config_.enable_reuse || blk.committed || table_.count(key) != 0) return key;
  blk.committed = true;
  blk.key = key;
  blk.parent_key = parent_key;
  blk.tokens.assign(tokens, tokens + config_.tokens_per_block);
  blk.priority = std::clamp(priority, 0, 100);
  table_[key] = b;
  children_.emplace(parent_key, b);
  if (events_) {
    KvCacheEvent e;
    e.type = KvCacheEvent::Type::kStored;
    e.group = event_group_;
    e.block_hash = key;
    e.parent_hash = parent_key;
    e.tokens = blk.tokens;
    e.priority = blk.priority;
    events_->Record(std::move(e));
  }
  return key;
}

KvCacheSnapshot KvBlockManager::Snapshot() const {
  KvCacheSnapshot s;
  s.last_event_id = events_ ? events_->last_id() : 0;
  for (const auto& [key, b] : table_) {
    const Block& blk = blocks_[b];
    KvCacheEvent e;
    e.group = event_group_;
    e.block_hash = key;
    e.parent_hash = blk.parent_key;
    e.tokens = blk.tokens;
    e.priority = blk.priority;
    s.blocks.push_back(std::move(e));
  }
  return s;
}

std::pair<int32_t, int32_t> KvBlockManager::AcquirePartial(uint64_t parent_key,
                                                           const int32_t* tokens,
                                                           int32_t max_tokens) {
  if (!config_.enable_reuse || max_tokens <= 0) return {-1, 0};
  max_tokens = std::min(max_tokens, config_.tokens_per_block - 1);
  int32_t best = -1, best_len = 0;
  for (auto [it, end] = children_.equal_range(parent_key); it != end; ++it) {
    const Block& blk = blocks_[it->second];
    int32_t len = 0;
    while (len < max_tokens && blk.tokens[len] == tokens[len]) ++len;
    if (len > best_len) best = it->second, best_len = len;
  }
  if (best < 0) return {-1, 0};
  Acquire(best);
  return {best, best_len};
}

void KvBlockManager::Acquire(int32_t b) {
  Block& blk = blocks_[b];
  if (blk.ref_count == 0) {
    evictable_.erase({blk.priority, blk.last_used, b});
    --num_cached_;
  }
  ++blk.ref_count;
  blk.last_used = ++clock_;
}

int32_t KvBlockManager::AcquireCommitted(uint64_t parent_key, const int32_t* tokens) {
  if (!config_.enable_reuse) return -1;
  auto it = table_.find(ChainKey(parent_key, tokens));
  if (it == table_.end()) return -1;
  const Block& blk = blocks_[it->second];
  if (blk.parent_key != parent_key || !std::equal(blk.tokens.begin(), blk.tokens.end(), tokens))
    return -1;
  Acquire(it->second);
  ++num_reused_blocks_;
  return it->second;
}

void KvBlockManager::AddRef(int32_t b) {
  INFLIGHT_CHECK(blocks_[b].ref_count > 0);
  ++blocks_[b].ref_count;
}

void KvBlockManager::Release(const std::vector<int32_t>& blocks) {
  // Last block first: the leaf gets the older timestamp, so it is evicted before its parent.
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
    Block& blk = blocks_[*it];
    INFLIGHT_CHECK(blk.ref_count > 0);
    if (--blk.ref_count > 0) continue;
    if (blk.committed) {
      blk.last_used = ++clock_;
      evictable_.insert({blk.priority, blk.last_used, *it});
      ++num_cached_;
    } else {
      free_list_.push_back(*it);
      ++num_free_;
    }
  }
}

std::string KvBlockManager::CheckInvariants() const {
  int32_t free = 0, cached = 0;
  std::vector<bool> in_free(blocks_.size(), false);
  for (int32_t b : free_list_) {
    if (in_free[b]) return "block " + std::to_string(b) + " twice in the free list";
    in_free[b] = true;
    if (blocks_[b].ref_count != 0 || blocks_[b].committed)
      return "free block " + std::to_string(b) + " is in use or cached";
  }
  for (size_t b = 0; b < blocks_.size(); ++b) {
    const Block& blk = blocks_[b];
    if (blk.ref_count < 0) return "negative reference count";
    if (blk.ref_count == 0 && !blk.committed) ++free;
    if (blk.ref_count == 0 && blk.committed) {
      ++cached;
      if (!evictable_.count({blk.priority, blk.last_used, static_cast<int32_t>(b)}))
        return "cached block " + std::to_string(b) + " not evictable";
    }
    if (blk.committed) {
      auto it = table_.find(blk.key);
      if (it == table_.end() || it->second != static_cast<int32_t>(b))
        return "committed block " + std::to_string(b) + " not in the table";
    }
  }
  if (free != num_free_ || free != static_cast<int32_t>(free_list_.size()))
    return "free count mismatch";
  if (cached != num_cached_ || cached != static_cast<int32_t>(evictable_.size()))
    return "cached count mismatch";
  if (table_.size() > blocks_.size()) return "table larger than the pool";
  if (children_.size() != table_.size()) return "children index out of step with the table";
  for (const auto& [key, b] : table_) {
    if (!blocks_[b].committed || blocks_[b].key != key)
      return "table entry points at a block with another key";
  }
  return "";
}

}  // namespace inflight
