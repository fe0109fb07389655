#include "kvcache/kv_storage.h"

#include <cstring>

namespace inflight {

int64_t KvStorage::BytesPerBlock(const KvStorageConfig& c) {
  return int64_t{2} * c.num_layers * c.tokens_per_block * c.kv_dim * DTypeBlockBytes(c.dtype);
}

KvStorage::KvStorage(const KvStorageConfig& config) : config_(config) {
  const size_t layer_bytes = static_cast<size_t>(config.num_blocks) * config.tokens_per_block *
                             config.kv_dim * DTypeBlockBytes(config.dtype);
  for (int32_t l = 0; l < config.num_layers; ++l) {
    k_.emplace_back(layer_bytes);
    v_.emplace_back(layer_bytes);
  }
}

void KvStorage::CopyBlock(int32_t src, int32_t dst) {
  const size_t block = static_cast<size_t>(config_.kv_dim) * DTypeBlockBytes(config_.dtype) *
                       config_.tokens_per_block;
  for (int32_t l = 0; l < config_.num_layers; ++l) {
    for (AlignedBuffer* pool : {&k_[l], &v_[l]}) {
      auto* p = static_cast<uint8_t*>(pool->data());
      std::memcpy(p + dst * block, p + src * block, block);
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
