// Reads blocks of the disk tier (kvcache/kv_disk_store.h) on a thread of its own, so that a
// prefix found on disk is loaded while the engine keeps stepping the other sequences: the
// engine asks for a chain of blocks before it admits a sequence, admits it once the chain is
// read, and takes each block's bytes to copy into the pool (a memory copy, not a file read).
//
// Blocks are staged by key (a key names its whole prefix, so whoever asked, the bytes are the
// same) in buffers of at most max_bytes in all: a block read but not taken for a few seconds is
// dropped, oldest first, when room is needed (its sequence was cancelled, or the pool found it
// meanwhile); until then a chain that does not fit waits.
// Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kvcache/kv_disk_store.h"

namespace inflight {

class KvDiskReader {
 public:
  struct Block {
    uint64_t key = 0, parent = 0;
    std::vector<int32_t> tokens;  // the block's tokens_per_block ids (checked on read)
  };
  // on_read: called on the reader's thread after each chain it finished (wakes the engine).
  KvDiskReader(KvDiskStore& store, int64_t max_bytes, std::function<void()> on_read);
  ~KvDiskReader();  // stops the thread (blocks not taken are dropped)

  // Whether the chain's first max_blocks() blocks are read as far as they can be: every block
  // staged, up to one whose read failed (the chain ends there). Blocks neither staged nor
  // queued are queued, as many as the room allows; false while any is still to come.
  bool Ready(const std::vector<Block>& chain);
  // The staged bytes of `key` read as the block of `tokens` (tokens_per_block) after `parent`,
  // moved out (empty when not staged: not read, failed, dropped, or read for another prefix
  // under the same key).
  std::vector<uint8_t> Take(uint64_t key, uint64_t parent, const int32_t* tokens);
  // The most blocks of one chain staged (half the room: two long chains are read at once).
  int64_t max_blocks() const { return max_blocks_; }

  struct Stats {
    int64_t read = 0;     // blocks read into staging
    int64_t failed = 0;   // reads that failed (absent, corrupt, another prefix)
    int64_t dropped = 0;  // staged blocks dropped before they were taken
    int64_t staged_bytes = 0;
  };
  Stats stats() const;

 private:
  enum class State { kQueued, kStaged, kFailed };
  struct Entry {
    State state = State::kQueued;
    uint64_t parent = 0;
    std::vector<int32_t> tokens;
    std::vector<uint8_t> bytes;
    std::list<uint64_t>::iterator age;  // in staged_order_ when staged
    std::chrono::steady_clock::time_point staged_at;
  };
  static constexpr std::chrono::seconds kUnclaimedAfter{5};
  struct Job {
    Block block;
  };
  void Loop();
  // Drops staged blocks, oldest first, until `bytes` more fit; false when they cannot.
  bool MakeRoomLocked(int64_t bytes);

  KvDiskStore& store_;
  const int64_t block_bytes_, max_bytes_, max_blocks_;
  std::function<void()> on_read_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<uint64_t, Entry> entries_;
  std::list<uint64_t> staged_order_;  // staged keys, oldest first
  std::deque<Job> jobs_;
  int64_t held_bytes_ = 0;  // staged plus queued
  bool stop_ = false;
  Stats stats_;
  std::thread thread_;
};

}  // namespace inflight
