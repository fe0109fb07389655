// The KV cache's secondary tier on disk: reusable blocks (full prompt blocks, by the prefix key
// of kvcache/block_manager.h) written behind to a bounded directory, found again by the same
// key after an eviction, a restart or a crash, and read back instead of recomputed.
//
// One file per block, "<fingerprint hash>/<key as 16 hex digits>.kvb" under the path: a header
// (magic, version, the store's fingerprint, the block's key, its parent key, sizes, checksums), the
// block's token ids, then the K/V bytes of every layer (KvStorage::ExportBlock). The fingerprint
// binds files to the model file, the weights' format and the KV layout and type; the tenant salt is
// in the key chain itself. Nothing in a file is trusted: a file that is truncated, corrupt, renamed
// to another key or of another store is skipped with a warning (deleted when it is ours and broken;
// left alone when it belongs to another fingerprint), never read into the cache.
//
// Writes never block the caller: Write queues a copy of the block for a writer thread and
// drops it when the queue is full. The directory is kept under max_bytes, least recently used
// blocks deleted first. Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/status.h"

namespace inflight {

struct KvDiskStoreConfig {
  std::string path;       // a directory; created if missing
  int64_t max_bytes = 0;  // of block files kept
  // Binds the files to what can read them (model file, weights, KV type and layout).
  std::string fingerprint;
  int32_t tokens_per_block = 32;
  int64_t block_bytes = 0;                // K/V bytes of one block
  int64_t max_queued_bytes = 64ll << 20;  // blocks waiting for the writer
  // Keep the blocks that come onto the disk or leave it for TakeChanges (KV cache events).
  bool track_changes = false;
};

struct KvDiskStats {
  int64_t files = 0, bytes = 0;  // in the store now
  int64_t hits = 0;              // blocks read back
  int64_t written = 0;           // blocks written
  int64_t dropped = 0;           // blocks not kept: the write queue was full
  int64_t rejected = 0;          // files skipped: truncated, corrupt, renamed or foreign
  int64_t evicted = 0;           // deleted to stay under max_bytes
};

class KvDiskStore {
 public:
  // Opens (creating) the directory and indexes the valid files in it.
  static StatusOr<std::unique_ptr<KvDiskStore>> Open(const KvDiskStoreConfig& config);
  ~KvDiskStore();  // writes what is queued, then stops the writer

  // Whether the block of `key` is stored or queued.
  bool Contains(uint64_t key) const;
  // Reads the block of `key`, which must be the block of `tokens` after `parent` (checked),
  // into out[block_bytes]. False when absent or when the file fails a check (it is then
  // deleted with a warning).
  bool Read(uint64_t key, uint64_t parent, const int32_t* tokens, uint8_t* out);
  // Queues a block for writing; false (and the block is not kept) when the queue is full or
  // the block is already stored.
  bool Write(uint64_t key, uint64_t parent, const int32_t* tokens, std::vector<uint8_t> kv);
  // Waits until every queued block is written (tests and shutdown).
  void Flush();

  KvDiskStats stats() const;

  // A block that came onto the disk (written, or found at Open) or left it (evicted,
  // rejected), in order; with track_changes only.
  struct Change {
    uint64_t key = 0, parent = 0;
    std::vector<int32_t> tokens;
    bool held = true;  // on disk now; else gone
  };
  std::vector<Change> TakeChanges();
  const KvDiskStoreConfig& config() const { return config_; }

 private:
  struct Entry {
    uint64_t parent = 0;
    int64_t bytes = 0;  // of the file
    uint64_t last_used = 0;
    std::vector<int32_t> tokens;  // kept only with track_changes
    uint64_t generation = 0;      // which write of the key's file
  };
  struct Pending {
    uint64_t key = 0, parent = 0;
    std::vector<int32_t> tokens;
    std::vector<uint8_t> kv;
  };

  explicit KvDiskStore(const KvDiskStoreConfig& config);
  std::string FileOf(uint64_t key) const;
  void Index();
  void WriterLoop();
  void WriteFile(const Pending& p);
  void EvictLocked(int64_t incoming);
  void DropLocked(uint64_t key, bool evicted);

  KvDiskStoreConfig config_;
  uint64_t fingerprint_hash_ = 0;
  std::string dir_;  // path/<fingerprint hash>
  uint64_t generation_ = 0;
  mutable std::mutex mu_;
  std::condition_variable cv_, drained_;
  std::unordered_map<uint64_t, Entry> index_;
  std::deque<Pending> queue_;
  std::unordered_map<uint64_t, bool> queued_;  // keys in queue_
  int64_t queued_bytes_ = 0;
  bool writing_ = false;
  bool stop_ = false;
  uint64_t clock_ = 0;
  KvDiskStats stats_;
  std::vector<Change> changes_;  // with track_changes
  std::thread writer_;
};

}  // namespace inflight
