#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/kernels.h"

namespace inflight {

Status SamplingParams::Validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature))
    return InvalidArgumentError("temperature must be >= 0");
  if (top_k < 0) return InvalidArgumentError("top_k must be >= 0");
  if (!(top_p > 0.0f && top_p <= 1.0f)) return InvalidArgumentError("top_p must be in (0, 1]");
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return InvalidArgumentError("min_p must be in [0, 1]");
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty))
    return InvalidArgumentError("repetition_penalty must be > 0");
  if (!std::isfinite(presence_penalty) || !std::isfinite(frequency_penalty))
    return InvalidArgumentError("penalties must be finite");
  if (num_top_logprobs < 0 || num_top_logprobs > 100)
    return InvalidArgumentError("number of top log-probs must be in [0, 100]");
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0)
      return InvalidArgumentError("logit bias for a negative token id " + std::to_string(id));
    if (!std::isfinite(bias))
      return InvalidArgumentError("logit bias for token " + std::to_string(id) + " is not finite");
  }
  return OkStatus();
}

int32_t ArgMax(const float* x, int32_t n) {
  return static_cast<int32_t>(kernels::ActiveKernels().argmax(x, n));
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}

void Sampler::AddPromptTokens(const int32_t* ids, int64_t n) {
  if (params_.repetition_penalty == 1.0f) return;
  for (int64_t i = 0; i < n; ++i) prompt_counts_[ids[i]]++;
}

void Sampler::SetOutputTokens(const int32_t* ids, int64_t n) {
  output_counts_.clear();
  for (int64_t i = 0; i < n; ++i) output_counts_[ids[i]]++;
}

void TopLogProbs(const float* logits, int32_t vocab, float temperature, int32_t k,
                 std::vector<std::pair<int32_t, float>>* out) {
  out->clear();
  if (k <= 0 || vocab <= 0) return;
  const float inv_t = temperature > 0.0f ? 1.0f / temperature : 1.0f;
  const int32_t top = ArgMax(logits, vocab);
  const float mx = logits[top];
  if (mx == -std::numeric_limits<float>::infinity()) return;  // everything banned
  double sum = 0;
  for (int32_t i = 0; i < vocab; ++i)
    sum += std::exp(static_cast<double>((logits[i] - mx) * inv_t));
  const float log_z = static_cast<float>(std::log(sum));
  // A min-heap of the k best (value, id): better = larger value, then lower id.
  auto better = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  std::vector<std::pair<float, int32_t>> heap;
  heap.reserve(static_cast<size_t>(k) + 1);
  for (int32_t i = 0; i < vocab; ++i) {
    const float v = logits[i];
    if (v == -std::numeric_limits<float>::infinity()) continue;
    if (static_cast<int32_t>(heap.size()) < k) {
      heap.emplace_back(v, i);
      std::push_heap(heap.begin(), heap.end(), better);
    } else if (better({v, i}, heap.front())) {
      std::pop_heap(heap.begin(), heap.end(), better);
      heap.back() = {v, i};
      std::push_heap(heap.begin(), heap.end(), better);
    }
  }
  std::sort(heap.begin(), heap.end(), better);
  for (const auto& [v, id] : heap) out->emplace_back(id, (v - mx) * inv_t - log_z);
}

void Sampler::ApplyPenalties(float* logits, int32_t vocab) const {
  for (const auto& [id, bias] : params_.logit_bias) {
    if (id < vocab) logits[id] += bias;
  }
  if (params_.repetition_penalty != 1.0f) {
    auto penalise = [&](int32_t id) {
      if (id < 0 || id >= vocab) return;
      logits[id] = logits[id] > 0 ? logits[id] / params_.repetition_penalty
                                  : logits[id] * params_.repetition_penalty;
    };
    for (const auto& [id, count] : prompt_counts_) penalise(id);
    for (const auto& [id, count] : output_counts_) {
      if (!prompt_counts_.count(id)) penalise(id);
    }
  }
  if (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f) {
    for (const auto& [id, count] : output_counts_) {
      if (id < 0 || id >= vocab) continue;
      logits[id] -= params_.presence_penalty + params_.frequency_penalty * count;
    }
  }
}

