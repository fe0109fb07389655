// What part of a model one process computes under tensor parallelism (TP: heads, FFN columns,
// hidden rows and vocabulary rows split over the ranks of a group) and pipeline parallelism
// (PP: a contiguous range of layers per stage), and the one collective the forward pass needs
// from its TP group. The model never sees MPI: src/parallel implements TensorParallelGroup.
//
// Every matrix is split by output rows only, never along its reduction dimension: a rank
// computes whole dot products for its rows and the group all-gathers the pieces. Each output
// element is then computed by exactly the code and the arithmetic order of a single process,
// so TP outputs are bit-identical to TP=1 (a Megatron-style all-reduce of partial sums would
// change the summation order and round differently).
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"

namespace inflight {

// Which shard to load (ModelLoadOptions).
struct ModelShard {
  int32_t tp_rank = 0;
  int32_t tp_size = 1;
  int32_t pp_rank = 0;  // this pipeline stage: layers split evenly over pp_size stages
  int32_t pp_size = 1;
  bool operator==(const ModelShard&) const = default;
};

// Rows [begin, end) of a matrix that one rank owns.
struct RowRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};

// Part `part` of `n` rows split over `parts` ranks, boundaries on multiples of `align` rows
// (the interleaved kernels' 16-row groups) while that keeps every part non-empty.
RowRange SplitRows(int64_t n, int32_t parts, int32_t part, int64_t align = 16);

// The resolved shard of a loaded model (Model::shard()).
struct ShardLayout {
  ModelShard shard;
  int32_t layer_begin = 0, layer_end = 0;       // global layer ids of this stage
  int32_t head_begin = 0, num_heads = 0;        // query heads of this rank
  int32_t kv_head_begin = 0, num_kv_heads = 0;  // K/V heads of this rank
  RowRange ffn;                                 // FFN columns (rows of gate/up)
  RowRange hidden;                              // rows of attn_output / ffn_down
  RowRange vocab;                               // rows of the embedding and output matrices
  RowRange expert_ffn;                          // columns of each expert's FFN
  RowRange shared_ffn;                          // columns of the shared expert's FFN
  // Per TP rank, the sizes of the split dimensions (all-gather layouts).
  std::vector<int64_t> ffn_sizes, hidden_sizes, vocab_sizes, expert_ffn_sizes, shared_ffn_sizes;

  int32_t tp_size() const { return shard.tp_size; }
  int32_t num_layers() const { return layer_end - layer_begin; }
  bool first_stage() const { return layer_begin == 0; }
  bool last_stage(int32_t model_layers) const { return layer_end == model_layers; }
};

// The ranks of one tensor-parallel group (one pipeline stage). Engine-thread only.
class TensorParallelGroup {
 public:
  virtual ~TensorParallelGroup() = default;
  virtual int32_t size() const = 0;
  virtual int32_t rank() const = 0;
  // recv[size() * n] = every rank's send[n], in rank order. An error (a peer failed or timed
  // out) leaves the group unusable.
  virtual Status AllGather(const float* send, int64_t n, float* recv) = 0;
  // The same, but only rank 0 receives (recv is ignored elsewhere).
  virtual Status Gather(const float* send, int64_t n, float* recv) = 0;
};

}  // namespace inflight
