// A 64-bit checksum of a byte run, 8 bytes per step: the disk tier's block files and the
// disaggregated hand-off check their bytes with it (corruption detection, not security).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace inflight {

inline uint64_t KvChecksum(const void* data, size_t n, uint64_t h = 0xcbf29ce484222325ull) {
  const auto* p = static_cast<const uint8_t*>(data);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0x100000001b3ull;
    h ^= h >> 29;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h ^ (h >> 31);
}

}  // namespace inflight
