// The in-flight batching executor (TensorRT-LLM's Executor): requests join the running batch
// at the next step, finished ones leave at once and free their KV blocks, and context chunks
// and generation tokens of different requests run fused in one forward pass.
//
// One engine thread owns the scheduler, the block manager and every request's state, with no
// locks inside the step: admit -> cancel/time out -> schedule -> forward -> sample -> publish
// -> retire. Other threads talk to it through two hand-offs only: the submission queue
// (Enqueue, Cancel) and each request's result channel (AwaitResponses or the request's
// on_result callback). Every public method is thread-safe.
//
// Batch invariance (a request's greedy output never depends on its batch mates): every row of
// the forward pass is computed by the same code path whatever the batch holds. Matmuls quantize
// and reduce each token row on its own (token groups only share weight loads, never sums),
// attention runs per (token, head) over that sequence's own blocks, and every K/V value is read
// back from the cache in its stored dtype, so a token computed in a chunk, in a full prompt, in
// a decode step, on a resume after a pause, or served from the prefix cache holds the same bits.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/executor_config.h"
#include "engine/model_runner.h"
#include "engine/output_stream.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "kvcache/block_manager.h"
#include "kvcache/kv_disk_reader.h"
#include "kvcache/kv_disk_store.h"
#include "kvcache/kv_events.h"

namespace inflight {

class Executor {
 public:
  // Starts the engine thread over `runner` (owned); `draft` runs the draft model when
  // config.speculative_mode is kDraftModel.
  // `disk`: the KV cache's disk tier (CreateWithRunner opens it from the config).
  Executor(std::unique_ptr<ModelRunner> runner, const ExecutorConfig& config,
           std::unique_ptr<ModelRunner> draft = nullptr,
           std::unique_ptr<KvDiskStore> disk = nullptr);
  // A LocalModelRunner over `model` (which must outlive the executor), and one over
  // `draft_model` on the same compute threads when speculative_mode is kDraftModel (it must
  // share the vocabulary).
  static StatusOr<std::unique_ptr<Executor>> Create(const Model& model,
                                                    const ExecutorConfig& config,
                                                    const Model* draft_model = nullptr);
  // The same over any runner (e.g. a tensor/pipeline-parallel one); the draft model runs on the
  // runner's compute threads.
  static StatusOr<std::unique_ptr<Executor>> CreateWithRunner(std::unique_ptr<ModelRunner> runner,
                                                              const ExecutorConfig& config,
                                                              const Model* draft_model = nullptr);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Validates and queues a request. INVALID_ARGUMENT for a request that can never be served
  // (bad ids, prompt + max_tokens over the context or over the whole KV cache, ...),
  // RESOURCE_EXHAUSTED when the queue is full, UNAVAILABLE after Shutdown.
  StatusOr<RequestId> Enqueue(Request request);

  // Results of `id` that arrived, waiting up to `timeout` for the first. Empty on timeout or
  // for an unknown id; after the final result the id is forgotten.
  std::vector<Result> AwaitResponses(RequestId id, std::chrono::milliseconds timeout);

  // Cancels at the next step boundary: a final result (kCancelled) with what was generated,
  // blocks freed. Unknown or finished ids are ignored.
  void Cancel(RequestId id);

  // OK while the model runs; UNAVAILABLE once its runner failed for good (a parallel rank
  // died): Enqueue then refuses, and every request the engine still holds fails at its next step.
  Status Health() const { return runner_->Health(); }

  // Finishes every outstanding request with kCancelled and stops the engine thread.
  void Shutdown();

  // Stats of the steps since the last call (the newest 1000 at most).
  std::vector<IterationStats> GetLatestIterationStats();

