#include "base/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace inflight {

StatusOr<std::shared_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return Status(err == ENOENT ? StatusCode::kNotFound : StatusCode::kInvalidArgument,
                  "cannot open '" + path + "': " + std::strerror(err));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgumentError("'" + path + "' is not a regular file");
  }
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->path_ = path;
  file->size_ = static_cast<size_t>(st.st_size);
  if (file->size_ > 0) {
    void* p = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return InvalidArgumentError("cannot mmap '" + path + "': " + std::strerror(err));
    }
    file->data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return file;
}

std::shared_ptr<MappedFile> MappedFile::FromBytes(const std::string& name, const uint8_t* bytes,
                                                  size_t size) {
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->path_ = name;
  file->size_ = size;
  // One spare byte so an empty buffer still has a valid, unique address.
  file->owned_ = std::make_unique<uint8_t[]>(size + 1);
  if (size > 0) std::memcpy(file->owned_.get(), bytes, size);
  file->data_ = file->owned_.get();
  return file;
}

void MappedFile::ReleasePages(const void* p, size_t bytes) const {
  if (owned_ != nullptr || data_ == nullptr) return;
  const auto begin = reinterpret_cast<uintptr_t>(p), map_begin = reinterpret_cast<uintptr_t>(data_);
  if (begin < map_begin || bytes > size_ || begin - map_begin > size_ - bytes) return;
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t first = (begin + page - 1) / page * page, last = (begin + bytes) / page * page;
  // Advice only: a failure leaves the pages resident, nothing else.
  if (first < last) (void)::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

MappedFile::~MappedFile() {
  if (data_ != nullptr && owned_ == nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace inflight
