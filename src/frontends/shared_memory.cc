#include "frontends/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>  // shm_open
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace inflight::frontends {
namespace {

bool ValidKey(const std::string& key) {
  if (key.size() < 2 || key.size() > 255 || key[0] != '/') return false;
  for (size_t i = 1; i < key.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(key[i]);
    if (c == '/' || c < 0x20 || c == 0x7f) return false;
  }
  return key != "/." && key != "/..";
}

// offset + size within limit, without overflow.
bool Fits(uint64_t offset, uint64_t size, uint64_t limit) {
  return offset <= limit && size <= limit - offset;
}

}  // namespace

SharedMemoryRegistry::Region::~Region() {
  if (fd >= 0) close(fd);
}

SharedMemoryRegistry::~SharedMemoryRegistry() = default;

Status SharedMemoryRegistry::Register(const std::string& name, const std::string& key,
                                      uint64_t offset, uint64_t byte_size) {
  if (name.empty()) return InvalidArgumentError("shared memory region name must not be empty");
  if (!ValidKey(key)) {
    return InvalidArgumentError("shared memory key '" + key +
                                "' is not a shared memory object name ('/name')");
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (regions_.count(name))
      return InvalidArgumentError("shared memory region '" + name + "' already in manager");
    if (regions_.size() >= kMaxRegions) {
      return InvalidArgumentError("too many shared memory regions (" + std::to_string(kMaxRegions) +
                                  ")");
    }
  }
  auto region = std::make_shared<Region>();
  region->fd = shm_open(key.c_str(), O_RDWR, 0);
  if (region->fd < 0)
    return InvalidArgumentError("Unable to open shared memory region: '" + key + "'");
  struct stat st {};
  if (fstat(region->fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      !Fits(offset, byte_size, static_cast<uint64_t>(st.st_size))) {
    return InvalidArgumentError("shared memory region '" + name + "': offset " +
                                std::to_string(offset) + " + byte_size " +
                                std::to_string(byte_size) + " is outside the object '" + key + "'");
  }
  region->status = {name, key, offset, byte_size};
  std::lock_guard<std::mutex> lock(mu_);
  if (!regions_.emplace(name, std::move(region)).second) {
    return InvalidArgumentError("shared memory region '" + name + "' already in manager");
  }
  return OkStatus();
}

Status SharedMemoryRegistry::Unregister(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  if (name.empty()) {
    regions_.clear();
  } else {
    regions_.erase(name);
  }
  return OkStatus();
}

StatusOr<std::vector<SharedMemoryRegionStatus>> SharedMemoryRegistry::GetStatus(
    const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<SharedMemoryRegionStatus> out;
  if (!name.empty()) {
    auto it = regions_.find(name);
    if (it == regions_.end())
      return NotFoundError("Unable to find system shared memory region: '" + name + "'");
    out.push_back(it->second->status);
    return out;
  }
  for (const auto& [n, r] : regions_) out.push_back(r->status);
  return out;
}

StatusOr<std::shared_ptr<SharedMemoryRegistry::Region>> SharedMemoryRegistry::Find(
    const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = regions_.find(name);
  if (it == regions_.end())
    return NotFoundError("Unable to find system shared memory region: '" + name + "'");
  return it->second;
}

StatusOr<std::string> SharedMemoryRegistry::Read(const std::string& name, uint64_t offset,
                                                 uint64_t byte_size) const {
  auto r = Find(name);
  if (!r.ok()) return r.status();
  const SharedMemoryRegionStatus& st = (*r)->status;
  if (!Fits(offset, byte_size, st.byte_size)) {
    return InvalidArgumentError("shared memory region '" + name + "': offset " +
                                std::to_string(offset) + " + byte_size " +
                                std::to_string(byte_size) + " exceeds the region's " +
                                std::to_string(st.byte_size) + " bytes");
  }
  std::string data(byte_size, '\0');
  size_t done = 0;
  while (done < byte_size) {
    const ssize_t n = pread((*r)->fd, data.data() + done, byte_size - done,
                            static_cast<off_t>(st.offset + offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return InvalidArgumentError("shared memory region '" + name + "' is shorter than registered");
    done += static_cast<size_t>(n);
  }
  return data;
}

Status SharedMemoryRegistry::Write(const std::string& name, uint64_t offset, uint64_t capacity,
                                   const std::string& data) const {
  auto r = Find(name);
  if (!r.ok()) return r.status();
  const SharedMemoryRegionStatus& st = (*r)->status;
  if (data.size() > capacity || !Fits(offset, capacity, st.byte_size)) {
    return InvalidArgumentError("shared memory region '" + name + "': output of " +
                                std::to_string(data.size()) + " bytes does not fit at offset " +
                                std::to_string(offset) + " in " + std::to_string(capacity) +
                                " bytes");
  }
  // Writing past the object's end would grow it: the object must still be as registered.
  struct stat now {};
  if (fstat((*r)->fd, &now) != 0 ||
      !Fits(st.offset + offset, data.size(), static_cast<uint64_t>(now.st_size))) {
    return InvalidArgumentError("shared memory region '" + name + "' is shorter than registered");
  }
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = pwrite((*r)->fd, data.data() + done, data.size() - done,
                             static_cast<off_t>(st.offset + offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return InternalError("writing shared memory region '" + name + "' failed");
    done += static_cast<size_t>(n);
  }
  return OkStatus();
}

}  // namespace inflight::frontends