  // KV cache events (config.kv_event_buffer_size > 0; group 0 the full-attention blocks, 1 the
  // window group's): those after `after_id`, or FAILED_PRECONDITION when they are off.
  // Thread-safe.
  StatusOr<KvEventLog::Read> KvEvents(uint64_t after_id, size_t max) const;
  // The disk tier's figures (files, bytes, hits, writes, drops); nullopt when it is off.
  // Thread-safe.
  std::optional<KvDiskStats> KvDiskStatistics() const;
  uint64_t num_kv_events_dropped() const { return kv_events_ ? kv_events_->num_dropped() : 0; }
  // Every reusable block of both groups, taken on the engine thread between steps, with the
  // id of the last event it reflects. UNAVAILABLE when the engine does not answer in
  // `timeout` or stops. Thread-safe.
  StatusOr<KvCacheSnapshot> KvSnapshot(std::chrono::milliseconds timeout);
  IterationStats LastIterationStats() const;
  BlockCounts KvBlockCounts() const;
  // The window group's blocks (sliding-window layers; all 0 when the cache has none).
  BlockCounts WindowKvBlockCounts() const;
  // The draft model's KV blocks (all free when it has none).
  BlockCounts DraftKvBlockCounts() const;
  int32_t num_kv_blocks() const { return num_kv_blocks_; }
  // K/V slots moved after tree verification so far (an accepted branch off the first path).
  int64_t num_tree_kv_moves() const { return tree_kv_moves_.load(); }
  int32_t vocab_size() const { return vocab_size_; }
  int32_t context_length() const { return context_length_; }
  const ExecutorConfig& config() const { return config_; }
  // Requests enqueued and not finished yet.
  int64_t num_unfinished_requests() const { return num_unfinished_.load(); }
  // Requests enqueued and not yet admitted by the engine thread.
  int64_t num_queued_requests() const { return num_queued_.load(); }

