// The engine's state of one sequence (a request has num_return_sequences of them). Every
// sequence is "num_computed catching up to tokens.size()": a prompt, a resumed (recomputed)
// sequence and a decoding one differ only in how far behind they are. Engine-thread only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/lookahead.h"
#include "engine/request.h"
#include "kvcache/block_manager.h"
#include "model/eagle.h"
#include "sampling/sampler.h"

namespace inflight {

struct RequestState;

enum class SequenceState { kWaiting, kRunning, kFinished };

struct Sequence {
  Sequence(RequestState* owner, int32_t index, const SamplingParams& sampling)
      : request(owner), index(index), sampler(sampling) {}

  RequestState* request;
  int32_t index;
  uint64_t order = 0;  // arrival order of the request (ties in priority)
  SequenceState state = SequenceState::kWaiting;
  std::vector<int32_t> tokens;  // prompt + generated
  int32_t prompt_len = 0;
  int32_t num_computed = 0;     // tokens whose K/V are in the cache
  std::vector<int32_t> blocks;  // block table
  // Its blocks in the KV cache's window group (sliding-window layers; when the model has
  // them), index for index with `blocks`: -1 where no window sees the block any more (it went
  // back to the pool). Entries before window_first are all -1.
  std::vector<int32_t> window_blocks;
  int32_t window_first = 0;
  int32_t num_committed = 0;                     // leading blocks committed for prefix reuse
  uint64_t last_key = KvBlockManager::kRootKey;  // key of the last committed block
  bool ever_scheduled = false;
  // Partial-block reuse waiting for its copy before the next forward pass: the first
  // copy_tokens slots of block copy_src (acquired) go to blocks[copy_index].
  int32_t copy_src = -1;
  int32_t window_copy_src = -1;  // the same slots' source in the window group
  int32_t copy_tokens = 0;
  int32_t disk_blocks = 0;  // of the prefix taken at admission, read from the disk tier
  // A generation-only admission took blocks for its hand-off; their K/V is copied in once the
  // admission holds (a blocked admission drops the blocks without the copy).
  bool handoff_pending = false;
  int32_t copy_index = 0;
  int64_t scheduled_step = -1;  // last step that scheduled it
  Sampler sampler;
  FinishReason finish = FinishReason::kNotFinished;
  int32_t num_published = 0;     // generated tokens already sent to the client
  int32_t num_timed = 0;         // generated tokens already in the inter-token latency
  std::vector<float> log_probs;  // per generated token
  std::vector<std::vector<std::pair<int32_t, float>>>
      top_logprobs;  // per generated token, if asked
  float cum_log_prob = 0.0f;
  std::vector<float> generation_logits;  // [unpublished generated, vocab]
  // Speculative decoding: this step's draft tokens (verified after the forward pass) and the
  // tokens the step computes, [uncomputed tokens..., drafts...] (the chunk points into it).
  std::vector<int32_t> draft;
  std::vector<int32_t> step_tokens;
  // Drafts as a tree (lookahead decoding): draft_parent[j] is draft j's parent among the
  // drafts (-1: the sequence's last token; parents come first); empty: a chain. For the step:
  // the tree over [last token, drafts...] as SequenceChunk::tree bits and depths, its scratch
  // blocks (taken by the scheduler, given back after the pass: the exact tree path), and the
  // drafts verification accepted, in order (their K/V move to consecutive slots).
  std::vector<int32_t> draft_parent;
  std::vector<uint64_t> step_tree;
  std::vector<int32_t> step_depth;
  std::vector<int32_t> tree_scratch;
  std::vector<int32_t> tree_path;
  std::unique_ptr<LookaheadDecoder> lookahead;  // the sequence's window and n-gram pool
  // Medusa: the row (after the one the step's draw started at) whose hidden state guesses what
  // follows the last token drawn, and the heads' top-k tokens from it ([heads, top_k]), for
  // the sequence's next step when tokens.size() is still medusa_len.
  int32_t medusa_row = 0;
  std::vector<int32_t> medusa_top;
  size_t medusa_len = 0;
  // EAGLE (executor_eagle.cc): the head's K/V of this sequence, the target states of computed
  // positions not yet run through the head (pending: [rows, the states the head reads (3 x
  // hidden for EAGLE-3, 1 for EAGLE-1/2)] at consecutive
  // positions, with the token after each), and the tree drafted after the last step: its
  // tokens by node, for tokens.size() == eagle_len, and each run node's output
  // (eagle_hidden: [1 + nodes, hidden], the first the last committed row's). A dynamic tree
  // (EAGLE-2) keeps its drafted nodes' parents too (parents first), and hidden by expanded node.
  struct Eagle {
    EagleCache cache;
    EagleTree tree;
    std::vector<float> pending;
    std::vector<int32_t> pending_pos, pending_token;
    std::vector<float> hidden;
    std::vector<int32_t> draft;
    std::vector<int32_t> parent;  // dynamic tree
    size_t len = 0;
    bool probe = false;  // the tree drafted holds one level (a probe)
  };
  std::unique_ptr<Eagle> eagle;
  // Draft model: its own KV blocks (no prefix sharing) and how many leading tokens they hold.
  std::vector<int32_t> draft_blocks;
  int32_t draft_computed = 0;
  // Decayed counts of the executor's drafts verified and accepted (a draft after a rejection
  // is not verified): their ratio estimates how often the next draft holds.
  double drafts_verified = 0, drafts_accepted = 0;
  // What an accepted draft of the tree being verified counts for in drafts_accepted: an EAGLE
  // probe drafts one level, so a guess of it that holds stands for the whole tree's depth (at
  // one token a probe at most, a dynamic tree of 6 nodes never looked worth its rows).
  int32_t accept_credit = 1;
  // When no draft pays off, one is tried at generated token next_probe; each failed try
  // doubles the wait (16, 32, ... 256 tokens).
  int32_t next_probe = 16, probe_interval = 16;
  // Beam search: this round's candidate continuations (token, log-prob), best first; a beam
  // that has reported waits (fully computed) until all its request's beams have.
  std::vector<std::pair<int32_t, float>> beam_candidates;
  bool beam_reported = false;
  std::unique_ptr<TokenConstraint> constraint;  // guided decoding: where the output is

