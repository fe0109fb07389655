#include "guided/guide.h"

#include <limits>

#include "guided/json_schema.h"
#include "guided/structural_tag.h"
#include "tokenizer/tokenizer.h"

namespace inflight::guided {
namespace {

// Cached masks of one guide, in bytes; past it the cache starts over (a long free-form
// output can visit many recognizer states).
constexpr size_t kMaxCacheBytes = size_t{16} << 20;

}  // namespace

std::shared_ptr<const GuideVocabulary> GuideVocabulary::FromTokenizer(const Tokenizer& tokenizer) {
  std::vector<std::string> bytes(static_cast<size_t>(tokenizer.vocab_size()));
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (tokenizer.IsControl(id) || id == tokenizer.spec().unk_id) continue;
    bytes[id] = tokenizer.TokenBytes(id);
  }
  return std::make_shared<GuideVocabulary>(std::move(bytes));
}

StatusOr<GuideType> GuideTypeFromName(std::string_view name) {
  if (name == "json") return GuideType::kJson;
  if (name == "json_schema") return GuideType::kJsonSchema;
  if (name == "regex") return GuideType::kRegex;
  if (name == "ebnf_grammar") return GuideType::kEbnf;
  if (name == "structural_tag") return GuideType::kStructuralTag;
  return InvalidArgumentError("guided_decoding_guide_type '" + std::string(name) +
                              "' is not one of json, json_schema, regex, ebnf_grammar, "
                              "structural_tag");
}

// One sequence's position in a guide.
class GuideConstraint : public TokenConstraint {
 public:
  explicit GuideConstraint(std::shared_ptr<Guide> guide) : guide_(std::move(guide)) {
    if (guide_->grammar_) pos_.grammar = GrammarState(guide_->grammar_.get());
  }

  int32_t Mask(float* logits, int32_t vocab, int32_t end_id) override {
    if (dead_) {
      for (int32_t i = 0; i < vocab; ++i) logits[i] = -std::numeric_limits<float>::infinity();
      return 0;
    }
    const std::shared_ptr<const Guide::Mask> m = guide_->MaskAt(pos_);
    constexpr float kBanned = -std::numeric_limits<float>::infinity();
    const bool has_end = end_id >= 0 && end_id < vocab;
    const float end_logit = has_end ? logits[end_id] : 0.0f;
    const int32_t known = std::min<int32_t>(vocab, guide_->vocab_->size());
    const std::vector<uint64_t>& words = m->allowed.words;
    for (int32_t w = 0; w * 64 < known; ++w) {
      const uint64_t bits = words[w];
      if (bits == ~uint64_t{0}) continue;
      const int32_t end = std::min(known, (w + 1) * 64);
      for (int32_t i = w * 64; i < end; ++i) {
        if (!((bits >> (i & 63)) & 1)) logits[i] = kBanned;
      }
    }
    for (int32_t i = known; i < vocab; ++i) logits[i] = kBanned;
    int32_t allowed = m->allowed.count;
    if (has_end) {
      // The end token is allowed exactly where the output may end (whatever its bytes).
      const bool in_mask = end_id < known && m->allowed.Test(end_id);
      if (m->accepting) {
        logits[end_id] = end_logit;
        allowed += in_mask ? 0 : 1;
      } else {
        logits[end_id] = kBanned;
        allowed -= in_mask ? 1 : 0;
      }
    }
    return allowed;
  }

  void Advance(int32_t token) override {
    if (dead_) return;
    if (!guide_->Step(&pos_, token)) dead_ = true;
  }

  bool Terminated() const override {
    if (dead_) return true;
    const std::shared_ptr<const Guide::Mask> m = guide_->MaskAt(pos_);
    return m->accepting && !m->can_continue;
  }

  std::unique_ptr<TokenConstraint> Clone() const override {
    return std::make_unique<GuideConstraint>(*this);
  }

 private:
  std::shared_ptr<Guide> guide_;
  Guide::Position pos_;
  bool dead_ = false;  // a token the guide does not allow was forced on it
};

