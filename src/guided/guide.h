// Guided decoding: a guide (TensorRT-LLM's guided_decoding_guide_type / _guide) compiled
// against a model's vocabulary into per-sequence token constraints.
//   json         any JSON text whose root is an object or an array (a pushdown recognizer)
//   json_schema  a JSON value valid against the schema (json_schema.h, as a regex)
//   regex        the whole output matches the pattern (regex_dfa.h)
//   ebnf_grammar the output is in the grammar's language (grammar.h, a pushdown recognizer)
//   structural_tag  xgrammar's structural tag: tags, JSON schemas and free text between
//                markers (structural_tag.h, as a regex)
// The allowed-token set of each automaton state is computed once (a walk of the vocabulary
// trie) and cached, so a step costs a cache lookup and one pass over the logits once the
// states an output visits have been seen. A compiled guide is shared by every request that
// uses it, from any thread.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "guided/grammar.h"
#include "guided/json_matcher.h"
#include "guided/regex_dfa.h"
#include "guided/token_trie.h"
#include "sampling/token_constraint.h"

namespace inflight {
class Tokenizer;
}

namespace inflight::guided {

enum class GuideType { kJson, kJsonSchema, kRegex, kEbnf, kStructuralTag };
// json | json_schema | regex | ebnf_grammar | structural_tag; others are INVALID_ARGUMENT.
StatusOr<GuideType> GuideTypeFromName(std::string_view name);

// The vocabulary a guide works over: each token's bytes (empty for special tokens).
class GuideVocabulary {
 public:
  explicit GuideVocabulary(std::vector<std::string> token_bytes)
      : trie_(token_bytes), bytes_(std::move(token_bytes)) {}
  // Each token's output bytes; control and unknown tokens get none (a guide never picks them).
  static std::shared_ptr<const GuideVocabulary> FromTokenizer(const Tokenizer& tokenizer);
  const TokenTrie& trie() const { return trie_; }
  const std::string& bytes(int32_t id) const { return bytes_[id]; }
  int32_t size() const { return static_cast<int32_t>(bytes_.size()); }

 private:
  TokenTrie trie_;
  std::vector<std::string> bytes_;
};

class Guide : public std::enable_shared_from_this<Guide> {
 public:
  static StatusOr<std::shared_ptr<Guide>> Compile(GuideType type, std::string_view guide,
                                                  std::shared_ptr<const GuideVocabulary> vocab);

  // A constraint at the start of the output.
  std::unique_ptr<TokenConstraint> NewConstraint();

  // For tests and benchmarks: automaton states built and masks cached so far.
  int32_t num_cached_masks() const;

  // A state's allowed tokens, and whether the output may end or go on there.
  struct Mask {
    TokenBitset allowed;
    bool accepting = false;
    bool can_continue = false;
  };

 private:
  friend class GuideConstraint;
  Guide(GuideType type, std::shared_ptr<const GuideVocabulary> vocab)
      : type_(type), vocab_(std::move(vocab)) {}

  // One automaton position: a DFA state (regex, json_schema, structural_tag) or a JSON or
  // grammar recognizer state.
  struct Position {
    int32_t dfa = 0;
    JsonState json;
    GrammarState grammar;
  };
  std::shared_ptr<const Mask> MaskAt(const Position& p);
  bool Step(Position* p, int32_t token);

  const GuideType type_;
  std::shared_ptr<const GuideVocabulary> vocab_;
  mutable std::mutex mu_;
  std::unique_ptr<RegexDfa> dfa_;
  std::shared_ptr<const Grammar> grammar_;
  std::unordered_map<int32_t, std::shared_ptr<const Mask>> dfa_masks_;
  std::unordered_map<std::string, std::shared_ptr<const Mask>>
      json_masks_;  // json and ebnf_grammar states, by Key()
};

}  // namespace inflight::guided
