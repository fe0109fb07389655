// Speculative decoding in the executor: where drafts come from (prompt lookup, the draft
// model's batched passes), how many a sequence gets (adaptive length), and how a step's rows
// verify them. Engine-thread only, as the rest of the executor.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "base/logging.h"
#include "engine/executor.h"

namespace inflight {
namespace {

// Prompt lookup: the tokens that followed the latest earlier occurrence of the sequence's last
// n tokens, for n from max_ngram down to 1 (at most k of them; none without a match).
void PromptLookup(const std::vector<int32_t>& t, int32_t max_ngram, int32_t k,
                  std::vector<int32_t>* out) {
  out->clear();
  const int64_t len = static_cast<int64_t>(t.size());
  for (int64_t n = std::min<int64_t>(max_ngram, len - 1); n >= 1; --n) {
    const int32_t* tail = t.data() + len - n;
    for (int64_t start = len - n - 1; start >= 0; --start) {
      if (t[start] != tail[0] || !std::equal(tail, tail + n, t.data() + start)) continue;
      const int64_t from = start + n;
      out->assign(t.begin() + from, t.begin() + from + std::min<int64_t>(k, len - from));
      return;
    }
  }
}

}  // namespace

int32_t Executor::DraftLength(const Sequence& seq) const {
  const Request& r = seq.request->request;
  if (r.beam_width > 1) return 0;  // beams are chosen among all beams' candidates, not verified
  if (r.guide) return 0;           // drafts would need the guide's mask per verified row
  if (r.prompt_table) return 0;    // the prompt's virtual tokens mean nothing to a drafter
  const int32_t most =
      std::min(r.num_draft_tokens < 0 ? config_.max_draft_tokens : r.num_draft_tokens,
               r.max_tokens - seq.num_generated() - 1);
  if (most <= 0 || !config_.adaptive_draft_length || r.num_draft_tokens >= 0)
    return std::max(most, 0);
  // With each draft holding with probability a (after the ones before it), k drafts give
  // 1 + a + ... + a^k tokens per step for a step that costs 1 + k * (c + v): c a draft model
  // pass against a target pass (measured), v the target's cost per verified token (~5% on a
  // memory-bound decode; spec_bench). Pick the best k; with none paying off, try one draft
  // now and then (Sequence::next_probe) so a sequence whose text turns predictable gets them
  // back.
  const double a = (seq.drafts_accepted + 1) / (seq.drafts_verified + 2);  // a uniform prior
  const double c =
      draft_runner_ && target_forward_ms_ > 0 ? draft_pass_ms_ / target_forward_ms_ : 0.0;
  double best_rate = 1.0, tokens = 1.0, power = 1.0;
  int32_t best = 0;
  for (int32_t k = 1; k <= most; ++k) {
    power *= a;
    tokens += power;
    const double rate = tokens / (1.0 + k * (c + kVerifyCost));
    if (rate > best_rate) best_rate = rate, best = k;
  }
  if (best == 0 && seq.num_generated() >= seq.next_probe) best = 1;
  return best;
}

void Executor::ReleaseDraftBlocks(Sequence* seq) {
  if (draft_blocks_ && !seq->draft_blocks.empty()) draft_blocks_->Release(seq->draft_blocks);
  seq->draft_blocks.clear();
  seq->draft_computed = 0;
}

void Executor::ProposeWithDraftModel() {
  // Pass 0 catches each decoding sequence's draft cache up with its tokens (a new sequence's
  // whole prompt, else the one or few tokens since the last step) and drafts from the last
  // position; pass j feeds draft j-1 back. Every pass is one batched forward of the draft
  // model, greedy: the drafts are certain guesses, which rejection sampling keeps exact.
  const int32_t tpb = config_.tokens_per_block;
  const int32_t draft_context = draft_runner_->context_length();
  int32_t budget = config_.max_num_tokens;  // pass 0's catch-up tokens
  drafting_.clear();
  draft_plan_.chunks.clear();
  int32_t most = 0;
  for (Sequence* seq : scheduler_.running()) {
    if (seq->num_uncomputed() != 1 || seq->num_generated() == 0 || budget <= 0) continue;
    if (seq->request->output_paused) continue;  // sits this step out: no draft pass for it
    seq->draft.clear();
    const int32_t len = static_cast<int32_t>(seq->tokens.size());
    const int32_t k = std::min(DraftLength(*seq), draft_context - len + 1);
    if (k <= 0) continue;
    // The last token is always (re)computed: its logits give the first draft. Slots past it
    // hold last step's drafts and are overwritten.
    seq->draft_computed = std::min(seq->draft_computed, len - 1);
    const int32_t catch_up = std::min(len - seq->draft_computed, budget);
    const int64_t need = (static_cast<int64_t>(len) + k - 1 + tpb - 1) / tpb -
                         static_cast<int64_t>(seq->draft_blocks.size());
    if (need > draft_blocks_->NumAvailable()) continue;  // no room: no drafts this step
    for (int64_t i = 0; i < need; ++i) seq->draft_blocks.push_back(*draft_blocks_->Allocate());
    budget -= catch_up;
    seq->draft.reserve(k);
    SequenceChunk ch;
    ch.token_ids = seq->tokens.data() + seq->draft_computed;
    ch.num_tokens = catch_up;
    ch.start_pos = seq->draft_computed;
    ch.block_table = seq->draft_blocks.data();
    ch.num_blocks = static_cast<int32_t>(seq->draft_blocks.size());
    draft_plan_.chunks.push_back(ch);
    drafting_.push_back(seq);
    // A sequence still catching up on a long prompt drafts from a later step.
    seq->draft.resize(seq->draft_computed + catch_up == len ? k : 0);
    most = std::max(most, static_cast<int32_t>(seq->draft.size()));
  }
  if (drafting_.empty()) return;
  // seq->draft holds each sequence's k slots; `made` counts the drafts filled in.
  std::vector<int32_t> made(drafting_.size(), 0);
  auto ema = [](double& mean, double v) { mean = mean == 0 ? v : 0.9 * mean + 0.1 * v; };
  for (int32_t pass = 0; pass < std::max(most, 1); ++pass) {
    if (pass > 0) {
      draft_plan_.chunks.clear();
      for (size_t i = 0; i < drafting_.size(); ++i) {
        Sequence* seq = drafting_[i];
        if (made[i] != pass || static_cast<int32_t>(seq->draft.size()) <= pass) continue;
        SequenceChunk ch;
        ch.token_ids = &seq->draft[pass - 1];
        ch.num_tokens = 1;
        ch.start_pos = seq->draft_computed;
        ch.block_table = seq->draft_blocks.data();
        ch.num_blocks = static_cast<int32_t>(seq->draft_blocks.size());
        draft_plan_.chunks.push_back(ch);
      }
      if (draft_plan_.chunks.empty()) break;
    }
    const size_t rows = draft_plan_.chunks.size();
    if (draft_logits_.size() < rows * vocab_size_) draft_logits_.resize(rows * vocab_size_);
    const Clock::time_point pass_start = Clock::now();
    const Status st = draft_runner_->Forward(draft_plan_, draft_logits_.data());
    // A drafting pass's cost (a catch-up over a new sequence's prompt is not one).
    if (draft_plan_.num_tokens() <= 4 * static_cast<int64_t>(rows)) {
      ema(draft_pass_ms_,
          std::chrono::duration<double, std::milli>(Clock::now() - pass_start).count());
    }
    if (!st.ok()) {
      INFLIGHT_LOG(kWarning) << "draft model forward failed (" << st.message()
                             << "); this step runs without drafts";
      for (Sequence* seq : drafting_) {
        seq->draft.clear();
        seq->draft_computed = 0;
      }
      return;
    }
    size_t row = 0;
    for (size_t i = 0; i < drafting_.size(); ++i) {
      Sequence* seq = drafting_[i];
      if (pass == 0) {
        seq->draft_computed += draft_plan_.chunks[row].num_tokens;
      } else if (made[i] != pass || static_cast<int32_t>(seq->draft.size()) <= pass) {
        continue;
      } else {
        seq->draft_computed += 1;
      }
      if (static_cast<int32_t>(seq->draft.size()) > pass) {
        seq->draft[pass] = ArgMax(draft_logits_.data() + row * vocab_size_, vocab_size_);
        made[i] = pass + 1;
      }
      ++row;
    }
  }
  for (size_t i = 0; i < drafting_.size(); ++i) drafting_[i]->draft.resize(made[i]);
}

Status Executor::CheckTreeDrafting(ModelRunner& runner, ExecutorConfig* config) {
  const SpeculativeMode mode = config->speculative_mode;
  if (mode != SpeculativeMode::kLookahead && mode != SpeculativeMode::kMedusa &&
      mode != SpeculativeMode::kEagle)
    return OkStatus();
  if (!runner.SupportsTreeDrafts()) {
    return InvalidArgumentError(
        std::string("speculative decoding mode ") + SpeculativeModeName(mode) +
        " verifies drafts as a tree, which this model does not support (sliding-window layers, "
        "or tensor/pipeline parallelism)");
  }
  if (mode == SpeculativeMode::kEagle) return CheckEagle(runner, config);
  if (mode != SpeculativeMode::kMedusa) return OkStatus();
  if (!config->medusa_heads)
    return InvalidArgumentError("speculative decoding mode medusa needs Medusa heads");
  // The paths, checked as the parameter's are (prefixes first, indices within the top-k the
  // vocabulary allows); the default when none are given.
  const int32_t heads = config->medusa_heads->num_heads();
  auto paths = CheckMedusaChoices(
      config->medusa_choices.empty() ? DefaultMedusaChoices(heads) : config->medusa_choices, heads,
      std::min(64, runner.vocab_size()), kMaxLookaheadDrafts);
  if (!paths.ok()) return paths.status();
  config->medusa_choices = std::move(paths).value();
  return OkStatus();
}

void Executor::SetUpMedusa() {
  if (config_.speculative_mode != SpeculativeMode::kMedusa || !config_.medusa_heads) return;
  // CheckTreeDrafting put prefixes first: each node's parent is the node of its path's prefix.
  medusa_choices_ = config_.medusa_choices;
  for (const auto& path : medusa_choices_) {
    for (int32_t i : path) medusa_top_k_ = std::max(medusa_top_k_, i + 1);
    int32_t parent = -1;
    if (path.size() > 1) {
      const std::vector<int32_t> prefix(path.begin(), path.end() - 1);
      parent =
          static_cast<int32_t>(std::find(medusa_choices_.begin(), medusa_choices_.end(), prefix) -
                               medusa_choices_.begin());
    }
    medusa_parent_.push_back(parent);
  }
}

bool Executor::TreeEligible(const Sequence& seq) const {
  const Request& r = seq.request->request;
  if (r.beam_width > 1 || r.guide || r.prompt_table || r.num_draft_tokens == 0) return false;
  return r.max_tokens - seq.num_generated() - 1 > 0;
}

bool Executor::TreePays(const Sequence& seq, double x, double extra_ms, bool probe) const {
  if (!config_.adaptive_draft_length || x <= 0) return true;
  if (probe && seq.num_generated() >= seq.next_probe) return true;  // tried now and then
  // A tree's x tokens slow the whole step by x rows' cost; the step's B rows make B tokens,
  // so the tree pays when its expected accepted tokens exceed x * (row cost * B / step). The
  // extra rows' cost comes from the step cost model (a step of the last step's decode rows at
  // this context, with and without the tree): rows and the positions they attend to both
  // grow with it.
  const double rows = std::max(last_gen_seqs_, 1);
  double share = kVerifyCost, step_ms = target_forward_ms_;
  const StepCostModel& cost = step_budget_.cost();
  if (cost.ready()) {
    StepShape base;
    base.decode_rows = rows;
    base.decode_positions = rows * seq.num_computed;
    StepShape more = base;
    more.decode_rows += x;
    more.decode_positions += AttendedPositions(seq.num_computed, x);
    const double t0 = cost.PredictMs(base), t1 = cost.PredictMs(more);
    // A draft row costs what a prompt token does (both are rows of the step's matmuls,
    // attending to about as many positions): the prompt fit is well identified, the decode
    // fit's per-row term is not when every decode step has the same rows (its fixed cost
    // takes them: a batch of 16 then saw trees as nearly free and ran 0.8x); a tree row as
    // measured (ObserveTreeRows) when dearer. Never below the memory-bound guess either.
    const double row_ms = std::max({(t1 - t0) / x, cost.ms_per_context_token(), tree_row_ms_});
    if (t0 > 0) share = std::max(share, row_ms / t0 * rows);
    if (t0 > 0) step_ms = t0;
  }
  // Tokens accepted per tree (decayed), with a prior of one. extra_ms (the Medusa heads' pass,
  // shared by the step's rows) counts as that much of a step per row.
  const double expected = (seq.drafts_accepted + 1) / (seq.drafts_verified + 1);
  const double extra = step_ms > 0 ? extra_ms / step_ms : 0.0;
  return expected > share * x + extra;
}

void Executor::FinishTree(Sequence* seq) {
  const Request& r = seq->request->request;
  if (r.num_draft_tokens > 0 && static_cast<int32_t>(seq->draft.size()) > r.num_draft_tokens) {
    // The request's cap: a prefix of the tree (parents come first) is a tree. A lookahead
    // window cut short could never take its Jacobi step: it goes whole.
    int32_t keep = r.num_draft_tokens;
    if (seq->lookahead && seq->lookahead->window_in_step() &&
        keep > seq->lookahead->window_begin()) {
      keep = seq->lookahead->window_begin();
      seq->lookahead->DropWindow();
    }
    seq->draft.resize(keep);
    seq->draft_parent.resize(keep);
  }
  if (seq->draft.empty()) {
    seq->draft_parent.clear();
    return;
  }
  // The chunk's tree over [last token, drafts...]: bits of each token's branch, its depth.
  const size_t n = seq->draft.size();
  seq->step_tree.assign(1, 1);
  seq->step_depth.assign(1, 0);
  for (size_t j = 0; j < n; ++j) {
    const size_t p = static_cast<size_t>(seq->draft_parent[j] + 1);
    seq->step_tree.push_back(seq->step_tree[p] | (uint64_t{1} << (j + 1)));
    seq->step_depth.push_back(seq->step_depth[p] + 1);
  }
}

void Executor::ObserveTreeRows(const ScheduleOutput& out, const StepShape& shape) {
  // What a tree's rows cost beyond the step without them, measured: the exact tree path
  // (each branch copied and attended alone) makes them dearer than the rows the fit knows.
  if (!step_budget_.cost().ready()) return;
  StepShape plain = shape;
  double tree_rows = 0;
  for (const ScheduledChunk& c : out.chunks) {
    if (c.num_draft == 0 || c.seq->draft_parent.empty() || c.num_tokens != 1) continue;
    const double p = c.seq->num_computed;
    tree_rows += c.num_draft;
    plain.decode_rows -= c.num_draft;
    plain.decode_positions -= AttendedPositions(p, 1 + c.num_draft) - AttendedPositions(p, 1);
  }
  if (tree_rows == 0) return;
  const double ms =
      std::max(0.0, (last_forward_ms_ - step_budget_.cost().PredictMs(plain)) / tree_rows);
  tree_row_ms_ = tree_row_ms_ == 0 ? ms : 0.8 * tree_row_ms_ + 0.2 * ms;
}

void Executor::ProposeLookahead(Sequence* seq) {
  seq->draft.clear();
  seq->draft_parent.clear();
  if (!TreeEligible(*seq)) return;
  const Request& r = seq->request->request;
  if (!seq->lookahead) {
    seq->lookahead = std::make_unique<LookaheadDecoder>(
        r.lookahead.empty() ? config_.lookahead : r.lookahead,
        seq->request->id * 31 + static_cast<uint64_t>(seq->index));
  }
  LookaheadDecoder& la = *seq->lookahead;
  la.Observe(seq->tokens);
  la.Propose(seq->tokens, /*with_window=*/true, &seq->draft, &seq->draft_parent);
  if (!TreePays(*seq, static_cast<double>(seq->draft.size()))) {
    // Without the window branch only the pool's n-grams are verified; with neither paying,
    // the whole tree is tried now and then (Sequence::next_probe), which also moves the
    // window on.
    const int32_t verify = la.window_begin();
    la.DropWindow();
    if (verify > 0 && TreePays(*seq, verify)) {
      seq->draft.resize(verify);
      seq->draft_parent.resize(verify);
    } else {
      seq->draft.clear();
      seq->draft_parent.clear();
    }
  }
  FinishTree(seq);
}

void Executor::ProposeMedusa(Sequence* seq) {
  seq->draft.clear();
  seq->draft_parent.clear();
  if (!TreeEligible(*seq) || seq->medusa_len != seq->tokens.size() || seq->medusa_top.empty())
    return;
  // One node per path of medusa_choices: head d-1's top-k token at the path's last index,
  // under the node of the path's prefix (paths come after their prefixes).
  // A probe (the tree does not pay at the acceptance seen) tries the first level only: it
  // measures whether the guesses hold again at a few rows' cost (paths come shortest first).
  const bool probe_only =
      !TreePays(*seq, static_cast<double>(medusa_choices_.size()), medusa_heads_ms_, false);
  const size_t top_k = static_cast<size_t>(medusa_top_k_);
  for (size_t i = 0; i < medusa_choices_.size(); ++i) {
    const std::vector<int32_t>& path = medusa_choices_[i];
    if (probe_only && path.size() > 1) break;
    seq->draft.push_back(seq->medusa_top[(path.size() - 1) * top_k + path.back()]);
    seq->draft_parent.push_back(medusa_parent_[i]);
  }
  FinishTree(seq);
}

void Executor::RunMedusaHeads() {
  // The heads read the hidden state of each sequence's last drawn token (its row of this
  // pass) and guess the tokens after the next one; only for sequences whose next tree pays.
  const float* hidden = runner_->OutputHidden();
  if (hidden == nullptr || medusa_rows_.empty()) {
    medusa_rows_.clear();
    return;
  }
  const int64_t H = hidden_size_;
  medusa_hidden_.clear();
  medusa_for_.clear();
  for (const auto& [seq, row] : medusa_rows_) {
    if (seq->state != SequenceState::kRunning || seq->num_uncomputed() != 1) continue;
    if (!TreeEligible(*seq) ||
        !TreePays(*seq, static_cast<double>(medusa_choices_.size()), medusa_heads_ms_))
      continue;
    medusa_hidden_.insert(medusa_hidden_.end(), hidden + row * H, hidden + (row + 1) * H);
    medusa_for_.push_back(seq);
  }
  medusa_rows_.clear();
  if (medusa_for_.empty()) return;
  ThreadPool* pool = runner_->pool();
  if (pool == nullptr) return;
  const int64_t n = static_cast<int64_t>(medusa_for_.size());
  const Clock::time_point start = Clock::now();
  config_.medusa_heads->TopK(medusa_hidden_.data(), n, medusa_top_k_, &medusa_top_, *pool);
  // The heads' time per step (their weights are read once for all rows: a step's cost).
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  medusa_heads_ms_ = medusa_heads_ms_ == 0 ? ms : 0.9 * medusa_heads_ms_ + 0.1 * ms;
  const size_t per = static_cast<size_t>(config_.medusa_heads->num_heads() * medusa_top_k_);
  for (int64_t i = 0; i < n; ++i) {
    Sequence* seq = medusa_for_[i];
    seq->medusa_top.assign(medusa_top_.begin() + static_cast<std::ptrdiff_t>(i * per),
                           medusa_top_.begin() + static_cast<std::ptrdiff_t>((i + 1) * per));
    seq->medusa_len = seq->tokens.size();
  }
}

void Executor::ProposeDrafts() {
  if (config_.speculative_mode == SpeculativeMode::kNone) return;
  if (config_.speculative_mode == SpeculativeMode::kDraftModel) {
    if (draft_runner_) ProposeWithDraftModel();
    return;
  }
  if (config_.speculative_mode == SpeculativeMode::kLookahead ||
      config_.speculative_mode == SpeculativeMode::kMedusa ||
      config_.speculative_mode == SpeculativeMode::kEagle) {
    for (Sequence* seq : scheduler_.running()) {
      if (seq->num_uncomputed() != 1 || seq->num_generated() == 0) continue;  // not decoding
      if (seq->request->output_paused) continue;                              // sits this step out
      if (config_.speculative_mode == SpeculativeMode::kLookahead) {
        ProposeLookahead(seq);
      } else if (config_.speculative_mode == SpeculativeMode::kMedusa) {
        ProposeMedusa(seq);
      } else {
        ProposeEagle(seq);
      }
    }
    return;
  }
  for (Sequence* seq : scheduler_.running()) {
    if (seq->num_uncomputed() != 1 || seq->num_generated() == 0) continue;  // not decoding
    if (seq->request->output_paused) continue;                              // sits this step out
    const int32_t k = DraftLength(*seq);
    if (k <= 0) {
      seq->draft.clear();
      continue;
    }
    PromptLookup(seq->tokens, config_.prompt_lookup_ngram, k, &seq->draft);
  }
}

void Executor::VerifyTree(Sequence* seq, const float* rows, int32_t num_draft, float* scratch,
                          std::vector<SampledToken>* out) {
  out->clear();
  seq->tree_path.clear();
  if (seq->lookahead && seq->lookahead->window_in_step()) {
    // The window's last level: each row's most likely token is the column's next guess (read
    // before the walk below may apply penalties to rows in place).
    const int32_t first = seq->lookahead->window_last_level();
    const int32_t end = std::min(num_draft, first + seq->lookahead->config().window);
    std::vector<int32_t> argmax(static_cast<size_t>(std::max(end, 0)), -1);
    for (int32_t j = first; j < end; ++j)
      argmax[j] = ArgMax(rows + static_cast<int64_t>(j + 1) * vocab_size_, vocab_size_);
    seq->lookahead->Advance(argmax, num_draft);
  }
  // From the last token down: draw the node's next token (offering its first child as the
  // draft: a draw that rejects it samples the rest of the distribution, so matching any other
  // child keeps the distribution exact); a child that matches is the next node.
  const int32_t end_id = seq->request->request.end_id;
  const std::vector<int32_t>& parent = seq->draft_parent;
  int32_t node = -1, pushed = 0;
  for (;;) {
    int32_t first = -1;
    for (int32_t j = node + 1; j < num_draft; ++j) {
      if (parent[j] == node) {
        first = j;
        break;
      }
    }
    out->push_back(DrawNext(seq, rows + static_cast<int64_t>(node + 1) * vocab_size_, scratch,
                            first >= 0 ? seq->draft[first] : -1, nullptr));
    const int32_t id = out->back().id;
    if (first < 0 || id == end_id) break;
    int32_t next = -1;
    for (int32_t j = first; j < num_draft; ++j) {
      if (parent[j] == node && seq->draft[j] == id) {
        next = j;
        break;
      }
    }
    if (next < 0) break;
    seq->tree_path.push_back(next);
    seq->tokens.push_back(id);
    ++pushed;
    node = next;
  }
  seq->tokens.resize(seq->tokens.size() - pushed);  // AcceptDrawn appends them for real
  seq->medusa_row = node + 1;                       // the row whose draw came last
}

void Executor::VerifyDrafts(Sequence* seq, const float* rows, int32_t num_draft, float* scratch,
                            std::vector<SampledToken>* out) {
  if (!seq->draft_parent.empty()) {
    VerifyTree(seq, rows, num_draft, scratch, out);
    return;
  }
  // Row i chooses the token after draft i-1: accepted drafts join the sequence for the
  // next row's bad words, min_tokens and penalties, and the first mismatch ends the run (its
  // token replaces the rejected draft; all drafts matching adds one more token).
  out->clear();
  const int32_t end_id = seq->request->request.end_id;
  int32_t pushed = 0;
  // A client's drafts with their draft model's logits (verified with the prompt's last
  // chunk): speculative sampling against q = softmax(logits / temperature).
  const Request& r = seq->request->request;
  const bool with_q = !r.draft_logits.empty() && seq->num_generated() == 0 && !r.sampling.greedy();
  thread_local std::vector<float> q;
  for (int32_t i = 0; i <= num_draft; ++i) {
    const int32_t draft = i < num_draft ? seq->draft[i] : -1;
    const float* probs = nullptr;
    if (with_q && draft >= 0) {
      const float* logits = r.draft_logits.data() + static_cast<int64_t>(i) * vocab_size_;
      const float inv_t = 1.0f / r.sampling.temperature;
      q.resize(vocab_size_);
      float mx = -std::numeric_limits<float>::infinity();
      for (int32_t v = 0; v < vocab_size_; ++v) mx = std::max(mx, logits[v] * inv_t);
      double sum = 0;
      for (int32_t v = 0; v < vocab_size_; ++v) sum += (q[v] = std::exp(logits[v] * inv_t - mx));
      for (int32_t v = 0; v < vocab_size_; ++v) q[v] = static_cast<float>(q[v] / sum);
      probs = q.data();
    }
    out->push_back(
        DrawNext(seq, rows + static_cast<int64_t>(i) * vocab_size_, scratch, draft, probs));
    if (out->back().id != draft || draft == end_id) break;
    seq->tokens.push_back(draft);
    ++pushed;
  }
  seq->tokens.resize(seq->tokens.size() - pushed);          // AcceptDrawn appends them for real
  seq->medusa_row = static_cast<int32_t>(out->size()) - 1;  // the row whose draw came last
}

void Executor::AcceptDrawn(Sequence* seq, const std::vector<SampledToken>& drawn,
                           int32_t num_draft) {
  RequestState* rs = seq->request;
  const bool tree = !seq->draft_parent.empty();
  int32_t accepted = 0;
  for (size_t i = 0; i < drawn.size(); ++i) {
    if (seq->state == SequenceState::kFinished) {
      // Ended by a stop word or max_tokens inside the run: the rest was never produced.
      if (rs->request.return_generation_logits) {
        seq->generation_logits.resize(seq->generation_logits.size() -
                                      (drawn.size() - i) * static_cast<size_t>(vocab_size_));
      }
      break;
    }
    const bool is_draft = tree
                              ? i < seq->tree_path.size()
                              : static_cast<int32_t>(i) < num_draft && drawn[i].id == seq->draft[i];
    AcceptToken(seq, drawn[i]);
    if (is_draft) ++accepted;
  }
  rs->stats.num_draft_tokens += num_draft;
  rs->stats.num_accepted_draft_tokens += accepted;
  // Drafts verified: the accepted ones and the first rejected one (the rest never were); a
  // tree counts steps (its estimate is tokens accepted per tree).
  seq->drafts_verified =
      0.9 * seq->drafts_verified + (tree ? 1 : accepted + (accepted < num_draft ? 1 : 0));
  seq->drafts_accepted = 0.9 * seq->drafts_accepted + accepted * seq->accept_credit;
  seq->accept_credit = 1;
  if (accepted == 0) {
    seq->probe_interval = std::min(2 * seq->probe_interval, 256);
  } else {
    seq->probe_interval = 16;
  }
  seq->next_probe = seq->num_generated() + seq->probe_interval;
  step_draft_tokens_ += num_draft;
  step_accepted_draft_tokens_ += accepted;
  seq->draft.clear();
  seq->draft_parent.clear();
  if (seq->state == SequenceState::kFinished) return;
  if (tree && accepted > 0) {
    // The accepted branch's K/V sit at their drafts' slots (the last token's slot + 1 + draft
    // index); they move to the slots of the positions they hold. A draft's slot is never
    // before its position's, so moving in order overwrites nothing still to move.
    tree_moves_.clear();
    for (int32_t m = 0; m < accepted; ++m) {
      const int32_t from = seq->num_computed + seq->tree_path[m], to = seq->num_computed + m;
      if (from != to) tree_moves_.emplace_back(from, to);
    }
    if (!tree_moves_.empty()) {
      runner_->MoveKvSlots(seq->blocks.data(), tree_moves_);
      tree_kv_moves_.fetch_add(static_cast<int64_t>(tree_moves_.size()));
    }
  }
  // The accepted drafts' K/V were computed in this step; the rejected ones' slots are
  // overwritten later and any block only they used goes back to the pool.
  seq->num_computed += accepted;
  scheduler_.CommitFullBlocks(seq);
  scheduler_.TrimBlocks(seq);
}

}  // namespace inflight
