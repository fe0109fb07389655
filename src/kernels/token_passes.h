// How the interleaved matmul kernels walk the tokens of one column tile: passes of NT tokens
// (each weight vector unpacked once per pass), then one pass of the rest. Internal to the
// kernels library.
#pragma once

#include <cstdint>

namespace inflight::kernels {

// Calls pass.template operator()<N>(t0, pf_phase, pf_period) for tokens [t0, t0 + N): full
// passes of N = NT, then one of the rest. Every pass prefetches its share of the next tile's
// blocks (pass i of P takes the blocks b with b % P == i), so the transfer spreads over the
// whole tile: when the first pass prefetched all of it, the burst overflowed the queue of
// outstanding misses (weights streamed at ~25 GB/s at 16 tokens), and a call of exactly 6 or
// 12 tokens prefetched nothing or a third.
template <int NT, typename Pass>
inline void ForTokenPasses(int64_t num_tokens, Pass&& pass) {
  static_assert(NT >= 1 && NT <= 6);
  const int passes = static_cast<int>((num_tokens + NT - 1) / NT);
  int64_t t = 0;
  for (; t + NT <= num_tokens; t += NT)
    pass.template operator()<NT>(t, static_cast<int>(t / NT), passes);
  const int last = static_cast<int>(t / NT);
  switch (num_tokens - t) {
    case 5:
      if constexpr (NT > 5) pass.template operator()<5>(t, last, passes);
      break;
    case 4:
      if constexpr (NT > 4) pass.template operator()<4>(t, last, passes);
      break;
    case 3:
      if constexpr (NT > 3) pass.template operator()<3>(t, last, passes);
      break;
    case 2:
      if constexpr (NT > 2) pass.template operator()<2>(t, last, passes);
      break;
    case 1:
      if constexpr (NT > 1) pass.template operator()<1>(t, last, passes);
      break;
    default:
      break;
  }
}

}  // namespace inflight::kernels
