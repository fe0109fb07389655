#include "engine/scheduler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <optional>
#include <tuple>

#include "base/check.h"
#include "kernels/attention.h"
#include "kvcache/kv_storage.h"

namespace inflight {
namespace {

// Serve order: higher request priority first, then earlier arrival.
bool ServedBefore(const Sequence* a, const Sequence* b) {
  const float pa = a->request->request.priority, pb = b->request->request.priority;
  if (pa != pb) return pa > pb;
  if (a->order != b->order) return a->order < b->order;
  return a->index < b->index;
}

}  // namespace

int32_t WindowBlocksPerSequence(int32_t window, int32_t tokens_per_block) {
  return (window - 1 + tokens_per_block - 1) / tokens_per_block + 3;
}

int32_t WindowBlocksPerStep(const ExecutorConfig& config) {
  return (config.max_num_tokens + config.tokens_per_block - 1) / config.tokens_per_block;
}

Scheduler::Scheduler(const ExecutorConfig& config, KvBlockManager& blocks,
                     KvBlockManager* window_blocks, int32_t window, StepBudget* budget)
    : config_(config),
      blocks_(blocks),
      window_blocks_(window_blocks),
      window_(window),
      policy_(KvCapacityPolicy::Create(config.policy)),
      budget_(config.batching == BatchingStrategy::kInflight ? budget : nullptr) {
  INFLIGHT_CHECK(window_blocks_ == nullptr || window_ > 0);
}

int64_t Scheduler::NumAvailable() const {
  const int64_t full = blocks_.NumAvailable();
  return window_blocks_ ? std::min<int64_t>(full, window_blocks_->NumAvailable()) : full;
}

void Scheduler::ReleaseWindow(Sequence* seq, size_t from) {
  // Last one first, as KvBlockManager::Release does (leaves evicted before their parents).
  while (seq->window_blocks.size() > from) {
    const int32_t b = seq->window_blocks.back();
    seq->window_blocks.pop_back();
    if (b >= 0) window_blocks_->Release({b});
  }
}

void Scheduler::ReleaseBehindWindow(Sequence* seq) {
  if (!window_blocks_) return;
  const int64_t first =
      std::min<int64_t>(FirstWindowBlock(seq->num_computed, window_, config_.tokens_per_block),
                        static_cast<int64_t>(seq->window_blocks.size()));
  for (int64_t i = seq->window_first; i < first; ++i) {
    int32_t& b = seq->window_blocks[static_cast<size_t>(i)];
    if (b >= 0) window_blocks_->Release({b});
    b = -1;
  }
  seq->window_first = static_cast<int32_t>(std::max<int64_t>(seq->window_first, first));
}

void Scheduler::AddWaiting(Sequence* seq) {
  seq->state = SequenceState::kWaiting;
  waiting_.insert(std::upper_bound(waiting_.begin(), waiting_.end(), seq, ServedBefore), seq);
}

void Scheduler::AddRunning(Sequence* seq) {
  seq->state = SequenceState::kRunning;
  running_.push_back(seq);
}

void Scheduler::DropBlocks(Sequence* seq) {
  seq->handoff_pending = false;
  if (seq->copy_src >= 0) {
    blocks_.Release({seq->copy_src});
    seq->copy_src = -1;
    seq->copy_tokens = 0;
  }
  if (seq->window_copy_src >= 0) {
    window_blocks_->Release({seq->window_copy_src});
    seq->window_copy_src = -1;
  }
  if (window_blocks_) ReleaseWindow(seq, 0);
  seq->window_first = 0;
  blocks_.Release(seq->blocks);
  seq->blocks.clear();
  seq->num_computed = 0;
  seq->num_committed = 0;
  seq->last_key = KvBlockManager::RootKey(seq->request->request.cache_salt);
}

void Scheduler::Remove(Sequence* seq) {
  auto drop = [seq](std::vector<Sequence*>& v) {
    v.erase(std::remove(v.begin(), v.end(), seq), v.end());
  };
  drop(running_);
  drop(waiting_);
  DropBlocks(seq);
  seq->state = SequenceState::kFinished;
}

void Scheduler::CommitFullBlocks(Sequence* seq) {
  const int32_t tpb = config_.tokens_per_block;
  // A generation-only request's K/V comes from a hand-off a client could have forged, and
  // every later block of it attends to that K/V: none of its blocks is offered for reuse.
  const bool untrusted = seq->request->request.context_phase != nullptr;
  while ((seq->num_committed + 1) * tpb <= seq->num_computed) {
    const uint64_t parent = seq->last_key;
    const int32_t* block_tokens =
        seq->tokens.data() + static_cast<int64_t>(seq->num_committed) * tpb;
    if (untrusted) {
      seq->last_key = blocks_.ChainKey(parent, block_tokens);
      ++seq->num_committed;
      continue;
    }
    seq->last_key = blocks_.Commit(seq->blocks[seq->num_committed], seq->last_key, block_tokens,
                                   seq->request->request.kv_retention_priority);
    // Prompt blocks only: what a later request can share (a system prompt, a conversation).
    // The window group's copy under the same key (its parent key is the same chain's).
    const int32_t w = window_blocks_ ? seq->window_blocks[seq->num_committed] : -1;
    if (lower_.store && config_.enable_kv_cache_reuse && !seq->request->request.lora &&
        static_cast<int64_t>(seq->num_committed + 1) * tpb <= seq->prompt_len &&
        (!window_blocks_ || w >= 0)) {
      lower_.store(seq->last_key, parent,
                   seq->tokens.data() + static_cast<int64_t>(seq->num_committed) * tpb,
                   seq->blocks[seq->num_committed], w);
    }
    if (w >= 0)
      window_blocks_->Commit(w, parent,
                             seq->tokens.data() + static_cast<int64_t>(seq->num_committed) * tpb,
                             seq->request->request.kv_retention_priority);
    ++seq->num_committed;
  }
  ReleaseBehindWindow(seq);
}

void Scheduler::ShareBlocks(const Sequence& from, Sequence* to, size_t count) {
  INFLIGHT_CHECK(to->blocks.empty() && to->window_blocks.empty() && count <= from.blocks.size());
  for (size_t i = 0; i < count; ++i) {
    blocks_.AddRef(from.blocks[i]);
    to->blocks.push_back(from.blocks[i]);
  }
  if (!window_blocks_) return;
  for (size_t i = 0; i < count; ++i) {
    const int32_t b = from.window_blocks[i];
    if (b >= 0) window_blocks_->AddRef(b);
    to->window_blocks.push_back(b);
  }
  to->window_first = std::min(from.window_first, static_cast<int32_t>(count));
}

bool Scheduler::CopyLastBlock(Sequence* seq, int32_t used,
                              const std::function<void(int32_t, int32_t, int32_t, int32_t)>& copy) {
  if (used == 0 || seq->blocks.empty()) return true;
  const bool full_shared = blocks_.RefCount(seq->blocks.back()) > 1;
  const int32_t w = window_blocks_ ? seq->window_blocks.back() : -1;
  const bool window_shared = w >= 0 && window_blocks_->RefCount(w) > 1;
  if ((full_shared && blocks_.NumAvailable() < 1) ||
      (window_shared && window_blocks_->NumAvailable() < 1))
    return false;
  if (full_shared) {
    const int32_t fresh = *blocks_.Allocate();
    copy(kFullGroup, seq->blocks.back(), fresh, used);
    blocks_.Release({seq->blocks.back()});
    seq->blocks.back() = fresh;
    seq->request->stats.num_allocated_blocks++;
  }
  if (window_shared) {
    const int32_t fresh = *window_blocks_->Allocate();
    copy(kWindowGroup, w, fresh, used);
    window_blocks_->Release({w});
    seq->window_blocks.back() = fresh;
  }
  return true;
}

int32_t Scheduler::ChunkSize(const Sequence& seq, int32_t budget) const {
  const int32_t remaining = seq.num_uncomputed();
  if (remaining <= budget) return remaining;
  if (!config_.enable_chunked_context) return 0;
  // Non-final chunks end on a block boundary.
  const int32_t tpb = config_.tokens_per_block;
  const int32_t end = (seq.num_computed + budget) / tpb * tpb;
  return std::max(0, end - seq.num_computed);
}

bool Scheduler::EnsureBlocks(Sequence* seq, int64_t num_tokens) {
  const int64_t tpb = config_.tokens_per_block;
  const int64_t need = (num_tokens + tpb - 1) / tpb - static_cast<int64_t>(seq->blocks.size());
  if (need <= 0) return true;
  if (need > NumAvailable()) return false;
  for (int64_t i = 0; i < need; ++i) {
    auto b = blocks_.Allocate();
    INFLIGHT_CHECK(b.has_value());
    seq->blocks.push_back(*b);
    if (window_blocks_) {
      b = window_blocks_->Allocate();
      INFLIGHT_CHECK(b.has_value());
      seq->window_blocks.push_back(*b);
    }
  }
  seq->request->stats.num_allocated_blocks += static_cast<int32_t>(need);
  return true;
}

void Scheduler::Pause(Sequence* seq) {
  running_.erase(std::remove(running_.begin(), running_.end(), seq), running_.end());
  DropBlocks(seq);  // full blocks stay cached when reuse is on: the resume finds them
  seq->request->stats.num_pauses++;
  ++num_paused_total_;
  out_.paused.push_back(seq);
  AddWaiting(seq);
}

void Scheduler::Requeue(Sequence* seq) {
  running_.erase(std::remove(running_.begin(), running_.end(), seq), running_.end());
  DropBlocks(seq);
  AddWaiting(seq);
}

Sequence* Scheduler::PickVictim(const Sequence* exclude) const {
  // A beam never evicts its siblings: a beam search advances only with all beams resident.
  const bool beams = exclude->request->request.beam_width > 1;
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    if (*it == exclude || (*it)->scheduled_step == step_) continue;
    if (beams && (*it)->request == exclude->request) continue;
    return *it;
  }
  return nullptr;
}

