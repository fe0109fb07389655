#include "engine/executor.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/check.h"
#include "base/logging.h"

namespace inflight {
namespace {

constexpr size_t kMaxStatsKept = 1000;

}  // namespace

Executor::Executor(std::unique_ptr<ModelRunner> runner, const ExecutorConfig& config,
                   std::unique_ptr<ModelRunner> draft, std::unique_ptr<KvDiskStore> disk)
    : config_(config),
      runner_(std::move(runner)),
      vocab_size_(runner_->vocab_size()),
      hidden_size_(runner_->hidden_size()),
      context_length_(runner_->context_length()),
      num_kv_blocks_(runner_->num_kv_blocks()),
      blocks_({num_kv_blocks_, config.tokens_per_block, config.enable_kv_cache_reuse}),
      window_blocks_(runner_->num_window_kv_blocks() > 0
                         ? std::make_unique<KvBlockManager>(BlockManagerConfig{
                               runner_->num_window_kv_blocks(), config.tokens_per_block,
                               config.enable_kv_cache_reuse})
                         : nullptr),
      step_budget_(config.max_inter_token_latency_ms),
      scheduler_(config, blocks_, window_blocks_.get(), runner_->kv_window(),
                 config.max_inter_token_latency_ms >= 0 ? &step_budget_ : nullptr) {
  sample_row_.resize(vocab_size_);
  copy_block_ = [this](int32_t group, int32_t src, int32_t dst, int32_t n) {
    runner_->CopyBlockPrefix(group, src, dst, n);
  };
  block_counts_ = blocks_.counts();
  if (window_blocks_) window_block_counts_ = window_blocks_->counts();
  if (config.kv_event_buffer_size > 0) {
    kv_events_ = std::make_unique<KvEventLog>(static_cast<size_t>(config.kv_event_buffer_size));
    blocks_.SetEventLog(kv_events_.get(), 0);
    if (window_blocks_) window_blocks_->SetEventLog(kv_events_.get(), 1);
  }
  if (disk) SetUpDiskTier(std::move(disk));
  if (draft && config.speculative_mode == SpeculativeMode::kDraftModel) {
    draft_runner_ = std::move(draft);
    draft_blocks_ = std::make_unique<KvBlockManager>(
        BlockManagerConfig{draft_runner_->num_kv_blocks(), config.tokens_per_block, false});
    draft_block_counts_ = draft_blocks_->counts();
  }
  SetUpMedusa();
  SetUpEagle();
  handoff_fingerprint_ = KvHandoffFingerprint(runner_->KvLayoutFingerprint());
  scheduler_.SetBlockImporter([this](int32_t block, const uint8_t* kv) {
    return runner_->ImportBlock(kFullGroup, block, kv);
  });
  sampled_decoding_ = MakeSampledDecoding(*this);
  beam_decoding_ = MakeBeamDecoding(*this);
  waker_->executor = this;
  thread_ = std::thread([this] { Loop(); });
}

StatusOr<std::unique_ptr<Executor>> Executor::Create(const Model& model,
                                                     const ExecutorConfig& config,
                                                     const Model* draft_model) {
  RETURN_IF_ERROR(config.Validate());
  return CreateWithRunner(std::make_unique<LocalModelRunner>(model, config), config, draft_model);
}

StatusOr<std::unique_ptr<Executor>> Executor::CreateWithRunner(std::unique_ptr<ModelRunner> runner,
                                                               const ExecutorConfig& config,
                                                               const Model* draft_model) {
  RETURN_IF_ERROR(config.Validate());
  std::unique_ptr<ModelRunner> draft;
  if (config.speculative_mode == SpeculativeMode::kDraftModel) {
    if (draft_model == nullptr)
      return InvalidArgumentError("speculative decoding mode draft_model needs a draft model");
    if (draft_model->config().vocab_size != runner->vocab_size()) {
      return InvalidArgumentError(
          "the draft model's vocabulary (" + std::to_string(draft_model->config().vocab_size) +
          " tokens) differs from the model's (" + std::to_string(runner->vocab_size()) + ")");
    }
    // As many blocks as the target's (a draft's blocks are smaller), on the target's threads.
    ExecutorConfig dc = config;
    dc.max_tokens_in_paged_kv_cache =
        static_cast<int64_t>(runner->num_kv_blocks()) * config.tokens_per_block;
    draft = std::make_unique<LocalModelRunner>(*draft_model, dc, runner->pool(),
                                               /*kv_window_group=*/false);
  }
  ExecutorConfig checked = config;
  RETURN_IF_ERROR(CheckTreeDrafting(*runner, &checked));
  std::unique_ptr<KvDiskStore> disk;
  if (!config.kv_cache_disk_path.empty()) {
    auto opened = OpenDiskTier(*runner, config);
    if (!opened.ok()) return opened.status();
    disk = std::move(opened).value();
  }
  return std::make_unique<Executor>(std::move(runner), checked, std::move(draft), std::move(disk));
}

Executor::~Executor() { Shutdown(); }

StatusOr<RequestId> Executor::Enqueue(Request request) {
  // As TensorRT-LLM's executor: max_tokens is clamped to what fits in the context (with a
  // warning); only a prompt that leaves no room is refused (by Validate).
  const int64_t prompt = static_cast<int64_t>(request.prompt_ids.size());
  if (prompt > 0 && prompt < context_length_ && prompt + request.max_tokens > context_length_) {
    INFLIGHT_LOG(kWarning) << "max_tokens " << request.max_tokens << " + prompt " << prompt
                           << " exceeds the context length " << context_length_
                           << "; max_tokens clamped to " << context_length_ - prompt;
    request.max_tokens = static_cast<int32_t>(context_length_ - prompt);
  }
  RETURN_IF_ERROR(Health());
  if (request.request_type == RequestType::kContextOnly) AsContextPhase(&request);
  RETURN_IF_ERROR(Validate(request));
  if (request.prompt_table) {
    // Virtual tokens mean this table's rows: prefix reuse only among equal tables.
    uint64_t h = 1469598103934665603ull;
    const auto* bytes = reinterpret_cast<const unsigned char*>(request.prompt_table->data());
    for (size_t i = 0; i < request.prompt_table->size() * sizeof(float); ++i)
      h = (h ^ bytes[i]) * 1099511628211ull;
    request.cache_salt = (request.cache_salt ^ h) | 1;
  }
  if (request.lora) {
    // KV computed with an adapter is the adapter's own: prefix reuse only within one task.
    request.cache_salt =
        (request.cache_salt ^ 0x6c6f7261ull) * 0x9e3779b97f4a7c15ull + request.lora_task_id + 1;
    if (request.cache_salt == 0) request.cache_salt = 1;
  }
  RETURN_IF_ERROR(CheckDisaggregated(request));
  if (request.arrival_time == Clock::time_point{}) request.arrival_time = Clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_) return UnavailableError("the executor is shut down");
  if (config_.max_queue_size > 0 && num_queued_.load() >= config_.max_queue_size) {
    return ResourceExhaustedError("Maximum queue size of " +
                                  std::to_string(config_.max_queue_size) +
                                  " has been reached, please try again later");
  }
  const RequestId id = next_id_++;
  if (!request.output) {
    request.output = std::make_shared<OutputStream>(config_.max_unread_output_bytes);
    streams_[id] = request.output;
  }
  submissions_.emplace_back(id, std::move(request));
  ++num_queued_;
  ++num_unfinished_;
  wake_.notify_one();
  return id;
}

