#include "guided/literal_scan.h"

#include <array>
#include <unordered_map>

namespace inflight::guided {
namespace {

// UTF-8 validation as a byte automaton (no overlong forms, surrogates or code points past
// U+10FFFF): 0 is a character boundary; 1..3 need that many continuation bytes; 4..7 need one
// restricted continuation byte (after E0, ED, F0, F4) and then 1 or 2 more. -1: invalid.
constexpr int kUtf8States = 8;
int Utf8Next(int state, uint8_t b) {
  const bool cont = b >= 0x80 && b <= 0xBF;
  switch (state) {
    case 0:
      if (b < 0x80) return 0;
      if (b >= 0xC2 && b <= 0xDF) return 1;
      if (b == 0xE0) return 4;
      if (b == 0xED) return 5;
      if (b >= 0xE1 && b <= 0xEF) return 2;
      if (b == 0xF0) return 6;
      if (b >= 0xF1 && b <= 0xF3) return 3;
      if (b == 0xF4) return 7;
      return -1;
    case 1:
    case 2:
    case 3:
      return cont ? state - 1 : -1;
    case 4:
      return b >= 0xA0 && b <= 0xBF ? 1 : -1;
    case 5:
      return b >= 0x80 && b <= 0x9F ? 1 : -1;
    case 6:
      return b >= 0x90 && b <= 0xBF ? 2 : -1;
    default:  // 7
      return b >= 0x80 && b <= 0x8F ? 2 : -1;
  }
}

// The Aho-Corasick automaton of the literals: a full transition table and, per node, whether
// the exit (literal 0) or another literal ends there.
struct AhoCorasick {
  std::vector<std::array<int32_t, 256>> next;
  std::vector<uint8_t> ends;  // bit 1: the exit ends here; bit 2: another literal does

