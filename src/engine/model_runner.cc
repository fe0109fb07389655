#include "engine/model_runner.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <string>

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

KvStorageConfig KvStorageConfigFor(const Model& model, int32_t num_blocks,
                                   const ExecutorConfig& config) {
  const ModelConfig& c = model.config();
  const ShardLayout& shard = model.shard();
  return KvStorageConfig{shard.num_layers(),      num_blocks,
                         config.tokens_per_block, shard.num_kv_heads * c.head_dim,
                         config.kv_dtype,         c.head_dim};
}

int32_t ComputeNumKvBlocks(const Model& model, const ExecutorConfig& config, double memory_share) {
  const int64_t block_bytes = KvStorage::BytesPerBlock(KvStorageConfigFor(model, 1, config));
  const double budget = config.kv_cache_free_mem_fraction * memory_share *
                        static_cast<double>(AvailableMemoryBytes());
  int64_t blocks = static_cast<int64_t>(budget) / block_bytes;
  if (config.max_tokens_in_paged_kv_cache > 0)
    blocks = std::min(blocks, config.max_tokens_in_paged_kv_cache / config.tokens_per_block);
  const int64_t context = model.config().context_length;
  const int64_t per_sequence = (context + config.tokens_per_block - 1) / config.tokens_per_block;
  blocks = std::min(blocks, 2 * per_sequence * std::max(config.max_batch_size, 1));
  return static_cast<int32_t>(std::clamp<int64_t>(blocks, 1, INT32_MAX / 2));
}

LocalModelRunner::LocalModelRunner(const Model& model, const ExecutorConfig& config,
                                   ThreadPool* shared_pool)
    : model_(model),
      storage_(KvStorageConfigFor(model, ComputeNumKvBlocks(model, config), config)),
      owned_pool_(shared_pool ? nullptr : std::make_unique<ThreadPool>(config.num_threads)),
      pool_(shared_pool ? shared_pool : owned_pool_.get()) {
  view_.layers = storage_.LayerViews();
  view_.num_blocks = storage_.config().num_blocks;
}

Status LocalModelRunner::Forward(const BatchPlan& plan, float* logits) {
  return model_.Forward(plan, view_, scratch_, *pool_, logits);
}

// Copies the whole block: a block holds its positions per head (kernels/attention.h), and the
// positions past num_tokens are written by the new owner before anything reads them.
void LocalModelRunner::CopyBlockPrefix(int32_t src, int32_t dst, int32_t num_tokens) {
  (void)num_tokens;
  storage_.CopyBlock(src, dst);
}

}  // namespace inflight
