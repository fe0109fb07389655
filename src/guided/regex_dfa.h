// Regular expressions compiled to a byte-level automaton over UTF-8: parsed, built into a
// Thompson NFA (character classes become UTF-8 byte-range sequences), and determinized
// lazily, state by state, as matching reaches it. A pattern matches the whole output (as
// a guide: there is no search); ^ and $ at its ends are accepted and ignored.
//
// Syntax: literals, ., [...] and [^...] with ranges, \d \w \s \D \W \S, escapes \n \t \r \f
// \v \0 \xHH \uHHHH and escaped punctuation, groups (...) and (?:...), |, *, +, ?, {n},
// {n,}, {n,m} (lazy suffixes accepted; they change nothing for a whole-output match).
// No backreferences, lookaround or anchors elsewhere. Not thread-safe: callers lock.
// Two extensions for free text between markers (structural tags), over lists of literals
// (characters or one-character escapes, '|' between them; literal_scan.h builds them):
//   (?~A|B)  any text in which no listed literal occurs (Onigmo's absent operator, for
//            literals), e.g. (?~<tool_call>) is text without a tool call;
//   (?*A|B)  any text through the first place where a listed literal ends, which must be an
//            A: e.g. (?*</think>) is the rest of a reasoning section with its end tag.
// Both are refused inside (?J:...) (a JSON string must not hold their free text).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace inflight::guided {

class RegexDfa {
 public:
  static constexpr int32_t kDead = -1;

  // INVALID_ARGUMENT naming the position for a malformed or too large pattern.
  static StatusOr<std::unique_ptr<RegexDfa>> Compile(std::string_view pattern);
  // Whether the pattern parses (as Compile's first step; the automaton's size is not checked).
  static Status Check(std::string_view pattern);

  int32_t start() const { return 0; }
  // The state after `byte`; kDead when no match can continue. Builds the state on first use;
  // RESOURCE_EXHAUSTED-like failure is reported as kDead once max_states is reached
  // (states_exhausted() tells).
  int32_t Next(int32_t state, uint8_t byte);
  bool Accepting(int32_t state) const { return dfa_[state].accepting; }
  // Whether some byte continues from the state (false: a complete match that cannot grow).
  bool CanContinue(int32_t state);
  int32_t num_states() const { return static_cast<int32_t>(dfa_.size()); }
  bool states_exhausted() const { return exhausted_; }

  // Bounds on what a client's pattern can cost: NFA states, DFA states, and the NFA states
  // all DFA states list together (memory, and the work of building them, which happens on
  // the engine thread as masks are computed). Past the DFA bounds no new state is built and
  // the bytes that would need one are refused.
  static constexpr int32_t kMaxNfaStates = 100000;
  static constexpr int32_t kMaxDfaStates = 20000;
  static constexpr int64_t kMaxClosureEntries = int64_t{4} << 20;

 private:
  struct NfaState {
    uint8_t lo = 1, hi = 0;  // byte range of the edge to `next` (lo > hi: no byte edge)
    int32_t next = -1;
    std::vector<int32_t> eps;  // epsilon edges
  };
  struct DfaState {
    std::vector<int32_t> nfa;  // sorted, epsilon-closed
    bool accepting = false;
    std::array<int32_t, 256> next;  // kUnknown until computed
  };
  static constexpr int32_t kUnknown = -2;

  friend class RegexCompiler;
  int32_t AddState(std::vector<int32_t> closure);
  void Close(std::vector<int32_t>* states) const;

  std::vector<NfaState> nfa_;
  int32_t nfa_start_ = 0, nfa_accept_ = 0;
  std::vector<DfaState> dfa_;
  std::map<std::vector<int32_t>, int32_t> index_;
  bool exhausted_ = false;
  int64_t closure_entries_ = 0;
  // Close()'s visited marks: a stamp per NFA state, so a closure costs its own size.
  mutable std::vector<uint32_t> mark_;
  mutable uint32_t stamp_ = 0;
};

// The pattern matching exactly the UTF-8 text `literal` (regex metacharacters escaped).
std::string RegexEscape(std::string_view literal);

}  // namespace inflight::guided