int32_t Scheduler::FitDrafts(Sequence* seq, int32_t n, int32_t budget) {
  // Drafts ride only on a chunk that ends the sequence's uncomputed tokens, within the token
  // budget and the request's remaining max_tokens (the step adds one token beyond the accepted
  // drafts), in blocks that are free now: drafts never pause anyone. Under max_utilization a
  // block per running sequence stays free for their own next tokens.
  if (seq->draft.empty() || n != seq->num_uncomputed()) return 0;
  if (!seq->draft_parent.empty() && n != 1) return 0;  // a tree rides only on a decode row
  const int32_t left = seq->request->request.max_tokens - seq->num_generated() - 1;
  int32_t d = std::min({static_cast<int32_t>(seq->draft.size()), budget - n, left});
  if (d <= 0) return 0;
  const int64_t tpb = config_.tokens_per_block;
  const int64_t end = static_cast<int64_t>(seq->num_computed) + n + d;
  const int64_t need = (end + tpb - 1) / tpb - static_cast<int64_t>(seq->blocks.size());
  const int64_t keep_free = policy_->BlocksKeptFromDrafts(running_.size());
  if (need > 0 && (need > NumAvailable() - keep_free || !EnsureBlocks(seq, end))) {
    const int64_t held = static_cast<int64_t>(seq->blocks.size()) * tpb - seq->num_computed - n;
    d = static_cast<int32_t>(std::clamp<int64_t>(held, 0, d));
  }
  return d;
}

