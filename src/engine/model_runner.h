// What the executor needs from a model: one forward pass over a ragged batch with K/V in the
// paged pool, and a block copy (forked sequences). The real runner wraps Model + KvStorage +
// the compute thread pool; scheduler tests use a fake. Engine-thread only.
#pragma once

#include <cstdint>
#include <memory>

#include "base/status.h"
#include "base/thread_pool.h"
#include "engine/executor_config.h"
#include "kvcache/kv_storage.h"
#include "model/model.h"

namespace inflight {

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual int32_t vocab_size() const = 0;
  virtual int32_t context_length() const = 0;
  virtual int32_t num_kv_blocks() const = 0;
  virtual int32_t num_layers() const = 0;
  virtual int32_t hidden_size() const = 0;
  // Logits [plan.num_logit_rows(), vocab]; K/V of the new tokens go to their blocks.
  virtual Status Forward(const BatchPlan& plan, float* logits) = 0;
  // Copies the K/V of the first num_tokens slots of block src into block dst (the rest of
  // dst may be overwritten too).
  virtual void CopyBlockPrefix(int32_t src, int32_t dst, int32_t num_tokens) = 0;
  // The compute pool, for per-sequence work between forward passes; null: run it inline.
  virtual ThreadPool* pool() { return nullptr; }
  // OK while the runner can run steps; an error (e.g. a parallel rank died) is final.
  // Thread-safe (serving threads ask it for readiness).
  virtual Status Health() const { return OkStatus(); }
};

// Pool size for a model: max_tokens_in_paged_kv_cache or kv_cache_free_mem_fraction of the
// memory available now (after the weights are loaded), whichever is smaller, and never more
// than twice what max_batch_size sequences at full context could use (the rest would only
// ever serve as prefix cache). At least one full-context sequence when the memory allows.
// A shard (tensor/pipeline parallel) counts only its own layers and K/V heads; memory_share is
// the part of this host's memory the process may take (ranks sharing a host split it).
int32_t ComputeNumKvBlocks(const Model& model, const ExecutorConfig& config,
                           double memory_share = 1.0);
// The paged pool of a model or of its shard: its layers, its K/V heads.
KvStorageConfig KvStorageConfigFor(const Model& model, int32_t num_blocks,
                                   const ExecutorConfig& config);

class LocalModelRunner : public ModelRunner {
 public:
  // shared_pool: run on another runner's compute threads (a draft model beside its target:
  // two pools would fight over the same cores); null: own config.num_threads threads.
  LocalModelRunner(const Model& model, const ExecutorConfig& config,
                   ThreadPool* shared_pool = nullptr);
  int32_t vocab_size() const override { return model_.config().vocab_size; }
  int32_t context_length() const override { return model_.config().context_length; }
  int32_t num_kv_blocks() const override { return storage_.config().num_blocks; }
  int32_t num_layers() const override { return model_.config().num_layers; }
  int32_t hidden_size() const override { return model_.config().hidden_size; }
  Status Forward(const BatchPlan& plan, float* logits) override;
  void CopyBlockPrefix(int32_t src, int32_t dst, int32_t num_tokens) override;
  ThreadPool* pool() override { return pool_; }

 private:
  const Model& model_;
  KvStorage storage_;
  KvCacheView view_;
  ForwardScratch scratch_;
  std::unique_ptr<ThreadPool> owned_pool_;
  ThreadPool* pool_;
};

}  // namespace inflight
