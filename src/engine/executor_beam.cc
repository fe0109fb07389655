// Beam search inside the in-flight step. A request's beams are its sequences: each beam
// computes its next token's logits whenever the scheduler runs it (beams of one request may
// run in different steps, or be paused and recomputed) and reports its best candidates; once
// every live beam has reported and is resident, AdvanceBeams picks the next beams among all
// candidates, as Hugging Face's BeamSearchScorer does, and moves the sequences onto them.
// A beam that continues another beam takes a reference to each of its blocks; the partial last
// block, the only one the next step writes, is copied for all but one of the beams sharing it.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include "base/check.h"
#include "engine/executor.h"

namespace inflight {
namespace {

float LengthPenalised(float cum_log_prob, int32_t length, float length_penalty) {
  if (length_penalty == 0.0f) return cum_log_prob;
  return cum_log_prob / std::pow(static_cast<float>(std::max(length, 1)), length_penalty);
}

}  // namespace

// Beam search: each beam reports its best candidates; once all have, AdvanceBeams moves them
// (EndStep); the beams' results go out together (PublishBeams), never per sequence.
class Executor::BeamDecoding final : public Executor::Decoding {
 public:
  using Decoding::Decoding;
  Status Validate(const Request& r) const override {
    if (r.num_return_sequences > r.beam_width) {
      return InvalidArgumentError(
          "num_return_sequences (" + std::to_string(r.num_return_sequences) +
          ") must not exceed beam_width (" + std::to_string(r.beam_width) + ")");
    }
    if (r.return_generation_logits)
      return InvalidArgumentError(
          "generation logits are not returned with beam search (beam_width > 1)");
    if (!r.draft_tokens.empty())
      return InvalidArgumentError(
          "draft tokens cannot be verified with beam search (beam_width > 1)");
    if (!std::isfinite(r.length_penalty))
      return InvalidArgumentError("length_penalty must be finite");
    if (!std::isfinite(r.beam_search_diversity_rate) || r.beam_search_diversity_rate < 0) {
      return InvalidArgumentError("beam_search_diversity_rate must be >= 0");
    }
    if (r.early_stopping < 0) return InvalidArgumentError("early_stopping must be >= 0");
    if (r.guide)
      return InvalidArgumentError(
          "guided decoding is not supported with beam search (beam_width > 1)");
    return OkStatus();
  }
  int64_t BlocksNeededAtOnce(const Request& r, int64_t, int64_t lifetime) const override {
    return r.beam_width * lifetime;  // all beams resident to advance
  }
  void Draw(const PendingSample& p, float* scratch, std::vector<SampledToken>*) override {
    e_.BeamCandidates(p.seq, p.row, scratch);
  }
  void Accept(const PendingSample& p, std::vector<SampledToken>&) override {
    p.seq->beam_reported = true;  // AdvanceBeams moves the beams once all have reported
  }
  void EndStep(RequestState* rs) override { e_.AdvanceBeams(rs); }
  void End(RequestState* rs, FinishReason reason) override { e_.FinishBeams(rs, reason); }
  void Publish(RequestState*) override {}  // AdvanceBeams and FinishBeams publish
};

std::unique_ptr<Executor::Decoding> Executor::MakeBeamDecoding(Executor& e) {
  return std::make_unique<BeamDecoding>(e);
}

void Executor::BeamCandidates(Sequence* seq, const float* logits_row, float* scratch) {
  // Engine-side logits processing as for sampling (bad words, min_tokens, bias, penalties,
  // temperature); top-k, top-p and min-p do not apply to beam search.
  const Request& r = seq->request->request;
  std::copy(logits_row, logits_row + vocab_size_, scratch);
  BanTokens(*seq, scratch);
  seq->sampler.ApplyPenaltiesTo(scratch, vocab_size_);
  // 2 * beam_width candidates per beam: after at most beam_width end tokens among the overall
  // best, beam_width continuations remain.
  TopLogProbs(scratch, vocab_size_, r.sampling.temperature, 2 * r.beam_width,
              &seq->beam_candidates);
}

void Executor::AddHypothesis(RequestState* rs, const Sequence& parent, int32_t token,
                             float log_prob, FinishReason reason) {
  BeamHypothesis h;
  h.tokens.assign(parent.tokens.begin() + parent.prompt_len, parent.tokens.end());
  h.log_probs = parent.log_probs;
  h.cum_log_prob = parent.cum_log_prob;
  int32_t length = static_cast<int32_t>(h.tokens.size());
  if (token >= 0) {
    // The end token counts in the score and length but is not output.
    h.cum_log_prob += log_prob;
    ++length;
    if (reason != FinishReason::kEndId) {
      h.tokens.push_back(token);
      h.log_probs.push_back(log_prob);
    }
  }
  h.score = LengthPenalised(h.cum_log_prob, length, rs->request.length_penalty);
  h.finish = reason;
  auto& hyps = rs->beam_hypotheses;
  const size_t width = static_cast<size_t>(rs->request.beam_width);
  if (hyps.size() >= width && h.score <= hyps.back().score) return;
  // After the equal scores already in: earlier hypotheses win ties.
  auto at = std::upper_bound(hyps.begin(), hyps.end(), h.score,
                             [](float s, const BeamHypothesis& x) { return s > x.score; });
  hyps.insert(at, std::move(h));
  if (hyps.size() > width) hyps.pop_back();
}

void Executor::AdvanceBeams(RequestState* rs) {
  const Request& r = rs->request;
  const int32_t width = r.beam_width;
  std::vector<Sequence*> live;
  for (auto& s : rs->sequences) {
    if (s->state == SequenceState::kFinished) continue;
    if (!s->beam_reported || s->state != SequenceState::kRunning || s->num_uncomputed() != 0)
      return;
    live.push_back(s.get());
  }
  if (live.empty()) return;
  const Clock::time_point now = Clock::now();
  if (rs->stats.first_token_time == Clock::time_point{}) rs->stats.first_token_time = now;
  rs->stats.last_token_time = now;

  struct Candidate {
    float rank_score;  // cum log-prob less the diversity penalty: the selection order
    int32_t parent;    // index into live
    int32_t token;
    float log_prob;
  };
  std::vector<Candidate> candidates;
  for (int32_t b = 0; b < static_cast<int32_t>(live.size()); ++b) {
    const auto& cands = live[b]->beam_candidates;
    for (int32_t k = 0; k < static_cast<int32_t>(cands.size()); ++k) {
      const float cum = live[b]->cum_log_prob + cands[k].second;
      candidates.push_back({cum - r.beam_search_diversity_rate * static_cast<float>(k), b,
                            cands[k].first, cands[k].second});
    }
  }
  // Stable: ties keep beam order, then candidate rank.
  std::stable_sort(
      candidates.begin(), candidates.end(),
      [](const Candidate& a, const Candidate& b) { return a.rank_score > b.rank_score; });

  // The best beam_width continuations go on; an ending candidate among the best beam_width
  // becomes a hypothesis (one ranked lower would have been beaten by a continuing beam).
  const int32_t generated = live[0]->num_generated() + 1;  // all beams have the same length
  std::vector<Candidate> next;
  for (size_t i = 0; i < candidates.size() && static_cast<int32_t>(next.size()) < width; ++i) {
    const Candidate& c = candidates[i];
    Sequence* parent = live[c.parent];
    FinishReason ends = FinishReason::kNotFinished;
    if (c.token == r.end_id) {
      ends = FinishReason::kEndId;
    } else if (generated >= r.min_tokens && !r.stop_words.empty()) {
      parent->tokens.push_back(c.token);
      if (StopWordMatched(*parent)) ends = FinishReason::kStopWords;
      parent->tokens.pop_back();
    }
    if (ends != FinishReason::kNotFinished) {
      if (static_cast<int32_t>(i) < width) AddHypothesis(rs, *parent, c.token, c.log_prob, ends);
      continue;
    }
    next.push_back(c);
  }
  rs->stats.num_generated_tokens += static_cast<int32_t>(live.size());

  const int32_t prompt_len = live[0]->prompt_len;
  const bool at_length = generated >= r.max_tokens || prompt_len + generated >= context_length_;
  bool done = next.empty();
  const auto& hyps = rs->beam_hypotheses;
  if (!done && static_cast<int32_t>(hyps.size()) >= width) {
    if (r.early_stopping == 1) {
      done = true;
    } else {
      // Done when no live beam can beat the worst hypothesis kept: at its current length
      // (early_stopping 0) or at the longest length it may still reach (> 1, for a positive
      // length penalty, which favours longer hypotheses).
      float best = -std::numeric_limits<float>::infinity();
      for (const Candidate& c : next)
        best = std::max(best, live[c.parent]->cum_log_prob + c.log_prob);
      const int32_t length = r.early_stopping > 1 && r.length_penalty > 0
                                 ? std::min(r.max_tokens, context_length_ - prompt_len)
                                 : generated;
      done = hyps.back().score >= LengthPenalised(best, length, r.length_penalty);
    }
  }
  if (!done && at_length) {
    for (const Candidate& c : next)
      AddHypothesis(rs, *live[c.parent], c.token, c.log_prob, FinishReason::kLength);
    done = true;
  }
  if (done) {
    FinishBeams(rs, FinishReason::kNotFinished);
    return;
  }

  // Move the sequences onto the next beams. A parent keeps its sequence for its first child;
  // further children take the sequences of parents without children (or new ones at the first
  // step). Their state is copied before any sequence changes: parents with children are never
  // overwritten, so copying from them in any order is safe.
  const int32_t tpb = config_.tokens_per_block;
  std::vector<int32_t> children(live.size(), 0);
  std::vector<Sequence*> target(next.size(), nullptr);
  for (size_t j = 0; j < next.size(); ++j) {
    if (children[next[j].parent]++ == 0) target[j] = live[next[j].parent];
  }
  std::vector<Sequence*> spare;
  for (size_t b = 0; b < live.size(); ++b) {
    if (children[b] == 0) spare.push_back(live[b]);
  }
  for (size_t j = 0; j < next.size(); ++j) {
    if (target[j] != nullptr) continue;
    const Sequence* parent = live[next[j].parent];
    Sequence* seq;
    if (!spare.empty()) {
      seq = spare.back();
      spare.pop_back();
      scheduler_.DropBlocks(seq);  // a parent without children: nothing refers to them
    } else {
      SamplingParams sp = r.sampling;
      sp.compute_logprobs = r.return_log_probs;
      auto fresh = std::make_unique<Sequence>(rs, static_cast<int32_t>(rs->sequences.size()), sp);
      fresh->order = parent->order;
      fresh->ever_scheduled = true;
      fresh->sampler.AddPromptTokens(r.prompt_ids.data(),
                                     static_cast<int64_t>(r.prompt_ids.size()));
      seq = fresh.get();
      scheduler_.AddRunning(seq);
      rs->sequences.push_back(std::move(fresh));
    }
    seq->tokens = parent->tokens;
    seq->prompt_len = parent->prompt_len;
    seq->log_probs = parent->log_probs;
    seq->cum_log_prob = parent->cum_log_prob;
    scheduler_.ShareBlocks(*parent, seq, parent->blocks.size());
    seq->num_computed = parent->num_computed;
    seq->num_committed = parent->num_committed;
    seq->last_key = parent->last_key;
    target[j] = seq;
  }
  // Fewer continuations than beams (stop words ended several): the rest end here.
  for (Sequence* seq : spare) FinishSequence(seq, FinishReason::kNotFinished);

  for (size_t j = 0; j < next.size(); ++j) {
    Sequence* seq = target[j];
    seq->tokens.push_back(next[j].token);
    seq->log_probs.push_back(next[j].log_prob);
    seq->cum_log_prob += next[j].log_prob;
    seq->beam_reported = false;
    if (seq->sampler.modifies_logits())
      seq->sampler.SetOutputTokens(seq->tokens.data() + seq->prompt_len, seq->num_generated());
  }
  // Copy-on-write: the next step writes each beam's next token into its partial last block;
  // every beam but the last one sharing it gets its own copy.
  for (size_t j = 0; j < next.size(); ++j) {
    Sequence* seq = target[j];
    const int32_t used = seq->num_computed % tpb;
    if (!scheduler_.CopyLastBlock(seq, used, copy_block_))
      scheduler_.Requeue(seq);  // max_utilization, out of blocks: recompute this beam later
  }
  rs->forked = true;
  if (r.streaming) PublishBeams(rs, false);
}

void Executor::FinishBeams(RequestState* rs, FinishReason live_reason) {
  // Cancelled or timed out: the live beams count as hypotheses as they stand.
  if (live_reason != FinishReason::kNotFinished) {
    for (auto& s : rs->sequences) {
      if (s->state != SequenceState::kFinished &&
          (s->num_generated() > 0 || rs->beam_hypotheses.empty())) {
        AddHypothesis(rs, *s, -1, 0.0f, live_reason);
      }
    }
  }
  for (auto& s : rs->sequences) {
    if (s->state != SequenceState::kFinished) FinishSequence(s.get(), FinishReason::kNotFinished);
  }
  rs->forked = true;
  PublishBeams(rs, true);
  for (auto& s : rs->sequences) s->num_published = -1;
}

void Executor::PublishBeams(RequestState* rs, bool final) {
  const Request& r = rs->request;
  Result res;
  res.request_id = rs->id;
  res.vocab_size = vocab_size_;
  res.decoding_iteration = static_cast<int32_t>(iteration_);
  auto add = [&](const std::vector<int32_t>& generated, const std::vector<float>& log_probs,
                 float cum, float score, FinishReason finish) {
    BeamOutput b;
    if (!r.streaming && !r.exclude_input_in_output) b.output_token_ids = r.prompt_ids;
    b.output_token_ids.insert(b.output_token_ids.end(), generated.begin(), generated.end());
    if (r.return_log_probs) b.log_probs = log_probs;
    b.cum_log_prob = cum;
    b.score = score;
    b.finish_reason = finish;
    res.beams.push_back(std::move(b));
  };
  if (final) {
    const size_t n =
        std::min(rs->beam_hypotheses.size(), static_cast<size_t>(r.num_return_sequences));
    for (size_t i = 0; i < n; ++i) {
      const BeamHypothesis& h = rs->beam_hypotheses[i];
      add(h.tokens, h.log_probs, h.cum_log_prob, h.score, h.finish);
    }
  } else {
    // The live beams, best first: provisional, all generated tokens so far.
    std::vector<const Sequence*> live;
    for (auto& s : rs->sequences) {
      if (s->state != SequenceState::kFinished) live.push_back(s.get());
    }
    std::stable_sort(live.begin(), live.end(), [](const Sequence* a, const Sequence* b) {
      return a->cum_log_prob > b->cum_log_prob;
    });
    for (size_t i = 0; i < live.size() && i < static_cast<size_t>(r.num_return_sequences); ++i) {
      const Sequence* s = live[i];
      const std::vector<int32_t> generated(s->tokens.begin() + s->prompt_len, s->tokens.end());
      add(generated, s->log_probs, s->cum_log_prob,
          LengthPenalised(s->cum_log_prob, s->num_generated(), r.length_penalty),
          FinishReason::kNotFinished);
    }
  }
  if (!res.beams.empty()) {
    res.output_token_ids = res.beams[0].output_token_ids;
    res.log_probs = res.beams[0].log_probs;
    res.cum_log_prob = res.beams[0].cum_log_prob;
    res.finish_reason = res.beams[0].finish_reason;
  } else if (final && !r.streaming && !r.exclude_input_in_output) {
    res.output_token_ids = r.prompt_ids;
  }
  if (r.return_context_logits && !rs->context_logits_sent &&
      rs->num_context_logits == static_cast<int32_t>(r.prompt_ids.size())) {
    res.context_logits = rs->context_logits;
    rs->context_logits_sent = true;
  }
  res.is_final = res.is_sequence_final = final;
  if (final) res.stats = rs->stats;
  Deliver(rs, std::move(res));
}

}  // namespace inflight
