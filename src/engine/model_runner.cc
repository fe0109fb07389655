#include "engine/model_runner.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <string>

#include "engine/scheduler.h"
#include "kernels/attention.h"

namespace inflight {
namespace {

// MemAvailable from /proc/meminfo, in bytes; 0 when unknown.
int64_t AvailableMemoryBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024;
  }
  return 0;
}

}  // namespace

KvStorageConfig KvStorageConfigFor(const Model& model, const KvCacheSizes& sizes,
                                   const ExecutorConfig& config) {
  const ModelConfig& c = model.config();
  const ShardLayout& shard = model.shard();
  KvStorageConfig kv{shard.num_layers(),      sizes.num_blocks,
                     config.tokens_per_block, shard.num_kv_heads * c.head_dim,
                     config.kv_dtype,         c.head_dim};
  if (sizes.num_window_blocks > 0 && c.sliding_window > 0) {
    for (int32_t l = 0; l < shard.num_layers(); ++l)
      kv.layer_group.push_back(c.is_window_layer(shard.layer_begin + l) ? kWindowGroup
                                                                        : kFullGroup);
    if (kv.NumLayersIn(kWindowGroup) > 0) {
      kv.num_window_blocks = sizes.num_window_blocks;
    } else {
      kv.layer_group.clear();
    }
  }
  return kv;
}

KvCacheSizes ComputeKvCacheSizes(const Model& model, const ExecutorConfig& config,
                                 double memory_share, bool window_group) {
  const KvStorageConfig one =
      KvStorageConfigFor(model, KvCacheSizes{1, window_group ? 1 : 0}, config);
  const int64_t full_bytes = KvStorage::BytesPerBlock(one, kFullGroup);
  const int64_t window_bytes = KvStorage::BytesPerBlock(one, kWindowGroup);
  const double budget = config.kv_cache_free_mem_fraction * memory_share *
                        static_cast<double>(AvailableMemoryBytes());
  const int64_t tpb = config.tokens_per_block;
  const int64_t context = model.config().context_length;
  const int64_t per_sequence = (context + tpb - 1) / tpb;
  const int64_t batch = std::max(config.max_batch_size, 1);
  int64_t cap = 2 * per_sequence * batch;  // more would only ever serve as prefix cache
  if (config.max_tokens_in_paged_kv_cache > 0)
    cap = std::min(cap, config.max_tokens_in_paged_kv_cache / tpb);
  auto clamp = [](int64_t blocks) {
    return static_cast<int32_t>(std::clamp<int64_t>(blocks, 1, INT32_MAX / 2));
  };
  if (one.num_window_blocks == 0)
    return {clamp(std::min(static_cast<int64_t>(budget) / full_bytes, cap)), 0};
  // As many window blocks as max_batch_size windows and a step need, never more than the
  // window layers would have held in group 0 (so neither group is smaller than without
  // groups), at least one sequence's worth.
  const int64_t ungrouped =
      std::min(static_cast<int64_t>(budget) / (full_bytes + window_bytes), cap);
  const int64_t per_seq =
      WindowBlocksPerSequence(model.config().sliding_window, config.tokens_per_block);
  const int64_t step = WindowBlocksPerStep(config);
  const int64_t window = std::max(per_seq + step, std::min(batch * per_seq + step, ungrouped));
  const int64_t left = static_cast<int64_t>(budget) - window * window_bytes;
  const int64_t full = full_bytes > 0 ? std::min(left / full_bytes, cap) : cap;
  return {clamp(full), clamp(window)};
}

LocalModelRunner::LocalModelRunner(const Model& model, const ExecutorConfig& config,
                                   ThreadPool* shared_pool, bool kv_window_group)
    : model_(model),
      storage_(KvStorageConfigFor(model, ComputeKvCacheSizes(model, config, 1.0, kv_window_group),
                                  config)),
      owned_pool_(shared_pool ? nullptr : std::make_unique<ThreadPool>(config.num_threads)),
      pool_(shared_pool ? shared_pool : owned_pool_.get()) {
  view_.layers = storage_.LayerViews();
  view_.num_blocks = storage_.config().num_blocks;
  view_.layer_group = storage_.config().layer_group;
  view_.num_window_blocks = storage_.config().num_window_blocks;
  if (!view_.layer_group.empty()) view_.window = model.config().sliding_window;
}

Status LocalModelRunner::Forward(const BatchPlan& plan, float* logits) {
  if (aux_layers_.empty()) return model_.Forward(plan, view_, scratch_, *pool_, logits);
  ShardIo io;
  io.logits = logits;
  io.aux_layers = &aux_layers_;
  const size_t need = static_cast<size_t>(plan.num_tokens()) * aux_layers_.size() *
                      static_cast<size_t>(model_.config().hidden_size);
  if (aux_.size() < need) aux_.resize(need);
  io.aux_out = aux_.data();
  return model_.ForwardShard(plan, view_, scratch_, *pool_, io);
}

bool LocalModelRunner::CaptureLayerInputs(std::vector<int32_t> layers) {
  if (model_.sharded()) return false;
  for (int32_t l : layers)
    if (l < 0 || l > model_.config().num_layers) return false;
  aux_layers_ = std::move(layers);
  return true;
}

std::string LocalModelRunner::KvLayoutFingerprint() const {
  const KvStorageConfig& c = storage_.config();
  std::string groups;  // which layers' K/V a file holds first (the full group) and after
  for (int32_t l = 0; l < c.num_layers; ++l) groups += static_cast<char>('0' + c.GroupOf(l));
  return model_.Describe() + "|kv " + DTypeName(c.dtype) + " layers " +
         std::to_string(c.num_layers) + " kv_dim " + std::to_string(c.kv_dim) + " head_dim " +
         std::to_string(c.head_dim) + " tokens_per_block " + std::to_string(c.tokens_per_block) +
         " groups " + groups;
}

// Copies the whole block: a block holds its positions per head (kernels/attention.h), and the
// positions past num_tokens are written by the new owner before anything reads them.
void LocalModelRunner::CopyBlockPrefix(int32_t group, int32_t src, int32_t dst,
                                       int32_t num_tokens) {
  (void)num_tokens;
  storage_.CopyBlock(group, src, dst);
}

void LocalModelRunner::MoveKvSlots(const int32_t* block_table,
                                   const std::vector<std::pair<int32_t, int32_t>>& moves) {
  const int32_t tpb = storage_.config().tokens_per_block;
  for (const kernels::KvLayerView& kv : view_.layers) {
    for (const auto& [from, to] : moves) {
      kernels::CopyKvSlot(kv, block_table[from / tpb], from % tpb, block_table[to / tpb], to % tpb);
    }
  }
}

}  // namespace inflight