std::vector<Result> Executor::AwaitResponses(RequestId id, std::chrono::milliseconds timeout) {
  std::shared_ptr<OutputStream> stream;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = streams_.find(id);
    if (it == streams_.end()) return {};
    stream = it->second;
  }
  std::vector<Result> out = stream->Wait(timeout);
  for (const Result& r : out) {
    if (r.is_final) {
      std::lock_guard<std::mutex> lock(mu_);
      streams_.erase(id);
      break;
    }
  }
  return out;
}

void Executor::Cancel(RequestId id) {
  std::lock_guard<std::mutex> lock(mu_);
  cancels_.push_back(id);
  wake_.notify_one();
}

void Executor::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
    wake_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
  if (disk_) disk_->Flush();  // what the engine queued reaches the disk before we return
  std::lock_guard<std::mutex> lock(waker_->mu);
  waker_->executor = nullptr;
}

std::vector<IterationStats> Executor::GetLatestIterationStats() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<IterationStats> out(stats_.begin(), stats_.end());
  stats_.clear();
  return out;
}

IterationStats Executor::LastIterationStats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_stats_;
}

BlockCounts Executor::KvBlockCounts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return block_counts_;
}

BlockCounts Executor::WindowKvBlockCounts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return window_block_counts_;
}

BlockCounts Executor::DraftKvBlockCounts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return draft_block_counts_;
}

void Executor::Loop() {
  std::vector<std::pair<RequestId, Request>> submissions;
  std::vector<RequestId> cancels;
  std::vector<std::shared_ptr<std::promise<KvCacheSnapshot>>> snapshots;
  // The last step scheduled nothing (e.g. the requests holding the batch are all paused for
  // their clients while others wait): wait for an event instead of spinning.
  bool stalled = false;
  while (true) {
    bool stopping;
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto ready = [&] {
        return stop_ || !submissions_.empty() || !cancels_.empty() || resumed_ ||
               !snapshot_requests_.empty() ||
               (!requests_.empty() && !stalled && !AllOutputPaused());
      };
      if (requests_.empty()) {
        wake_.wait(lock, ready);
      } else {
        // Every request is paused for its client (back-pressure): a credit's release wakes
        // the loop; the timeout still ends requests whose deadline passes meanwhile.
        wake_.wait_for(lock, std::chrono::milliseconds(100), ready);
      }
      resumed_ = false;
      stopping = stop_;
      submissions.swap(submissions_);
      cancels.swap(cancels_);
      snapshots.swap(snapshot_requests_);
    }
    AnswerSnapshots(snapshots);
    Admit(submissions);
    submissions.clear();
    if (stopping) {
      for (auto& [id, rs] : requests_) cancels.push_back(id);
    }
    HandleCancellationsAndTimeouts(cancels);
    cancels.clear();
    RetireFinished();
    if (stopping) break;
    stalled = !requests_.empty() && !RunStep();
    RetireFinished();
    // Cancellations free blocks outside steps too: keep the snapshot exact when idle.
    std::lock_guard<std::mutex> lock(mu_);
    block_counts_ = blocks_.counts();
    if (window_blocks_) window_block_counts_ = window_blocks_->counts();
    if (draft_blocks_) draft_block_counts_ = draft_blocks_->counts();
  }
}