void Scheduler::Schedule(Sequence* seq, int32_t n, int32_t& budget) {
  seq->scheduled_step = step_;
  if (!seq->ever_scheduled) {
    seq->ever_scheduled = true;
    if (seq->index == 0) seq->request->stats.first_scheduled_time = Clock::now();
  }
  const int32_t d = FitDrafts(seq, n, budget);
  out_.chunks.push_back({seq, n, d});
  budget -= n + d;
  if (seq->num_uncomputed() == 1) {
    // A decode row (and its drafts), attending to every position before it.
    decode_shape_.decode_rows += 1 + d;
    decode_shape_.decode_positions += AttendedPositions(seq->num_computed, 1 + d);
  } else {
    if (std::isfinite(prompt_ms_)) prompt_ms_ -= budget_->CostMs(seq->num_computed, n);
    first_prompt_ = false;
  }
}

bool Scheduler::TakeStepBlocks(Sequence* seq, int32_t n) {
  bool ok = EnsureBlocks(seq, seq->num_computed + n);
  while (!ok && policy_->MakeRoom(*this, seq)) ok = EnsureBlocks(seq, seq->num_computed + n);
  if (!ok) policy_->OutOfRoom(*this, seq);
  return ok;
}

int32_t Scheduler::PromptChunk(const Sequence& seq, int32_t budget, bool* held) const {
  *held = false;
  const int32_t n = ChunkSize(seq, budget);
  if (n == 0 || !std::isfinite(prompt_ms_)) return n;
  const int32_t fit = budget_->TokensFor(prompt_ms_, seq.num_computed, n, first_prompt_);
  *held = fit < n;
  // A cut chunk may end inside a block (as a partial-block reuse starts one): aligning it
  // would round a step's few tokens of budget to a whole block or to nothing.
  return fit;
}