SampledToken Sampler::SampleWithDraft(float* logits, int32_t vocab, int32_t draft,
                                      const float* draft_probs) {
  ApplyPenalties(logits, vocab);
  SampledToken out;
  out.id = params_.greedy() ? ArgMax(logits, vocab)
                            : Draw(logits, vocab, draft < vocab ? draft : -1, draft_probs);
  // Log-probabilities of the penalised distribution (one extra pass over the vocabulary).
  // The greedy pick is already the maximum; only a sampled token needs another pass.
  if (!params_.compute_logprobs && params_.num_top_logprobs == 0) {
    output_counts_[out.id]++;
    return out;
  }
  const float mx = logits[params_.greedy() ? out.id : ArgMax(logits, vocab)];
  const float log_z = mx + std::log(kernels::ActiveKernels().sum_exp(logits, vocab, mx));
  out.logprob = logits[out.id] - log_z;
  if (params_.num_top_logprobs > 0) {
    const int32_t n = std::min(params_.num_top_logprobs, vocab);
    candidates_.clear();
    for (int32_t i = 0; i < vocab; ++i) candidates_.emplace_back(logits[i], i);
    std::partial_sort(candidates_.begin(), candidates_.begin() + n, candidates_.end(),
                      [](const auto& a, const auto& b) {
                        return a.first > b.first || (a.first == b.first && a.second < b.second);
                      });
    for (int32_t i = 0; i < n; ++i)
      out.top_logprobs.emplace_back(candidates_[i].second, candidates_[i].first - log_z);
  }
  output_counts_[out.id]++;
  return out;
}

int32_t Sampler::Draw(const float* logits, int32_t vocab, int32_t draft, const float* draft_probs) {
  const float inv_t = 1.0f / params_.temperature;
  candidates_.clear();
  candidates_.reserve(vocab);
  for (int32_t i = 0; i < vocab; ++i) candidates_.emplace_back(logits[i] * inv_t, i);
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  size_t n = candidates_.size();
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < n) {
    n = params_.top_k;
    std::partial_sort(candidates_.begin(), candidates_.begin() + n, candidates_.end(), by_logit);
  } else if (params_.top_p < 1.0f || params_.min_p > 0.0f) {
    std::sort(candidates_.begin(), candidates_.end(), by_logit);
  } else {
    std::nth_element(candidates_.begin(), candidates_.begin(), candidates_.end(),
                     by_logit);  // max first
  }
  candidates_.resize(n);
  const float mx = candidates_[0].first;
  double total = 0;
  for (auto& c : candidates_) {
    c.first = std::exp(c.first - mx);
    total += c.first;
  }
  if (params_.min_p > 0.0f) {
    // candidates_[0] holds the largest probability (sorted above).
    const double floor = params_.min_p * candidates_[0].first;
    size_t keep = 1;
    while (keep < candidates_.size() && candidates_[keep].first >= floor) ++keep;
    candidates_.resize(keep);
    total = 0;
    for (auto& c : candidates_) total += c.first;
  }
  if (params_.top_p < 1.0f) {
    double cum = 0;
    size_t keep = 0;
    while (keep < candidates_.size()) {
      cum += candidates_[keep].first;
      ++keep;
      if (cum >= params_.top_p * total) break;
    }
    candidates_.resize(keep);
    total = cum;
  }
  if (draft >= 0 && draft_probs != nullptr) {
    double draft_weight = 0;
    for (const auto& c : candidates_) {
      if (c.second == draft) draft_weight = c.first;
    }
    const double p = draft_weight / total, q = draft_probs[draft];
    // Keep the draft with probability min(1, p / q) (q = 0: it was not drawn from q at all;
    // keep it as p allows).
    if (p > 0 && (q <= 0 || std::uniform_real_distribution<double>(0.0, 1.0)(rng_) * q < p))
      return draft;
    // Otherwise from the residual max(0, p - q), renormalised.
    double residual = 0;
    for (const auto& c : candidates_)
      residual += std::max(0.0, c.first / total - static_cast<double>(draft_probs[c.second]));
    if (residual > 0) {
      double r = std::uniform_real_distribution<double>(0.0, residual)(rng_);
      int32_t last = -1;
      for (const auto& c : candidates_) {
        const double w =
            std::max(0.0, c.first / total - static_cast<double>(draft_probs[c.second]));
        if (w <= 0) continue;
        last = c.second;
        r -= w;
        if (r <= 0) return c.second;
      }
      return last;
    }
    draft = -1;  // p == q where p > 0: draw from p
  }
  if (draft >= 0) {
    double draft_weight = 0;
    for (const auto& c : candidates_) {
      if (c.second == draft) draft_weight = c.first;
    }
    // Accept with probability p(draft); otherwise draw from the rest, renormalised:
    // P(x) = p(x) for the draft and (1 - p(draft)) * p(x) / (1 - p(draft)) for every other x.
    if (std::uniform_real_distribution<double>(0.0, total)(rng_) < draft_weight) return draft;
    const double rest = total - draft_weight;
    if (rest <= 0) return draft;
    double r = std::uniform_real_distribution<double>(0.0, rest)(rng_);
    int32_t last = -1;
    for (const auto& c : candidates_) {
      if (c.second == draft) continue;
      last = c.second;
      r -= c.first;
      if (r <= 0) return c.second;
    }
    return last;
  }
  std::uniform_real_distribution<double> uniform(0.0, total);
  double r = uniform(rng_);
  for (const auto& c : candidates_) {
    r -= c.first;
    if (r <= 0) return c.second;
  }
  return candidates_.back().second;
}

}  // namespace inflight