void Executor::Admit(std::vector<std::pair<RequestId, Request>>& submissions) {
  for (auto& [id, request] : submissions) {
    auto rs = std::make_unique<RequestState>();
    rs->id = id;
    rs->request = std::move(request);
    const Request& r = rs->request;
    rs->stats.arrival_time = r.arrival_time;
    rs->stats.num_prompt_tokens = static_cast<int32_t>(r.prompt_ids.size());
    if (r.timeout_ms > 0) rs->deadline = r.arrival_time + std::chrono::milliseconds(r.timeout_ms);
    if (const auto& credit = r.output->credit()) {
      credit->SetOnResume([w = waker_] {
        std::lock_guard<std::mutex> lock(w->mu);
        if (w->executor == nullptr) return;
        std::lock_guard<std::mutex> executor_lock(w->executor->mu_);
        w->executor->resumed_ = true;
        w->executor->wake_.notify_one();
      });
    }
    SamplingParams sampling = r.sampling;
    sampling.compute_logprobs = r.return_log_probs;  // nothing else reads them
    auto seq = std::make_unique<Sequence>(rs.get(), 0, sampling);
    seq->order = next_order_++;
    seq->last_key = KvBlockManager::RootKey(r.cache_salt);
    seq->tokens = r.prompt_ids;
    seq->prompt_len = static_cast<int32_t>(r.prompt_ids.size());
    seq->sampler.AddPromptTokens(r.prompt_ids.data(), seq->prompt_len);
    if (r.guide) seq->constraint = r.guide->Clone();
    // A client's drafts are verified with the prompt's last chunk (sibling sequences fork from
    // the prompt alone, so not for num_return_sequences > 1).
    if (r.num_return_sequences == 1) seq->draft = r.draft_tokens;  // (none with beams)
    if (r.return_context_logits)
      rs->context_logits.resize(static_cast<size_t>(seq->prompt_len) * vocab_size_);
    scheduler_.AddWaiting(seq.get());
    rs->sequences.push_back(std::move(seq));
    requests_.emplace(id, std::move(rs));
  }
}

void Executor::HandleCancellationsAndTimeouts(const std::vector<RequestId>& cancels) {
  auto end_request = [&](RequestState* rs, FinishReason reason) {
    DecodingOf(rs->request).End(rs, reason);
  };
  for (RequestId id : cancels) {
    auto it = requests_.find(id);
    if (it != requests_.end() &&
        it->second->num_finished < static_cast<int32_t>(it->second->sequences.size())) {
      end_request(it->second.get(), FinishReason::kCancelled);
    }
  }
  const Clock::time_point now = Clock::now();
  for (auto& [id, rs] : requests_) {
    if (now >= rs->deadline && rs->num_finished < static_cast<int32_t>(rs->sequences.size())) {
      end_request(rs.get(), FinishReason::kTimedOut);
    }
  }
  // A request paused for its client too long ends (cancelled, as a client that went away): it
  // holds KV blocks and a batch slot.
  for (auto& [id, rs] : requests_) {
    const auto& credit = rs->request.output->credit();
    if (credit && rs->num_finished < static_cast<int32_t>(rs->sequences.size()) &&
        credit->stalled(now)) {
      FailRequest(
          rs.get(),
          CancelledError("the client read the stream too slowly (generation paused for more than " +
                         std::to_string(credit->max_stall().count()) + " ms with more than " +
                         std::to_string(credit->pause_bytes()) + " bytes unread)"));
    }
  }
}

bool Executor::AllOutputPaused() const {
  for (const auto& [id, rs] : requests_) {
    const auto& credit = rs->request.output->credit();
    if (!credit || !credit->paused()) return false;
  }
  return true;
}