  explicit AhoCorasick(const std::vector<std::string>& literals, bool until) {
    std::array<int32_t, 256> none;
    none.fill(-1);
    next.push_back(none);
    ends.push_back(0);
    for (size_t i = 0; i < literals.size(); ++i) {
      int32_t node = 0;
      for (char c : literals[i]) {
        const auto b = static_cast<uint8_t>(c);
        if (next[node][b] < 0) {
          next[node][b] = static_cast<int32_t>(next.size());
          next.push_back(none);
          ends.push_back(0);
        }
        node = next[node][b];
      }
      ends[node] |= (until && i == 0) ? 1 : 2;
    }
    // Breadth first: a node's failure link is shallower, so its row is complete when read.
    std::vector<int32_t> fail(next.size(), 0), queue;
    for (int b = 0; b < 256; ++b) {
      if (next[0][b] < 0) {
        next[0][b] = 0;
      } else {
        queue.push_back(next[0][b]);
      }
    }
    for (size_t q = 0; q < queue.size(); ++q) {
      const int32_t v = queue[q];
      ends[v] |= ends[fail[v]];
      for (int b = 0; b < 256; ++b) {
        const int32_t child = next[v][b];
        if (child < 0) {
          next[v][b] = next[fail[v]][b];
        } else {
          fail[child] = next[fail[v]][b];
          queue.push_back(child);
        }
      }
    }
  }
};

// A state of the product of the two automata, before pruning.
struct RawState {
  int32_t node;
  int u;
  std::vector<LiteralScan::Edge> edges;
};

Status CheckLiterals(const std::vector<std::string>& literals) {
  if (literals.empty()) return InvalidArgumentError("a literal scan needs at least one literal");
  int64_t bytes = 0;
  for (const std::string& l : literals) {
    if (l.empty()) return InvalidArgumentError("a literal to scan for is empty");
    int u = 0;
    for (char c : l) {
      u = Utf8Next(u, static_cast<uint8_t>(c));
      if (u < 0) break;
    }
    if (u != 0) return InvalidArgumentError("a literal to scan for is not valid UTF-8");
    bytes += static_cast<int64_t>(l.size());
  }
  if (bytes > kMaxScanLiteralBytes) {
    return InvalidArgumentError("the literals to scan for hold " + std::to_string(bytes) +
                                " bytes; at most " + std::to_string(kMaxScanLiteralBytes));
  }
  return OkStatus();
}

// The product of the two automata, as far as the start reaches; byte ranges with one target
// merged into one edge.
StatusOr<std::vector<RawState>> Product(const AhoCorasick& ac) {
  std::vector<RawState> raw;
  std::unordered_map<int64_t, int32_t> index;
  auto id_of = [&](int32_t node, int u) -> int32_t {
    const int64_t key = int64_t{node} * kUtf8States + u;
    auto [it, added] = index.emplace(key, static_cast<int32_t>(raw.size()));
    if (added) raw.push_back({node, u, {}});
    return it->second;
  };
  id_of(0, 0);
  for (size_t s = 0; s < raw.size(); ++s) {
    if (raw.size() > static_cast<size_t>(kMaxScanStates)) {
      return InvalidArgumentError("the literal scan needs over " + std::to_string(kMaxScanStates) +
                                  " states");
    }
    const int32_t node = raw[s].node;
    const int u = raw[s].u;
    std::vector<LiteralScan::Edge> edges;
    for (int b = 0; b < 256; ++b) {
      const int u2 = Utf8Next(u, static_cast<uint8_t>(b));
      if (u2 < 0) continue;
      const int32_t n2 = ac.next[node][b];
      int32_t target;
      if (ac.ends[n2] & 1) {
        if (u2 != 0) continue;  // cannot happen: a valid literal ends on a boundary
        target = LiteralScan::kMatched;
      } else if (ac.ends[n2] != 0) {
        continue;  // a literal other than the exit: the text may not hold it
      } else {
        target = id_of(n2, u2);
      }
      if (!edges.empty() && edges.back().next == target && edges.back().hi + 1 == b) {
        edges.back().hi = static_cast<uint8_t>(b);
      } else {
        edges.push_back({static_cast<uint8_t>(b), static_cast<uint8_t>(b), target});
      }
    }
    raw[s].edges = std::move(edges);
  }
  return raw;
}

// The states that can still finish (reach an accepting state or the exit), and of those the
// ones the start reaches through kept states, renumbered from 0.
LiteralScan Prune(const std::vector<RawState>& raw, bool until) {
  const size_t n = raw.size();
  std::vector<std::vector<int32_t>> preds(n);
  std::vector<bool> live(n, false);
  std::vector<int32_t> work;
  for (size_t s = 0; s < n; ++s) {
    bool finishes = !until && raw[s].u == 0;
    for (const auto& e : raw[s].edges) {
      if (e.next == LiteralScan::kMatched) {
        finishes = true;
      } else {
        preds[e.next].push_back(static_cast<int32_t>(s));
      }
    }
    if (finishes) {
      live[s] = true;
      work.push_back(static_cast<int32_t>(s));
    }
  }
  while (!work.empty()) {
    const int32_t s = work.back();
    work.pop_back();
    for (int32_t p : preds[s]) {
      if (!live[p]) {
        live[p] = true;
        work.push_back(p);
      }
    }
  }
  LiteralScan out;
  out.edges.emplace_back();
  out.accepting.push_back(false);
  if (!live[0]) return out;
  std::vector<int32_t> renumber(n, -1);
  renumber[0] = 0;
  std::vector<int32_t> order = {0};
  for (size_t k = 0; k < order.size(); ++k) {
    const int32_t s = order[k];
    const int32_t id = renumber[s];
    out.accepting[id] = !until && raw[s].u == 0;
    for (const auto& e : raw[s].edges) {
      int32_t target = e.next;
      if (target != LiteralScan::kMatched) {
        if (!live[target]) continue;
        if (renumber[target] < 0) {
          renumber[target] = static_cast<int32_t>(out.edges.size());
          out.edges.emplace_back();
          out.accepting.push_back(false);
          order.push_back(target);
        }
        target = renumber[target];
      }
      out.edges[id].push_back({e.lo, e.hi, target});
    }
  }
  return out;
}

}  // namespace

int64_t LiteralScan::num_edges() const {
  int64_t n = 0;
  for (const auto& e : edges) n += static_cast<int64_t>(e.size());
  return n;
}

StatusOr<LiteralScan> BuildLiteralScan(const std::vector<std::string>& literals, bool until) {
  RETURN_IF_ERROR(CheckLiterals(literals));
  auto raw = Product(AhoCorasick(literals, until));
  if (!raw.ok()) return raw.status();
  return Prune(*raw, until);
}

}  // namespace inflight::guided
