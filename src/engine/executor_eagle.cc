// EAGLE decoding in the executor (model/eagle.h): after each step's draws, the target states
// the pass computed go through the draft head, which keeps its own K/V per sequence and drafts
// a tree along eagle_choices (the top-k index paths medusa_choices use); the next step
// verifies the tree as Medusa's and lookahead's are (VerifyTree). Engine-thread only.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include "engine/executor.h"

namespace inflight {
namespace {

// The most target states a sequence keeps waiting for the head (a prompt's, or while its trees
// do not pay): past it the oldest go, and the head's cache starts again after the gap. The
// head reads the model's states, which carry the whole context: its own attention over the
// last 128 positions loses little, and a sequence whose trees never pay costs the head only
// its probes (a 512-token prompt run through it at once cost a losing run 6% at batch 1).
constexpr size_t kMaxPendingRows = 128;
// The states a probe runs through the head (the latest).
constexpr size_t kProbeRows = 16;

// A dynamic tree node's score: a NaN (a head's bad output) ranks last, keeping the order strict.
float Score(float logp) {
  return std::isnan(logp) ? -std::numeric_limits<float>::infinity() : logp;
}

}  // namespace

Status Executor::CheckEagle(ModelRunner& runner, ExecutorConfig* config) {
  if (!config->eagle_head)
    return InvalidArgumentError("speculative decoding mode eagle needs an EAGLE head");
  const EagleHead& head = *config->eagle_head;
  if (head.target_hidden_size() != runner.hidden_size()) {
    return InvalidArgumentError("the EAGLE head was made for a hidden size of " +
                                std::to_string(head.target_hidden_size()) + ", not the model's " +
                                std::to_string(runner.hidden_size()));
  }
  if (head.vocab_size() != runner.vocab_size()) {
    return InvalidArgumentError("the EAGLE head was made for a vocabulary of " +
                                std::to_string(head.vocab_size()) + " tokens, not the model's " +
                                std::to_string(runner.vocab_size()));
  }
  for (int32_t l : head.aux_layers()) {
    if (l > runner.num_layers()) {  // num_layers: the final normed state
      return InvalidArgumentError("the EAGLE head reads layer " + std::to_string(l) +
                                  " of a model with " + std::to_string(runner.num_layers()) +
                                  " layers");
    }
  }
  if (!runner.CaptureLayerInputs(head.aux_layers())) {
    return InvalidArgumentError(
        "speculative decoding mode eagle needs the model's layer inputs, which this runner does "
        "not keep (tensor/pipeline parallelism)");
  }
  if (config->eagle_dynamic_tree) {
    const int32_t most_k = std::min({64, runner.vocab_size(), head.draft_vocab_size()});
    if (!config->eagle_choices.empty())
      return InvalidArgumentError(
          "eagle_choices and eagle_use_dynamic_tree exclude each other (the dynamic tree is "
          "chosen per step)");
    if (config->eagle_dynamic_tree_max_top_k < 1 || config->eagle_dynamic_tree_max_top_k > most_k)
      return InvalidArgumentError("eagle_dynamic_tree_max_top_k must be in [1, " +
                                  std::to_string(most_k) + "]");
    if (config->eagle_num_layers < 1 || config->eagle_num_layers > kMaxEagleChoicesDepth)
      return InvalidArgumentError("eagle_num_layers must be in [1, " +
                                  std::to_string(kMaxEagleChoicesDepth) + "]");
    const int32_t most_nodes = std::min(kMaxDraftTokens, kMaxLookaheadDrafts);
    if (config->max_draft_tokens < 1 || config->max_draft_tokens > most_nodes)
      return InvalidArgumentError("max_draft_len (the dynamic tree's nodes) must be in [1, " +
                                  std::to_string(most_nodes) + "]");
    return OkStatus();
  }
  auto paths = CheckMedusaChoices(
      config->eagle_choices.empty() ? DefaultEagleChoices() : config->eagle_choices,
      kMaxEagleChoicesDepth, std::min({64, runner.vocab_size(), head.draft_vocab_size()}),
      kMaxLookaheadDrafts, "eagle_choices");
  if (!paths.ok()) return paths.status();
  config->eagle_choices = std::move(paths).value();
  return OkStatus();
}

void Executor::SetUpEagle() {
  if (config_.speculative_mode != SpeculativeMode::kEagle || !config_.eagle_head) return;
  if (config_.eagle_dynamic_tree) {
    eagle_top_k_ = config_.eagle_dynamic_tree_max_top_k;
    eagle_max_depth_ = config_.eagle_num_layers;
    return;
  }
  // CheckEagle put prefixes first: a node's parent is the node of its path's prefix, and the
  // first level's nodes come first.
  const auto& paths = config_.eagle_choices;
  const size_t n = paths.size();
  eagle_parent_.assign(n, -1);
  eagle_depth_.assign(n, 0);
  eagle_has_child_.assign(n, 0);
  eagle_ancestors_.assign(n, {});
  for (size_t i = 0; i < n; ++i) {
    for (int32_t k : paths[i]) eagle_top_k_ = std::max(eagle_top_k_, k + 1);
    eagle_depth_[i] = static_cast<int32_t>(paths[i].size());
    eagle_max_depth_ = std::max(eagle_max_depth_, eagle_depth_[i]);
    if (paths[i].size() > 1) {
      const std::vector<int32_t> prefix(paths[i].begin(), paths[i].end() - 1);
      const int32_t p =
          static_cast<int32_t>(std::find(paths.begin(), paths.end(), prefix) - paths.begin());
      eagle_parent_[i] = p;
      eagle_has_child_[p] = 1;
      eagle_ancestors_[i] = eagle_ancestors_[p];
      eagle_ancestors_[i].push_back(p);
    }
  }
}

void Executor::ProposeEagle(Sequence* seq) {
  seq->draft.clear();
  seq->draft_parent.clear();
  seq->accept_credit = 1;
  if (!TreeEligible(*seq) || !seq->eagle || seq->eagle->len != seq->tokens.size()) return;
  const Sequence::Eagle& e = *seq->eagle;
  if (config_.eagle_dynamic_tree) {
    seq->draft = e.draft;
    seq->draft_parent = e.parent;
  } else {
    // A tree drafted as a probe (not paying at the acceptance seen) holds its first level only.
    const size_t n = std::min(e.draft.size(), eagle_parent_.size());
    for (size_t i = 0; i < n && e.draft[i] >= 0; ++i) {
      seq->draft.push_back(e.draft[i]);
      seq->draft_parent.push_back(eagle_parent_[i]);
    }
  }
  FinishTree(seq);
  // A probe's accepted guess stands for the tree it probes: as deep as the tree can be.
  if (e.probe && !seq->draft.empty()) {
    int32_t depth = eagle_max_depth_;
    if (config_.eagle_dynamic_tree) depth = std::min(depth, config_.max_draft_tokens);
    const int32_t cap = seq->request->request.num_draft_tokens;
    if (cap > 0) depth = std::min(depth, cap);
    seq->accept_credit = std::max(depth, 1);
  }
}

void Executor::RunEagle() {
  EagleHead* head = config_.eagle_head.get();
  const float* states = runner_->LayerInputs();
  ThreadPool* pool = runner_->pool();
  if (head == nullptr || states == nullptr || pool == nullptr) {
    eagle_chunks_.clear();
    return;
  }
  const Clock::time_point start = Clock::now();
  const int64_t W = static_cast<int64_t>(head->aux_layers().size()) * head->target_hidden_size(),
                H = head->hidden_size();
  const bool dynamic = config_.eagle_dynamic_tree;
  const double nodes =
      static_cast<double>(dynamic ? config_.max_draft_tokens : eagle_parent_.size());
  // 1. Each computed position whose next token is now known (the prompt's, and the accepted
  // branch's) joins its sequence's pending states.
  eagle_for_.clear();
  for (const EagleChunk& c : eagle_chunks_) {
    Sequence* seq = c.seq;
    const Request& r = seq->request->request;
    if (seq->state == SequenceState::kFinished || r.prompt_table || r.beam_width > 1 || r.guide ||
        r.num_draft_tokens == 0)
      continue;
    if (!seq->eagle) seq->eagle = std::make_unique<Sequence::Eagle>();
    Sequence::Eagle& e = *seq->eagle;
    e.len = 0;  // the last tree is spent
    const int32_t accepted = std::max(0, seq->num_computed - (c.start_pos + c.num_tokens));
    const int32_t known = static_cast<int32_t>(seq->tokens.size()) - 1;
    auto add = [&](int32_t pos, int64_t row) {
      if (pos >= seq->num_computed || pos >= known) return;
      if (!e.pending_pos.empty() && pos != e.pending_pos.back() + 1) {
        e.pending.clear();  // not consecutive (a sequence recomputed): start again
        e.pending_pos.clear();
        e.pending_token.clear();
      }
      e.pending.insert(e.pending.end(), states + row * W, states + (row + 1) * W);
      e.pending_pos.push_back(pos);
      e.pending_token.push_back(seq->tokens[pos + 1]);
    };
    for (int32_t j = 0; j < c.num_tokens; ++j) add(c.start_pos + j, c.row + j);
    for (int32_t m = 0; m < accepted && m < c.num_draft; ++m) {
      const int32_t draft =
          c.tree ? (m < static_cast<int32_t>(seq->tree_path.size()) ? seq->tree_path[m] : -1) : m;
      if (draft < 0) break;
      add(c.start_pos + c.num_tokens + m, c.row + c.num_tokens + draft);
    }
    if (e.pending_pos.size() > kMaxPendingRows) {
      const size_t drop = e.pending_pos.size() - kMaxPendingRows;
      e.pending.erase(e.pending.begin(), e.pending.begin() + static_cast<int64_t>(drop * W));
      e.pending_pos.erase(e.pending_pos.begin(), e.pending_pos.begin() + drop);
      e.pending_token.erase(e.pending_token.begin(), e.pending_token.begin() + drop);
    }
    if (std::find(eagle_for_.begin(), eagle_for_.end(), seq) == eagle_for_.end())
      eagle_for_.push_back(seq);
  }
  eagle_chunks_.clear();
  // 2. The pending states go through the head when the sequence's next tree pays (or is
  // probed); the others wait (bounded).
  eagle_rows_.clear();
  eagle_row_of_.clear();
  std::vector<Sequence*> drafting;
  std::vector<char> probe_only;
  bool long_catch_up = false;  // many waiting states: not what a step's head work costs
  for (Sequence* seq : eagle_for_) {
    Sequence::Eagle& e = *seq->eagle;
    if (e.pending_pos.empty()) continue;
    const bool decoding = seq->num_uncomputed() == 1 && seq->num_generated() > 0 &&
                          seq->state == SequenceState::kRunning;
    const bool draft = decoding && !seq->request->output_paused && TreeEligible(*seq) &&
                       TreePays(*seq, nodes, eagle_ms_);
    if (!draft) continue;  // waits
    // A sequence's first tree is a probe too: no acceptance seen yet (a fresh sequence's
    // optimistic prior drafted a whole tree over 128 states, ~100 ms, in every losing run).
    const bool probe = !TreePays(*seq, nodes, eagle_ms_, false) ||
                       (config_.adaptive_draft_length && seq->drafts_verified == 0);
    if (probe && e.pending_pos.size() > kProbeRows) {
      // A probe asks whether the guesses hold again: the latest states answer it (16 sequences
      // probing at once with 128 states each cost a losing batch 6%).
      const size_t drop = e.pending_pos.size() - kProbeRows;
      e.pending.erase(e.pending.begin(), e.pending.begin() + static_cast<int64_t>(drop * W));
      e.pending_pos.erase(e.pending_pos.begin(), e.pending_pos.begin() + drop);
      e.pending_token.erase(e.pending_token.begin(), e.pending_token.begin() + drop);
    }
    long_catch_up =
        long_catch_up || e.pending_pos.size() > static_cast<size_t>(eagle_max_depth_) + 1;
    for (size_t i = 0; i < e.pending_pos.size(); ++i) {
      EagleRow row;
      row.cache = &e.cache;
      row.position = e.pending_pos[i];
      row.token = e.pending_token[i];
      row.hidden = e.pending.data() + static_cast<int64_t>(i) * W;
      row.top = i + 1 == e.pending_pos.size();
      eagle_rows_.push_back(row);
      eagle_row_of_.emplace_back(seq, -1);
    }
    drafting.push_back(seq);
    probe_only.push_back(probe);
    e.probe = probe;
  }
  if (eagle_rows_.empty()) return;
  eagle_out_.resize(eagle_rows_.size() * static_cast<size_t>(H));
  head->Forward(eagle_rows_, /*fuse=*/true, eagle_top_k_, eagle_out_.data(), &eagle_top_, *pool,
                dynamic ? &eagle_logp_ : nullptr);
  // Dynamic: each drafting sequence's first level (top-k tokens and log-probabilities).
  std::vector<std::vector<std::pair<int32_t, float>>> roots;
  // The last committed row's output of each drafting sequence, its first level of guesses.
  const size_t nn = eagle_parent_.size(), K = static_cast<size_t>(eagle_top_k_);
  const auto& paths = config_.eagle_choices;
  size_t top_row = 0;
  for (size_t r = 0; r < eagle_rows_.size(); ++r) {
    Sequence* seq = eagle_row_of_[r].first;
    Sequence::Eagle& e = *seq->eagle;
    if (r + 1 == eagle_rows_.size() || eagle_row_of_[r + 1].first != seq) {
      // The sequence's rows are done: its states are in the head's cache.
      e.pending.clear();
      e.pending_pos.clear();
      e.pending_token.clear();
    }
    if (!eagle_rows_[r].top) continue;
    e.hidden.resize((nn + 1) * static_cast<size_t>(H));
    std::memcpy(e.hidden.data(), eagle_out_.data() + r * H, H * sizeof(float));
    if (dynamic) {
      roots.emplace_back();
      for (size_t i = 0; i < K; ++i)
        roots.back().emplace_back(eagle_top_[top_row * K + i], eagle_logp_[top_row * K + i]);
      ++top_row;
      continue;
    }
    e.draft.assign(nn, -1);
    for (size_t i = 0; i < nn; ++i)
      if (eagle_depth_[i] == 1) e.draft[i] = eagle_top_[top_row * K + paths[i].back()];
    e.tree.k.resize(nn * static_cast<size_t>(head->kv_dim()));
    e.tree.v.resize(nn * static_cast<size_t>(head->kv_dim()));
    ++top_row;
  }
  // 3. Level by level: each node with children runs at its position (the last computed one
  // plus its depth) on its token and its parent's output, attending to its ancestors; its
  // top-k are its children's tokens.
  if (dynamic) DraftEagleDynamic(drafting, probe_only, roots);
  for (int32_t depth = 1; depth < eagle_max_depth_ && !dynamic; ++depth) {
    eagle_rows_.clear();
    eagle_row_of_.clear();
    for (size_t s = 0; s < drafting.size(); ++s) {
      if (probe_only[s]) continue;
      Sequence* seq = drafting[s];
      Sequence::Eagle& e = *seq->eagle;
      for (size_t i = 0; i < nn; ++i) {
        if (eagle_depth_[i] != depth || !eagle_has_child_[i] || e.draft[i] < 0) continue;
        EagleRow row;
        row.cache = &e.cache;
        row.position = seq->num_computed - 1 + depth;
        row.token = e.draft[i];
        row.hidden = e.hidden.data() + static_cast<int64_t>(eagle_parent_[i] + 1) * H;
        row.tree = &e.tree;
        row.node = static_cast<int32_t>(i);
        row.ancestors = eagle_ancestors_[i].data();
        row.num_ancestors = static_cast<int32_t>(eagle_ancestors_[i].size());
        row.top = true;
        eagle_rows_.push_back(row);
        eagle_row_of_.emplace_back(seq, static_cast<int32_t>(i));
      }
    }
    if (eagle_rows_.empty()) break;
    eagle_out_.resize(eagle_rows_.size() * static_cast<size_t>(H));
    head->Forward(eagle_rows_, /*fuse=*/false, eagle_top_k_, eagle_out_.data(), &eagle_top_, *pool);
    for (size_t r = 0; r < eagle_rows_.size(); ++r) {
      const auto [seq, node] = eagle_row_of_[r];
      Sequence::Eagle& e = *seq->eagle;
      std::memcpy(e.hidden.data() + static_cast<int64_t>(node + 1) * H, eagle_out_.data() + r * H,
                  H * sizeof(float));
      for (size_t i = 0; i < nn; ++i) {
        if (eagle_parent_[i] == node) e.draft[i] = eagle_top_[r * K + paths[i].back()];
      }
    }
  }
  for (Sequence* seq : drafting) seq->eagle->len = seq->tokens.size();
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  if (!drafting.empty() && !long_catch_up)
    eagle_ms_ = eagle_ms_ == 0 ? ms : 0.9 * eagle_ms_ + 0.1 * ms;
}

void Executor::DraftEagleDynamic(const std::vector<Sequence*>& drafting,
                                 const std::vector<char>& probe_only,
                                 const std::vector<std::vector<std::pair<int32_t, float>>>& roots) {
  EagleHead* head = config_.eagle_head.get();
  ThreadPool* pool = runner_->pool();
  const int64_t H = head->hidden_size();
  const size_t K = static_cast<size_t>(eagle_top_k_);
  // A node: its token, parent (-1: under the last committed token), path score (the sum of
  // its path's log-probabilities) and, once expanded, its slot: its output at hidden[slot]
  // (slot 0 is the committed row's) and its K/V at tree node slot - 1.
  struct Node {
    int32_t token, parent;
    float score;
    int32_t slot;
  };
  const size_t S = drafting.size();
  std::vector<std::vector<Node>> nodes(S);
  std::vector<std::vector<int32_t>> frontier(S);
  std::vector<std::vector<std::vector<int32_t>>> ancestors(S);  // by slot - 1, top first
  // Best path score first; ties to the older node (a parent before its child).
  auto better = [](const std::vector<Node>& n) {
    return [&n](int32_t a, int32_t b) {
      return n[a].score != n[b].score ? n[a].score > n[b].score : a < b;
    };
  };
  for (size_t s = 0; s < S; ++s) {
    for (const auto& [token, logp] : roots[s]) nodes[s].push_back({token, -1, Score(logp), -1});
    if (probe_only[s]) continue;  // its first guess alone
    for (size_t i = 0; i < nodes[s].size(); ++i) frontier[s].push_back(static_cast<int32_t>(i));
  }
  for (int32_t depth = 1; depth < eagle_max_depth_; ++depth) {
    eagle_rows_.clear();
    eagle_row_of_.clear();
    for (size_t s = 0; s < S; ++s) {
      Sequence* seq = drafting[s];
      Sequence::Eagle& e = *seq->eagle;
      // Room for this level's outputs first: rows point into hidden.
      const size_t slots = ancestors[s].size() + 1;
      e.hidden.resize((slots + frontier[s].size()) * static_cast<size_t>(H));
      for (int32_t id : frontier[s]) {
        Node& node = nodes[s][id];
        node.slot = static_cast<int32_t>(ancestors[s].size()) + 1;
        std::vector<int32_t> anc;
        for (int32_t p = node.parent; p >= 0; p = nodes[s][p].parent)
          anc.insert(anc.begin(), nodes[s][p].slot - 1);
        ancestors[s].push_back(std::move(anc));
      }
      for (int32_t id : frontier[s]) {
        const Node& node = nodes[s][id];
        EagleRow row;
        row.cache = &e.cache;
        row.position = seq->num_computed - 1 + depth;
        row.token = node.token;
        row.hidden = e.hidden.data() +
                     (node.parent < 0 ? 0 : static_cast<int64_t>(nodes[s][node.parent].slot)) * H;
        row.tree = &e.tree;
        row.node = node.slot - 1;
        row.ancestors = ancestors[s][node.slot - 1].data();
        row.num_ancestors = static_cast<int32_t>(ancestors[s][node.slot - 1].size());
        row.top = true;
        eagle_rows_.push_back(row);
      }
    }
    if (eagle_rows_.empty()) break;
    eagle_out_.resize(eagle_rows_.size() * static_cast<size_t>(H));
    head->Forward(eagle_rows_, /*fuse=*/false, eagle_top_k_, eagle_out_.data(), &eagle_top_, *pool,
                  &eagle_logp_);
    // Each expanded node's top-k are its children; the level's best k are expanded next.
    size_t r = 0;
    for (size_t s = 0; s < S; ++s) {
      Sequence::Eagle& e = *drafting[s]->eagle;
      const int32_t first_child = static_cast<int32_t>(nodes[s].size());
      for (int32_t id : frontier[s]) {
        const Node parent = nodes[s][id];
        std::memcpy(e.hidden.data() + static_cast<int64_t>(parent.slot) * H,
                    eagle_out_.data() + r * H, H * sizeof(float));
        for (size_t i = 0; i < K; ++i)
          nodes[s].push_back(
              {eagle_top_[r * K + i], id, Score(parent.score + eagle_logp_[r * K + i]), -1});
        ++r;
      }
      std::vector<int32_t> children;
      for (int32_t c = first_child; c < static_cast<int32_t>(nodes[s].size()); ++c)
        children.push_back(c);
      const size_t keep = std::min(K, children.size());
      std::partial_sort(children.begin(), children.begin() + keep, children.end(),
                        better(nodes[s]));
      children.resize(keep);
      std::sort(children.begin(), children.end());
      frontier[s] = std::move(children);
    }
  }
  // The tree: the max_draft_tokens best nodes of all, best first (a child never scores above
  // its parent and ties go to the older node, so parents come first and any prefix a cut
  // keeps is the best tree of its size).
  for (size_t s = 0; s < S; ++s) {
    Sequence::Eagle& e = *drafting[s]->eagle;
    std::vector<int32_t> order(nodes[s].size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
    const size_t take = probe_only[s] ? std::min<size_t>(1, order.size())
                                      : std::min<size_t>(config_.max_draft_tokens, order.size());
    std::partial_sort(order.begin(), order.begin() + take, order.end(), better(nodes[s]));
    order.resize(take);
    std::vector<int32_t> index(nodes[s].size(), -1);
    e.draft.clear();
    e.parent.clear();
    for (int32_t id : order) {
      const int32_t p = nodes[s][id].parent;
      if (p >= 0 && index[p] < 0) continue;  // (cannot happen: a parent scores at least as high)
      index[id] = static_cast<int32_t>(e.draft.size());
      e.draft.push_back(nodes[s][id].token);
      e.parent.push_back(p < 0 ? -1 : index[p]);
    }
  }
}

}  // namespace inflight
