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
  // Experts of this rank's EP group split like dense FFNs over its MoE-TP ranks; the other
  // groups' experts are dropped before any page of them is read (the router stays whole: every
  // rank routes alike). Biases stay whole: the block indexes them by expert and range.
  for (auto* experts : {&l.expert_gate, &l.expert_up, &l.expert_down}) {
    const RowRange rows = experts == &l.expert_down ? s.expert_hidden : s.expert_ffn;
    for (size_t e = 0; e < experts->size(); ++e) {
      TensorView& w = (*experts)[e];
      const bool mine =
          static_cast<int32_t>(e) >= s.expert_begin && static_cast<int32_t>(e) < s.expert_end;
      w = mine ? SliceRows(w, rows) : TensorView{};
    }
  }
  l.shared_gate = SliceRows(l.shared_gate, s.shared_ffn);
  l.shared_up = SliceRows(l.shared_up, s.shared_ffn);
  l.shared_down = SliceRows(l.shared_down, s.hidden);
}

// The EP groups, their experts and this rank's part of them (ShardLayout's expert fields).
Status ResolveExperts(const ModelConfig& c, const ModelShard& shard, ShardLayout* s) {
  const int32_t ep = shard.moe_ep_size, tp = shard.tp_size;
  if (ep < 1 || tp % ep != 0) {
    return InvalidArgumentError("moe_ep_size " + std::to_string(ep) +
                                " must divide tensor_parallel_size " + std::to_string(tp));
  }
  if (ep > 1 && c.num_experts == 0) {
    return InvalidArgumentError("moe_ep_size " + std::to_string(ep) +
                                " needs a mixture-of-experts model; this one has no experts");
  }
  if (ep > 1 && ep > c.num_experts) {
    return InvalidArgumentError("moe_ep_size " + std::to_string(ep) + " exceeds the model's " +
                                std::to_string(c.num_experts) + " experts");
  }
  s->moe_ep_size = ep, s->moe_tp_size = tp / ep;
  s->moe_ep_rank = shard.tp_rank % ep, s->moe_tp_rank = shard.tp_rank / ep;
  const int32_t E = std::max(c.num_experts, 1);
  for (int32_t g = 0; g <= ep; ++g)
    s->ep_expert_bounds.push_back(g == ep ? E : static_cast<int32_t>(SplitRows(E, ep, g, 1).begin));
  s->expert_begin = s->ep_expert_bounds[s->moe_ep_rank];
  s->expert_end = s->ep_expert_bounds[s->moe_ep_rank + 1];
  for (int32_t m = 0; m < s->moe_tp_size; ++m) {
    s->expert_ffn_sizes.push_back(SplitRows(c.expert_ffn_size, s->moe_tp_size, m).size());
    s->expert_hidden_sizes.push_back(SplitRows(c.hidden_size, s->moe_tp_size, m).size());
  }
  s->expert_ffn = SplitRows(c.expert_ffn_size, s->moe_tp_size, s->moe_tp_rank);
  s->expert_hidden = SplitRows(c.hidden_size, s->moe_tp_size, s->moe_tp_rank);
  return OkStatus();
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
  // More ranks than K/V heads (MQA, or GQA at a wide TP): each K/V head is held by the
  // tp / kv ranks whose query heads read it, computed alike on each (as the reference does).
  const bool replicate_kv = c.num_kv_heads > 0 && c.num_kv_heads < tp && tp % c.num_kv_heads == 0;
  if (c.num_heads % tp != 0 || (c.num_kv_heads % tp != 0 && !replicate_kv)) {
    return InvalidArgumentError("tensor_parallel_size " + std::to_string(tp) +
                                " must divide the model's " + std::to_string(c.num_heads) +
                                " query heads, and divide or be a multiple of its " +
                                std::to_string(c.num_kv_heads) + " K/V heads");
  }
  s = ShardLayout{};
  s.shard = shard;
  s.layer_begin = static_cast<int32_t>(layers.begin),
  s.layer_end = static_cast<int32_t>(layers.end);
  s.num_heads = c.num_heads / tp, s.head_begin = rank * s.num_heads;
  if (replicate_kv) {
    s.num_kv_heads = 1, s.kv_head_begin = rank / (tp / c.num_kv_heads);
  } else {
    s.num_kv_heads = c.num_kv_heads / tp, s.kv_head_begin = rank * s.num_kv_heads;
  }
  for (int32_t r = 0; r < tp; ++r) {
    s.ffn_sizes.push_back(SplitRows(c.ffn_size, tp, r).size());
    s.hidden_sizes.push_back(SplitRows(c.hidden_size, tp, r).size());
    s.vocab_sizes.push_back(SplitRows(c.vocab_size, tp, r).size());
  }
  const int64_t shared = c.shared_expert_ffn_size > 0 ? c.shared_expert_ffn_size : c.ffn_size;
  for (int32_t r = 0; r < tp; ++r) s.shared_ffn_sizes.push_back(SplitRows(shared, tp, r).size());
  s.shared_ffn = SplitRows(shared, tp, rank);
  RETURN_IF_ERROR(ResolveExperts(c, shard, &s));
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