bool Executor::RunStep() {
  const Clock::time_point start = Clock::now();
  // Requests whose client has not read its output past the credit's bound sit this step out
  // (they keep their KV blocks); decided once per step so a request's beams agree.
  for (auto& [id, rs] : requests_) {
    const auto& credit = rs->request.output->credit();
    rs->output_paused = credit && credit->paused();
  }
  ProposeDrafts();
  const ScheduleOutput& out = scheduler_.Step();
  ++iteration_;
  if (out.chunks.empty()) {
    if (scheduler_.running().empty() && !scheduler_.waiting().empty() &&
        out.waiting_for_kv_disk_reads == 0) {
      // Enqueue's checks make this unreachable; never leave a request waiting forever. (A
      // prefix being read from disk is admitted when the reader wakes the loop.)
      FailRequest(
          scheduler_.waiting().front()->request,
          ResourceExhaustedError(
              "the request cannot be scheduled with the KV cache and token budget configured"));
    }
    RecordStats(out, start, 0, 0, 0);
    return false;
  }
  scheduler_.FinishCopies(copy_block_);
  plan_.chunks.clear();
  context_rows_.clear();
  int64_t rows = 0;
  int32_t context_seqs = 0, context_tokens = 0, gen_seqs = 0;
  for (const ScheduledChunk& c : out.chunks) {
    Sequence* seq = c.seq;
    SequenceChunk ch;
    ch.token_ids = seq->tokens.data() + seq->num_computed;
    if (c.num_draft > 0) {
      // The draft tokens run after the sequence's own: one contiguous run of ids.
      seq->step_tokens.assign(seq->tokens.begin() + seq->num_computed, seq->tokens.end());
      seq->step_tokens.insert(seq->step_tokens.end(), seq->draft.begin(),
                              seq->draft.begin() + c.num_draft);
      ch.token_ids = seq->step_tokens.data();
    }
    ch.num_tokens = c.num_tokens + c.num_draft;
    ch.start_pos = seq->num_computed;
    ch.lora = seq->request->request.lora.get();
    if (const auto& table = seq->request->request.prompt_table) {
      ch.prompt_table = table->data();
      ch.prompt_table_rows =
          static_cast<int32_t>(table->size() / static_cast<size_t>(hidden_size_));
    }
    ch.block_table = seq->blocks.data();
    ch.num_blocks = static_cast<int32_t>(seq->blocks.size());
    ch.window_block_table = seq->window_blocks.data();
    ch.num_window_blocks = static_cast<int32_t>(seq->window_blocks.size());
    if (c.num_draft > 0 && !seq->draft_parent.empty()) {
      // Drafts as a tree (the scheduler took its scratch blocks): each draft's logits are its
      // branch's run alone, bit for bit.
      ch.tree = seq->step_tree.data();
      ch.tree_depth = seq->step_depth.data();
      ch.tree_scratch = seq->tree_scratch.data();
      ch.num_tree_scratch = static_cast<int32_t>(seq->tree_scratch.size());
    }
    // Context logits of the prompt's first pass; the last token's row and each draft's row
    // choose tokens.
    const bool all_logits = seq->index == 0 && seq->request->request.return_context_logits &&
                            seq->num_computed == seq->request->num_context_logits &&
                            seq->num_computed < seq->prompt_len;
    ch.num_logits = all_logits ? ch.num_tokens : 1 + c.num_draft;
    rows += ch.num_logits;
    plan_.chunks.push_back(ch);
    context_rows_.push_back(all_logits ? c.num_tokens : 0);
    if (seq->num_uncomputed() == 1 && seq->num_generated() > 0) {
      ++gen_seqs;
    } else {
      ++context_seqs;
      context_tokens += c.num_tokens;
    }
  }
  if (logits_.size() < static_cast<size_t>(rows) * vocab_size_) {
    // Geometric growth: a batch that grows by one sequence per step would otherwise copy
    // and zero the whole logits buffer every step.
    logits_.resize(std::max(static_cast<size_t>(rows) * vocab_size_, 2 * logits_.size()));
  }
  const StepShape shape = ShapeOf(out);
  last_predicted_ms_ = step_budget_.cost().ready() ? step_budget_.cost().PredictMs(shape) : 0;
  last_latency_target_ms_ = out.latency_target_ms;
  const Clock::time_point forward_start = Clock::now();
  const Status st = runner_->Forward(plan_, logits_.data());
  last_forward_ms_ =
      std::chrono::duration<double, std::milli>(Clock::now() - forward_start).count();
  scheduler_.ReleaseTreeScratch();
  if (st.ok()) {
    ObserveTreeRows(out, shape);
    step_budget_.cost().Observe(shape, last_forward_ms_);
  }
  last_gen_seqs_ = gen_seqs;
  if (context_seqs == 0 && gen_seqs > 0) {
    // A decode step's time as if it verified no drafts: what a draft pass is weighed against.
    int64_t drafts = 0;
    for (const ScheduledChunk& c : out.chunks) drafts += c.num_draft;
    const double plain_ms =
        last_forward_ms_ / (1.0 + kVerifyCost * static_cast<double>(drafts) / gen_seqs);
    target_forward_ms_ =
        target_forward_ms_ == 0 ? plain_ms : 0.9 * target_forward_ms_ + 0.1 * plain_ms;
  }
  if (!st.ok()) {
    for (const ScheduledChunk& c : out.chunks) {
      if (c.seq->state != SequenceState::kFinished) FailRequest(c.seq->request, st);
    }
    RecordStats(out, start, context_seqs, context_tokens, gen_seqs);
    return true;  // the failed requests end: progress
  }
  int64_t row = 0, pass_row = 0;
  const bool eagle = config_.speculative_mode == SpeculativeMode::kEagle;
  for (size_t i = 0; i < out.chunks.size(); ++i) {
    const SequenceChunk& ch = plan_.chunks[i];
    const ScheduledChunk& c = out.chunks[i];
    if (eagle) {
      eagle_chunks_.push_back(
          {c.seq, pass_row, ch.start_pos, c.num_tokens, c.num_draft, !c.seq->draft_parent.empty()});
    }
    ProcessChunk(c, context_rows_[i], logits_.data() + row * vocab_size_, ch.num_logits);
    row += ch.num_logits;
    pass_row += ch.num_tokens;
  }
  SampleAll();
  for (RequestState* rs : touched_) DecodingOf(rs->request).EndStep(rs);
  for (RequestState* rs : touched_) {
    TimeTokens(rs);
    DecodingOf(rs->request).Publish(rs);
    rs->touched = false;
  }
  touched_.clear();
  // The head drafts the next step's trees once this step's tokens are out (a prompt's states
  // go through it here: the first token does not wait for them).
  if (config_.speculative_mode == SpeculativeMode::kEagle) RunEagle();
  RecordStats(out, start, context_seqs, context_tokens, gen_seqs);
  return true;
}

