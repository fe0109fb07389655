// Bookkeeping of the paged KV cache's blocks: free list, reference counts, and prefix reuse.
// Engine-thread only (no locks).
//
// Prefix reuse (TensorRT-LLM's block reuse, vLLM's prefix caching): a block that a sequence has
// filled completely is "committed" under a key that hashes (parent block's key, its token ids),
// so a key names a whole prefix. A new sequence walks its prompt block by block from the root
// and takes every block whose key is in the table and whose stored tokens and parent really
// match (hash collisions are checked, never trusted). Shared blocks are reference counted and
// never written. When the last user releases a committed block it stays cached (reusable) and
// becomes evictable: a fresh allocation takes an uncached free block first, else evicts the
// cached block of lowest retention priority, least recently used first. Sequences release their
// blocks last-first, so within one release the leaf is the older one and is evicted before its
// parent (the reference evicts leaves only; evicting a parent first costs reuse, not
// correctness, because a child's key depends on its prefix's content, not on block ids).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "kvcache/kv_events.h"

namespace inflight {

inline constexpr int32_t kDefaultRetentionPriority = 35;  // TensorRT-LLM's default (0..100)

struct BlockManagerConfig {
  int32_t num_blocks = 0;
  int32_t tokens_per_block = 32;
  bool enable_reuse = false;
};

struct BlockCounts {
  int32_t total = 0;
  int32_t free = 0;    // unreferenced and holding nothing reusable
  int32_t cached = 0;  // unreferenced, committed: reusable until evicted
  int32_t used = 0;    // referenced by at least one sequence
};

class KvBlockManager {
 public:
  explicit KvBlockManager(const BlockManagerConfig& config);

  const BlockManagerConfig& config() const { return config_; }
  BlockCounts counts() const;
  // Blocks an allocation could get now (free + cached).
  int32_t NumAvailable() const { return num_free_ + num_cached_; }
  // Of those, the blocks holding nothing reusable (an allocation takes these first).
  int32_t NumFree() const { return num_free_; }

  // A fresh block with reference count 1; nullopt when every block is referenced.
  std::optional<int32_t> Allocate();

  // The longest run of committed blocks matching whole blocks of `tokens` (at most
  // max_blocks), each acquired (reference count + 1). Empty when reuse is off.
  // `root_key` is RootKey(salt) of the sequence's cache salt.
  std::vector<int32_t> AcquirePrefix(const int32_t* tokens, int64_t num_tokens, int32_t max_blocks,
                                     uint64_t root_key = kRootKey);

  // The committed block holding the full block `tokens` after the prefix `parent_key`,
  // acquired, or -1 (not cached, or reuse is off). A sliding-window group looks up only the
  // blocks its window still sees, by the keys the full group's walk computed.
  int32_t AcquireCommitted(uint64_t parent_key, const int32_t* tokens);

  // Partial-block reuse: among the committed blocks that follow the prefix `parent_key`, the
  // one whose leading tokens match `tokens` longest (at most max_tokens, fewer than a block).
  // Returns {block, matched tokens} with the block acquired (the caller copies those token
  // slots into a block of its own, then releases it), or {-1, 0}. Off when reuse is off.
  std::pair<int32_t, int32_t> AcquirePartial(uint64_t parent_key, const int32_t* tokens,
                                             int32_t max_tokens);

  // Key of the prefix ending with the block holding `tokens` (tokens_per_block of them) after
  // the prefix `parent_key` (kRootKey for the first block).
  static constexpr uint64_t kRootKey = 0x9e3779b97f4a7c15ull;
  // The root of a salted chain: prefixes under different salts never share a key (a
  // block's parent key is checked, so even equal keys would not be taken).
  static uint64_t RootKey(uint64_t salt) { return salt == 0 ? kRootKey : salt; }
  uint64_t ChainKey(uint64_t parent_key, const int32_t* tokens) const;

  // Records that `block` (referenced by the caller) now holds the full block `tokens` after
  // the prefix `parent_key`; returns the block's key. A no-op for the table (but the key is
  // still returned) when reuse is off or another block already holds that prefix.
  uint64_t Commit(int32_t block, uint64_t parent_key, const int32_t* tokens, int32_t priority);

  // One more reference to a block the caller already references (a forked sequence shares
  // its parent's full prompt blocks).
  void AddRef(int32_t block);

  // Drops one reference to each block, last one first.
  void Release(const std::vector<int32_t>& blocks);

  int32_t RefCount(int32_t block) const { return blocks_[block].ref_count; }
  bool IsCached(int32_t block) const { return blocks_[block].committed; }
  // Number of times a block was served from the cache (AcquirePrefix hits), for statistics.
  int64_t num_reused_blocks() const { return num_reused_blocks_; }

  // Checks every internal invariant (counts, lists, table); for tests. Empty when fine.
  std::string CheckInvariants() const;

  // Reports each block that becomes reusable (stored) and each reusable block evicted
  // (removed) to `log` as KV group `group` (null: none). The log outlives the manager.
  void SetEventLog(KvEventLog* log, int32_t group) {
    events_ = log;
    event_group_ = group;
  }
  // Every reusable block now, with the id of the last event recorded (a router's resync).
  KvCacheSnapshot Snapshot() const;
  // Whether a lower tier (the disk) holds the block of a key: an evicted block it holds is
  // reported as updated to cache level 1, not removed. Null: no lower tier.
  void SetLowerTierHolds(std::function<bool(uint64_t key)> holds) {
    lower_holds_ = std::move(holds);
  }
  // Whether the pool holds a reusable block under `key`.
  bool HoldsKey(uint64_t key) const { return table_.count(key) > 0; }

 private:
  struct Block {
    int32_t ref_count = 0;
    bool committed = false;  // in the table under `key`
    uint64_t key = 0;
    uint64_t parent_key = 0;
    std::vector<int32_t> tokens;  // the block's token ids, for collision checks
    int32_t priority = kDefaultRetentionPriority;
    uint64_t last_used = 0;
  };
  using EvictionKey = std::tuple<int32_t, uint64_t, int32_t>;  // priority, last_used, block

  void Evict(int32_t block);
  void Acquire(int32_t block);  // one more reference to a referenced or cached block

  BlockManagerConfig config_;
  std::vector<Block> blocks_;
  std::vector<int32_t> free_list_;   // uncached free blocks (a stack: the lowest id on top)
  std::set<EvictionKey> evictable_;  // cached, unreferenced
  std::unordered_map<uint64_t, int32_t> table_;          // prefix key -> block
  std::unordered_multimap<uint64_t, int32_t> children_;  // parent key -> committed blocks
  KvEventLog* events_ = nullptr;
  std::function<bool(uint64_t key)> lower_holds_;
  int32_t event_group_ = 0;
  int32_t num_free_ = 0;
  int32_t num_cached_ = 0;
  uint64_t clock_ = 0;
  int64_t num_reused_blocks_ = 0;
};

}  // namespace inflight