  int32_t num_generated() const { return static_cast<int32_t>(tokens.size()) - prompt_len; }
  int32_t num_uncomputed() const { return static_cast<int32_t>(tokens.size()) - num_computed; }
};

// A beam-search hypothesis that has ended (or the live beams when the request ends).
struct BeamHypothesis {
  std::vector<int32_t> tokens;  // generated (the end token is not in it)
  std::vector<float> log_probs;
  float cum_log_prob = 0.0f;
  float score = 0.0f;
  FinishReason finish = FinishReason::kNotFinished;
};

// A request's engine-side state.
struct RequestState {
  RequestId id = 0;
  Request request;
  RequestStats stats;
  Clock::time_point deadline = Clock::time_point::max();
  std::vector<std::unique_ptr<Sequence>> sequences;  // [0] runs the prompt; others fork from it
  bool forked = false;
  int32_t num_finished = 0;
  std::vector<float> context_logits;  // [prompt_len, vocab] when requested
  int32_t num_context_logits = 0;     // rows filled so far
  bool context_logits_sent = false;
  // Context-only: the hand-off exported when its sequence finished.
  std::shared_ptr<const KvHandoff> context_phase;
  // Its client is behind on reading its output (OutputCredit paused): not scheduled this step.
  bool output_paused = false;
  std::vector<BeamHypothesis> beam_hypotheses;  // best score first, at most beam_width

  int64_t mark = -1;     // the scheduler's per-step walks
  bool touched = false;  // the executor publishes its results at the end of the step
  Clock::time_point last_step_with_tokens{};  // for the inter-token latency

  // The sequences it may run at once (beams, or returned sequences once forked).
  int32_t MaxLiveSequences() const {
    return std::max(request.beam_width, request.num_return_sequences);
  }

  // Blocks the request may still have to allocate to run to completion: each unfinished
  // sequence grows its table to ceil((prompt + max_tokens) / tokens_per_block) blocks, and
  // sequences not forked yet will share the prompt's full blocks.
  int64_t OutstandingBlocks(int32_t tokens_per_block) const {
    const int64_t prompt = static_cast<int64_t>(request.prompt_ids.size());
    const int64_t lifetime =
        (prompt + request.max_tokens + tokens_per_block - 1) / tokens_per_block;
    if (request.beam_width > 1) {
      // Beams share blocks copy-on-write, so the group never holds more than beam_width
      // whole tables: what it lacks of that is outstanding.
      std::vector<int32_t> held;
      for (const auto& s : sequences) {
        if (s->state != SequenceState::kFinished)
          held.insert(held.end(), s->blocks.begin(), s->blocks.end());
      }
      std::sort(held.begin(), held.end());
      const int64_t distinct = std::unique(held.begin(), held.end()) - held.begin();
      return std::max<int64_t>(0, request.beam_width * lifetime - distinct);
    }
    int64_t need = 0;
    for (const auto& s : sequences) {
      if (s->state != SequenceState::kFinished)
        need += std::max<int64_t>(0, lifetime - static_cast<int64_t>(s->blocks.size()));
    }
    if (!forked)
      need += (request.num_return_sequences - 1) * (lifetime - prompt / tokens_per_block);
    return need;
  }
};

}  // namespace inflight
