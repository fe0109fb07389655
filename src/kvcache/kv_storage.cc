#include "kvcache/kv_storage.h"

#include <cstring>

#include "base/check.h"

namespace inflight {
namespace {

size_t BlockBytesPerLayer(const KvStorageConfig& c) {
  return static_cast<size_t>(c.kv_dim / c.head_dim) *
         kernels::KvLayerView::KvTileBytes(c.dtype, c.tokens_per_block, c.head_dim);
}

}  // namespace

int32_t KvStorageConfig::NumLayersIn(int32_t group) const {
  int32_t n = 0;
  for (int32_t l = 0; l < num_layers; ++l) n += GroupOf(l) == group;
  return n;
}

int64_t KvStorage::BytesPerBlock(const KvStorageConfig& c, int32_t group) {
  return int64_t{2} * c.NumLayersIn(group) * static_cast<int64_t>(BlockBytesPerLayer(c));
}

KvStorage::KvStorage(const KvStorageConfig& config) : config_(config) {
  INFLIGHT_CHECK(config.layer_group.empty() ||
                 static_cast<int32_t>(config.layer_group.size()) == config.num_layers);
  for (int32_t l = 0; l < config.num_layers; ++l) {
    const size_t bytes =
        static_cast<size_t>(config.NumBlocksIn(config.GroupOf(l))) * BlockBytesPerLayer(config);
    k_.emplace_back(bytes);
    v_.emplace_back(bytes);
  }
}

void KvStorage::CopyBlock(int32_t group, int32_t src, int32_t dst) {
  const size_t block = BlockBytesPerLayer(config_);
  for (int32_t l = 0; l < config_.num_layers; ++l) {
    if (config_.GroupOf(l) != group) continue;
    for (AlignedBuffer* pool : {&k_[l], &v_[l]}) {
      auto* p = static_cast<uint8_t*>(pool->data());
      std::memcpy(p + dst * block, p + src * block, block);
    }
  }
}

void KvStorage::ExportBlock(int32_t group, int32_t block, uint8_t* out) const {
  const size_t n = BlockBytesPerLayer(config_);
  for (int32_t l = 0; l < config_.num_layers; ++l) {
    if (config_.GroupOf(l) != group) continue;
    for (const AlignedBuffer* pool : {&k_[l], &v_[l]}) {
      std::memcpy(out, static_cast<const uint8_t*>(pool->data()) + block * n, n);
      out += n;
    }
  }
}

void KvStorage::ImportBlock(int32_t group, int32_t block, const uint8_t* in) {
  const size_t n = BlockBytesPerLayer(config_);
  for (int32_t l = 0; l < config_.num_layers; ++l) {
    if (config_.GroupOf(l) != group) continue;
    for (AlignedBuffer* pool : {&k_[l], &v_[l]}) {
      std::memcpy(static_cast<uint8_t*>(pool->data()) + block * n, in, n);
      in += n;
    }
  }
}

std::vector<kernels::KvLayerView> KvStorage::LayerViews() {
  std::vector<kernels::KvLayerView> views;
  for (int32_t l = 0; l < config_.num_layers; ++l) {
    views.push_back({k_[l].data(), v_[l].data(), config_.dtype, config_.tokens_per_block,
                     config_.kv_dim, config_.head_dim});
  }
  return views;
}

}  // namespace inflight
