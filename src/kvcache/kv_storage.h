// The memory of the paged KV cache: for each layer, K and V pools of num_blocks blocks of
// tokens_per_block * kv_dim elements (laid out per head, see kernels/attention.h). Block
// bookkeeping (free lists, reference counts, prefix reuse) lives in the block manager on top of
// this.
#pragma once

#include <cstdint>
#include <vector>

#include "base/aligned_buffer.h"
#include "kernels/attention.h"
#include "tensor/dtype.h"

namespace inflight {

struct KvStorageConfig {
  int32_t num_layers = 0;
  int32_t num_blocks = 0;
  int32_t tokens_per_block = 32;
  int32_t kv_dim = 0;
  DType dtype = DType::kF16;  // kF32, kF16 or kBF16
  int32_t head_dim = 0;       // K/V heads are tiles of each block (kernels/attention.h)
};

class KvStorage {
 public:
  explicit KvStorage(const KvStorageConfig& config);
  const KvStorageConfig& config() const { return config_; }
  // Per-layer views for the kernels.
  std::vector<kernels::KvLayerView> LayerViews();
  static int64_t BytesPerBlock(const KvStorageConfig& config);
  // Copies block src's K/V over block dst in every layer (copy-on-write, partial reuse).
  void CopyBlock(int32_t src, int32_t dst);

 private:
  KvStorageConfig config_;
  std::vector<AlignedBuffer> k_, v_;
};

}  // namespace inflight
