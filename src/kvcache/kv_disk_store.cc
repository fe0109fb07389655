#include "kvcache/kv_disk_store.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>

#include "base/logging.h"
#include "kvcache/kv_checksum.h"

namespace inflight {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'I', 'F', 'K', 'V', 'B', 'L', 'K', '1'};
constexpr uint32_t kVersion = 1;
constexpr char kSuffix[] = ".kvb";

// The fixed header of a block file; every field is checked before a byte of K/V is used.
struct Header {
  char magic[8];
  uint32_t version;
  uint32_t tokens_per_block;
  uint64_t fingerprint;
  uint64_t key;
  uint64_t parent;
  uint64_t kv_bytes;
  uint64_t body_checksum;    // of the token ids and the K/V bytes
  uint64_t header_checksum;  // of the fields above
};
static_assert(sizeof(Header) == 64);

uint64_t Checksum(const void* data, size_t n, uint64_t h = 0xcbf29ce484222325ull) {
  return KvChecksum(data, n, h);
}

uint64_t HeaderChecksum(const Header& h) { return Checksum(&h, offsetof(Header, header_checksum)); }

std::string Hex(uint64_t key) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(key));
  return buf;
}

bool ParseHex(const std::string& s, uint64_t* key) {
  if (s.size() != 16) return false;
  uint64_t v = 0;
  for (char c : s) {
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return false;
    v = v << 4 | static_cast<uint64_t>(d);
  }
  *key = v;
  return true;
}

}  // namespace

StatusOr<std::unique_ptr<KvDiskStore>> KvDiskStore::Open(const KvDiskStoreConfig& config) {
  if (config.path.empty()) return InvalidArgumentError("kv_cache_disk_path is empty");
  if (config.max_bytes <= 0) return InvalidArgumentError("kv_cache_disk_bytes must be > 0");
  if (config.block_bytes <= 0 || config.tokens_per_block <= 0)
    return InvalidArgumentError("the KV disk store needs the block size");
  std::unique_ptr<KvDiskStore> store(new KvDiskStore(config));
  // One folder per fingerprint: models (or KV layouts) sharing the path never touch each
  // other's files. Only the server's user reads them (they hold prompts' token ids).
  std::error_code ec;
  fs::create_directories(store->dir_, ec);
  if (!fs::is_directory(store->dir_, ec)) {
    return InvalidArgumentError("kv_cache_disk_path '" + config.path +
                                "' is not a directory that can be created");
  }
  fs::permissions(store->dir_, fs::perms::owner_all, ec);
  store->Index();
  store->writer_ = std::thread([s = store.get()] { s->WriterLoop(); });
  return store;
}

KvDiskStore::KvDiskStore(const KvDiskStoreConfig& config)
    : config_(config),
      fingerprint_hash_(Checksum(config.fingerprint.data(), config.fingerprint.size())),
      dir_((fs::path(config.path) / Hex(fingerprint_hash_)).string()) {}

KvDiskStore::~KvDiskStore() {
  Flush();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (writer_.joinable()) writer_.join();
}

std::string KvDiskStore::FileOf(uint64_t key) const {
  return (fs::path(dir_) / (Hex(key) + kSuffix)).string();
}

