#include "kvcache/kv_disk_reader.h"

#include <algorithm>

namespace inflight {

KvDiskReader::KvDiskReader(KvDiskStore& store, int64_t max_bytes, std::function<void()> on_read)
    : store_(store),
      block_bytes_(std::max<int64_t>(1, store.config().block_bytes)),
      max_bytes_(max_bytes),
      // Half the room: two long chains can be read at once.
      max_blocks_(std::max<int64_t>(1, max_bytes / std::max<int64_t>(1, block_bytes_) / 2)),
      on_read_(std::move(on_read)),
      thread_([this] { Loop(); }) {}

KvDiskReader::~KvDiskReader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

bool KvDiskReader::MakeRoomLocked(int64_t bytes) {
  const auto now = std::chrono::steady_clock::now();
  while (held_bytes_ + bytes > max_bytes_ && !staged_order_.empty()) {
    const uint64_t key = staged_order_.front();
    auto it = entries_.find(key);
    // A chain's blocks wait for the rest of it: only blocks nobody took for a while (their
    // sequence was cancelled, or found them in the pool) make room.
    if (now - it->second.staged_at < kUnclaimedAfter) break;
    staged_order_.pop_front();
    held_bytes_ -= static_cast<int64_t>(it->second.bytes.size());
    entries_.erase(it);
    ++stats_.dropped;
  }
  // One block always fits an empty room (a block larger than the room would wait forever).
  return held_bytes_ + bytes <= max_bytes_ || held_bytes_ == 0;
}

bool KvDiskReader::Ready(const std::vector<Block>& chain) {
  bool queued = false, ready = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const size_t n = std::min(chain.size(), static_cast<size_t>(max_blocks_));
    for (size_t i = 0; i < n; ++i) {
      const Block& b = chain[i];
      auto it = entries_.find(b.key);
      if (it != entries_.end()) {
        Entry& e = it->second;
        if (e.state == State::kFailed) break;  // the chain ends here
        if (e.state == State::kQueued) ready = false;
        if (e.state == State::kStaged) {
          // Still wanted: the newest again, so waiting for the rest of its chain never drops it.
          staged_order_.splice(staged_order_.end(), staged_order_, e.age);
          e.staged_at = std::chrono::steady_clock::now();
        }
        continue;
      }
      // Not asked for yet. The room it needs is taken now (a queued block is never dropped),
      // after the staged blocks nobody took.
      if (!MakeRoomLocked(block_bytes_)) {
        ready = false;  // the rest waits for room
        break;
      }
      Entry e;
      e.parent = b.parent;
      e.tokens = b.tokens;
      entries_.emplace(b.key, std::move(e));
      held_bytes_ += block_bytes_;
      jobs_.push_back(Job{b});
      queued = true;
      ready = false;
    }
    // Failed reads stay as markers until taken; a cancelled sequence's markers must not pile up.
    if (entries_.size() > static_cast<size_t>(8 * max_blocks_ + 64)) {
      for (auto it = entries_.begin(); it != entries_.end();)
        it = it->second.state == State::kFailed ? entries_.erase(it) : std::next(it);
    }
  }
  if (queued) cv_.notify_one();
  return ready;
}

std::vector<uint8_t> KvDiskReader::Take(uint64_t key, uint64_t parent, const int32_t* tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.state == State::kQueued) return {};
  // Read for the prefix that asked first: a key is a 64-bit hash, so the block must also be
  // this one's (its parent and tokens) to be handed over.
  if (it->second.parent != parent ||
      !std::equal(it->second.tokens.begin(), it->second.tokens.end(), tokens))
    return {};
  std::vector<uint8_t> bytes = std::move(it->second.bytes);
  if (it->second.state == State::kStaged) {
    staged_order_.erase(it->second.age);
    held_bytes_ -= block_bytes_;
  }
  entries_.erase(it);
  return bytes;
}

KvDiskReader::Stats KvDiskReader::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s = stats_;
  s.staged_bytes = held_bytes_;
  return s;
}

void KvDiskReader::Loop() {
  std::vector<uint8_t> buffer;
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (stop_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    buffer.resize(static_cast<size_t>(block_bytes_));
    const bool ok =
        static_cast<int64_t>(job.block.tokens.size()) == store_.config().tokens_per_block &&
        store_.Read(job.block.key, job.block.parent, job.block.tokens.data(), buffer.data());
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = entries_.find(job.block.key);
      Entry& e = it->second;  // queued entries are only removed here
      if (ok) {
        e.state = State::kStaged;
        e.bytes = std::move(buffer);
        buffer = {};
        e.age = staged_order_.insert(staged_order_.end(), job.block.key);
        e.staged_at = std::chrono::steady_clock::now();
        ++stats_.read;
      } else {
        e.state = State::kFailed;
        held_bytes_ -= block_bytes_;
        ++stats_.failed;
      }
    }
    if (on_read_) on_read_();
  }
}

}  // namespace inflight
