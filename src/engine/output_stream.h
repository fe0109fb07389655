// The results of one request on their way out of the engine: the engine thread only pushes
// (never blocks, never runs consumer code beyond a notification); consumers take results in
// order, by waiting or when notified. Whether the request is over is decided here (the
// final result has been pushed), and so is whether its consumer fell behind: unread output
// past the bound marks the stream overflowed, and the executor cancels the request. With an
// OutputCredit attached, the unread results count in it too, and the executor pauses the
// request while the credit is past its pause bound (the client is not reading).
// Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "base/output_credit.h"
#include "engine/request.h"

namespace inflight {

class OutputStream {
 public:
  // max_unread_bytes: 0 = unbounded.
  explicit OutputStream(size_t max_unread_bytes = 0) : max_unread_(max_unread_bytes) {}

  // Engine side. False when this push took the unread output past the bound (the stream is
  // overflowed from then on; the result is still queued, so the final one always arrives).
  bool Push(Result&& result);

  // Consumer side: everything queued now (possibly nothing), or after waiting up to
  // `timeout` for at least one result.
  // keep_credit: the taken bytes stay charged to the credit; the caller releases them (the
  // sum of ResultBytes) once it has handed the results on.
  std::vector<Result> Take(bool keep_credit = false);
  std::vector<Result> Wait(std::chrono::milliseconds timeout);
  // fn runs on the pushing thread after a push into an empty stream (so once per batch of
  // results the consumer has not taken yet); it should only schedule a Take elsewhere.
  void SetNotify(std::function<void()> fn);

  // Set before the first push. Null: no back-pressure, only the overflow bound.
  void SetCredit(std::shared_ptr<OutputCredit> credit);
  const std::shared_ptr<OutputCredit>& credit() const { return credit_; }

  bool final_pushed() const;  // the request is over (its final result is queued or taken)
  bool overflowed() const;
  size_t unread_bytes() const;

  // Bytes a result holds (ids, log-probs, logits): what the bound counts.
  static size_t ResultBytes(const Result& r);

 private:
  const size_t max_unread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Result> queue_;
  size_t unread_ = 0;
  bool final_ = false, overflowed_ = false;
  std::function<void()> notify_;
  std::shared_ptr<OutputCredit> credit_;
};

}  // namespace inflight
