// Triton's system shared-memory extension: clients register POSIX shared-memory objects
// (shm_open names) by a region name, then name a region, offset and size in place of an
// input's data or as where an output goes. Regions are read and written with pread/pwrite
// on the object's descriptor, never mapped: a client that shrinks its object afterwards gets
// an error, not a SIGBUS in the server. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"

namespace inflight::frontends {

// Where a tensor's bytes are in a registered region (the shared_memory_region,
// shared_memory_offset and shared_memory_byte_size parameters of an input or output).
struct SharedMemoryRef {
  std::string region;
  uint64_t offset = 0, byte_size = 0;
};

struct SharedMemoryRegionStatus {
  std::string name, key;
  uint64_t offset = 0, byte_size = 0;
};

class SharedMemoryRegistry {
 public:
  static constexpr size_t kMaxRegions = 1024;
  ~SharedMemoryRegistry();

  // key: a shared-memory object name ("/name": one leading slash, no other, at most 255
  // bytes; confined to the system's shared-memory folder). INVALID_ARGUMENT for a bad key,
  // a region outside the object, a name already registered or too many regions.
  Status Register(const std::string& name, const std::string& key, uint64_t offset,
                  uint64_t byte_size);
  // Every region when name is empty; an unknown name is not an error (as in Triton).
  Status Unregister(const std::string& name);
  // One region (NOT_FOUND if unknown) or all when name is empty.
  StatusOr<std::vector<SharedMemoryRegionStatus>> GetStatus(const std::string& name) const;

  // byte_size bytes at offset inside region `name` (offset relative to the region).
  StatusOr<std::string> Read(const std::string& name, uint64_t offset, uint64_t byte_size) const;
  // Writes data at offset inside the region; INVALID_ARGUMENT if it does not fit in
  // `capacity` (what the client reserved) or the region.
  Status Write(const std::string& name, uint64_t offset, uint64_t capacity,
               const std::string& data) const;

 private:
  struct Region {
    SharedMemoryRegionStatus status;
    int fd = -1;
    ~Region();
  };
  StatusOr<std::shared_ptr<Region>> Find(const std::string& name) const;

  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Region>> regions_;
};

}  // namespace inflight::frontends