StatusOr<std::shared_ptr<Guide>> Guide::Compile(GuideType type, std::string_view guide,
                                                std::shared_ptr<const GuideVocabulary> vocab) {
  auto g = std::shared_ptr<Guide>(new Guide(type, std::move(vocab)));
  if (type == GuideType::kJson) return g;  // `guide` is unused: any JSON
  if (type == GuideType::kEbnf) {
    auto grammar = Grammar::Parse(guide);
    if (!grammar.ok()) return grammar.status();
    g->grammar_ = *grammar;
    Position start;
    start.grammar = GrammarState(g->grammar_.get());
    auto first = g->MaskAt(start);
    if (first->allowed.count == 0 && !first->accepting) {
      return InvalidArgumentError(
          "the guide allows no token of this model's vocabulary to start the output");
    }
    return g;
  }
  std::string pattern(guide);
  if (type == GuideType::kJsonSchema || type == GuideType::kStructuralTag) {
    auto regex =
        type == GuideType::kJsonSchema ? JsonSchemaToRegex(guide) : StructuralTagToRegex(guide);
    if (!regex.ok()) return regex.status();
    pattern = std::move(regex).value();
  }
  auto dfa = RegexDfa::Compile(pattern);
  if (!dfa.ok()) {
    // The structural tag's parts were checked on their own: what is left is its size.
    if (type == GuideType::kStructuralTag) {
      return InvalidArgumentError("structural_tag: " + dfa.status().message());
    }
    return dfa.status();
  }
  g->dfa_ = std::move(dfa).value();
  // The start state's mask now: a guide that allows no first token is refused here, not
  // discovered mid-request.
  auto first = g->MaskAt(Position{});
  if (first->allowed.count == 0 && !first->accepting) {
    return InvalidArgumentError(
        "the guide allows no token of this model's vocabulary to start the output");
  }
  return g;
}

std::unique_ptr<TokenConstraint> Guide::NewConstraint() {
  return std::make_unique<GuideConstraint>(shared_from_this());
}

int32_t Guide::num_cached_masks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int32_t>(dfa_masks_.size() + json_masks_.size());
}

namespace {

// The cached mask of `key`, or a new one from a trie walk of `state` (which `step` advances
// by a byte) and the state's accepting / can-continue answers; the cache starts over past
// kMaxCacheBytes.
template <typename Key, typename Cache, typename State, typename StepFn>
std::shared_ptr<const Guide::Mask> CachedMask(Cache& cache, const Key& key, const State& state,
                                              StepFn step, bool accepting, bool can_continue,
                                              const GuideVocabulary& vocab) {
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  auto m = std::make_shared<Guide::Mask>();
  m->allowed = vocab.trie().Allowed(state, step);
  m->accepting = accepting;
  m->can_continue = can_continue;
  const size_t mask_bytes = (static_cast<size_t>(vocab.size()) + 63) / 64 * 8 + sizeof(Guide::Mask);
  if (cache.size() * mask_bytes > kMaxCacheBytes) cache.clear();
  cache.emplace(key, m);
  return m;
}

}  // namespace

std::shared_ptr<const Guide::Mask> Guide::MaskAt(const Position& p) {
  std::lock_guard<std::mutex> lock(mu_);
  switch (type_) {
    case GuideType::kEbnf:
      return CachedMask(
          json_masks_, p.grammar.Key(), p.grammar,
          [](GrammarState& s, uint8_t b) { return s.Step(b); }, p.grammar.Accepting(),
          p.grammar.CanContinue(), *vocab_);
    case GuideType::kJson:
      return CachedMask(
          json_masks_, p.json.Key(), p.json, [](JsonState& s, uint8_t b) { return s.Step(b); },
          p.json.Done(), !p.json.Done(), *vocab_);
    default: {
      RegexDfa* dfa = dfa_.get();
      auto step = [dfa](int32_t& s, uint8_t b) {
        s = dfa->Next(s, b);
        return s != RegexDfa::kDead;
      };
      return CachedMask(dfa_masks_, p.dfa, p.dfa, step, dfa->Accepting(p.dfa),
                        dfa->CanContinue(p.dfa), *vocab_);
    }
  }
}

bool Guide::Step(Position* p, int32_t token) {
  if (token < 0 || token >= vocab_->size()) return false;
  const std::string& bytes = vocab_->bytes(token);
  if (bytes.empty()) return false;
  std::lock_guard<std::mutex> lock(mu_);
  for (char c : bytes) {
    const auto b = static_cast<uint8_t>(c);
    if (type_ == GuideType::kJson) {
      if (!p->json.Step(b)) return false;
    } else if (type_ == GuideType::kEbnf) {
      if (!p->grammar.Step(b)) return false;
    } else {
      p->dfa = dfa_->Next(p->dfa, b);
      if (p->dfa == RegexDfa::kDead) return false;
    }
  }
  return true;
}

}  // namespace inflight::guided
