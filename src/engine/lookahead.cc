#include "engine/lookahead.h"

#include <algorithm>

namespace inflight {

Status LookaheadConfig::Validate(const std::string& prefix) const {
  if (window < 1) return InvalidArgumentError(prefix + "window_size must be >= 1");
  if (ngram < 2) return InvalidArgumentError(prefix + "ngram_size must be >= 2");
  if (verification_set < 1)
    return InvalidArgumentError(prefix + "verification_set_size must be >= 1");
  // Each factor is bounded before the product is taken.
  if (window > kMaxLookaheadDrafts || ngram > kMaxLookaheadDrafts + 1 ||
      verification_set > kMaxLookaheadDrafts || MaxDrafts() > kMaxLookaheadDrafts) {
    return InvalidArgumentError(prefix + "window_size, " + prefix + "ngram_size and " + prefix +
                                "verification_set_size make a tree of (window + verification "
                                "set) * (ngram - 1) drafts; at most " +
                                std::to_string(kMaxLookaheadDrafts));
  }
  return OkStatus();
}

Status LookaheadConfig::ValidateWithin(const LookaheadConfig& model,
                                       const std::string& prefix) const {
  RETURN_IF_ERROR(Validate(prefix));
  auto over = [&](const char* field, int32_t got, int32_t most) {
    return InvalidArgumentError(prefix + field + " " + std::to_string(got) +
                                " exceeds the model's " + std::to_string(most));
  };
  if (window > model.window) return over("window_size", window, model.window);
  if (ngram > model.ngram) return over("ngram_size", ngram, model.ngram);
  if (verification_set > model.verification_set)
    return over("verification_set_size", verification_set, model.verification_set);
  return OkStatus();
}

LookaheadDecoder::LookaheadDecoder(const LookaheadConfig& config, uint64_t seed)
    : config_(config), rng_(seed * 0x9E3779B97F4A7C15ULL + 1) {}

void LookaheadDecoder::AddNgram(const int32_t* ngram) {
  const size_t len = static_cast<size_t>(config_.ngram - 1);
  std::vector<int32_t>& list = pool_[ngram[0]];
  const int32_t* followers = ngram + 1;
  // Already there: it moves to the front (newest first); else it goes in front and the
  // oldest beyond G drops out.
  for (size_t at = 0; at < list.size(); at += len) {
    if (std::equal(followers, followers + len, list.begin() + static_cast<std::ptrdiff_t>(at))) {
      std::rotate(list.begin(), list.begin() + static_cast<std::ptrdiff_t>(at),
                  list.begin() + static_cast<std::ptrdiff_t>(at + len));
      return;
    }
  }
  list.insert(list.begin(), followers, followers + len);
  if (list.size() > len * static_cast<size_t>(config_.verification_set))
    list.resize(len * static_cast<size_t>(config_.verification_set));
}

void LookaheadDecoder::Observe(const std::vector<int32_t>& tokens) {
  const int64_t n = config_.ngram, size = static_cast<int64_t>(tokens.size());
  for (int64_t end = std::max(observed_, n - 1); end < size; ++end)
    AddNgram(tokens.data() + end - n + 1);
  observed_ = std::max(observed_, size);
}

void LookaheadDecoder::Propose(const std::vector<int32_t>& tokens, bool with_window,
                               std::vector<int32_t>* draft, std::vector<int32_t>* parent) {
  draft->clear();
  parent->clear();
  window_in_step_ = false;
  if (tokens.empty()) return;
  const int32_t len = config_.ngram - 1;
  // The verification branch: the pool's n-grams after the last token, merged into a trie.
  if (auto it = pool_.find(tokens.back()); it != pool_.end()) {
    const std::vector<int32_t>& list = it->second;
    for (size_t at = 0; at < list.size(); at += static_cast<size_t>(len)) {
      int32_t node = -1;
      for (int32_t k = 0; k < len; ++k) {
        const int32_t token = list[at + static_cast<size_t>(k)];
        int32_t child = -1;
        for (int32_t j = node + 1; j < static_cast<int32_t>(draft->size()); ++j) {
          if ((*parent)[j] == node && (*draft)[j] == token) {
            child = j;
            break;
          }
        }
        if (child < 0) {
          child = static_cast<int32_t>(draft->size());
          draft->push_back(token);
          parent->push_back(node);
        }
        node = child;
      }
    }
  }
  window_begin_ = static_cast<int32_t>(draft->size());
  if (!with_window) return;
  const int32_t w = config_.window;
  if (levels_.empty()) {
    // First guesses: tokens of the text so far, picked at random (as the reference seeds
    // them); a Jacobi step replaces a level per step.
    levels_.resize(static_cast<size_t>(len) * w);
    for (int32_t& t : levels_) {
      rng_ ^= rng_ << 13, rng_ ^= rng_ >> 7, rng_ ^= rng_ << 17;
      t = tokens[rng_ % tokens.size()];
    }
  }
  window_in_step_ = true;
  for (int32_t l = 0; l < len; ++l) {
    for (int32_t i = 0; i < w; ++i) {
      // Level 0 is a chain over the columns; a higher level sits on its column's level below.
      const int32_t p =
          l == 0 ? (i == 0 ? -1 : window_begin_ + i - 1) : window_begin_ + (l - 1) * w + i;
      draft->push_back(levels_[static_cast<size_t>(l) * w + i]);
      parent->push_back(p);
    }
  }
}

void LookaheadDecoder::Advance(const std::vector<int32_t>& argmax, int32_t num_run) {
  const int32_t w = config_.window, len = config_.ngram - 1;
  if (!window_in_step_ || num_run < window_begin_ + len * w ||
      static_cast<int32_t>(argmax.size()) < window_begin_ + len * w) {
    return;  // the window's branch did not run whole: it waits for the next step
  }
  const int32_t last = window_last_level();
  std::vector<int32_t> ngram(static_cast<size_t>(len) + 1);
  for (int32_t i = 0; i < w; ++i) {
    for (int32_t l = 0; l < len; ++l) ngram[l] = levels_[static_cast<size_t>(l) * w + i];
    ngram[len] = argmax[last + i];
    AddNgram(ngram.data());
  }
  // Each level moves down one; the outputs become the top level.
  std::copy(levels_.begin() + w, levels_.end(), levels_.begin());
  for (int32_t i = 0; i < w; ++i) levels_[static_cast<size_t>(len - 1) * w + i] = argmax[last + i];
  window_in_step_ = false;
}

int64_t LookaheadDecoder::pool_size() const {
  int64_t n = 0;
  for (const auto& [key, list] : pool_)
    n += static_cast<int64_t>(list.size()) / (config_.ngram - 1);
  return n;
}

}  // namespace inflight
