// Lookahead decoding (Fu et al., "Break the Sequential Dependency of LLM Inference Using
// Lookahead Decoding"; TensorRT-LLM's lookahead mode): no extra weights. Each step verifies,
// beside the sequence's next token, a tree of drafts made of two branches:
//   - the verification branch: up to G n-grams from the sequence's pool whose first token is
//     the sequence's last one (their N-1 following tokens, merged into a trie);
//   - the lookahead branch: a window of W columns by N-1 levels of Jacobi guesses. Level 0
//     column i sits at position last+1+i and level l of column i at last+1+i+l: a token sees
//     level 0 up to its column and the levels below it in its column (a tree: level 0 is a
//     chain, each column a chain above it). The last level's outputs are the next guesses;
//     each column then yields an n-gram (its levels and the new guess) for the pool.
// The pool also takes every n-gram of the prompt and of the accepted text (most recent first,
// at most G per first token), so copied text is found as prompt lookup finds it.
// One object per sequence, engine-thread only.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"

namespace inflight {

// TensorRT-LLM's (window, n-gram, verification set) triple. All 0: not set.
struct LookaheadConfig {
  int32_t window = 0;            // W: Jacobi columns
  int32_t ngram = 0;             // N: n-gram length (levels = N - 1)
  int32_t verification_set = 0;  // G: n-grams verified per step (and kept per first token)

  bool empty() const { return window == 0 && ngram == 0 && verification_set == 0; }
  // Draft tokens of the largest tree a step can carry: (W + G) * (N - 1).
  int32_t MaxDrafts() const { return (window + verification_set) * (ngram - 1); }
  // INVALID_ARGUMENT naming the field (prefix + "window_size" etc.): W >= 1, N >= 2, G >= 1 and
  // a tree of at most kMaxLookaheadDrafts drafts.
  Status Validate(const std::string& prefix) const;
  // A request's triple may not exceed its model's in any field.
  Status ValidateWithin(const LookaheadConfig& model, const std::string& prefix) const;
};

// A tree pass carries at most 64 tokens: the sequence's next one and 63 drafts.
inline constexpr int32_t kMaxLookaheadDrafts = 63;

class LookaheadDecoder {
 public:
  // seed: picks the window's first guesses among the prompt's tokens (reproducible).
  LookaheadDecoder(const LookaheadConfig& config, uint64_t seed);

  // Adds the n-grams ending at the tokens not seen before (the whole prompt the first time,
  // then the tokens each step accepted) to the pool.
  void Observe(const std::vector<int32_t>& tokens);

  // This step's tree after the sequence's last token: drafts in an order where a parent comes
  // before its children, parent[j] the index of draft j's parent (-1: the last token).
  // with_window: include the lookahead branch (else the verification branch only).
  void Propose(const std::vector<int32_t>& tokens, bool with_window, std::vector<int32_t>* draft,
               std::vector<int32_t>* parent);
  // After the pass: argmax[j] is the most likely token after draft j (its row's argmax) for
  // the num_run leading drafts that ran. Moves the window one Jacobi step when its whole
  // branch ran; no-op otherwise.
  void Advance(const std::vector<int32_t>& argmax, int32_t num_run);

  // Where this step's lookahead branch starts among the drafts (drafts before it are the
  // verification branch); the last level starts at window_last_level().
  int32_t window_begin() const { return window_begin_; }
  int32_t window_last_level() const { return window_begin_ + (config_.ngram - 2) * config_.window; }
  bool window_in_step() const { return window_in_step_; }
  // This step runs only the drafts before window_begin() (the verification branch).
  void DropWindow() { window_in_step_ = false; }
  const LookaheadConfig& config() const { return config_; }
  // N-grams in the pool (for tests and bounds).
  int64_t pool_size() const;

 private:
  void AddNgram(const int32_t* ngram);  // N tokens: the key and N - 1 followers
  LookaheadConfig config_;
  uint64_t rng_;
  // Per first token: up to G n-grams' N - 1 followers, newest first, back to back.
  std::unordered_map<int32_t, std::vector<int32_t>> pool_;
  // The window: level l column i at levels_[l * W + i]; empty until the first Propose with
  // a window (seeded from the sequence's tokens).
  std::vector<int32_t> levels_;
  int32_t window_begin_ = 0;
  bool window_in_step_ = false;
  int64_t observed_ = 0;  // tokens whose n-grams are in the pool
};

}  // namespace inflight