void Executor::ProcessChunk(const ScheduledChunk& c, int64_t context_rows, const float* logits,
                            int64_t rows) {
  Sequence* seq = c.seq;
  RequestState* rs = seq->request;
  if (context_rows > 0) {
    const int64_t keep = std::min<int64_t>(context_rows, seq->prompt_len - rs->num_context_logits);
    std::copy(
        logits, logits + keep * vocab_size_,
        rs->context_logits.begin() + static_cast<int64_t>(rs->num_context_logits) * vocab_size_);
    rs->num_context_logits += static_cast<int32_t>(keep);
  }
  seq->num_computed += c.num_tokens;
  scheduler_.CommitFullBlocks(seq);
  if (!rs->touched) {
    rs->touched = true;
    touched_.push_back(rs);
  }
  if (seq->num_computed < static_cast<int32_t>(seq->tokens.size())) return;  // mid-prompt chunk
  if (seq->beam_reported) return;  // a beam recomputed after a pause: its candidates are in
  to_sample_.push_back({seq, logits + (rows - 1 - c.num_draft) * vocab_size_, c.num_draft});
}

SampledToken Executor::DrawNext(Sequence* seq, const float* logits_row, float* scratch,
                                int32_t draft, const float* draft_probs) {
  const Request& r = seq->request->request;
  if (r.return_generation_logits)
    seq->generation_logits.insert(seq->generation_logits.end(), logits_row,
                                  logits_row + vocab_size_);
  const bool ban_end = r.end_id >= 0 && seq->num_generated() < r.min_tokens;
  if (r.bad_words.empty() && !ban_end && !seq->sampler.modifies_logits() && !seq->constraint) {
    // Nothing to write into the row: sample it where it is (no copy of the vocabulary).
    return seq->sampler.SampleWithDraft(const_cast<float*>(logits_row), vocab_size_, draft,
                                        draft_probs);
  }
  float* x = scratch;
  std::copy(logits_row, logits_row + vocab_size_, x);
  BanTokens(*seq, x);
  if (seq->constraint && seq->constraint->Mask(x, vocab_size_, r.end_id) == 0) {
    SampledToken none;  // nothing may follow (the guide is complete): AcceptToken ends it
    none.id = -1;
    return none;
  }
  return seq->sampler.SampleWithDraft(x, vocab_size_, draft, draft_probs);
}

void Executor::BanTokens(const Sequence& seq, float* logits) const {
  const Request& r = seq.request->request;
  constexpr float kBanned = -std::numeric_limits<float>::infinity();
  // Bad words: a one-token word is always banned; a longer one bans its last token after
  // its prefix.
  for (const auto& w : r.bad_words) {
    const size_t prefix = w.size() - 1;
    if (prefix > seq.tokens.size()) continue;
    if (std::equal(w.begin(), w.end() - 1, seq.tokens.end() - static_cast<std::ptrdiff_t>(prefix)))
      logits[w.back()] = kBanned;
  }
  if (r.end_id >= 0 && seq.num_generated() < r.min_tokens) logits[r.end_id] = kBanned;
}

void Executor::AcceptToken(Sequence* seq, const SampledToken& t) {
  RequestState* rs = seq->request;
  const Request& r = rs->request;
  const Clock::time_point now = Clock::now();
  if (rs->stats.first_token_time == Clock::time_point{}) rs->stats.first_token_time = now;
  rs->stats.last_token_time = now;
  if (t.id == r.end_id || t.id < 0) {
    if (r.return_generation_logits)
      seq->generation_logits.resize(seq->generation_logits.size() - vocab_size_);
    FinishSequence(seq, FinishReason::kEndId);
    return;
  }
  seq->tokens.push_back(t.id);
  seq->log_probs.push_back(t.logprob);
  if (r.sampling.num_top_logprobs > 0) seq->top_logprobs.push_back(t.top_logprobs);
  seq->cum_log_prob += t.logprob;
  rs->stats.num_generated_tokens++;
  if (seq->constraint) {
    seq->constraint->Advance(t.id);
    if (seq->constraint->Terminated()) {
      FinishSequence(seq, FinishReason::kEndId);  // the guided output is complete
      return;
    }
  }
  if (seq->num_generated() >= r.min_tokens && StopWordMatched(*seq)) {
    FinishSequence(seq, FinishReason::kStopWords);
  } else if (seq->num_generated() >= r.max_tokens ||
             static_cast<int32_t>(seq->tokens.size()) >= context_length_) {
    FinishSequence(seq, FinishReason::kLength);
  }
}

