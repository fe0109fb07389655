// An owning, 64-byte aligned, zero-initialised byte buffer (for weights converted at load
// time and for scratch activations).
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace inflight {

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t size_bytes) { Resize(size_bytes); }
  ~AlignedBuffer() { std::free(data_); }
  AlignedBuffer(AlignedBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  // Discards the old contents.
  void Resize(size_t size_bytes) {
    std::free(data_);
    data_ = nullptr;
    size_ = size_bytes;
    if (size_bytes == 0) return;
    const size_t rounded = (size_bytes + 63) / 64 * 64;
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
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace inflight
