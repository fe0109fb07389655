// Free text that stops at literals, as a deterministic byte automaton: an Aho-Corasick
// automaton over the literals run in step with a UTF-8 validator. It is what the regex groups
// (?~...) and (?*...) compile to (regex_dfa.h), and so what structural tags' any_text and
// triggered_tags are made of:
//   avoid  (until = false): any valid UTF-8 text in which no literal occurs;
//   until  (until = true):  any valid UTF-8 text that ends at the first place where a literal
//          ends, where literals[0] (the exit) ends: "text through the first occurrence", so
//          "ab" never lets "aab" pass for "a" + "ab".
// States from which no accepted text can be finished are removed, so an automaton never
// leads into a trap; one that accepts nothing has no edge and a non-accepting start. Thread-
// compatible (a value).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace inflight::guided {

struct LiteralScan {
  static constexpr int32_t kMatched = -1;  // an edge's target: the exit literal just ended
  struct Edge {
    uint8_t lo, hi;  // the byte range of the edge
    int32_t next;    // a state, or kMatched
  };
  std::vector<std::vector<Edge>> edges;  // per state; state 0 is the start
  std::vector<bool> accepting;           // avoid: the text may end here (character boundary)

  // Whether no text at all is accepted (e.g. the exit always contains another literal first).
  bool Empty() const { return edges[0].empty() && !accepting[0]; }
  int64_t num_edges() const;
};

// Bounds on what one scan may cost: the literals' bytes, and the automaton's states.
inline constexpr int64_t kMaxScanLiteralBytes = 4096;
inline constexpr int32_t kMaxScanStates = 40000;

// INVALID_ARGUMENT for no literal, an empty literal, a literal that is not valid UTF-8, or past
// the bounds above.
StatusOr<LiteralScan> BuildLiteralScan(const std::vector<std::string>& literals, bool until);

}  // namespace inflight::guided
