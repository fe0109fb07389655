// The KV cache's tiers and events in the executor: the disk tier (opened from the config, its
// hooks in the scheduler, its changes turned into events on the engine thread) and KV cache
// events (reads from any thread; block listings answered by the engine thread between steps,
// so a listing and the last event id agree).
#include <future>

#include "engine/executor.h"

namespace inflight {

StatusOr<std::unique_ptr<KvDiskStore>> Executor::OpenDiskTier(const ModelRunner& runner,
                                                              const ExecutorConfig& config) {
  if (runner.KvBlockBytes(kFullGroup) <= 0) {
    return InvalidArgumentError(
        "kv_cache_disk_path is not supported yet with tensor or pipeline parallelism");
  }
  KvDiskStoreConfig dc;
  dc.path = config.kv_cache_disk_path;
  dc.max_bytes = config.kv_cache_disk_bytes;
  dc.fingerprint = config.kv_cache_disk_fingerprint + "|" + runner.KvLayoutFingerprint();
  dc.tokens_per_block = config.tokens_per_block;
  // A file holds every layer's K/V of its block: the full group's, then the window group's.
  dc.block_bytes = runner.KvBlockBytes(kFullGroup) +
                   (runner.num_window_kv_blocks() > 0 ? runner.KvBlockBytes(kWindowGroup) : 0);
  dc.track_changes = config.kv_event_buffer_size > 0;
  return KvDiskStore::Open(dc);
}

// The scheduler continues prefixes from the disk after the pool, and offers it every prompt
// block it fills (written behind). The engine waits for the disk neither way: a prefix's
// blocks are read by the reader's thread while the sequence waits to be admitted, and
// admitting it copies them into the pool.
void Executor::SetUpDiskTier(std::unique_ptr<KvDiskStore> disk) {
  disk_ = std::move(disk);
  disk_reader_ = std::make_unique<KvDiskReader>(*disk_, kDiskStagingBytes, [w = waker_] {
    std::lock_guard<std::mutex> lock(w->mu);
    if (w->executor == nullptr) return;
    std::lock_guard<std::mutex> executor_lock(w->executor->mu_);
    w->executor->resumed_ = true;  // a sequence waiting for the reads may be admitted now
    w->executor->wake_.notify_one();
  });
  Scheduler::LowerTier tier;
  tier.has = [this](uint64_t key) { return disk_->Contains(key); };
  tier.ready = [this](const std::vector<KvDiskReader::Block>& chain) {
    return disk_reader_->Ready(chain);
  };
  const bool windows = window_blocks_ != nullptr;
  const int64_t full_bytes = runner_->KvBlockBytes(kFullGroup);
  tier.load = [this, windows](uint64_t key, uint64_t parent, const int32_t* tokens, int32_t block) {
    std::vector<uint8_t> bytes = disk_reader_->Take(key, parent, tokens);
    if (bytes.empty() || !runner_->ImportBlock(kFullGroup, block, bytes.data())) return false;
    // The window part waits for TakePrefix's window pass (load_window), then `done`.
    if (windows) window_parts_[key] = std::move(bytes);
    return true;
  };
  tier.store = [this, windows, full_bytes](uint64_t key, uint64_t parent, const int32_t* tokens,
                                           int32_t block, int32_t window_block) {
    if (disk_->Contains(key)) return;
    std::vector<uint8_t> kv(static_cast<size_t>(disk_->config().block_bytes));
    if (runner_->ExportBlock(kFullGroup, block, kv.data()) &&
        (!windows || runner_->ExportBlock(kWindowGroup, window_block, kv.data() + full_bytes)))
      disk_->Write(key, parent, tokens, std::move(kv));
  };
  if (windows) {
    tier.load_window = [this, full_bytes](uint64_t key, int32_t window_block) {
      auto it = window_parts_.find(key);
      return it != window_parts_.end() &&
             runner_->ImportBlock(kWindowGroup, window_block, it->second.data() + full_bytes);
    };
    tier.done = [this] { window_parts_.clear(); };
  }
  scheduler_.SetLowerTier(std::move(tier));
  if (kv_events_) {
    blocks_.SetLowerTierHolds([this](uint64_t key) { return on_disk_.count(key) > 0; });
    SyncDiskTier();
  }
}

// The disk tier's changes as events (engine thread): a block written while the pool no longer
// holds it is stored at level 1; one leaving the disk while the pool does not hold it is
// removed. A block the pool holds is reported at level 0 whatever the disk does.
void Executor::SyncDiskTier() {
  if (!disk_ || !kv_events_) return;
  for (KvDiskStore::Change& c : disk_->TakeChanges()) {
    const bool in_pool = blocks_.HoldsKey(c.key);
    KvCacheEvent e;
    e.group = kFullGroup;
    e.block_hash = c.key;
    e.cache_level = 1;
    if (c.held) {
      const bool fresh = !on_disk_.count(c.key);
      on_disk_[c.key] = {c.parent, c.tokens};
      if (!fresh || in_pool) continue;
      e.type = KvCacheEvent::Type::kStored;
      e.parent_hash = c.parent;
      e.tokens = std::move(c.tokens);
    } else {
      if (on_disk_.erase(c.key) == 0 || in_pool) continue;
      e.type = KvCacheEvent::Type::kRemoved;
    }
    kv_events_->Record(std::move(e));
  }
}

void Executor::AnswerSnapshots(
    std::vector<std::shared_ptr<std::promise<KvCacheSnapshot>>>& requests) {
  SyncDiskTier();
  if (requests.empty()) return;
  // The engine thread is the only one recording events: the log's last id matches the blocks.
  KvCacheSnapshot snap = blocks_.Snapshot();
  for (const auto& [key, b] : on_disk_) {  // held on disk only: level 1
    if (blocks_.HoldsKey(key)) continue;
    KvCacheEvent e;
    e.group = kFullGroup;
    e.block_hash = key;
    e.parent_hash = b.parent;
    e.tokens = b.tokens;
    e.cache_level = 1;
    snap.blocks.push_back(std::move(e));
  }
  if (window_blocks_) {
    KvCacheSnapshot window = window_blocks_->Snapshot();
    for (KvCacheEvent& b : window.blocks) snap.blocks.push_back(std::move(b));
  }
  for (auto& r : requests) r->set_value(snap);
  requests.clear();
}

std::optional<KvDiskStats> Executor::KvDiskStatistics() const {
  if (!disk_) return std::nullopt;
  return disk_->stats();
}

StatusOr<KvEventLog::Read> Executor::KvEvents(uint64_t after_id, size_t max) const {
  if (!kv_events_)
    return FailedPreconditionError("KV cache events are off (kv_event_buffer_size is 0)");
  return kv_events_->Since(after_id, max);
}

StatusOr<KvCacheSnapshot> Executor::KvSnapshot(std::chrono::milliseconds timeout) {
  if (!kv_events_)
    return FailedPreconditionError("KV cache events are off (kv_event_buffer_size is 0)");
  auto request = std::make_shared<std::promise<KvCacheSnapshot>>();
  std::future<KvCacheSnapshot> answer = request->get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return UnavailableError("the executor is shutting down");
    snapshot_requests_.push_back(request);
  }
  wake_.notify_all();
  if (answer.wait_for(timeout) != std::future_status::ready)
    return UnavailableError("the engine did not take the KV cache snapshot in time");
  try {
    return answer.get();
  } catch (const std::future_error&) {
    return UnavailableError("the executor stopped before taking the KV cache snapshot");
  }
}

}  // namespace inflight