void Executor::SampleAll() {
  // Each sequence draws with its own sampler: independent, so the draws run on the compute
  // pool (per-thread logits scratch); accepting tokens touches shared state and stays serial.
  const int64_t n = static_cast<int64_t>(to_sample_.size());
  drawn_.resize(n);
  ThreadPool* pool = runner_->pool();
  const int threads = pool != nullptr && n > 1 ? pool->num_threads() : 1;
  if (sample_rows_.size() < static_cast<size_t>(threads) * vocab_size_)
    sample_rows_.resize(static_cast<size_t>(threads) * vocab_size_);
  auto draw = [&](int ti, int nt) {
    for (int64_t i = n * ti / nt; i < n * (ti + 1) / nt; ++i) {
      float* scratch = sample_rows_.data() + static_cast<size_t>(ti) * vocab_size_;
      const PendingSample& p = to_sample_[i];
      DecodingOf(p.seq->request->request).Draw(p, scratch, &drawn_[i]);
    }
  };
  if (threads > 1)
    pool->Run(draw);
  else
    draw(0, 1);
  const bool medusa = config_.speculative_mode == SpeculativeMode::kMedusa;
  for (int64_t i = 0; i < n; ++i) {
    const PendingSample& p = to_sample_[i];
    DecodingOf(p.seq->request->request).Accept(p, drawn_[i]);
    if (medusa) {
      // The row whose draw came last: its hidden state guesses what follows.
      const int64_t row = (p.row - logits_.data()) / vocab_size_ + p.seq->medusa_row;
      medusa_rows_.emplace_back(p.seq, row);
    }
    p.seq->medusa_row = 0;
  }
  to_sample_.clear();
  if (medusa) RunMedusaHeads();
}

// Sampled sequences: one, or num_return_sequences forked from the prompt, each drawing with
// its own sampler (drafts verified in the same pass).
class Executor::SampledDecoding final : public Executor::Decoding {
 public:
  using Decoding::Decoding;
  Status Validate(const Request&) const override { return OkStatus(); }
  int64_t BlocksNeededAtOnce(const Request& r, int64_t prompt_blocks,
                             int64_t lifetime) const override {
    return e_.scheduler_.policy().BlocksNeededAtOnce(r, prompt_blocks, lifetime);
  }
  void Draw(const PendingSample& p, float* scratch, std::vector<SampledToken>* drawn) override {
    if (p.num_draft > 0) {
      e_.VerifyDrafts(p.seq, p.row, p.num_draft, scratch, drawn);
    } else {
      drawn->assign(1, e_.DrawNext(p.seq, p.row, scratch));
    }
  }
  void Accept(const PendingSample& p, std::vector<SampledToken>& drawn) override {
    Sequence* seq = p.seq;
    RequestState* rs = seq->request;
    const bool first_of_request = seq->index == 0 && !rs->forked && seq->num_generated() == 0;
    // The siblings fork from the prompt before the first sequence's token is accepted:
    // accepting it can end that sequence (an end token, max_tokens 1) and release the prompt's
    // blocks the siblings share.
    if (first_of_request && rs->request.num_return_sequences > 1) e_.Fork(seq, p.row);
    if (p.num_draft > 0) {
      e_.AcceptDrawn(seq, drawn, p.num_draft);
    } else {
      e_.AcceptToken(seq, drawn[0]);
      seq->draft.clear();  // a client's drafts that found no room in the prompt's last chunk
    }
    rs->forked = true;
  }
  void EndStep(RequestState*) override {}
  void End(RequestState* rs, FinishReason reason) override {
    for (auto& seq : rs->sequences) {
      if (seq->state != SequenceState::kFinished) e_.FinishSequence(seq.get(), reason);
    }
    // Sequences not forked yet end too, so the request's result set is complete.
    rs->forked = true;
    Publish(rs);
  }
  void Publish(RequestState* rs) override {
    for (auto& seq : rs->sequences) e_.Publish(seq.get());
  }
};

std::unique_ptr<Executor::Decoding> Executor::MakeSampledDecoding(Executor& e) {
  return std::make_unique<SampledDecoding>(e);
}

bool Executor::StopWordMatched(const Sequence& seq) const {
  const int32_t gen = seq.num_generated();
  for (const auto& w : seq.request->request.stop_words) {
    if (static_cast<int32_t>(w.size()) > gen) continue;
    if (std::equal(w.begin(), w.end(), seq.tokens.end() - static_cast<std::ptrdiff_t>(w.size())))
      return true;
  }
  return false;
}

