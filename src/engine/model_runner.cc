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

int32_t ComputeNumKvBlocks(const ModelConfig& model, const ExecutorConfig& config) {
  const KvStorageConfig one{model.num_layers, 1, config.tokens_per_block, model.kv_dim(), config.kv_dtype,
                             model.head_dim};
  const int64_t block_bytes = KvStorage::BytesPerBlock(one);
  int64_t blocks = static_cast<int64_t>(config.kv_cache_free_mem_fraction * static_cast<double>(AvailableMemoryBytes())) / block_bytes;
  if (config.max_tokens_in_paged_kv_cache > 0) blocks = std::min(blocks, config.max_tokens_in_paged_kv_cache / config.tokens_per_block);
  const int64_t per_sequence = (model.context_length + config.tokens_per_block - 1) / config.tokens_per_block;
  blocks = std::min(blocks, 2 * per_sequence * std::max(config.max_batch_size, 1));
  return static_cast<int32_t>(std::clamp<int64_t>(blocks, 1, INT32_MAX / 2));
}

LocalModelRunner::LocalModelRunner(const Model& model, const ExecutorConfig& config, ThreadPool* shared_pool)
    : model_(model),
      storage_(KvStorageConfig{model.config().num_layers, ComputeNumKvBlocks(model.config(), config),
                               config.tokens_per_block, model.config().kv_dim(), config.kv_dtype,
                               model.config().head_dim}),
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
  const KvStorageConfig& c = storage_.config();
  const size_t block = static_cast<size_t>(c.kv_dim) * DTypeBlockBytes(c.dtype) * c.tokens_per_block;
  for (const kernels::KvLayerView& l : view_.layers) {
    for (void* base : {l.k, l.v}) {
      auto* p = static_cast<uint8_t*>(base);
      std::memcpy(p + dst * block, p + src * block, block);
    }
  }
}

}  // namespace inflight
