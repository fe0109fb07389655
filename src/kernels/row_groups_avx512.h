// How the interleaved int8 matmul kernels walk their rows: 16-row groups, two at a time so
// each activation broadcast feeds two groups, column tile by column tile, the results waiting
// in a per-thread buffer until a pair's last tile is done. Included only by the AVX-512
// translation units of the kernels library (built with AVX-512 flags).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/interleave.h"

namespace inflight::kernels {

// Rows [row_begin, row_end) of y = x W^T, y row stride y_stride. For each pair of groups (a
// single group at the end, or for fewer than `pair_tokens` tokens: one token streams weights,
// it has no broadcasts to share), `tiles.template operator()<G>(first_group, b0, b1, partial)`
// adds blocks [b0, b1) into partial[token][G * 16], for column tiles of `tile_blocks` blocks.
template <typename Tiles>
inline void ForRowGroups(int64_t row_begin, int64_t row_end, int64_t nb, int64_t tile_blocks,
                         int64_t num_tokens, int64_t pair_tokens, float* y, int64_t y_stride,
                         Tiles&& tiles) {
  thread_local std::vector<float> partial;  // [num_tokens, G * 16]
  if (partial.size() < static_cast<size_t>(num_tokens) * 32)
    partial.resize(static_cast<size_t>(num_tokens) * 32);
  for (int64_t r0 = row_begin; r0 < row_end;) {
    const int G = row_end - r0 > kInterleaveRows && num_tokens >= pair_tokens ? 2 : 1;
    const int64_t first_group = r0 / kInterleaveRows;
    for (int64_t b0 = 0; b0 < nb; b0 += tile_blocks) {
      const int64_t b1 = std::min(nb, b0 + tile_blocks);
      if (G == 2)
        tiles.template operator()<2>(first_group, b0, b1, partial.data());
      else
        tiles.template operator()<1>(first_group, b0, b1, partial.data());
    }
    for (int g = 0; g < G; ++g) {
      const int64_t rg = r0 + g * kInterleaveRows;
      const int64_t valid = std::min<int64_t>(kInterleaveRows, row_end - rg);
      const __mmask16 mask = static_cast<__mmask16>((1u << valid) - 1);
      for (int64_t t = 0; t < num_tokens; ++t) {
        _mm512_mask_storeu_ps(y + t * y_stride + rg, mask,
                              _mm512_loadu_ps(partial.data() + 16 * (G * t + g)));
      }
    }
    r0 += G * kInterleaveRows;
  }
}

}  // namespace inflight::kernels
