// EBNF grammars (the guide type ebnf_grammar, in xgrammar's / GBNF's notation) and a
// recognizer over their language: a set of parse stacks advanced one code point at a time,
// as llama.cpp's grammar sampler does.
//
//   root   ::= "{" ws pair ("," ws pair)* "}"     # the start rule is `root`
//   pair   ::= string ":" ws value
//   value  ::= [0-9]+ | string | "[" ws (value ("," ws value)*)? "]"
//   string ::= "\"" [^"\\]* "\""
//   ws     ::= [ \t\n]*
//
// Elements: "literals" (\n \t \r \\ \" \xHH \uHHHH escapes), [classes] with ranges and [^...],
// rule names, ( groups ), alternatives |, and *, +, ?, {n}, {n,}, {n,m}. # starts a comment.
// Recursion is allowed except left recursion (refused). Bounds keep a client's grammar
// cheap: rules, stack depth (nesting), and live parse stacks.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace inflight::guided {

class Grammar {
 public:
  // INVALID_ARGUMENT naming the line for a malformed, undefined, left-recursive or too
  // large grammar.
  static StatusOr<std::shared_ptr<const Grammar>> Parse(std::string_view text);

  struct Element {
    int32_t rule = -1;                                 // a rule reference, or -1
    std::vector<std::pair<uint32_t, uint32_t>> chars;  // else: the code points it matches
  };
  using Sequence = std::vector<Element>;
  struct Rule {
    std::string name;
    std::vector<Sequence> alternatives;
  };
  const std::vector<Rule>& rules() const { return rules_; }
  int32_t root() const { return root_; }

  static constexpr int kMaxRules = 4096;
  static constexpr int kMaxDepth = 128;   // nested rule frames on one stack
  static constexpr int kMaxStacks = 512;  // live parse stacks
  // Rule entries one code point may cost (an ambiguous grammar's expansions multiply).
  static constexpr int64_t kMaxExpansions = 1 << 16;

 private:
  std::vector<Rule> rules_;
  int32_t root_ = 0;
};

// Where a recognizer is: the live parse stacks (each a list of (rule, alternative, element)
// frames, innermost last) and a code point being read byte by byte.
class GrammarState {
 public:
  GrammarState() = default;
  explicit GrammarState(const Grammar* g);
  // False when no parse can continue with this byte.
  bool Step(uint8_t byte);
  bool Accepting() const;  // the text so far is in the language
  bool CanContinue() const;
  std::string Key() const;  // the whole state, for caching its token mask

 private:
  struct Frame {
    int32_t rule, alt, pos;
    bool operator==(const Frame& o) const { return rule == o.rule && alt == o.alt && pos == o.pos; }
    bool operator<(const Frame& o) const {
      return rule != o.rule ? rule < o.rule : alt != o.alt ? alt < o.alt : pos < o.pos;
    }
  };
  using Stack = std::vector<Frame>;
  void Expand(Stack stack, std::vector<Stack>* out, int depth, int64_t* work) const;
  bool Advance(uint32_t cp);
  bool PrefixPossible() const;

  const Grammar* g_ = nullptr;
  std::vector<Stack> stacks_;  // each ends at a character element, or is empty (complete)
  uint32_t partial_ = 0;       // the code point's bits read so far
  int need_ = 0;               // UTF-8 continuation bytes still to come
  int len_ = 0;                // the code point's length in bytes
};

}  // namespace inflight::guided