void Scheduler::TrimBlocks(Sequence* seq) {
  const int64_t tpb = config_.tokens_per_block;
  const size_t keep =
      static_cast<size_t>((static_cast<int64_t>(seq->tokens.size()) + tpb - 1) / tpb);
  if (seq->blocks.size() <= keep) return;
  blocks_.Release(std::vector<int32_t>(seq->blocks.begin() + static_cast<std::ptrdiff_t>(keep),
                                       seq->blocks.end()));
  seq->blocks.resize(keep);
  if (window_blocks_) ReleaseWindow(seq, keep);
}

void Scheduler::ScheduleRunning(int32_t& budget) {
  // Decoding sequences first, then mid-prompt ones; each group in start order. The decode
  // rows fix what the latency budget leaves for prompt tokens.
  order_scratch_.clear();
  for (Sequence* s : running_)
    if (s->num_uncomputed() == 1) order_scratch_.push_back(s);
  const size_t num_decoding = order_scratch_.size();
  for (Sequence* s : running_)
    if (s->num_uncomputed() != 1) order_scratch_.push_back(s);
  for (size_t i = 0; i < order_scratch_.size(); ++i) {
    Sequence* seq = order_scratch_[i];
    if (i == num_decoding && budget_) {
      prompt_ms_ = budget_->Begin(decode_shape_);
      if (std::isfinite(prompt_ms_)) out_.latency_target_ms = budget_->effective_target_ms();
    }
    if (seq->state != SequenceState::kRunning) continue;  // paused earlier in this loop
    if (seq->num_uncomputed() == 0) continue;             // a beam waiting for its siblings
    if (seq->request->output_paused) continue;            // its client is not reading
    if (static_cast<int32_t>(out_.chunks.size()) >= config_.max_batch_size) {
      ++out_.waiting_for_max_batch_size;
      continue;
    }
    bool held = false;
    const int32_t n = i < num_decoding ? ChunkSize(*seq, budget) : PromptChunk(*seq, budget, &held);
    if (n == 0) {
      ++(held ? out_.waiting_for_latency_budget : out_.waiting_for_max_num_tokens);
      continue;
    }
    if (held) ++out_.waiting_for_latency_budget;  // runs, but a shorter chunk
    if (!TakeStepBlocks(seq, n)) {
      ++out_.waiting_for_kv_cache;
      continue;
    }
    Schedule(seq, n, budget);
  }
  if (num_decoding == order_scratch_.size() && budget_) {
    prompt_ms_ = budget_->Begin(decode_shape_);  // for the admissions
    if (std::isfinite(prompt_ms_)) out_.latency_target_ms = budget_->effective_target_ms();
  }
}