void Executor::Fork(Sequence* parent, const float* logits_row) {
  RequestState* rs = parent->request;
  const int32_t tpb = config_.tokens_per_block;
  const int32_t full = parent->prompt_len / tpb, partial = parent->prompt_len % tpb;
  for (int32_t i = 1; i < rs->request.num_return_sequences; ++i) {
    SamplingParams sp = rs->request.sampling;
    sp.seed += static_cast<uint64_t>(i);  // sibling i draws with seed + i
    sp.compute_logprobs = rs->request.return_log_probs;
    auto seq = std::make_unique<Sequence>(rs, i, sp);
    seq->order = parent->order;
    seq->tokens.assign(rs->request.prompt_ids.begin(), rs->request.prompt_ids.end());
    seq->prompt_len = parent->prompt_len;
    seq->sampler.AddPromptTokens(seq->tokens.data(), seq->prompt_len);
    if (rs->request.guide) seq->constraint = rs->request.guide->Clone();
    seq->ever_scheduled = true;
    // The prompt's full blocks are shared; the partly filled last one is copied.
    scheduler_.ShareBlocks(*parent, seq.get(), static_cast<size_t>(full + (partial > 0 ? 1 : 0)));
    if (!scheduler_.CopyLastBlock(seq.get(), partial, copy_block_)) {
      // No block for the copy (max_utilization under pressure): recompute the prompt later.
      scheduler_.DropBlocks(seq.get());
      scheduler_.AddWaiting(seq.get());
      rs->sequences.push_back(std::move(seq));
      continue;
    }
    seq->num_computed = seq->prompt_len;
    seq->num_committed = std::min(parent->num_committed, full);
    seq->last_key = parent->last_key;
    INFLIGHT_CHECK(parent->num_committed == full);
    scheduler_.AddRunning(seq.get());
    Sequence* raw = seq.get();
    rs->sequences.push_back(std::move(seq));
    AcceptToken(raw, DrawNext(raw, logits_row, sample_row_.data()));
  }
}

void Executor::FinishSequence(Sequence* seq, FinishReason reason) {
  seq->finish = reason;
  if (seq->request->request.request_type == RequestType::kContextOnly &&
      reason != FinishReason::kNotFinished && reason != FinishReason::kCancelled &&
      reason != FinishReason::kTimedOut)
    ExportHandoff(seq);
  ReleaseDraftBlocks(seq);
  seq->eagle.reset();
  scheduler_.Remove(seq);  // releases its blocks now
  seq->request->num_finished++;
}

void Executor::Deliver(RequestState* rs, Result&& result) {
  // The only hand-off out of the engine: a consumer that falls behind its stream's bound
  // gets the request cancelled at the next loop (its final result still arrives).
  if (!rs->request.output->Push(std::move(result))) {
    std::lock_guard<std::mutex> lock(mu_);
    cancels_.push_back(rs->id);
  }
}

void Executor::Publish(Sequence* seq) {
  RequestState* rs = seq->request;
  const Request& r = rs->request;
  const bool finished = seq->state == SequenceState::kFinished;
  if (seq->num_published < 0) return;  // its final result is out
  const int32_t gen = seq->num_generated();
  if (!finished && (!r.streaming || gen == seq->num_published)) return;
  Result res;
  res.request_id = rs->id;
  res.sequence_index = seq->index;
  res.vocab_size = vocab_size_;
  res.decoding_iteration = static_cast<int32_t>(iteration_);
  res.finish_reason = seq->finish;
  res.is_sequence_final = finished;
  const int32_t from = r.streaming ? seq->num_published : 0;
  if (!r.streaming && !r.exclude_input_in_output)
    res.output_token_ids.assign(seq->tokens.begin(), seq->tokens.begin() + seq->prompt_len);
  res.output_token_ids.insert(res.output_token_ids.end(),
                              seq->tokens.begin() + seq->prompt_len + from, seq->tokens.end());
  if (r.return_log_probs) res.log_probs.assign(seq->log_probs.begin() + from, seq->log_probs.end());
  if (r.sampling.num_top_logprobs > 0)
    res.top_logprobs.assign(seq->top_logprobs.begin() + from, seq->top_logprobs.end());
  res.cum_log_prob = seq->cum_log_prob;
  if (r.return_generation_logits) res.generation_logits.swap(seq->generation_logits);
  if (seq->index == 0 && r.return_context_logits && !rs->context_logits_sent &&
      rs->num_context_logits == seq->prompt_len) {
    res.context_logits = rs->context_logits;
    rs->context_logits_sent = true;
  }
  seq->num_published = finished ? -1 : gen;  // -1: the final result is out
  const bool all_done =
      rs->forked && rs->num_finished == static_cast<int32_t>(rs->sequences.size());
  if (finished && all_done) {
    // The request's last result: only once every sibling has published its own.
    bool others_out = true;
    for (auto& s : rs->sequences)
      others_out = others_out && (s.get() == seq || s->num_published < 0);
    res.is_final = others_out;
  }
  if (res.is_final) {
    res.stats = rs->stats;
    res.context_phase = rs->context_phase;
  }
  Deliver(rs, std::move(res));
}

void Executor::FailRequest(RequestState* rs, const Status& error) {
  for (auto& seq : rs->sequences) {
    if (seq->state != SequenceState::kFinished)
      FinishSequence(seq.get(), FinishReason::kNotFinished);
    seq->num_published = -1;
  }
  rs->forked = true;
  Result res;
  res.request_id = rs->id;
  res.is_final = res.is_sequence_final = true;
  res.error = error;
  res.stats = rs->stats;
  Deliver(rs, std::move(res));
}

