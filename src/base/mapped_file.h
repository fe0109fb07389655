// A read-only memory-mapped file. Model weights are used in place (zero copy).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace inflight {

class MappedFile {
 public:
  // Returns NOT_FOUND / INVALID_ARGUMENT with the path and the OS reason on failure.
  static StatusOr<std::shared_ptr<MappedFile>> Open(const std::string& path);
  // An in-memory "file" owning a copy of `bytes` (fuzzing, tests).
  static std::shared_ptr<MappedFile> FromBytes(const std::string& name, const uint8_t* bytes,
                                               size_t size);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Drops the resident pages wholly inside [p, p + bytes) and the mapping (weights that were
  // copied into another layout): RSS stops counting them; reading them again faults them back
  // in from the file. Ranges outside the mapping, and in-memory files, are left alone.
  void ReleasePages(const void* p, size_t bytes) const;

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
  std::unique_ptr<uint8_t[]> owned_;  // FromBytes storage; otherwise data_ is mapped
};

}  // namespace inflight
