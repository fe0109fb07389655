// The mixture-of-experts block: route each token to its top-k experts, run each chosen expert
// once over all the step's tokens routed to it (its weights are read once per step however
// many rows use it), and add the k outputs per token in the token's own order of experts, so a
// row's result never depends on which other rows share its experts.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "base/thread_pool.h"
#include "kernels/ops.h"
#include "model/model.h"

namespace inflight {
namespace {

template <typename T>
T* Reserve(std::vector<T>& v, int64_t n) {
  if (v.size() < static_cast<size_t>(n))
    v.resize(std::max<size_t>(static_cast<size_t>(n), 2 * v.size()));
  return v.data();
}

// The k best experts of one token (largest first, the lower index on ties) and their weights.
void Route(const ModelConfig& c, float* logits, int32_t* choice, float* weight) {
  const int E = c.num_experts, K = c.experts_per_token;
  // Selection scores: probabilities (softmax / sigmoid) or the raw logits (gpt-oss).
  if (c.expert_gating == ExpertGating::kSoftmax) {
    kernels::Softmax(logits, E);
  } else if (c.expert_gating == ExpertGating::kSigmoid) {
    for (int e = 0; e < E; ++e) logits[e] = 1.0f / (1.0f + std::exp(-logits[e]));
  }
  for (int k = 0; k < K; ++k) {
    int best = -1;
    for (int e = 0; e < E; ++e) {
      if (std::find(choice, choice + k, e) != choice + k) continue;
      // NaN never wins: a corrupt router picks the lowest free experts rather than crashing.
      if (best < 0 || logits[e] > logits[best]) best = e;
    }
    choice[k] = best;
    weight[k] = logits[best];
  }
  if (c.expert_gating == ExpertGating::kSoftmaxSelected) kernels::Softmax(weight, K);
  if (c.normalize_expert_weights) {
    float sum = 0;
    for (int k = 0; k < K; ++k) sum += weight[k];
    sum = std::max(sum, 6.103515625e-5f);  // llama.cpp's clamp (smallest normal F16)
    for (int k = 0; k < K; ++k) weight[k] /= sum;
  }
}

}  // namespace

// Expert parallelism's exchange. Every rank knows every EP group's pair rows (the routing is
// the same on all), so each rank's block, [pairs of its group, columns[its MoE-TP rank]], has a
// size known everywhere: one padded all-gather moves them all. `all` [rows, sum(columns)] gets
// the blocks side by side: those of this rank's EP group (rows: the group's pairs), or of every
// rank (rows: all the step's pairs).
Status Model::GatherExpertBlocks(TensorParallelGroup* tp, const float* mine,
                                 const std::vector<int32_t>& first,
                                 const std::vector<int64_t>& columns, bool every_group, float* all,
                                 ForwardScratch& s) const {
  const ShardLayout& sh = shard_;
  const int32_t ranks = sh.tp_size();
  auto group_rows = [&](int32_t g) {
    return std::pair<int64_t, int64_t>(first[sh.ep_expert_bounds[g]],
                                       first[sh.ep_expert_bounds[g + 1]]);
  };
  int64_t widest = 1, width = 0;
  for (int32_t r = 0; r < ranks; ++r) {
    const auto [r0, r1] = group_rows(r % sh.moe_ep_size);
    widest = std::max(widest, (r1 - r0) * columns[r / sh.moe_ep_size]);
  }
  for (int64_t n : columns) width += n;
  float* send = Reserve(s.moe_exchange, (ranks + 1) * widest);
  const auto [my0, my1] = group_rows(sh.moe_ep_rank);
  const int64_t mine_size = (my1 - my0) * columns[sh.moe_tp_rank];
  if (mine_size > 0) std::memcpy(send, mine, mine_size * sizeof(float));
  RETURN_IF_ERROR(tp->AllGather(send, widest, send + widest));
  const int64_t base = every_group ? 0 : my0;
  for (int32_t r = 0; r < ranks; ++r) {
    const int32_t g = r % sh.moe_ep_size, m = r / sh.moe_ep_size;
    if (!every_group && g != sh.moe_ep_rank) continue;
    const auto [r0, r1] = group_rows(g);
    const int64_t n = columns[m];
    int64_t column = 0;
    for (int32_t q = 0; q < m; ++q) column += columns[q];
    const float* block = send + (r + 1) * widest;
    for (int64_t p = 0; p < r1 - r0; ++p)
      std::memcpy(all + (r0 - base + p) * width + column, block + p * n, n * sizeof(float));
  }
  return OkStatus();
}

Status Model::MixtureOfExperts(int layer, ForwardScratch& s, ThreadPool& pool, int64_t T,
                               TensorParallelGroup* tp) const {
  const ModelConfig& c = config_;
  const ShardLayout& sh = shard_;
  const LayerWeights& lw = weights_.layers[layer - sh.layer_begin];
  const int E = c.num_experts, K = c.experts_per_token;
  const int64_t H = c.hidden_size, F = c.expert_ffn_size;
  // This rank's columns of its experts' FFNs and its rows of their outputs (MoE-TP splits each
  // expert like a dense FFN: whole dot products per rank, gathered).
  const RowRange fr = sh.expert_ffn, hr = sh.expert_hidden;
  const int64_t lf = fr.size(), lh = static_cast<int64_t>(sh.hidden.size()), ld = hr.size();
  const bool ep = sh.moe_ep_size > 1;

  // 1. Routing (every rank alike: the router is not split).
  float* logits = Reserve(s.moe_logits, T * E);
  kernels::MatMul(lw.router, s.h, T, logits, pool, s.matmul);
  if (!lw.router_bias.empty()) kernels::AddBias(logits, lw.router_bias.data(), T, E);
  int32_t* choice = Reserve(s.moe_choice, T * K);
  float* weight = Reserve(s.moe_weight, T * K);
  for (int64_t t = 0; t < T; ++t) Route(c, logits + t * E, choice + t * K, weight + t * K);

  // 2. The (token, slot) pairs grouped by expert, tokens in order within an expert.
  // Scratch vectors keep their capacity: no allocation per step once warm.
  std::vector<int32_t>& count = s.moe_count;
  count.assign(E + 1, 0);
  for (int64_t i = 0; i < T * K; ++i) ++count[choice[i] + 1];
  std::vector<int32_t>& first = s.moe_first;
  first.assign(count.begin(), count.end());
  std::partial_sum(first.begin(), first.end(), first.begin());
  if (s.moe_experts_used.size() < static_cast<size_t>(c.num_layers))
    s.moe_experts_used.resize(c.num_layers);
  s.moe_experts_used[layer] = static_cast<int32_t>(
      std::count_if(count.begin() + 1, count.end(), [](int32_t n) { return n > 0; }));
  const int64_t P = T * K;
  int32_t* pair_row = Reserve(s.moe_pair_row, P);
  {
    std::vector<int32_t>& next = s.moe_next;
    next.assign(first.begin(), first.end() - 1);
    for (int64_t i = 0; i < P; ++i) pair_row[i] = next[choice[i]]++;
  }
  // Row r of the experts' input is token src_row[r]: the kernels convert each token's row once
  // and gather the converted rows (no float copies, no converting a row k times).
  int32_t* src_row = Reserve(s.moe_src_row, P);
  for (int64_t i = 0; i < P; ++i) src_row[pair_row[i]] = static_cast<int32_t>(i / K);

  // 3. Each of this rank's chosen experts over its rows: gate/up, activation (biases first
  // where present). Under EP the group's experts [e0, e1) own pair rows [p0, p0 + PL), local
  // row r - p0 here; without EP that is every expert and every row.
  const int e0 = sh.expert_begin, e1 = sh.expert_end;
  const int64_t p0 = first[e0], PL = first[e1] - p0;
  float* gate = Reserve(s.moe_gate, PL * lf);
  float* up = Reserve(s.moe_up, PL * lf);
  std::vector<kernels::MatMulSegment>& segments = s.moe_segments;
  segments.clear();
  for (int e = e0; e < e1; ++e) {
    const int64_t r0 = first[e], n = first[e + 1] - first[e];
    if (n == 0) continue;
    segments.push_back({&lw.expert_gate[e], r0 - p0, n, gate + (r0 - p0) * lf});
    segments.push_back({&lw.expert_up[e], r0 - p0, n, up + (r0 - p0) * lf});
  }
  kernels::MatMulSegments(segments.data(), static_cast<int>(segments.size()), s.h, T, pool,
                          s.matmul, src_row + p0, PL);
  for (int e = e0; e < e1; ++e) {
    const int64_t r0 = first[e] - p0, n = first[e + 1] - first[e];
    if (n == 0) continue;
    if (!lw.expert_gate_bias.empty())
      kernels::AddBias(gate + r0 * lf, lw.expert_gate_bias.data() + e * F + fr.begin, n, lf);
    if (!lw.expert_up_bias.empty())
      kernels::AddBias(up + r0 * lf, lw.expert_up_bias.data() + e * F + fr.begin, n, lf);
  }
  pool.ParallelFor(PL, 4, [&](int64_t q0, int64_t q1) {
    kernels::GatedActivation(c.ffn_activation, gate + q0 * lf, up + q0 * lf, (q1 - q0) * lf);
  });
  const float* act = gate;
  if (tp != nullptr && sh.moe_tp_size > 1) {
    float* all = Reserve(s.moe_act, PL * F);
    if (ep) {
      RETURN_IF_ERROR(GatherExpertBlocks(tp, gate, first, sh.expert_ffn_sizes, false, all, s));
    } else {
      RETURN_IF_ERROR(GatherColumns(tp, gate, P, sh.expert_ffn_sizes, all, s));
    }
    act = all;
  }

  // 4. Down projections (this rank's rows `hr` of its experts' outputs).
  float* down = Reserve(s.moe_out, PL * ld);
  segments.clear();
  for (int e = e0; e < e1; ++e) {
    const int64_t r0 = first[e] - p0, n = first[e + 1] - first[e];
    if (n > 0) segments.push_back({&lw.expert_down[e], r0, n, down + r0 * ld});
  }
  kernels::MatMulSegments(segments.data(), static_cast<int>(segments.size()), act, PL, pool,
                          s.matmul);
  for (int e = e0; e < e1; ++e) {
    const int64_t r0 = first[e] - p0, n = first[e + 1] - first[e];
    if (n == 0) continue;
    if (!lw.expert_down_bias.empty())
      kernels::AddBias(down + r0 * ld, lw.expert_down_bias.data() + e * H + hr.begin, n, ld);
  }
  // Under EP every rank takes every pair's outputs (whole rows, each computed by one rank):
  // rows of `all` are the expert-sorted pairs, columns the hidden size, and this rank then
  // sums its hidden columns. Without EP `down` already holds them (hr is this rank's hidden).
  const float* outputs = down;
  int64_t stride = ld, column0 = 0;
  if (ep) {
    float* all = Reserve(s.moe_act, P * H);
    RETURN_IF_ERROR(GatherExpertBlocks(tp, down, first, sh.expert_hidden_sizes, true, all, s));
    outputs = all, stride = H, column0 = sh.hidden.begin;
  }

  // 5. Each token's k outputs weighted and summed in slot order.
  pool.ParallelFor(T, 4, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* out = s.out + t * lh;
      std::fill(out, out + lh, 0.0f);
      for (int k = 0; k < K; ++k) {
        const float w = weight[t * K + k];
        const float* row = outputs + static_cast<int64_t>(pair_row[t * K + k]) * stride + column0;
        for (int64_t j = 0; j < lh; ++j) out[j] += w * row[j];
      }
    }
  });

  // 6. Qwen2-MoE's shared expert: a dense FFN on every token, weighted by sigmoid(g . h).
  if (!lw.shared_up.empty()) {
    const int64_t S = lw.shared_up.rows;
    float* sg = Reserve(s.moe_gate, T * S);
    float* su = Reserve(s.moe_up, T * S);
    const kernels::MatMulTarget targets[] = {{&lw.shared_gate, sg}, {&lw.shared_up, su}};
    kernels::MatMulGroup(targets, 2, s.h, T, pool, s.matmul);
    kernels::GatedActivation(c.ffn_activation, sg, su, T * S);
    const float* shared_in = sg;
    if (tp != nullptr) {
      int64_t total = 0;
      for (int64_t n : sh.shared_ffn_sizes) total += n;
      float* all = Reserve(s.moe_act, T * total);
      RETURN_IF_ERROR(GatherColumns(tp, sg, T, sh.shared_ffn_sizes, all, s));
      shared_in = all;
    }
    float* shared_out = Reserve(s.moe_out, T * lh);
    kernels::MatMul(lw.shared_down, shared_in, T, shared_out, pool, s.matmul);
    for (int64_t t = 0; t < T; ++t) {
      float g = 1.0f;
      if (!lw.shared_expert_gate.empty()) {
        float dot = 0;
        for (int64_t j = 0; j < H; ++j) dot += lw.shared_expert_gate[j] * s.h[t * H + j];
        g = 1.0f / (1.0f + std::exp(-dot));
      }
      for (int64_t j = 0; j < lh; ++j) s.out[t * lh + j] += g * shared_out[t * lh + j];
    }
  }
  return OkStatus();
}

}  // namespace inflight
