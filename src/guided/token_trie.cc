#include "guided/token_trie.h"

#include <algorithm>
#include <map>

namespace inflight::guided {

TokenTrie::TokenTrie(const std::vector<std::string>& token_bytes)
    : vocab_(static_cast<int32_t>(token_bytes.size())) {
  // Build with sorted child maps, then lay the nodes out breadth-first with each node's
  // children (and its tokens) contiguous.
  struct Build {
    std::map<uint8_t, int32_t> children;
    std::vector<int32_t> tokens;
  };
  std::vector<Build> b(1);
  for (int32_t id = 0; id < vocab_; ++id) {
    const std::string& bytes = token_bytes[id];
    if (bytes.empty()) continue;
    int32_t cur = 0;
    for (char c : bytes) {
      const auto byte = static_cast<uint8_t>(c);
      auto it = b[cur].children.find(byte);
      if (it == b[cur].children.end()) {
        b.emplace_back();
        it = b[cur].children.emplace(byte, static_cast<int32_t>(b.size()) - 1).first;
      }
      cur = it->second;
    }
    b[cur].tokens.push_back(id);
  }
  std::vector<int32_t> order{0}, position(b.size(), 0);
  for (size_t i = 0; i < order.size(); ++i) {
    position[order[i]] = static_cast<int32_t>(i);
    for (const auto& [byte, child] : b[order[i]].children) order.push_back(child);
  }
  nodes_.resize(b.size());
  for (size_t i = 0; i < order.size(); ++i) {
    const Build& src = b[order[i]];
    Node& n = nodes_[i];
    n.first_child = static_cast<int32_t>(edges_.size());
    n.num_children = static_cast<int32_t>(src.children.size());
    for (const auto& [byte, child] : src.children) edges_.push_back({byte, position[child]});
    n.first_token = static_cast<int32_t>(tokens_.size());
    n.num_tokens = static_cast<int32_t>(src.tokens.size());
    tokens_.insert(tokens_.end(), src.tokens.begin(), src.tokens.end());
  }
}

}  // namespace inflight::guided