 private:
  Status Validate(const Request& r) const;
  // Disaggregated serving: whether this executor can export and import hand-offs, and a
  // generation-only request's hand-off against its prompt, salt and adapter (after Enqueue
  // salted it).
  Status CheckDisaggregated(const Request& r) const;
  // A context-only request as the context phase runs it: one sequence drawing one token.
  static void AsContextPhase(Request* r);
  // Context-only: the hand-off of the sequence's whole prompt blocks (engine thread, before its
  // blocks are released).
  void ExportHandoff(Sequence* seq);
  void Loop();
  void Admit(std::vector<std::pair<RequestId, Request>>& submissions);
  void HandleCancellationsAndTimeouts(const std::vector<RequestId>& cancels);
  // Answers other threads' snapshot requests (engine thread, between steps).
  void AnswerSnapshots(std::vector<std::shared_ptr<std::promise<KvCacheSnapshot>>>& requests);
  // One step; false when it scheduled nothing.
  bool RunStep();
  void ProposeDrafts();
  int32_t DraftLength(const Sequence& seq) const;
  void ProposeWithDraftModel();
  void ReleaseDraftBlocks(Sequence* seq);
  void ProcessChunk(const ScheduledChunk& chunk, int64_t context_rows, const float* logits,
                    int64_t rows);
  void BanTokens(const Sequence& seq, float* logits) const;
  // Beam search (executor_beam.cc).
  void BeamCandidates(Sequence* seq, const float* logits_row, float* scratch);
  void AdvanceBeams(RequestState* rs);
  void AddHypothesis(RequestState* rs, const Sequence& parent, int32_t token, float log_prob,
                     FinishReason reason);
  void FinishBeams(RequestState* rs, FinishReason live_reason);
  void PublishBeams(RequestState* rs, bool final);
  SampledToken DrawNext(Sequence* seq, const float* logits_row, float* scratch, int32_t draft = -1,
                        const float* draft_probs = nullptr);
  void VerifyDrafts(Sequence* seq, const float* rows, int32_t num_draft, float* scratch,
                    std::vector<SampledToken>* out);
  void AcceptDrawn(Sequence* seq, const std::vector<SampledToken>& drawn, int32_t num_draft);
  // Drafts as a tree: walks from the last token down the children the draws match (the path
  // goes to seq->tree_path); a lookahead sequence's window moves one Jacobi step.
  void VerifyTree(Sequence* seq, const float* rows, int32_t num_draft, float* scratch,
                  std::vector<SampledToken>* out);
  // Lookahead decoding's tree for a decoding sequence, when it pays off (else none, trying
  // now and then).
  void ProposeLookahead(Sequence* seq);
  // Lookahead and Medusa need a runner that verifies trees; Medusa its heads and paths (put
  // in order, prefixes first). INVALID_ARGUMENT naming what is wrong.
  static Status CheckTreeDrafting(ModelRunner& runner, ExecutorConfig* config);
  // EAGLE's head (matching the model; the runner keeps the layer inputs it reads) and paths.
  static Status CheckEagle(ModelRunner& runner, ExecutorConfig* config);
  void SetUpMedusa();  // the paths' parents and the top-k they need
  // Medusa's tree from the heads' guesses of the last step (RunMedusaHeads).
  void ProposeMedusa(Sequence* seq);
  void RunMedusaHeads();
  // EAGLE (executor_eagle.cc): the choices' parents, ancestors and depths; after sampling, the
  // step's target states of each sequence go through the head (at once while its prompt runs
  // or when its next tree pays, else kept pending) and the head drafts its tree level by
  // level; the next step verifies it.
  void SetUpEagle();
  void RunEagle();
  // EAGLE-2: the dynamic trees of `drafting` from their first levels (roots[s]: sequence s's
  // last committed row's top-k tokens and log-probabilities); probes keep the best one.
  void DraftEagleDynamic(const std::vector<Sequence*>& drafting,
                         const std::vector<char>& probe_only,
                         const std::vector<std::vector<std::pair<int32_t, float>>>& roots);
  void ProposeEagle(Sequence* seq);
  // Whether a request's sequence may verify a tree of drafts now, and whether x more rows (and
  // extra_ms of work per step) pay off at the acceptance it has seen (adaptive_draft_length;
  // with `probe`, also yes now and then: Sequence::next_probe).
  bool TreeEligible(const Sequence& seq) const;
  bool TreePays(const Sequence& seq, double x, double extra_ms = 0, bool probe = true) const;
  // Cuts the tree to the request's num_draft_tokens and lays out its bits and depths.
  void FinishTree(Sequence* seq);
  // Measures what the step's tree rows cost beyond the same step without them.
  void ObserveTreeRows(const ScheduleOutput& out, const StepShape& shape);
  void AcceptToken(Sequence* seq, const SampledToken& token);
  void SampleAll();
  void Fork(Sequence* parent, const float* logits_row);
  bool StopWordMatched(const Sequence& seq) const;
  void FinishSequence(Sequence* seq, FinishReason reason);
  void Publish(Sequence* seq);
  void Deliver(RequestState* rs, Result&& result);
  void FailRequest(RequestState* rs, const Status& error);
  void RetireFinished();
  // Adds the step's gap to the inter-token latency of a request that got tokens in it.
  void TimeTokens(RequestState* rs);
  // The shape of the step out (for the step cost model).
  StepShape ShapeOf(const ScheduleOutput& out) const;
  void RecordStats(const ScheduleOutput& out, Clock::time_point start, int32_t context_seqs,
                   int32_t context_tokens, int32_t gen_seqs);

  // A target step's extra cost per verified draft token, against a one-token decode step (~5%
  // on a memory-bound decode: spec_bench measures 4 drafts at ~1.1-1.3x).
  static constexpr double kVerifyCost = 0.05;

  ExecutorConfig config_;
  std::unique_ptr<ModelRunner> runner_;
  const int32_t vocab_size_;
  const int32_t hidden_size_;
  const int32_t context_length_;
  double last_forward_ms_ = 0;                                 // of the step being recorded
  double last_predicted_ms_ = 0, last_latency_target_ms_ = 0;  // of the step being recorded
  const int32_t num_kv_blocks_;

