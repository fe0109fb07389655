// Cutting a loaded model's weights down to one tensor/pipeline-parallel shard (model/shard.h).
// Runs before the weights are interleaved, while every matrix is still a row-major view of
// the file: a row range is then a pointer and a count, and the interleaved copy reads only the
// shard's own pages of the mapped file.
#include <algorithm>
#include <cstring>
#include <string>

#include "model/model.h"

namespace inflight {

RowRange SplitRows(int64_t n, int32_t parts, int32_t part, int64_t align) {
  if (parts <= 1) return {0, n};
  // Aligned boundaries when every part still gets rows; else an even split.
  const int64_t per_part = (n + parts - 1) / parts;
  const int64_t step = (per_part + align - 1) / align * align;
  if (step * (parts - 1) < n) {
    return {std::min<int64_t>(n, step * part),
            part == parts - 1 ? n : std::min<int64_t>(n, step * (part + 1))};
  }
  return {n * part / parts, n * (part + 1) / parts};
}

namespace {

TensorView SliceRows(const TensorView& w, RowRange r) {
  if (w.empty()) return w;
  return TensorView{w.row(r.begin), w.dtype, r.size(), w.cols};
}

std::vector<float> SliceVector(const std::vector<float>& v, RowRange r) {
  if (v.empty()) return v;
  return std::vector<float>(v.begin() + r.begin, v.begin() + r.end);
}

// Rows of several ranges of one matrix, stacked into a new owned matrix (GPT-2's fused QKV:
// this rank's q, k and v rows).
TensorView StackRows(const TensorView& w, const std::vector<RowRange>& ranges, Model* model) {
  int64_t rows = 0;
  for (const RowRange& r : ranges) rows += r.size();
  AlignedBuffer buffer;
  buffer.Resize(static_cast<size_t>(rows * w.row_bytes()));
  uint8_t* out = buffer.as<uint8_t>();
  for (const RowRange& r : ranges) {
    std::memcpy(out, w.row(r.begin), static_cast<size_t>(r.size() * w.row_bytes()));
    out += r.size() * w.row_bytes();
  }
  TensorView view{buffer.as<uint8_t>(), w.dtype, rows, w.cols};
  model->owned_.push_back(std::move(buffer));
  return view;
}

void CutLayer(const ModelConfig& c, const ShardLayout& s, LayerWeights& l, Model* model) {
  const int64_t hd = c.head_dim;
  const RowRange q{s.head_begin * hd, (s.head_begin + s.num_heads) * hd};
  const RowRange kv{s.kv_head_begin * hd, (s.kv_head_begin + s.num_kv_heads) * hd};
  if (!l.wqkv.empty()) {
    const int64_t qd = c.q_dim(), kvd = c.kv_dim();
    const std::vector<RowRange> parts = {
        q, {qd + kv.begin, qd + kv.end}, {qd + kvd + kv.begin, qd + kvd + kv.end}};
    l.wqkv = StackRows(l.wqkv, parts, model);
    if (!l.bqkv.empty()) {
      std::vector<float> b;
      for (const RowRange& r : parts)
        b.insert(b.end(), l.bqkv.begin() + r.begin, l.bqkv.begin() + r.end);
      l.bqkv = std::move(b);
    }
  }
  l.wq = SliceRows(l.wq, q), l.bq = SliceVector(l.bq, q);
  l.wk = SliceRows(l.wk, kv), l.bk = SliceVector(l.bk, kv);
  l.wv = SliceRows(l.wv, kv), l.bv = SliceVector(l.bv, kv);
  l.wo = SliceRows(l.wo, s.hidden), l.bo = SliceVector(l.bo, s.hidden);
  l.w_gate = SliceRows(l.w_gate, s.ffn);
  l.w_up = SliceRows(l.w_up, s.ffn), l.b_up = SliceVector(l.b_up, s.ffn);
  l.w_down = SliceRows(l.w_down, s.hidden), l.b_down = SliceVector(l.b_down, s.hidden);
  l.attn_sinks = SliceVector(l.attn_sinks, {s.head_begin, s.head_begin + s.num_heads});
  // Experts split like dense FFNs (the router stays whole: every rank routes alike). Biases
  // stay whole too: the block indexes them by expert and by this rank's ranges.
  for (TensorView& w : l.expert_gate) w = SliceRows(w, s.expert_ffn);
  for (TensorView& w : l.expert_up) w = SliceRows(w, s.expert_ffn);
  for (TensorView& w : l.expert_down) w = SliceRows(w, s.hidden);
  l.shared_gate = SliceRows(l.shared_gate, s.shared_ffn);
  l.shared_up = SliceRows(l.shared_up, s.shared_ffn);
  l.shared_down = SliceRows(l.shared_down, s.hidden);
}

}  // namespace

// Resolves options.shard against the config into model->shard_ and drops or slices the
// weights outside it. A whole model (tp_size 1, every layer) is left as it is.
Status CutToShard(const ModelShard& shard, Model* model) {
  const ModelConfig& c = model->config_;
  ShardLayout& s = model->shard_;
  const int32_t tp = shard.tp_size, rank = shard.tp_rank;
  if (tp < 1 || tp > 256 || rank < 0 || rank >= tp) {
    return InvalidArgumentError("tensor-parallel rank " + std::to_string(rank) + " of " +
                                std::to_string(tp) + " is not a valid shard");
  }
  if (shard.pp_size < 1 || shard.pp_size > c.num_layers || shard.pp_rank < 0 ||
      shard.pp_rank >= shard.pp_size) {
    return InvalidArgumentError(
        "pipeline stage " + std::to_string(shard.pp_rank) + " of " + std::to_string(shard.pp_size) +
        " is not a valid stage of a model with " + std::to_string(c.num_layers) + " layers");
  }
  const RowRange layers = SplitRows(c.num_layers, shard.pp_size, shard.pp_rank, /*align=*/1);
  if (c.num_heads % tp != 0 || c.num_kv_heads % tp != 0) {
    return InvalidArgumentError("tensor_parallel_size " + std::to_string(tp) +
                                " must divide the model's " + std::to_string(c.num_heads) +
                                " query heads and " + std::to_string(c.num_kv_heads) +
                                " K/V heads");
  }
  s = ShardLayout{};
  s.shard = shard;
  s.layer_begin = static_cast<int32_t>(layers.begin),
  s.layer_end = static_cast<int32_t>(layers.end);
  s.num_heads = c.num_heads / tp, s.head_begin = rank * s.num_heads;
  s.num_kv_heads = c.num_kv_heads / tp, s.kv_head_begin = rank * s.num_kv_heads;
  for (int32_t r = 0; r < tp; ++r) {
    s.ffn_sizes.push_back(SplitRows(c.ffn_size, tp, r).size());
    s.hidden_sizes.push_back(SplitRows(c.hidden_size, tp, r).size());
    s.vocab_sizes.push_back(SplitRows(c.vocab_size, tp, r).size());
  }
  const int64_t shared = c.shared_expert_ffn_size > 0 ? c.shared_expert_ffn_size : c.ffn_size;
  for (int32_t r = 0; r < tp; ++r) {
    s.expert_ffn_sizes.push_back(SplitRows(c.expert_ffn_size, tp, r).size());
    s.shared_ffn_sizes.push_back(SplitRows(shared, tp, r).size());
  }
  s.expert_ffn = SplitRows(c.expert_ffn_size, tp, rank);
  s.shared_ffn = SplitRows(shared, tp, rank);
  s.ffn = SplitRows(c.ffn_size, tp, rank);
  s.hidden = SplitRows(c.hidden_size, tp, rank);
  s.vocab = SplitRows(c.vocab_size, tp, rank);
  for (const auto* sizes : {&s.ffn_sizes, &s.hidden_sizes, &s.vocab_sizes,
                            c.num_experts > 0 ? &s.expert_ffn_sizes : &s.ffn_sizes}) {
    if (std::find(sizes->begin(), sizes->end(), 0) != sizes->end()) {
      return InvalidArgumentError("tensor_parallel_size " + std::to_string(tp) +
                                  " leaves a rank with no rows of the model");
    }
  }
  if (!model->sharded()) return OkStatus();

  ModelWeights& w = model->weights_;
  std::vector<LayerWeights> kept(std::make_move_iterator(w.layers.begin() + s.layer_begin),
                                 std::make_move_iterator(w.layers.begin() + s.layer_end));
  w.layers = std::move(kept);
  for (LayerWeights& l : w.layers) CutLayer(c, s, l, model);
  // The embedding is read by the first stage, the output head by the last.
  w.token_embedding = s.first_stage() ? SliceRows(w.token_embedding, s.vocab) : TensorView{};
  if (!s.first_stage()) w.position_embedding = TensorView{};
  w.output = s.last_stage(c.num_layers) ? SliceRows(w.output, s.vocab) : TensorView{};
  return OkStatus();
}

}  // namespace inflight
