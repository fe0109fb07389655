// A per-sequence constraint on which token may come next (guided decoding: JSON, a JSON
// schema, a regular expression). The engine masks each step's logits with it before
// sampling and tells it the token chosen. Engine-thread only, one per sequence; Clone makes
// a sibling's (num_return_sequences) from the request's initial one.
#pragma once

#include <cstdint>
#include <memory>

namespace inflight {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets -inf on every token not allowed next; end_id (if >= 0) stays allowed only where the
  // output may end. Returns how many tokens are left allowed (0: nothing can follow).
  virtual int32_t Mask(float* logits, int32_t vocab, int32_t end_id) = 0;
  // The token chosen next (its bytes advance the constraint).
  virtual void Advance(int32_t token) = 0;
  // The output is complete and nothing but the end may follow.
  virtual bool Terminated() const = 0;
  virtual std::unique_ptr<TokenConstraint> Clone() const = 0;
};

}  // namespace inflight
