// A batch plan checked against the model and its KV cache before a forward pass: every
// chunk's tokens, positions, block tables, logit rows and tree bits in range, so a bad plan is
// an error rather than a read or write out of bounds.
#include <algorithm>
#include <string>
#include <unordered_set>

#include "kernels/ops.h"
#include "model/model.h"

namespace inflight {

Status Model::ValidatePlan(const BatchPlan& plan, const KvCacheView& kv) const {
  const ShardLayout& sh = shard_;
  if (static_cast<int>(kv.layers.size()) != sh.num_layers()) {
    return InvalidArgumentError("KV cache has " + std::to_string(kv.layers.size()) +
                                " layers, model has " + std::to_string(sh.num_layers()));
  }
  const int64_t kv_dim = static_cast<int64_t>(sh.num_kv_heads) * config_.head_dim;
  if (!kv.layer_group.empty()) {
    if (kv.layer_group.size() != kv.layers.size())
      return InvalidArgumentError("KV cache groups do not name every layer");
    for (int32_t l = 0; l < sh.num_layers(); ++l) {
      // A window-group layer keeps only its window: it must be a window layer of that window.
      if (kv.layer_group[static_cast<size_t>(l)] != 0 &&
          (!config_.is_window_layer(sh.layer_begin + l) || config_.sliding_window != kv.window))
        return InvalidArgumentError("layer " + std::to_string(sh.layer_begin + l) +
                                    " is in the KV cache's window group but is not a window layer");
    }
  }
  for (const kernels::KvLayerView& l : kv.layers) {
    if (l.head_dim != config_.head_dim || l.kv_dim != kv_dim || l.tokens_per_block < 1) {
      return InvalidArgumentError("KV cache layout (kv_dim " + std::to_string(l.kv_dim) +
                                  ", head_dim " + std::to_string(l.head_dim) +
                                  ") does not match the model (" + std::to_string(kv_dim) + ", " +
                                  std::to_string(config_.head_dim) + ")");
    }
  }
  for (const SequenceChunk& c : plan.chunks) {
    if (c.num_tokens <= 0) return InvalidArgumentError("a sequence chunk has no tokens");
    for (int32_t i = 0; i < c.num_tokens; ++i) {
      const int32_t id = c.token_ids[i];
      if (id < 0 || id >= config_.vocab_size + (c.prompt_table ? c.prompt_table_rows : 0)) {
        return InvalidArgumentError(
            "token id " + std::to_string(id) + " is outside the vocabulary of " +
            std::to_string(config_.vocab_size) +
            (c.prompt_table
                 ? " and the prompt table of " + std::to_string(c.prompt_table_rows) + " rows"
                 : std::string()));
      }
    }
    if (c.lora != nullptr && c.lora->num_layers() != config_.num_layers) {
      return InvalidArgumentError("a LoRA adapter for " + std::to_string(c.lora->num_layers()) +
                                  " layers cannot run on a model of " +
                                  std::to_string(config_.num_layers));
    }
    if (c.num_logits < 1 || c.num_logits > c.num_tokens)
      return InvalidArgumentError("a sequence chunk asks for logits of tokens it does not hold");
    if (c.start_pos < 0 ||
        static_cast<int64_t>(c.start_pos) + c.num_tokens > config_.context_length) {
      return InvalidArgumentError("positions " + std::to_string(c.start_pos) + ".." +
                                  std::to_string(c.start_pos + c.num_tokens - 1) +
                                  " exceed the context length " +
                                  std::to_string(config_.context_length));
    }
    if (c.tree == nullptr && (c.tree_depth != nullptr || c.tree_scratch != nullptr))
      return InvalidArgumentError("tree depths or scratch blocks without a tree");
    if (c.tree != nullptr) {
      if (c.tree_depth == nullptr || c.num_tokens > 64)
        return InvalidArgumentError("a tree chunk needs its depths and at most 64 tokens");
      if (!kv.layer_group.empty() || config_.sliding_window > 0)
        return InvalidArgumentError("tree attention does not support sliding-window layers");
      for (int32_t i = 0; i < c.num_tokens; ++i) {
        const uint64_t bits = c.tree[i], up = bits & ~(uint64_t{1} << i);
        // Itself, nothing after it, its parent's branch (the parent is its last ancestor,
        // before it: checked only once nothing after it is set) and a depth that counts its
        // ancestors.
        if (((bits >> i) & 1u) == 0 || (i < 63 && (bits >> (i + 1)) != 0) ||
            (up != 0 && c.tree[63 - std::countl_zero(up)] != up) ||
            c.tree_depth[i] != std::popcount(bits) - 1)
          return InvalidArgumentError("tree token " + std::to_string(i) +
                                      " is not a node of a tree in order");
      }
    }
    if (kv.layers.empty()) continue;
    const int32_t tpb = kv.layers[0].tokens_per_block;
    const int64_t need = (static_cast<int64_t>(c.start_pos) + c.num_tokens + tpb - 1) / tpb;
    if (c.num_blocks < need)
      return InvalidArgumentError("block table too short for the chunk's positions");
    for (int64_t b = 0; b < need; ++b) {
      if (c.block_table[b] < 0 || c.block_table[b] >= kv.num_blocks)
        return InvalidArgumentError("block id out of range");
    }
    if (c.tree != nullptr && c.tree_scratch != nullptr) {
      const int32_t scratch = kernels::TreeScratchBlocks(c.start_pos, c.num_tokens, c.tree, tpb);
      if (c.num_tree_scratch < scratch)
        return InvalidArgumentError("a tree chunk needs " + std::to_string(scratch) +
                                    " scratch blocks");
      for (int32_t i = 0; i < scratch; ++i) {
        const int32_t b = c.tree_scratch[i];
        if (b < 0 || b >= kv.num_blocks)
          return InvalidArgumentError("tree scratch block out of range");
      }
    }
    if (kv.layer_group.empty()) continue;
    // The window group: every block the chunk's first window can see, and those it writes.
    if (c.num_window_blocks < need)
      return InvalidArgumentError("window block table too short for the chunk's positions");
    const int64_t first_seen = std::max<int64_t>(0, c.start_pos - kv.window + 1) / tpb;
    for (int64_t b = first_seen; b < need; ++b) {
      if (c.window_block_table[b] < 0 || c.window_block_table[b] >= kv.num_window_blocks)
        return InvalidArgumentError("window block id out of range");
    }
  }
  return CheckTreeScratch(plan, kv);
}

// Tree scratch blocks are overwritten by every layer: none may be a block any chunk of the
// plan reads or writes, nor appear twice.
Status Model::CheckTreeScratch(const BatchPlan& plan, const KvCacheView& kv) const {
  if (kv.layers.empty()) return OkStatus();
  const int32_t tpb = kv.layers[0].tokens_per_block;
  std::unordered_set<int32_t> used, scratch;
  bool any = false;
  for (const SequenceChunk& c : plan.chunks) {
    const int64_t need = (static_cast<int64_t>(c.start_pos) + c.num_tokens + tpb - 1) / tpb;
    used.insert(c.block_table, c.block_table + need);
    any |= c.tree_scratch != nullptr;
  }
  if (!any) return OkStatus();
  for (const SequenceChunk& c : plan.chunks) {
    if (c.tree_scratch == nullptr) continue;
    const int32_t n = kernels::TreeScratchBlocks(c.start_pos, c.num_tokens, c.tree, tpb);
    for (int32_t i = 0; i < n; ++i) {
      const int32_t b = c.tree_scratch[i];
      if (used.count(b) > 0 || !scratch.insert(b).second)
        return InvalidArgumentError("tree scratch block " + std::to_string(b) +
                                    " is in use or given twice");
    }
  }
  return OkStatus();
}

}  // namespace inflight