void KvDiskStore::Index() {
  const int64_t expected_size =
      static_cast<int64_t>(sizeof(Header)) + 4ll * config_.tokens_per_block + config_.block_bytes;
  std::vector<std::pair<fs::file_time_type, uint64_t>> found;
  std::error_code ec;
  const auto stale = fs::file_time_type::clock::now() - std::chrono::minutes(1);
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const fs::path p = e.path();
    if (p.extension() == ".tmp") {
      // A write a crash cut short (not one of a store still open here: a reload's old model).
      if (e.last_write_time(ec) < stale) fs::remove(p, ec);
      continue;
    }
    uint64_t key = 0;
    if (p.extension() != kSuffix || !ParseHex(p.stem().string(), &key)) continue;
    Header h{};
    std::ifstream in(p, std::ios::binary);
    const bool read = static_cast<bool>(in.read(reinterpret_cast<char*>(&h), sizeof h));
    std::vector<int32_t> ids;
    if (config_.track_changes && read) {
      ids.resize(static_cast<size_t>(config_.tokens_per_block));
      if (!in.read(reinterpret_cast<char*>(ids.data()),
                   static_cast<std::streamsize>(ids.size() * sizeof(int32_t))))
        ids.clear();
    }
    const int64_t size = static_cast<int64_t>(e.file_size(ec));
    std::string problem;
    if (!read || std::memcmp(h.magic, kMagic, sizeof kMagic) != 0 || h.version != kVersion ||
        h.header_checksum != HeaderChecksum(h)) {
      problem = "not a block file of this version (or its header is corrupt)";
    } else if (h.fingerprint != fingerprint_hash_) {
      // Another model's (or KV type's) store sharing the directory: not ours to touch.
      INFLIGHT_LOG(kWarning) << "KV disk store: skipping " << p.filename().string()
                             << ", written for another model or KV cache layout";
      ++stats_.rejected;
      continue;
    } else if (h.key != key) {
      problem = "its name is not its key (renamed)";
    } else if (h.tokens_per_block != static_cast<uint32_t>(config_.tokens_per_block) ||
               h.kv_bytes != static_cast<uint64_t>(config_.block_bytes)) {
      problem = "its block size does not match";
    } else if (size != expected_size) {
      problem = "it is truncated";
    }
    if (!problem.empty()) {
      INFLIGHT_LOG(kWarning) << "KV disk store: deleting " << p.filename().string() << ": "
                             << problem;
      ++stats_.rejected;
      in.close();
      fs::remove(p, ec);
      continue;
    }
    index_[key] = {h.parent, size, 0, ids, ++generation_};
    stats_.bytes += size;
    if (config_.track_changes) changes_.push_back({key, h.parent, std::move(ids), true});
    found.emplace_back(e.last_write_time(ec), key);
  }
  // Least recently written first: the order eviction follows until blocks are used again.
  std::sort(found.begin(), found.end());
  for (const auto& [t, key] : found) index_[key].last_used = ++clock_;
  stats_.files = static_cast<int64_t>(index_.size());
  std::lock_guard<std::mutex> lock(mu_);
  EvictLocked(0);
}

bool KvDiskStore::Contains(uint64_t key) const {
  std::lock_guard<std::mutex> lock(mu_);
  return index_.count(key) > 0 || queued_.count(key) > 0;
}

bool KvDiskStore::Read(uint64_t key, uint64_t parent, const int32_t* tokens, uint8_t* out) {
  uint64_t generation = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(key);
    if (it == index_.end() || it->second.parent != parent) return false;
    generation = it->second.generation;
  }
  const std::string path = FileOf(key);
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;  // evicted meanwhile: a miss
  Header h{};
  std::vector<int32_t> ids(static_cast<size_t>(config_.tokens_per_block));
  const size_t id_bytes = ids.size() * sizeof(int32_t);
  std::string problem;
  if (!in.read(reinterpret_cast<char*>(&h), sizeof h) ||
      !in.read(reinterpret_cast<char*>(ids.data()), static_cast<std::streamsize>(id_bytes)) ||
      !in.read(reinterpret_cast<char*>(out), config_.block_bytes)) {
    problem = "it is truncated";
  } else if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0 ||
             h.header_checksum != HeaderChecksum(h) || h.fingerprint != fingerprint_hash_ ||
             h.key != key || h.kv_bytes != static_cast<uint64_t>(config_.block_bytes)) {
    problem = "its header changed";
  } else if (h.body_checksum != Checksum(out, static_cast<size_t>(config_.block_bytes),
                                         Checksum(ids.data(), id_bytes))) {
    problem = "its contents are corrupt";
  } else if (h.parent != parent || !std::equal(ids.begin(), ids.end(), tokens)) {
    problem = "it holds another prefix";
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!problem.empty()) {
    // Unless the file was replaced while it was read (evicted and written again).
    auto it = index_.find(key);
    if (it == index_.end() || it->second.generation != generation) return false;
    INFLIGHT_LOG(kWarning) << "KV disk store: deleting " << Hex(key) << kSuffix << ": " << problem;
    ++stats_.rejected;
    DropLocked(key, false);
    return false;
  }
  auto it = index_.find(key);
  if (it != index_.end()) it->second.last_used = ++clock_;
  ++stats_.hits;
  return true;
}

