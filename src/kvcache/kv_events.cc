#include "kvcache/kv_events.h"

#include <algorithm>

namespace inflight {

uint64_t KvEventLog::Record(KvCacheEvent e) {
  std::lock_guard<std::mutex> lock(mu_);
  e.id = next_id_++;
  if (ring_.size() == capacity_) {
    ring_.pop_front();
    ++dropped_;
  }
  ring_.push_back(std::move(e));
  return ring_.back().id;
}

KvEventLog::Read KvEventLog::Since(uint64_t after_id, size_t max) const {
  std::lock_guard<std::mutex> lock(mu_);
  Read r;
  r.last_id = next_id_ - 1;
  const uint64_t oldest = ring_.empty() ? next_id_ : ring_.front().id;
  // A cursor past the newest id comes from another log (the model was reloaded and its ids
  // start again): a gap too, so the reader resyncs instead of waiting for ids to catch up.
  r.gap = after_id + 1 < oldest || after_id > r.last_id;
  // Ids are dense: the first wanted event's place in the ring is arithmetic.
  const uint64_t from = std::max(after_id + 1, oldest);
  for (uint64_t id = from; id < next_id_ && r.events.size() < max; ++id)
    r.events.push_back(ring_[static_cast<size_t>(id - oldest)]);
  return r;
}

uint64_t KvEventLog::last_id() const {
  std::lock_guard<std::mutex> lock(mu_);
  return next_id_ - 1;
}

uint64_t KvEventLog::num_dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

}  // namespace inflight
