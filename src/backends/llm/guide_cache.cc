#include "backends/llm/guide_cache.h"

#include "tokenizer/tokenizer.h"

namespace inflight::serving {

StatusOr<std::shared_ptr<const TokenConstraint>> GuideCache::Get(const std::string& type,
                                                                 const std::string& guide) {
  auto kind = guided::GuideTypeFromName(type);
  if (!kind.ok()) return kind.status();
  if (guide.size() > kMaxGuideBytes) {
    return InvalidArgumentError("guided_decoding_guide holds " + std::to_string(guide.size()) +
                                " bytes; at most " + std::to_string(kMaxGuideBytes) + " are taken");
  }
  if (*kind != guided::GuideType::kJson && guide.empty()) {
    return InvalidArgumentError("guided_decoding_guide is empty; guide type '" + type +
                                "' needs one");
  }
  const std::string key = type + '\0' + (*kind == guided::GuideType::kJson ? std::string() : guide);
  std::shared_ptr<const guided::GuideVocabulary> vocab;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = guides_.find(key);
    if (it != guides_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.second);
      return std::shared_ptr<const TokenConstraint>(it->second.first->NewConstraint());
    }
    if (!vocab_) vocab_ = guided::GuideVocabulary::FromTokenizer(*tokenizer_);
    vocab = vocab_;
  }
  // Compiled outside the lock: a large schema must not hold up requests with warm guides.
  auto compiled = guided::Guide::Compile(*kind, guide, vocab);
  if (!compiled.ok()) return compiled.status();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = guides_.find(key);
  if (it == guides_.end()) {
    lru_.push_front(key);
    it = guides_.emplace(key, std::make_pair(*compiled, lru_.begin())).first;
    if (guides_.size() > kCapacity) {
      guides_.erase(lru_.back());
      lru_.pop_back();
    }
  }
  return std::shared_ptr<const TokenConstraint>(it->second.first->NewConstraint());
}

}  // namespace inflight::serving
