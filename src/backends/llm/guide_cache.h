// Compiled guides (guided decoding) of one model, shared by its requests: an LRU cache keyed
// by (guide type, guide text), so a schema a client sends with every request is compiled once
// and its token masks stay warm. Thread-safe; serving threads compile, the engine only masks.
#pragma once

#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "base/status.h"
#include "guided/guide.h"
#include "sampling/token_constraint.h"

namespace inflight {
class Tokenizer;
}

namespace inflight::serving {

class GuideCache {
 public:
  static constexpr size_t kMaxGuideBytes = 64 << 10;  // a guide's text
  static constexpr size_t kCapacity = 16;             // compiled guides kept

  explicit GuideCache(std::shared_ptr<const Tokenizer> tokenizer)
      : tokenizer_(std::move(tokenizer)) {}

  // The constraint at the start of an output for `type` (json | json_schema | regex) and
  // `guide`: INVALID_ARGUMENT for a bad or oversized guide, UNIMPLEMENTED for ebnf_grammar.
  StatusOr<std::shared_ptr<const TokenConstraint>> Get(const std::string& type,
                                                       const std::string& guide);

 private:
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::mutex mu_;
  std::shared_ptr<const guided::GuideVocabulary> vocab_;  // built on first use
  std::list<std::string> lru_;                            // most recent first
  std::unordered_map<std::string,
                     std::pair<std::shared_ptr<guided::Guide>, std::list<std::string>::iterator>>
      guides_;
};

}  // namespace inflight::serving