bool KvDiskStore::Write(uint64_t key, uint64_t parent, const int32_t* tokens,
                        std::vector<uint8_t> kv) {
  std::lock_guard<std::mutex> lock(mu_);
  if (index_.count(key) || queued_.count(key) || stop_) return false;
  const int64_t n = static_cast<int64_t>(kv.size());
  if (n != config_.block_bytes) return false;
  if (queued_bytes_ + n > config_.max_queued_bytes) {
    ++stats_.dropped;
    return false;
  }
  Pending p{key, parent, std::vector<int32_t>(tokens, tokens + config_.tokens_per_block),
            std::move(kv)};
  queued_bytes_ += n;
  queued_[key] = true;
  queue_.push_back(std::move(p));
  cv_.notify_all();
  return true;
}

void KvDiskStore::Flush() {
  std::unique_lock<std::mutex> lock(mu_);
  drained_.wait(lock, [&] { return (queue_.empty() && !writing_) || !writer_.joinable(); });
}

std::vector<KvDiskStore::Change> KvDiskStore::TakeChanges() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(changes_, {});
}

KvDiskStats KvDiskStore::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  KvDiskStats s = stats_;
  s.files = static_cast<int64_t>(index_.size());
  return s;
}

void KvDiskStore::WriterLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) {
      if (stop_) return;
      continue;
    }
    Pending p = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    const int64_t size = static_cast<int64_t>(sizeof(Header) + p.tokens.size() * 4 + p.kv.size());
    EvictLocked(size);
    lock.unlock();
    WriteFile(p);
    lock.lock();
    queued_bytes_ -= static_cast<int64_t>(p.kv.size());
    queued_.erase(p.key);
    std::error_code ec;
    if (fs::exists(FileOf(p.key), ec)) {
      index_[p.key] = {p.parent, size, ++clock_,
                       config_.track_changes ? p.tokens : std::vector<int32_t>(), ++generation_};
      stats_.bytes += size;
      ++stats_.written;
      if (config_.track_changes) changes_.push_back({p.key, p.parent, p.tokens, true});
    }
    writing_ = false;
    drained_.notify_all();
  }
}

void KvDiskStore::WriteFile(const Pending& p) {
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kVersion;
  h.tokens_per_block = static_cast<uint32_t>(config_.tokens_per_block);
  h.fingerprint = fingerprint_hash_;
  h.key = p.key;
  h.parent = p.parent;
  h.kv_bytes = p.kv.size();
  const size_t id_bytes = p.tokens.size() * sizeof(int32_t);
  h.body_checksum = Checksum(p.kv.data(), p.kv.size(), Checksum(p.tokens.data(), id_bytes));
  h.header_checksum = HeaderChecksum(h);
  // Written aside and renamed into place: a reader (or a restart after a crash) sees whole
  // files only.
  // A name of this store's own: a reload's old and new model may write the same block at once.
  const std::string path = FileOf(p.key),
                    tmp = path + "." + std::to_string(getpid()) + "-" +
                          std::to_string(reinterpret_cast<uintptr_t>(this) % 1000003) + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(&h), sizeof h);
    out.write(reinterpret_cast<const char*>(p.tokens.data()),
              static_cast<std::streamsize>(id_bytes));
    out.write(reinterpret_cast<const char*>(p.kv.data()),
              static_cast<std::streamsize>(p.kv.size()));
    if (!out) {
      INFLIGHT_LOG(kWarning) << "KV disk store: could not write " << tmp << " (disk full?)";
      out.close();
      std::error_code ec;
      fs::remove(tmp, ec);
      return;
    }
  }
  std::error_code ec;
  fs::permissions(tmp, fs::perms::owner_read | fs::perms::owner_write, ec);
  fs::rename(tmp, path, ec);
  if (ec) fs::remove(tmp, ec);
}

void KvDiskStore::EvictLocked(int64_t incoming) {
  while (!index_.empty() && stats_.bytes + incoming > config_.max_bytes) {
    auto lru = std::min_element(index_.begin(), index_.end(), [](const auto& a, const auto& b) {
      return a.second.last_used < b.second.last_used;
    });
    DropLocked(lru->first, true);
  }
}

void KvDiskStore::DropLocked(uint64_t key, bool evicted) {
  auto it = index_.find(key);
  if (it == index_.end()) return;
  stats_.bytes -= it->second.bytes;
  if (config_.track_changes)
    changes_.push_back({key, it->second.parent, std::move(it->second.tokens), false});
  index_.erase(it);
  if (evicted) ++stats_.evicted;
  std::error_code ec;
  fs::remove(FileOf(key), ec);
}

}  // namespace inflight
