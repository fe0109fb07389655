#include "kvcache/kv_handoff_shm.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace inflight {
namespace {

constexpr char kMagic[8] = {'I', 'F', 'K', 'V', 'S', 'H', 'M', '1'};
constexpr char kPrefix[] = "ifkv-";
constexpr size_t kPrefixLen = sizeof(kPrefix) - 1;
constexpr size_t kIdHex = 32;  // 128 random bits

// Descriptor: magic (8), segment size (uint64, 8), id (32 lowercase hex digits).
static_assert(sizeof kMagic + sizeof(uint64_t) + kIdHex == kKvHandoffShmDescriptorBytes);

bool IsSegmentName(const char* name) {
  if (std::strncmp(name, kPrefix, kPrefixLen) != 0 || std::strlen(name) != kPrefixLen + kIdHex)
    return false;
  for (size_t i = kPrefixLen; i < kPrefixLen + kIdHex; ++i)
    if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f'))) return false;
  return true;
}

Status Errno(const std::string& what) {
  return InternalError("KV hand-off segment: " + what + ": " + std::strerror(errno));
}

}  // namespace

bool IsKvHandoffShmDescriptor(const uint8_t* data, size_t size) {
  return size >= sizeof kMagic && std::memcmp(data, kMagic, sizeof kMagic) == 0;
}

StatusOr<std::unique_ptr<KvHandoffShm>> KvHandoffShm::Open(const std::string& dir, int64_t ttl_ms,
                                                           int64_t max_bytes) {
  if (ttl_ms < 1 || max_bytes < 1)
    return InvalidArgumentError("a KV hand-off folder needs a positive lifetime and size bound");
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open the folder");
  // The server's user's alone: no other local user lists the segment names (and takes a
  // segment first by sending its descriptor) or plants files.
  struct stat st;
  if (::fstat(fd, &st) != 0 || st.st_uid != ::geteuid() || ::fchmod(fd, 0700) != 0) {
    ::close(fd);
    return InvalidArgumentError("the KV hand-off folder " + dir +
                                " must belong to the server's user");
  }
  return std::unique_ptr<KvHandoffShm>(new KvHandoffShm(dir, fd, ttl_ms, max_bytes));
}

KvHandoffShm::~KvHandoffShm() { ::close(dir_fd_); }