  // Engine-thread state.
  KvBlockManager blocks_;
  // The window group's blocks (sliding-window layers), when the runner's cache has one.
  std::unique_ptr<KvBlockManager> window_blocks_;
  // copy(group, src, dst, tokens): the runner's block copy, for the scheduler's copy-on-write.
  std::function<void(int32_t, int32_t, int32_t, int32_t)> copy_block_;
  std::unique_ptr<ModelRunner> draft_runner_;
  std::unique_ptr<KvBlockManager> draft_blocks_;
  BatchPlan draft_plan_;
  std::vector<float> draft_logits_;
  std::vector<Sequence*> drafting_;
  // Decayed mean times of one draft-model pass and of the target's forward pass: what a
  // draft costs against the step it may save.
  double draft_pass_ms_ = 0, target_forward_ms_ = 0;
  std::vector<std::pair<int32_t, int32_t>> tree_moves_;  // AcceptDrawn's K/V slot moves
  std::atomic<int64_t> tree_kv_moves_{0};
  // Medusa: the choices (paths of top-k indices), the top-k they need, and this step's
  // (sequence, hidden row) pairs whose heads run after sampling.
  std::vector<std::vector<int32_t>> medusa_choices_;
  std::vector<int32_t> medusa_parent_;  // each path's prefix's index (-1: a first-level path)
  int32_t medusa_top_k_ = 1;
  std::vector<std::pair<Sequence*, int64_t>> medusa_rows_;
  std::vector<float> medusa_hidden_;
  std::vector<Sequence*> medusa_for_;
  std::vector<int32_t> medusa_top_;
  double medusa_heads_ms_ = 0;  // decayed mean time of a heads pass
  // EAGLE: this step's chunks (where their rows are), the tree's shape, the head's outputs.
  struct EagleChunk {
    Sequence* seq;
    int64_t row;  // the chunk's first row in the pass
    int32_t start_pos, num_tokens, num_draft;
    bool tree;
  };
  std::vector<EagleChunk> eagle_chunks_;
  std::vector<std::vector<int32_t>> eagle_ancestors_;  // each node's, top first
  std::vector<int32_t> eagle_parent_, eagle_depth_;
  std::vector<char> eagle_has_child_;
  int32_t eagle_top_k_ = 1, eagle_max_depth_ = 0;
  std::vector<EagleRow> eagle_rows_;
  std::vector<std::pair<Sequence*, int32_t>> eagle_row_of_;  // (sequence, node) per row
  std::vector<Sequence*> eagle_for_;
  std::vector<float> eagle_out_;
  std::vector<int32_t> eagle_top_;
  std::vector<float> eagle_logp_;  // dynamic tree: the guesses' log-probabilities
  double eagle_ms_ = 0;            // decayed mean time of the head's work in a step
  double tree_row_ms_ = 0;         // decayed measured cost of one tree row (ObserveTreeRows)
  int32_t last_gen_seqs_ = 0;      // decode rows of the last step (what a tree's tokens slow down)
  // Prompt tokens beside decode rows under max_inter_token_latency_ms; its cost model learns
  // from every forward pass.
  StepBudget step_budget_;
  Scheduler scheduler_;
  std::unordered_map<RequestId, std::unique_ptr<RequestState>> requests_;
  std::vector<RequestState*> touched_;  // requests with results to publish this step
  BatchPlan plan_;
  std::vector<int32_t> context_rows_;  // per chunk of plan_: leading rows that are context logits
  std::vector<float> logits_;          // [rows, vocab]
  std::vector<float> sample_row_;      // [vocab]
  struct PendingSample {
    Sequence* seq;
    const float* row;   // its logits row of this step (then one row per draft token)
    int32_t num_draft;  // draft tokens to verify
  };
  std::vector<PendingSample> to_sample_;

  // How a request's sequences turn logits into tokens and results: sampled sequences (one, or
  // num_return_sequences forked from the prompt; executor.cc) or beam search
  // (executor_beam.cc). DecodingOf picks one per request; the step calls it and never asks
  // which.
  class Decoding {
   public:
    explicit Decoding(Executor& e) : e_(e) {}
    virtual ~Decoding() = default;
    // The checks of this kind of decoding (Enqueue).
    virtual Status Validate(const Request& r) const = 0;
    // Full-group KV blocks the request must be able to hold at once (prompt_blocks: its
    // prompt's full blocks; lifetime: blocks of prompt + max_tokens).
    virtual int64_t BlocksNeededAtOnce(const Request& r, int64_t prompt_blocks,
                                       int64_t lifetime) const = 0;
    // On a pool thread: a sequence's logits rows -> its new tokens (or beam candidates).
    virtual void Draw(const PendingSample& p, float* scratch, std::vector<SampledToken>* drawn) = 0;
    // On the engine thread, in order: takes what Draw produced.
    virtual void Accept(const PendingSample& p, std::vector<SampledToken>& drawn) = 0;
    // After every sequence of the step was accepted.
    virtual void EndStep(RequestState* rs) = 0;
    // Ends the request early (cancelled, timed out) and publishes what it has.
    virtual void End(RequestState* rs, FinishReason reason) = 0;
    // Hands the request's new results to its consumer.
    virtual void Publish(RequestState* rs) = 0;

