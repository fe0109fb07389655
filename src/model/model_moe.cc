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

Status Model::MixtureOfExperts(int layer, ForwardScratch& s, ThreadPool& pool, int64_t T,
                               TensorParallelGroup* tp) const {
  const ModelConfig& c = config_;
  const ShardLayout& sh = shard_;
  const LayerWeights& lw = weights_.layers[layer - sh.layer_begin];
  const int E = c.num_experts, K = c.experts_per_token;
  const int64_t H = c.hidden_size, F = c.expert_ffn_size;
  // This rank's columns of every expert's FFN and its rows of their outputs (TP splits each
  // expert like a dense FFN: whole dot products per rank, gathered).
  const RowRange fr = sh.expert_ffn;
  const int64_t lf = fr.size(), lh = static_cast<int64_t>(sh.hidden.size());

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

  // 3. Each chosen expert over its rows: gate/up, activation (biases first where present).
  float* gate = Reserve(s.moe_gate, P * lf);
  float* up = Reserve(s.moe_up, P * lf);
  std::vector<kernels::MatMulSegment>& segments = s.moe_segments;
  segments.clear();
  for (int e = 0; e < E; ++e) {
    const int64_t r0 = first[e], n = first[e + 1] - first[e];
    if (n == 0) continue;
    segments.push_back({&lw.expert_gate[e], r0, n, gate + r0 * lf});
    segments.push_back({&lw.expert_up[e], r0, n, up + r0 * lf});
  }
  kernels::MatMulSegments(segments.data(), static_cast<int>(segments.size()), s.h, T, pool,
                          s.matmul, src_row, P);
  for (int e = 0; e < E; ++e) {
    const int64_t r0 = first[e], n = first[e + 1] - first[e];
    if (n == 0) continue;
    if (!lw.expert_gate_bias.empty())
      kernels::AddBias(gate + r0 * lf, lw.expert_gate_bias.data() + e * F + fr.begin, n, lf);
    if (!lw.expert_up_bias.empty())
      kernels::AddBias(up + r0 * lf, lw.expert_up_bias.data() + e * F + fr.begin, n, lf);
  }
  pool.ParallelFor(P, 4, [&](int64_t p0, int64_t p1) {
    kernels::GatedActivation(c.ffn_activation, gate + p0 * lf, up + p0 * lf, (p1 - p0) * lf);
  });
  const float* act = gate;
  if (tp != nullptr) {
    float* all = Reserve(s.moe_act, P * F);
    RETURN_IF_ERROR(GatherColumns(tp, gate, P, sh.expert_ffn_sizes, all, s));
    act = all;
  }

  // 4. Down projections, then each token's k outputs weighted and summed in slot order.
  float* down = Reserve(s.moe_out, P * lh);
  segments.clear();
  for (int e = 0; e < E; ++e) {
    const int64_t r0 = first[e], n = first[e + 1] - first[e];
    if (n > 0) segments.push_back({&lw.expert_down[e], r0, n, down + r0 * lh});
  }
  kernels::MatMulSegments(segments.data(), static_cast<int>(segments.size()), act, P, pool,
                          s.matmul);
  for (int e = 0; e < E; ++e) {
    const int64_t r0 = first[e], n = first[e + 1] - first[e];
    if (n == 0) continue;
    if (!lw.expert_down_bias.empty()) {
      kernels::AddBias(down + r0 * lh, lw.expert_down_bias.data() + e * H + sh.hidden.begin, n, lh);
    }
  }
  pool.ParallelFor(T, 4, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* out = s.out + t * lh;
      std::fill(out, out + lh, 0.0f);
      for (int k = 0; k < K; ++k) {
        const float w = weight[t * K + k];
        const float* row = down + static_cast<int64_t>(pair_row[t * K + k]) * lh;
        for (int64_t j = 0; j < lh; ++j) out[j] += w * row[j];
      }
    }
  });

  // 5. Qwen2-MoE's shared expert: a dense FFN on every token, weighted by sigmoid(g . h).
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
