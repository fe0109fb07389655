// The model's vocabulary as a byte trie, for computing which tokens a byte automaton allows
// next: one walk from the root, stepping the automaton once per trie edge and skipping every
// subtree whose prefix is already rejected, so a state costs the tokens it could start rather
// than vocabulary x token length.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace inflight::guided {

// A set of token ids.
struct TokenBitset {
  std::vector<uint64_t> words;
  int32_t count = 0;  // members

  explicit TokenBitset(int32_t vocab = 0) : words((static_cast<size_t>(vocab) + 63) / 64, 0) {}
  void Set(int32_t id) {
    uint64_t& w = words[static_cast<size_t>(id) >> 6];
    const uint64_t bit = uint64_t{1} << (id & 63);
    count += (w & bit) == 0;
    w |= bit;
  }
  bool Test(int32_t id) const { return (words[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1; }
};

class TokenTrie {
 public:
  // token_bytes[id]: the bytes the token adds to the output; empty ones (special and control
  // tokens) are never allowed by a guide.
  explicit TokenTrie(const std::vector<std::string>& token_bytes);

  int32_t vocab_size() const { return vocab_; }

  // The tokens whose every byte the automaton accepts from `state`: step(state, byte) returns
  // the next state, or a negative value for a rejected byte. State is a small copyable value.
  template <typename State, typename Step>
  TokenBitset Allowed(const State& state, Step&& step) const {
    TokenBitset out(vocab_);
    Walk(0, state, step, &out);
    return out;
  }

 private:
  struct Node {
    int32_t first_child = 0, num_children = 0;  // into edges_
    int32_t first_token = 0, num_tokens = 0;    // into tokens_: tokens that end here
  };
  struct Edge {
    uint8_t byte;
    int32_t node;
  };

  template <typename State, typename Step>
  void Walk(int32_t node, const State& state, Step& step, TokenBitset* out) const {
    const Node& n = nodes_[node];
    for (int32_t e = n.first_child; e < n.first_child + n.num_children; ++e) {
      State next = state;
      if (!step(next, edges_[e].byte)) continue;
      const Node& child = nodes_[edges_[e].node];
      for (int32_t t = child.first_token; t < child.first_token + child.num_tokens; ++t)
        out->Set(tokens_[t]);
      Walk(edges_[e].node, next, step, out);
    }
  }

  int32_t vocab_ = 0;
  std::vector<Node> nodes_;
  std::vector<Edge> edges_;
  std::vector<int32_t> tokens_;
};

}  // namespace inflight::guided