int64_t KvHandoffShm::Sweep() {
  std::lock_guard<std::mutex> lock(sweep_mu_);
  const int fd = ::openat(dir_fd_, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return 0;
  DIR* d = ::fdopendir(fd);
  if (!d) {
    ::close(fd);
    return 0;
  }
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(now).count();
  int64_t live = 0;
  while (const dirent* e = ::readdir(d)) {
    if (!IsSegmentName(e->d_name)) continue;
    struct stat st;
    if (::fstatat(dir_fd_, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
      continue;
    const int64_t mtime_ms =
        static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000;
    if (now_ms - mtime_ms > ttl_ms_) {
      // Nobody took it: its request is gone.
      if (::unlinkat(dir_fd_, e->d_name, 0) == 0) expired_.fetch_add(1);
    } else {
      live += static_cast<int64_t>(st.st_size);
    }
  }
  ::closedir(d);
  live_bytes_.store(live);
  return live;
}

KvHandoffShm::Counts KvHandoffShm::counts() const {
  return {written_.load(), taken_.load(), expired_.load(), declined_.load(), live_bytes_.load()};
}

StatusOr<std::optional<std::string>> KvHandoffShm::Write(
    size_t size, const std::function<void(uint8_t*)>& fill) {
  if (size == 0 || size > static_cast<uint64_t>(max_bytes_) ||
      Sweep() > max_bytes_ - static_cast<int64_t>(size)) {
    declined_.fetch_add(1);
    return std::optional<std::string>();
  }
  uint8_t id[kIdHex / 2];
  if (::getrandom(id, sizeof id, 0) != static_cast<ssize_t>(sizeof id))
    return InternalError("KV hand-off segment: no random name");
  std::string descriptor(kMagic, sizeof kMagic);
  const uint64_t n = size;
  descriptor.append(reinterpret_cast<const char*>(&n), sizeof n);
  static constexpr char kHex[] = "0123456789abcdef";
  for (uint8_t b : id) {
    descriptor.push_back(kHex[b >> 4]);
    descriptor.push_back(kHex[b & 15]);
  }
  const std::string name = kPrefix + descriptor.substr(sizeof kMagic + sizeof n);
  const int fd =
      ::openat(dir_fd_, name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("cannot create one in " + dir_);
  // The pages are reserved first: a full tmpfs is an error here, not a SIGBUS while filling.
  if (const int err = ::posix_fallocate(fd, 0, static_cast<off_t>(size)); err != 0) {
    ::close(fd);
    ::unlinkat(dir_fd_, name.c_str(), 0);
    if (err == ENOSPC) {  // the folder's filesystem is full: the caller sends inline
      declined_.fetch_add(1);
      return std::optional<std::string>();
    }
    errno = err;
    return Errno("cannot size one in " + dir_);
  }
  void* m = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (m == MAP_FAILED) {
    const Status s = Errno("cannot map one in " + dir_);
    ::close(fd);
    ::unlinkat(dir_fd_, name.c_str(), 0);
    return s;
  }
  fill(static_cast<uint8_t*>(m));  // straight into the shared pages: no staging copy
  ::munmap(m, size);
  // Its lifetime starts now, not at its creation: a long fill does not eat into it.
  ::futimens(fd, nullptr);
  ::close(fd);
  written_.fetch_add(1);
  return std::optional<std::string>(std::move(descriptor));
}

StatusOr<std::optional<std::string>> KvHandoffShm::Write(const uint8_t* data, size_t size) {
  return Write(size, [&](uint8_t* out) { std::memcpy(out, data, size); });
}

KvHandoffShm::Segment::~Segment() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

KvHandoffShm::Segment::Segment(Segment&& o) noexcept : data_(o.data_), size_(o.size_) {
  o.data_ = nullptr;
  o.size_ = 0;
}

StatusOr<KvHandoffShm::Segment> KvHandoffShm::Take(const uint8_t* descriptor, size_t size) {
  if (size != kKvHandoffShmDescriptorBytes || !IsKvHandoffShmDescriptor(descriptor, size))
    return InvalidArgumentError("context_phase_params: not a KV hand-off segment descriptor");
  uint64_t n = 0;
  std::memcpy(&n, descriptor + sizeof kMagic, sizeof n);
  const std::string name =
      kPrefix +
      std::string(reinterpret_cast<const char*>(descriptor) + sizeof kMagic + sizeof n, kIdHex);
  if (!IsSegmentName(name.c_str()))
    return InvalidArgumentError("context_phase_params: a malformed segment name");
  if (n == 0 || n > static_cast<uint64_t>(max_bytes_))
    return InvalidArgumentError("context_phase_params: a segment of " + std::to_string(n) +
                                " bytes (this model reads at most context_phase_shm_max_bytes " +
                                std::to_string(max_bytes_) + ")");
  // O_NONBLOCK: a FIFO planted under the name cannot stall this thread.
  const int fd = ::openat(dir_fd_, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT)
      return NotFoundError("context_phase_params: segment " + name +
                           " is gone (already read, or expired after " + std::to_string(ttl_ms_) +
                           " ms)");
    if (errno == ELOOP)
      return InvalidArgumentError("context_phase_params: segment " + name + " is a link");
    if (errno == EACCES)
      return InvalidArgumentError("context_phase_params: segment " + name + " is not readable");
    return Errno("cannot open " + name);
  }
  // A file this user wrote, with no other name, of the announced size.
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() ||
      st.st_nlink != 1 || static_cast<uint64_t>(st.st_size) != n) {
    ::close(fd);
    return InvalidArgumentError("context_phase_params: segment " + name +
                                " is not the file its descriptor announces");
  }
  // Claimed by unlinking: of two readers of one descriptor, one gets it.
  if (::unlinkat(dir_fd_, name.c_str(), 0) != 0 || ::fstat(fd, &st) != 0 || st.st_nlink != 0) {
    // Another reader was first (or the name now stood for another file).
    ::close(fd);
    return NotFoundError("context_phase_params: segment " + name + " was already read");
  }
  // Mapped, not copied: the parser reads the shared pages (the file has no name left, so
  // only a process that opened it before, i.e. its writer, could still change it).
  void* m = ::mmap(nullptr, static_cast<size_t>(n), PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
  if (m == MAP_FAILED) {
    const Status s = Errno("cannot map " + name);
    ::close(fd);
    return s;
  }
  ::close(fd);
  taken_.fetch_add(1);
  return Segment(static_cast<const uint8_t*>(m), static_cast<size_t>(n));
}

}  // namespace inflight
