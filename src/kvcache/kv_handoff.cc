#include "kvcache/kv_handoff.h"

#include <cstddef>
#include <cstring>

#include "kvcache/kv_checksum.h"

namespace inflight {
namespace {

constexpr char kMagic[8] = {'I', 'F', 'K', 'V', 'H', 'O', 'F', '1'};
constexpr uint32_t kVersion = 2;
// Bounds far above any real hand-off, so that sizes multiply without overflow.
constexpr int64_t kMaxTokensPerBlock = 1 << 16;
constexpr int64_t kMaxBlocks = 1 << 22;
constexpr int64_t kMaxBlockBytes = int64_t{1} << 32;
constexpr int64_t kMaxFirstTokens = 1 << 16;

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t tokens_per_block;
  uint64_t layout_fingerprint;
  uint64_t cache_salt;
  uint64_t lora_task_id;
  int64_t created_unix_ns;
  uint64_t num_blocks;
  uint64_t num_tokens;  // in ((num_blocks - 1) * tokens_per_block, num_blocks * tokens_per_block]
  uint64_t num_first_tokens;
  uint64_t block_bytes;
  uint64_t body_checksum;    // of the token ids, the first tokens and the K/V bytes
  uint64_t header_checksum;  // of the fields above
};
static_assert(sizeof(Header) == 96);

uint64_t HeaderChecksum(const Header& h) {
  return KvChecksum(&h, offsetof(Header, header_checksum));
}

}  // namespace

uint64_t KvHandoffFingerprint(const std::string& layout) {
  return KvChecksum(layout.data(), layout.size());
}

size_t KvHandoffSerializedSize(const KvHandoff& h) {
  return sizeof(Header) + (h.tokens.size() + h.first_tokens.size()) * sizeof(int32_t) + h.kv.size();
}

void SerializeKvHandoffTo(const KvHandoff& h, uint8_t* out) {
  Header hd{};
  std::memcpy(hd.magic, kMagic, sizeof kMagic);
  hd.version = kVersion;
  hd.tokens_per_block = static_cast<uint32_t>(h.tokens_per_block);
  hd.layout_fingerprint = h.layout_fingerprint;
  hd.cache_salt = h.cache_salt;
  hd.lora_task_id = h.lora_task_id;
  hd.created_unix_ns = h.created_unix_ns;
  hd.num_blocks = static_cast<uint64_t>(h.num_blocks());
  hd.num_tokens = h.tokens.size();
  hd.num_first_tokens = h.first_tokens.size();
  hd.block_bytes = static_cast<uint64_t>(h.block_bytes);
  const size_t ids = h.tokens.size() * sizeof(int32_t);
  const size_t firsts = h.first_tokens.size() * sizeof(int32_t);
  uint8_t* body = out + sizeof(Header);
  if (ids) std::memcpy(body, h.tokens.data(), ids);
  if (firsts) std::memcpy(body + ids, h.first_tokens.data(), firsts);
  if (!h.kv.empty()) std::memcpy(body + ids + firsts, h.kv.data(), h.kv.size());
  hd.body_checksum = KvChecksum(body, ids + firsts + h.kv.size());
  hd.header_checksum = HeaderChecksum(hd);
  std::memcpy(out, &hd, sizeof hd);
}

std::vector<uint8_t> SerializeKvHandoff(const KvHandoff& h) {
  std::vector<uint8_t> out(KvHandoffSerializedSize(h));
  SerializeKvHandoffTo(h, out.data());
  return out;
}

StatusOr<KvHandoff> ParseKvHandoff(const uint8_t* data, size_t size) {
  auto bad = [](const std::string& why) {
    return InvalidArgumentError("context_phase_params: " + why);
  };
  Header hd;
  if (size < sizeof hd)
    return bad("too short for a KV hand-off (" + std::to_string(size) + " bytes)");
  std::memcpy(&hd, data, sizeof hd);
  if (std::memcmp(hd.magic, kMagic, sizeof kMagic) != 0) return bad("not a KV hand-off");
  if (hd.version != kVersion)
    return bad("hand-off version " + std::to_string(hd.version) + " (this server reads " +
               std::to_string(kVersion) + ")");
  if (hd.header_checksum != HeaderChecksum(hd)) return bad("corrupt header (checksum mismatch)");
  if (hd.tokens_per_block == 0 || hd.tokens_per_block > kMaxTokensPerBlock ||
      hd.num_blocks > static_cast<uint64_t>(kMaxBlocks) ||
      hd.num_first_tokens > static_cast<uint64_t>(kMaxFirstTokens) ||
      hd.block_bytes > static_cast<uint64_t>(kMaxBlockBytes))
    return bad("sizes out of range");
  // The tokens fill every block but the last, and part of that at least.
  if (hd.num_tokens > hd.num_blocks * hd.tokens_per_block ||
      (hd.num_blocks > 0 && hd.num_tokens <= (hd.num_blocks - 1) * hd.tokens_per_block))
    return bad(std::to_string(hd.num_tokens) + " tokens do not fill " +
               std::to_string(hd.num_blocks) + " blocks");
  // Each factor is bounded above, so these products fit in 64 bits.
  const uint64_t ids = hd.num_tokens * sizeof(int32_t);
  const uint64_t firsts = hd.num_first_tokens * sizeof(int32_t);
  const uint64_t kv = hd.num_blocks * hd.block_bytes;
  const uint64_t want = sizeof hd + ids + firsts + kv;
  if (want != size)
    return bad("holds " + std::to_string(size) + " bytes where its header announces " +
               std::to_string(want));
  const uint8_t* body = data + sizeof hd;
  if (KvChecksum(body, size - sizeof hd) != hd.body_checksum)
    return bad("corrupt K/V transfer (checksum mismatch); refused");
  KvHandoff h;
  h.layout_fingerprint = hd.layout_fingerprint;
  h.tokens_per_block = static_cast<int32_t>(hd.tokens_per_block);
  h.block_bytes = static_cast<int64_t>(hd.block_bytes);
  h.cache_salt = hd.cache_salt;
  h.lora_task_id = hd.lora_task_id;
  h.created_unix_ns = hd.created_unix_ns;
  h.tokens.resize(static_cast<size_t>(ids / sizeof(int32_t)));
  h.first_tokens.resize(static_cast<size_t>(hd.num_first_tokens));
  if (ids) std::memcpy(h.tokens.data(), body, static_cast<size_t>(ids));
  if (firsts) std::memcpy(h.first_tokens.data(), body + ids, static_cast<size_t>(firsts));
  h.kv.assign(body + ids + firsts, body + ids + firsts + kv);
  return h;
}

}  // namespace inflight
