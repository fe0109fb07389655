#include "engine/output_stream.h"

namespace inflight {

size_t OutputStream::ResultBytes(const Result& r) {
  return sizeof(Result) +
         4 * (r.output_token_ids.size() + r.log_probs.size() + r.context_logits.size() +
              r.generation_logits.size()) +
         (r.top_logprobs.empty()
              ? 0
              : r.top_logprobs.size() * (sizeof(r.top_logprobs[0]) + 8 * r.top_logprobs[0].size()));
}

bool OutputStream::Push(Result&& result) {
  std::function<void()> notify;
  bool within_bound = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const bool was_empty = queue_.empty();
    const size_t bytes = ResultBytes(result);
    unread_ += bytes;
    if (credit_) credit_->Add(static_cast<int64_t>(bytes));
    final_ = final_ || result.is_final;
    if (max_unread_ > 0 && unread_ > max_unread_ && !overflowed_) {
      overflowed_ = true;
      within_bound = false;
    }
    queue_.push_back(std::move(result));
    if (was_empty) notify = notify_;
  }
  cv_.notify_all();
  if (notify) notify();
  return within_bound;
}

std::vector<Result> OutputStream::Take(bool keep_credit) {
  std::vector<Result> out;
  std::shared_ptr<OutputCredit> release;
  size_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out.reserve(queue_.size());
    for (Result& r : queue_) out.push_back(std::move(r));
    queue_.clear();
    bytes = unread_;
    unread_ = 0;
    if (!keep_credit) release = credit_;
  }
  // Outside the lock: ending a pause wakes the engine.
  if (release && bytes > 0) release->Release(static_cast<int64_t>(bytes));
  return out;
}

void OutputStream::SetCredit(std::shared_ptr<OutputCredit> credit) {
  std::lock_guard<std::mutex> lock(mu_);
  credit_ = std::move(credit);
}

std::vector<Result> OutputStream::Wait(std::chrono::milliseconds timeout) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return !queue_.empty(); });
  }
  return Take();
}

void OutputStream::SetNotify(std::function<void()> fn) {
  bool pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    notify_ = fn;
    pending = !queue_.empty();
  }
  if (pending && fn) fn();  // results pushed before the consumer was ready
}

bool OutputStream::final_pushed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return final_;
}

bool OutputStream::overflowed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return overflowed_;
}

size_t OutputStream::unread_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return unread_;
}

}  // namespace inflight
