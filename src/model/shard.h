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
  // Expert parallelism inside the TP group (TensorRT-LLM's moe_ep_size): the experts split
  // over moe_ep_size groups of moe_tp_size = tp_size / moe_ep_size ranks, each group holding
  // its experts whole or split by columns over its ranks. 1: every rank holds its columns of
  // every expert (moe_tp_size = tp_size).
  int32_t moe_ep_size = 1;
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
  RowRange shared_ffn;                          // columns of the shared expert's FFN
  // Per TP rank, the sizes of the split dimensions (all-gather layouts).
  std::vector<int64_t> ffn_sizes, hidden_sizes, vocab_sizes, shared_ffn_sizes;
  // Experts: TP rank r is in EP group r % moe_ep_size, MoE-TP rank r / moe_ep_size (the
  // reference's numbering). The group holds experts [expert_begin, expert_end); this rank
  // their FFN columns `expert_ffn` and the rows `expert_hidden` of their down projections.
  int32_t moe_ep_size = 1, moe_ep_rank = 0, moe_tp_size = 1, moe_tp_rank = 0;
  int32_t expert_begin = 0, expert_end = 0;
  RowRange expert_ffn, expert_hidden;
  // Per EP group: its experts' first id (moe_ep_size + 1 bounds). Per MoE-TP rank: the sizes
  // of expert_ffn and expert_hidden.
  std::vector<int32_t> ep_expert_bounds;
  std::vector<int64_t> expert_ffn_sizes, expert_hidden_sizes;
  int32_t TpRankOf(int32_t ep_rank, int32_t moe_tp_rank) const {
    return moe_tp_rank * moe_ep_size + ep_rank;
  }

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
