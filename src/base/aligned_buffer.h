// An owning, 64-byte aligned, zero-initialised byte buffer (for weights converted at load
// time and for scratch activations).
//
// Buffers of 2 MiB and more are anonymous mappings aligned to 2 MiB, advised for transparent
// huge pages (MADV_HUGEPAGE: the system's THP mode is usually "madvise") and populated when
// allocated: whoever resizes a buffer (the parallel repack of the weights at load) takes its
// page faults, ~1 per 2 MiB instead of 1 per 4 KiB, and the reads of a decode step walk 512x
// fewer pages. A 2.2 GB converted F16 model took ~540k minor faults and decoded at 4-23 tok/s
// from one process to the next with 4 KiB pages (see bench/README.md, model_bench).
// INFLIGHT_HUGE_PAGES=0 in the environment turns this off (malloc'd, memset buffers).
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace inflight {

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t size_bytes) { Resize(size_bytes); }
  ~AlignedBuffer() { Release(); }
  AlignedBuffer(AlignedBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)),
        size_(std::exchange(o.size_, 0)),
        map_(std::exchange(o.map_, nullptr)),
        map_bytes_(std::exchange(o.map_bytes_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(map_, o.map_);
    std::swap(map_bytes_, o.map_bytes_);
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  static constexpr size_t kHugePage = size_t{2} << 20;

  // Discards the old contents.
  void Resize(size_t size_bytes) {
    Release();
    size_ = size_bytes;
    if (size_bytes == 0) return;
    const size_t rounded = (size_bytes + 63) / 64 * 64;
    if (rounded >= kHugePage && HugePagesWanted() && MapHuge(rounded)) return;
    data_ = std::aligned_alloc(64, rounded);
    std::memset(data_, 0, rounded);
  }

  void* data() { return data_; }
  const void* data() const { return data_; }
  template <typename T>
  T* as() {
    return static_cast<T*>(data_);
  }
  template <typename T>
  const T* as() const {
    return static_cast<const T*>(data_);
  }
  size_t size() const { return size_; }

 private:
  static bool HugePagesWanted() {
    const char* env = std::getenv("INFLIGHT_HUGE_PAGES");
    return env == nullptr || std::strcmp(env, "0") != 0;
  }
  // A 2 MiB-aligned anonymous mapping (zero-filled by the kernel), advised for huge pages and
  // populated now; false (nothing mapped) when mmap fails.
  bool MapHuge(size_t bytes) {
    const size_t len = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    void* p = ::mmap(nullptr, len + kHugePage, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return false;
    const auto begin = reinterpret_cast<uintptr_t>(p);
    const uintptr_t aligned = (begin + kHugePage - 1) / kHugePage * kHugePage;
    // Trim the slack so the mapping is exactly the aligned range.
    if (aligned > begin) ::munmap(p, aligned - begin);
    const uintptr_t end = begin + len + kHugePage;
    if (end > aligned + len) ::munmap(reinterpret_cast<void*>(aligned + len), end - aligned - len);
    map_ = reinterpret_cast<void*>(aligned);
    map_bytes_ = len;
    data_ = map_;
    // Advice only: without THP the pages are 4 KiB, still populated here.
    (void)::madvise(map_, len, MADV_HUGEPAGE);
#ifdef MADV_POPULATE_WRITE
    if (::madvise(map_, len, MADV_POPULATE_WRITE) == 0) return true;
#endif
    for (size_t off = 0; off < len; off += 4096) static_cast<volatile uint8_t*>(map_)[off] = 0;
    return true;
  }
  void Release() {
    if (map_ != nullptr)
      ::munmap(map_, map_bytes_);
    else
      std::free(data_);
    data_ = map_ = nullptr;
    size_ = map_bytes_ = 0;
  }

  void* data_ = nullptr;
  size_t size_ = 0;
  void* map_ = nullptr;  // set when data_ is a mapping of map_bytes_
  size_t map_bytes_ = 0;
};

}  // namespace inflight