int32_t Scheduler::AcquireWindowPrefix(Sequence* seq, const std::vector<uint64_t>& keys,
                                       int32_t num_blocks, int32_t from_lower) {
  const int32_t tpb = config_.tokens_per_block;
  const int64_t first = FirstWindowBlock(static_cast<int64_t>(num_blocks) * tpb, window_, tpb);
  seq->window_blocks.assign(static_cast<size_t>(num_blocks), -1);
  seq->window_first = static_cast<int32_t>(std::min<int64_t>(first, num_blocks));
  for (int64_t i = first; i < num_blocks; ++i) {
    const int32_t* t = seq->tokens.data() + i * tpb;
    int32_t b = window_blocks_->AcquireCommitted(keys[static_cast<size_t>(i)], t);
    if (b < 0 && i >= from_lower && lower_.load_window && window_blocks_->NumAvailable() > 0) {
      // Read back with the full group's part: a fresh window block, committed like it.
      b = *window_blocks_->Allocate();
      if (lower_.load_window(keys[static_cast<size_t>(i) + 1], b)) {
        window_blocks_->Commit(b, keys[static_cast<size_t>(i)], t,
                               seq->request->request.kv_retention_priority);
      } else {
        window_blocks_->Release({b});
        b = -1;
      }
    }
    if (b < 0) {
      ReleaseWindow(seq, 0);
      return static_cast<int32_t>(i);
    }
    seq->window_blocks[static_cast<size_t>(i)] = b;
  }
  return num_blocks;
}

bool Scheduler::LowerTierUsable(const Sequence& seq) const {
  // A generation-only request's prefix comes from its hand-off, never from the tiers.
  return lower_.load && config_.enable_kv_cache_reuse && (!window_blocks_ || lower_.load_window) &&
         !seq.request->request.context_phase && !seq.request->request.lora &&
         !seq.request->request.return_context_logits;
}

bool Scheduler::LowerTierReady(const Sequence& seq) {
  if (!lower_.ready || !LowerTierUsable(seq) || !seq.blocks.empty()) return true;
  const int32_t tpb = config_.tokens_per_block;
  const int64_t usable = static_cast<int64_t>(seq.tokens.size()) - 1;
  uint64_t key = KvBlockManager::RootKey(seq.request->request.cache_salt);
  int64_t n = 0;
  // The pool's part of the prefix (as TakePrefix will find it, unless evicted meanwhile)...
  for (; (n + 1) * tpb <= usable; ++n) {
    const uint64_t next = blocks_.ChainKey(key, seq.tokens.data() + n * tpb);
    if (!blocks_.HoldsKey(next)) break;
    key = next;
  }
  // ... then the tier's.
  chain_scratch_.clear();
  for (; (n + 1) * tpb <= usable; ++n) {
    const int32_t* t = seq.tokens.data() + n * tpb;
    const uint64_t next = blocks_.ChainKey(key, t);
    if (!lower_.has(next)) break;
    chain_scratch_.push_back({next, key, std::vector<int32_t>(t, t + tpb)});
    key = next;
  }
  return chain_scratch_.empty() || lower_.ready(chain_scratch_);
}

void Scheduler::TakeHandoff(Sequence* seq) {
  RequestState* rs = seq->request;
  const KvHandoff& h = *rs->request.context_phase;
  const int64_t n = h.num_blocks();
  if (!rs->stats.from_handoff) {
    // The transfer ends here, at the first admission (a prompt shorter than a block hands
    // over no K/V, only its first token, and counts too).
    rs->stats.from_handoff = true;
    const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    rs->stats.kv_transfer_ms = std::max<double>(0, (now - h.created_unix_ns) / 1e6);
  }
  // Short of blocks, nothing is taken: the admission then waits for blocks as any would.
  if (n == 0 || !import_block_ || NumAvailable() < n) return;
  const int32_t tpb = config_.tokens_per_block;
  const int64_t covered = static_cast<int64_t>(h.tokens.size()), full = covered / tpb;
  uint64_t key = KvBlockManager::RootKey(rs->request.cache_salt);
  for (int64_t i = 0; i < n; ++i) {
    seq->blocks.push_back(*blocks_.Allocate());
    if (i < full) key = blocks_.ChainKey(key, seq->tokens.data() + i * tpb);
  }
  // The last block may be partly filled: its slots past `covered` are written before read.
  seq->num_computed = static_cast<int32_t>(covered);
  seq->num_committed = static_cast<int32_t>(full);  // never committed (see CommitFullBlocks)
  seq->last_key = key;
  seq->handoff_pending = true;  // copied in by FinishHandoff once admitted
}

