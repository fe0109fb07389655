// What the executor needs from a model: one forward pass over a ragged batch with K/V in the
// paged pool, and a block copy (forked sequences). The real runner wraps Model + KvStorage +
// the compute thread pool; scheduler tests use a fake. Engine-thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

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
  // The KV cache's window group (kvcache/kv_storage.h): its blocks and its sliding window in
  // tokens; 0 and 0 when every layer keeps its K/V in group 0.
  virtual int32_t num_window_kv_blocks() const { return 0; }
  virtual int32_t kv_window() const { return 0; }
  virtual int32_t num_layers() const = 0;
  virtual int32_t hidden_size() const = 0;
  // Logits [plan.num_logit_rows(), vocab]; K/V of the new tokens go to their blocks.
  virtual Status Forward(const BatchPlan& plan, float* logits) = 0;
  // Copies the K/V of the first num_tokens slots of block src into block dst of KV cache
  // group `group` (the rest of dst may be overwritten too).
  virtual void CopyBlockPrefix(int32_t group, int32_t src, int32_t dst, int32_t num_tokens) = 0;
  // The K/V of one block of `group` as bytes (the disk tier), and back; 0 / false when the
  // runner cannot (its cache is spread over ranks).
  virtual int64_t KvBlockBytes(int32_t group) const {
    (void)group;
    return 0;
  }
  virtual bool ExportBlock(int32_t group, int32_t block, uint8_t* out) const {
    (void)group, (void)block, (void)out;
    return false;
  }
  virtual bool ImportBlock(int32_t group, int32_t block, const uint8_t* in) {
    (void)group, (void)block, (void)in;
    return false;
  }
  // What a block's bytes depend on besides the model file: the model (layers, weights) and
  // the cache's type and layout. Files of the disk tier written under another are not read.
  virtual std::string KvLayoutFingerprint() const { return ""; }
  // Drafts verified as a tree (SequenceChunk::tree) and their K/V moved: false when the runner
  // cannot (sliding-window layers, a cache spread over ranks).
  virtual bool SupportsTreeDrafts() const { return false; }
  // Copies K/V slot from (a position of the table) to slot to, in every layer, for each
  // (from, to) in order: a verified branch's tokens move to the positions they hold.
  virtual void MoveKvSlots(const int32_t* block_table,
                           const std::vector<std::pair<int32_t, int32_t>>& moves) {
    (void)block_table, (void)moves;
  }
  // The final (normed) hidden states of the last pass's logit rows ([rows, hidden], in the
  // logits' order), valid until the next pass; null when the runner cannot give them.
  virtual const float* OutputHidden() const { return nullptr; }
  // From now on every pass keeps the residual stream at the input of these layers for every
  // row of the plan (an EAGLE head's features): LayerInputs() [rows, layers.size() * hidden],
  // valid until the next pass; layer num_layers() is the final normed state. False when the runner
  // cannot (a cache spread over ranks).
  virtual bool CaptureLayerInputs(std::vector<int32_t> layers) {
    (void)layers;
    return false;
  }
  virtual const float* LayerInputs() const { return nullptr; }
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
//
// KV cache groups: when window_group is set and the model (or shard) has sliding-window
// layers, those keep their K/V in a window group sized for max_batch_size sequences' windows
// plus one step's tokens (engine/scheduler.h), never more blocks
// than those layers would have had in group 0; group 0 (the full-attention layers) takes the
// rest of the budget. max_tokens_in_paged_kv_cache caps group 0 (the window group is bounded
// by its own formula).
struct KvCacheSizes {
  int32_t num_blocks = 0;
  int32_t num_window_blocks = 0;  // 0: no window group
};
KvCacheSizes ComputeKvCacheSizes(const Model& model, const ExecutorConfig& config,
                                 double memory_share = 1.0, bool window_group = true);
// The paged pool of a model or of its shard: its layers, its K/V heads; with
// num_window_blocks > 0 its sliding-window layers go to the window group.
KvStorageConfig KvStorageConfigFor(const Model& model, const KvCacheSizes& sizes,
                                   const ExecutorConfig& config);

class LocalModelRunner : public ModelRunner {
 public:
  // shared_pool: run on another runner's compute threads (a draft model beside its target:
  // two pools would fight over the same cores); null: own config.num_threads threads.
  // kv_window_group: keep the sliding-window layers' K/V in a window group (a draft model
  // keeps one table).
  LocalModelRunner(const Model& model, const ExecutorConfig& config,
                   ThreadPool* shared_pool = nullptr, bool kv_window_group = true);
  int32_t vocab_size() const override { return model_.config().vocab_size; }
  int32_t context_length() const override { return model_.config().context_length; }
  int32_t num_kv_blocks() const override { return storage_.config().num_blocks; }
  int32_t num_window_kv_blocks() const override { return storage_.config().num_window_blocks; }
  int32_t kv_window() const override { return view_.window; }
  int32_t num_layers() const override { return model_.config().num_layers; }
  int32_t hidden_size() const override { return model_.config().hidden_size; }
  Status Forward(const BatchPlan& plan, float* logits) override;
  void CopyBlockPrefix(int32_t group, int32_t src, int32_t dst, int32_t num_tokens) override;
  int64_t KvBlockBytes(int32_t group) const override {
    return KvStorage::BytesPerBlock(storage_.config(), group);
  }
  bool ExportBlock(int32_t group, int32_t block, uint8_t* out) const override {
    storage_.ExportBlock(group, block, out);
    return true;
  }
  bool ImportBlock(int32_t group, int32_t block, const uint8_t* in) override {
    storage_.ImportBlock(group, block, in);
    return true;
  }
  std::string KvLayoutFingerprint() const override;
  bool SupportsTreeDrafts() const override {
    return model_.config().sliding_window == 0 && view_.layer_group.empty();
  }
  void MoveKvSlots(const int32_t* block_table,
                   const std::vector<std::pair<int32_t, int32_t>>& moves) override;
  const float* OutputHidden() const override { return scratch_.h; }
  bool CaptureLayerInputs(std::vector<int32_t> layers) override;
  const float* LayerInputs() const override { return aux_layers_.empty() ? nullptr : aux_.data(); }
  ThreadPool* pool() override { return pool_; }

 private:
  const Model& model_;
  KvStorage storage_;
  KvCacheView view_;
  ForwardScratch scratch_;
  std::unique_ptr<ThreadPool> owned_pool_;
  ThreadPool* pool_;
  std::vector<int32_t> aux_layers_;  // CaptureLayerInputs
  std::vector<float> aux_;
};

}  // namespace inflight