void Executor::RetireFinished() {
  for (auto it = requests_.begin(); it != requests_.end();) {
    RequestState* rs = it->second.get();
    bool done = rs->forked && rs->num_finished == static_cast<int32_t>(rs->sequences.size());
    for (auto& s : rs->sequences) done = done && s->num_published < 0;
    if (done) {
      it = requests_.erase(it);
      --num_unfinished_;
    } else {
      ++it;
    }
  }
}

StepShape Executor::ShapeOf(const ScheduleOutput& out) const {
  StepShape shape;
  for (const ScheduledChunk& c : out.chunks) {
    const Sequence& seq = *c.seq;
    const double n = c.num_tokens, d = c.num_draft, p = seq.num_computed;
    if (c.num_tokens == 1 && seq.num_uncomputed() == 1) {
      shape.decode_rows += 1 + d;
      shape.decode_positions += AttendedPositions(p, 1 + d);
    } else {
      shape.context_tokens += n;
      shape.context_positions += AttendedPositions(p, n);
      shape.decode_rows += d;  // drafts after a prompt's last chunk
      shape.decode_positions += AttendedPositions(p + n, d);
    }
  }
  return shape;
}

void Executor::TimeTokens(RequestState* rs) {
  int32_t k = 0;  // tokens a sequence of the request got this step
  for (auto& s : rs->sequences) {
    k = std::max(k, s->num_generated() - s->num_timed);
    s->num_timed = s->num_generated();
  }
  if (k <= 0) return;
  const Clock::time_point now = rs->stats.last_token_time;
  if (rs->last_step_with_tokens != Clock::time_point{}) {
    const double gap =
        std::chrono::duration<double, std::milli>(now - rs->last_step_with_tokens).count();
    rs->stats.inter_token_latency.Add(gap / k, k);
  }
  rs->last_step_with_tokens = now;
}

void Executor::RecordStats(const ScheduleOutput& out, Clock::time_point start, int32_t context_seqs,
                           int32_t context_tokens, int32_t gen_seqs) {
  IterationStats s;
  s.iteration = iteration_;
  s.step_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  s.forward_ms = last_forward_ms_;
  if (last_forward_ms_ > 0) step_budget_.ObserveOverhead(s.step_ms - s.forward_ms);
  last_forward_ms_ = 0;
  s.num_active = static_cast<int32_t>(scheduler_.running().size());
  s.num_queued = static_cast<int32_t>(scheduler_.waiting().size());
  s.num_scheduled_context = context_seqs;
  s.num_scheduled_generation = gen_seqs;
  s.num_context_tokens = context_tokens;
  s.num_generation_tokens = gen_seqs;
  s.num_draft_tokens = step_draft_tokens_;
  s.num_accepted_draft_tokens = step_accepted_draft_tokens_;
  step_draft_tokens_ = step_accepted_draft_tokens_ = 0;
  s.num_paused = static_cast<int32_t>(out.paused.size());
  s.num_paused_total = scheduler_.num_paused_total();
  const BlockCounts c = blocks_.counts();
  s.kv_blocks_total = c.total, s.kv_blocks_free = c.free, s.kv_blocks_used = c.used,
  s.kv_blocks_cached = c.cached;
  const BlockCounts w = window_blocks_ ? window_blocks_->counts() : BlockCounts{};
  s.window_kv_blocks_total = w.total, s.window_kv_blocks_free = w.free,
  s.window_kv_blocks_used = w.used, s.window_kv_blocks_cached = w.cached;
  s.kv_window = window_blocks_ ? runner_->kv_window() : 0;
  s.kv_blocks_reused = out.num_reused_blocks;
  s.kv_blocks_reused_from_disk = out.num_disk_reused_blocks;
  s.kv_tokens_partially_reused = out.num_partially_reused_tokens;
  s.waiting_for_kv_cache = out.waiting_for_kv_cache;
  s.waiting_for_max_num_tokens = out.waiting_for_max_num_tokens;
  s.waiting_for_max_batch_size = out.waiting_for_max_batch_size;
  s.waiting_for_static_batch = out.waiting_for_static_batch;
  s.waiting_for_latency_budget = out.waiting_for_latency_budget;
  s.waiting_for_kv_disk_reads = out.waiting_for_kv_disk_reads;
  s.latency_target_ms = last_latency_target_ms_;
  s.predicted_forward_ms = last_predicted_ms_;
  last_latency_target_ms_ = last_predicted_ms_ = 0;
  std::lock_guard<std::mutex> lock(mu_);
  num_queued_ = s.num_queued + static_cast<int64_t>(submissions_.size());
  last_stats_ = s;
  block_counts_ = c;
  window_block_counts_ = w;
  if (draft_blocks_) draft_block_counts_ = draft_blocks_->counts();
  stats_.push_back(s);
  if (stats_.size() > kMaxStatsKept) stats_.pop_front();
}

}  // namespace inflight