void Scheduler::FinishHandoff(Sequence* seq) {
  if (!seq->handoff_pending) return;
  seq->handoff_pending = false;
  RequestState* rs = seq->request;
  const KvHandoff& h = *rs->request.context_phase;
  const int64_t n = h.num_blocks();
  for (int64_t i = 0; i < n; ++i) {
    // The executor refuses hand-offs its runner cannot import (Enqueue), so this holds.
    INFLIGHT_CHECK(
        import_block_(seq->blocks[static_cast<size_t>(i)], h.kv.data() + i * h.block_bytes));
  }
  rs->stats.num_allocated_blocks += static_cast<int32_t>(n);
  rs->stats.num_imported_blocks = static_cast<int32_t>(n);
}

void Scheduler::TakePrefix(Sequence* seq) {
  if (seq->request->request.context_phase) {
    if (seq->blocks.empty()) TakeHandoff(seq);
    return;
  }
  if (!config_.enable_kv_cache_reuse || seq->request->request.return_context_logits ||
      !seq->blocks.empty())
    return;
  // At least the last token is recomputed: its logits choose the next token.
  const int64_t usable = static_cast<int64_t>(seq->tokens.size()) - 1;
  const uint64_t root = KvBlockManager::RootKey(seq->request->request.cache_salt);
  seq->blocks = blocks_.AcquirePrefix(seq->tokens.data(), usable, INT32_MAX, root);
  int32_t n = static_cast<int32_t>(seq->blocks.size());
  const int32_t tpb = config_.tokens_per_block;
  // keys_scratch_[i]: the chain key of the prefix before block i.
  keys_scratch_.assign(1, root);
  for (int32_t i = 0; i < n; ++i)
    keys_scratch_.push_back(
        blocks_.ChainKey(keys_scratch_.back(), seq->tokens.data() + static_cast<int64_t>(i) * tpb));
  // Past the pool's blocks, the lower tier's: each put into a fresh block and committed, so
  // later requests find it in the pool.
  seq->disk_blocks = 0;
  const int32_t pool_blocks = n;
  while (LowerTierUsable(*seq) && (static_cast<int64_t>(n) + 1) * tpb <= usable &&
         NumAvailable() > 0) {
    const int32_t* t = seq->tokens.data() + static_cast<int64_t>(n) * tpb;
    const uint64_t parent = keys_scratch_.back(), key = blocks_.ChainKey(parent, t);
    if (!lower_.has(key)) break;
    const int32_t b = *blocks_.Allocate();
    if (!lower_.load(key, parent, t, b)) {
      blocks_.Release({b});
      break;
    }
    blocks_.Commit(b, parent, t, seq->request->request.kv_retention_priority);
    seq->blocks.push_back(b);
    keys_scratch_.push_back(key);
    ++n;
    ++seq->disk_blocks;
  }
  if (window_blocks_) {
    // The prefix is usable only as far as the window group still has what its window sees:
    // a block it lacks at i leaves a prefix of at most i blocks (whose window may not need it).
    for (;;) {
      const int32_t lacking = AcquireWindowPrefix(seq, keys_scratch_, n, pool_blocks);
      if (lacking == n) break;
      blocks_.Release(std::vector<int32_t>(seq->blocks.begin() + lacking, seq->blocks.end()));
      seq->blocks.resize(static_cast<size_t>(lacking));
      n = lacking;
    }
    seq->disk_blocks = std::max(0, n - pool_blocks);
  }
  if (lower_.done) lower_.done();
  seq->num_computed = n * tpb;
  seq->num_committed = n;
  seq->last_key = keys_scratch_[static_cast<size_t>(n)];
  // The next block may match in part: copying its matching slots beats recomputing them.
  const int64_t rest = usable - static_cast<int64_t>(n) * tpb;
  if (rest <= 0) return;
  int32_t src = -1, len = 0;
  std::tie(src, len) =
      blocks_.AcquirePartial(seq->last_key, seq->tokens.data() + static_cast<int64_t>(n) * tpb,
                             static_cast<int32_t>(std::min<int64_t>(rest, tpb)));
  if (src < 0) return;
  int32_t window_src = -1;
  if (window_blocks_) {
    // Copied slots must hold the same tokens in both groups: the shorter match wins.
    int32_t window_len = 0;
    std::tie(window_src, window_len) = window_blocks_->AcquirePartial(
        seq->last_key, seq->tokens.data() + static_cast<int64_t>(n) * tpb, len);
    len = std::min(len, window_len);
  }
  auto give_up = [&] {
    blocks_.Release({src});
    if (window_src >= 0) window_blocks_->Release({window_src});
  };
  if (window_blocks_ && window_src < 0) return give_up();
  if (NumAvailable() < 1) return give_up();
  seq->copy_index = static_cast<int32_t>(seq->blocks.size());
  seq->blocks.push_back(*blocks_.Allocate());
  if (window_blocks_) seq->window_blocks.push_back(*window_blocks_->Allocate());
  seq->copy_src = src;
  seq->window_copy_src = window_src;
  seq->copy_tokens = len;
  seq->num_computed += len;
  seq->request->stats.num_allocated_blocks++;
}

