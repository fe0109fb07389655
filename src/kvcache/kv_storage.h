// The memory of the paged KV cache: for each layer, K and V pools of blocks of
// tokens_per_block * kv_dim elements (laid out per head, see kernels/attention.h). Block
// bookkeeping (free lists, reference counts, prefix reuse) lives in the block managers on top
// of this.
//
// KV cache groups: the layers of one model may keep their K/V in two groups of blocks. Group 0
// (kFullGroup) holds every position of a sequence; group 1 (kWindowGroup) holds the
// sliding-window layers, whose sequences keep only the blocks their window can still see. The
// groups number their blocks independently (a sequence has one block table per group).
#pragma once

#include <cstdint>
#include <vector>

#include "base/aligned_buffer.h"
#include "kernels/attention.h"
#include "tensor/dtype.h"

namespace inflight {

inline constexpr int32_t kFullGroup = 0;
inline constexpr int32_t kWindowGroup = 1;

struct KvStorageConfig {
  int32_t num_layers = 0;
  int32_t num_blocks = 0;  // of group 0
  int32_t tokens_per_block = 32;
  int32_t kv_dim = 0;
  DType dtype = DType::kF16;  // kF32, kF16, kBF16 or kI8 (kernels/attention.h)
  int32_t head_dim = 0;       // K/V heads are tiles of each block (kernels/attention.h)
  // layer_group[l]: the group of layer l (kFullGroup or kWindowGroup); empty: all in group 0.
  std::vector<uint8_t> layer_group;
  int32_t num_window_blocks = 0;  // of group 1

  int32_t GroupOf(int32_t layer) const {
    return layer_group.empty() ? kFullGroup : layer_group[static_cast<size_t>(layer)];
  }
  int32_t NumLayersIn(int32_t group) const;
  int32_t NumBlocksIn(int32_t group) const {
    return group == kFullGroup ? num_blocks : num_window_blocks;
  }
};

class KvStorage {
 public:
  explicit KvStorage(const KvStorageConfig& config);
  const KvStorageConfig& config() const { return config_; }
  // Per-layer views for the kernels (each over its group's blocks).
  std::vector<kernels::KvLayerView> LayerViews();
  // Bytes one block of `group` takes over that group's layers.
  static int64_t BytesPerBlock(const KvStorageConfig& config, int32_t group = kFullGroup);
  // Copies block src's K/V over block dst in every layer of `group` (copy-on-write, partial
  // reuse).
  void CopyBlock(int32_t group, int32_t src, int32_t dst);
  // The K/V of block `block` of `group` as BytesPerBlock(config, group) bytes (each layer's K
  // then V), and back: the disk tier's block contents.
  void ExportBlock(int32_t group, int32_t block, uint8_t* out) const;
  void ImportBlock(int32_t group, int32_t block, const uint8_t* in);

 private:
  KvStorageConfig config_;
  std::vector<AlignedBuffer> k_, v_;
};

}  // namespace inflight