   protected:
    Executor& e_;
  };
  class SampledDecoding;
  class BeamDecoding;
  static std::unique_ptr<Decoding> MakeSampledDecoding(Executor& e);
  static std::unique_ptr<Decoding> MakeBeamDecoding(Executor& e);  // executor_beam.cc
  Decoding& DecodingOf(const Request& r) const {
    return r.beam_width > 1 ? *beam_decoding_ : *sampled_decoding_;
  }
  std::unique_ptr<Decoding> sampled_decoding_, beam_decoding_;
  std::vector<std::vector<SampledToken>> drawn_;  // per pending sample: its new tokens
  int32_t step_draft_tokens_ = 0, step_accepted_draft_tokens_ = 0;
  std::vector<float> sample_rows_;  // [threads, vocab]
  uint64_t next_order_ = 0;
  int64_t iteration_ = 0;

  // Shared with other threads.
  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool resumed_ = false;  // a paused request's client read enough since the loop last waited
  // What the output credits of paused requests call when their client has read enough; it
  // may outlive the executor (a frontend holds the credit), so it is cut off at shutdown.
  struct Waker {
    std::mutex mu;
    Executor* executor = nullptr;
  };
  std::shared_ptr<Waker> waker_ = std::make_shared<Waker>();
  // KV cache events, and snapshots asked for by other threads (answered by the engine thread;
  // guarded by mu_).
  std::unique_ptr<KvEventLog> kv_events_;
  std::unique_ptr<KvDiskStore> disk_;
  // Reads a waiting sequence's prefix from disk_ off the engine thread (after disk_: it reads
  // from it until destroyed). At most this much of read blocks waits to be admitted.
  uint64_t handoff_fingerprint_ = 0;  // of the runner's KV layout (disaggregated serving)
  std::unique_ptr<KvDiskReader> disk_reader_;
  static constexpr int64_t kDiskStagingBytes = 512ll << 20;
  // Blocks read back during one admission, kept for their window group's part (engine thread).
  std::unordered_map<uint64_t, std::vector<uint8_t>> window_parts_;
  // What the engine knows is on disk (KV cache events: a block's tier), from the store's
  // changes, taken by SyncDiskTier on the engine thread.
  struct DiskBlock {
    uint64_t parent = 0;
    std::vector<int32_t> tokens;
  };
  std::unordered_map<uint64_t, DiskBlock> on_disk_;
  void SyncDiskTier();
  static StatusOr<std::unique_ptr<KvDiskStore>> OpenDiskTier(const ModelRunner& runner,
                                                             const ExecutorConfig& config);
  void SetUpDiskTier(std::unique_ptr<KvDiskStore> disk);
  std::vector<std::shared_ptr<std::promise<KvCacheSnapshot>>> snapshot_requests_;
  bool AllOutputPaused() const;  // every request waits for its client to read (engine thread)
  std::vector<std::pair<RequestId, Request>> submissions_;
  std::vector<RequestId> cancels_;
  std::unordered_map<RequestId, std::shared_ptr<OutputStream>> streams_;  // for AwaitResponses
  std::deque<IterationStats> stats_;
  IterationStats last_stats_;
  BlockCounts block_counts_;
  BlockCounts draft_block_counts_;
  BlockCounts window_block_counts_;
  RequestId next_id_ = 1;
  bool stop_ = false;
  std::atomic<int64_t> num_queued_{0};
  std::atomic<int64_t> num_unfinished_{0};
  std::thread thread_;
};

}  // namespace inflight