void Scheduler::FinishCopies(const std::function<void(int32_t, int32_t, int32_t, int32_t)>& copy) {
  for (const ScheduledChunk& ch : out_.chunks) {
    Sequence* seq = ch.seq;
    if (seq->copy_src < 0) continue;
    copy(kFullGroup, seq->copy_src, seq->blocks[seq->copy_index], seq->copy_tokens);
    blocks_.Release({seq->copy_src});
    if (seq->window_copy_src >= 0) {
      copy(kWindowGroup, seq->window_copy_src, seq->window_blocks[seq->copy_index],
           seq->copy_tokens);
      window_blocks_->Release({seq->window_copy_src});
    }
    out_.num_partially_reused_tokens += seq->copy_tokens;
    seq->copy_src = seq->window_copy_src = -1;
    seq->copy_tokens = 0;
  }
}

void Scheduler::AdmitWaiting(int32_t& budget) {
  if (waiting_.empty()) return;
  if (!out_.paused.empty()) return;  // short of blocks already
  if (config_.batching == BatchingStrategy::kStatic && !running_.empty()) {
    out_.waiting_for_static_batch = static_cast<int32_t>(waiting_.size());
    return;
  }
  const bool forming_static_batch =
      config_.batching == BatchingStrategy::kStatic;  // running_ is empty here
  const int32_t tpb = config_.tokens_per_block;
  AdmissionPools pools;
  pools.blocks = &blocks_;
  pools.window_blocks = window_blocks_;
  // Window group: every admitted request's live sequences hold at most per_sequence blocks
  // beside one step's tokens (see the header).
  pools.window_per_sequence = window_blocks_ ? WindowBlocksPerSequence(window_, tpb) : 0;
  pools.window_per_step = window_blocks_ ? WindowBlocksPerStep(config_) : 0;
  pools.tokens_per_block = tpb;
  pools.step = step_;
  policy_->BeginAdmission(running_, pools);
  size_t i = 0;
  // waiting_[0, kept): paused for their clients or waiting for disk reads, they stay first in
  // line.
  size_t kept = 0;
  int32_t* blocked_reason = nullptr;
  for (; i < waiting_.size(); ++i) {
    Sequence* seq = waiting_[i];
    // Admitting a request whose client is not reading would only recompute its prompt to
    // pause again (and, under max_utilization, evict others for it).
    if (seq->request->output_paused) {
      waiting_[kept++] = seq;
      continue;
    }
    if (static_cast<int32_t>(running_.size()) >= config_.max_batch_size ||
        static_cast<int32_t>(out_.chunks.size()) >= config_.max_batch_size) {
      blocked_reason = &out_.waiting_for_max_batch_size;
      break;
    }
    // Its prefix is still being read from the lower tier: the next ones go first meanwhile.
    if (!LowerTierReady(*seq)) {
      ++out_.waiting_for_kv_disk_reads;
      waiting_[kept++] = seq;
      continue;
    }
    TakePrefix(seq);
    bool latency_held = false;
    const int32_t n = PromptChunk(*seq, budget, &latency_held);
    // A static batch forms all at once, up to max_batch_size: members the token budget
    // cannot start now join anyway and run their prompts in the next steps.
    if (n == 0 && !forming_static_batch)
      blocked_reason =
          latency_held ? &out_.waiting_for_latency_budget : &out_.waiting_for_max_num_tokens;
    if (!blocked_reason && !policy_->MayAdmit(*seq)) blocked_reason = &out_.waiting_for_kv_cache;
    const size_t held = seq->blocks.size();
    if (!blocked_reason && n > 0 && !EnsureBlocks(seq, seq->num_computed + n))
      blocked_reason = &out_.waiting_for_kv_cache;
    if (blocked_reason) {
      DropBlocks(seq);
      break;
    }
    policy_->Admitted(*seq, static_cast<int64_t>(seq->blocks.size() - held));
    if (latency_held) ++out_.waiting_for_latency_budget;  // starts, with a shorter chunk
    // A hand-off's blocks are imported, not reused from the cache.
    const int32_t reused = seq->handoff_pending ? 0 : seq->num_committed;
    FinishHandoff(seq);
    out_.num_reused_blocks += reused;
    out_.num_disk_reused_blocks += seq->disk_blocks;
    seq->request->stats.num_reused_blocks += reused;
    seq->request->stats.num_disk_reused_blocks += seq->disk_blocks;
    seq->state = SequenceState::kRunning;
    running_.push_back(seq);
    if (n > 0) Schedule(seq, n, budget);
  }
  if (blocked_reason) *blocked_reason += static_cast<int32_t>(waiting_.size() - i);
  // [kept, i) were admitted; the ones passed over moved to [0, kept) in their order.
  waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(kept),
                 waiting_.begin() + static_cast<std::ptrdiff_t>(i));
}

const ScheduleOutput& Scheduler::Step() {
  ++step_;
  // Reset in place: the vectors keep their capacity (no allocation per step once warm).
  out_.step = step_;
  out_.chunks.clear();
  out_.paused.clear();
  out_.num_reused_blocks = 0;
  out_.num_disk_reused_blocks = 0;
  out_.num_partially_reused_tokens = 0;
  out_.waiting_for_kv_cache = out_.waiting_for_max_num_tokens = 0;
  out_.waiting_for_max_batch_size = out_.waiting_for_static_batch = 0;
  out_.waiting_for_latency_budget = 0;
  out_.waiting_for_kv_disk_reads = 0;
  out_.latency_target_ms = 0;
  decode_shape_ = StepShape{};
  prompt_ms_ = StepBudget::kNoLimit;
  first_prompt_ = true;
  int32_t budget = config_.max_num_tokens;
  ScheduleRunning(budget);
  AdmitWaiting(budget);
  TakeTreeScratch();
  return out_;
}

void Scheduler::TakeTreeScratch() {
  const int32_t tpb = config_.tokens_per_block;
  int64_t spare = blocks_.NumFree();
  for (ScheduledChunk& c : out_.chunks) {
    Sequence* seq = c.seq;
    if (c.num_draft == 0 || seq->draft_parent.empty()) continue;
    // A prefix of a tree (parents first) is a tree: cut it until its scratch fits.
    int32_t need = 0;
    while (c.num_draft > 0) {
      need = kernels::TreeScratchBlocks(seq->num_computed, 1 + c.num_draft, seq->step_tree.data(),
                                        tpb);
      if (need <= spare) break;
      c.num_draft = c.num_draft * 3 / 4;
    }
    if (c.num_draft == 0) {
      // No room for any of it: the step runs the sequence's own token; the blocks FitDrafts
      // took for the drafts go back.
      seq->draft.clear();
      seq->draft_parent.clear();
      TrimBlocks(seq);
      continue;
    }
    spare -= need;
    for (int32_t i = 0; i < need; ++i) seq->tree_scratch.push_back(*blocks_.Allocate());
  }
}

void Scheduler::ReleaseTreeScratch() {
  for (const ScheduledChunk& c : out_.chunks) {
    if (c.seq->tree_scratch.empty()) continue;
    blocks_.Release(c.seq->tree_scratch);
    c.seq->tree_scratch.clear();
  }
}

}  // namespace inflight
