#include "backends/llm/llm_backend.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "backends/llm/guide_cache.h"
#include "backends/llm/llm_disaggregated.h"
#include "backends/llm/llm_inputs.h"
#include "backends/llm/llm_params.h"
#include "backends/llm/llm_stats.h"
#include "backends/llm/lora_cache.h"
#include "backends/llm/text_backends.h"
#include "base/logging.h"
#include "base/serial_worker.h"
#include "engine/executor.h"
#include "engine/output_stream.h"
#include "model/model.h"
#include "parallel/mpi_process.h"
#include "parallel/parallel_runner.h"
#include "serving/live_stats.h"
#include "serving/metrics.h"
#include "serving/model_config_util.h"
#include "serving/model_paths.h"
#include "serving/tenancy.h"
#include "serving/word_list.h"

namespace inflight::serving {
namespace {

serving::KvEventRecord ToRecord(const KvCacheEvent& e) {
  serving::KvEventRecord r;
  r.id = e.id;
  r.stored = e.type == KvCacheEvent::Type::kStored;
  r.updated = e.type == KvCacheEvent::Type::kUpdated;
  r.group = e.group;
  r.block_hash = e.block_hash;
  r.parent_hash = e.parent_hash;
  r.tokens = e.tokens;
  r.priority = e.priority;
  r.cache_level = e.cache_level;
  return r;
}

namespace fs = std::filesystem;

// Reads the per-row value of a scalar input ([B,1] or [B] or [1]): row b, or the only value.
class Inputs {
 public:
  explicit Inputs(const InferRequest& r) : r_(r) {}
  StatusOr<std::optional<double>> Scalar(const char* name, int64_t row) const {
    return ScalarInput(r_, name, row);
  }

 private:
  const InferRequest& r_;
};

// Nanoseconds since the epoch of a steady-clock time (0 when unset).
int64_t EpochNs(Clock::time_point t) {
  if (t == Clock::time_point{}) return 0;
  const auto system = std::chrono::system_clock::now() + (t - Clock::now());
  return std::chrono::duration_cast<std::chrono::nanoseconds>(system.time_since_epoch()).count();
}

// Beam search: output_ids [1, beams, L] padded with -1 to the longest beam, sequence_length
// [1, beams], and with log-probs cum_log_probs [1, beams], output_log_probs [1, beams, L]
// (padded with 0), as the reference returns them.
void AddBeamOutputs(const Result& res, bool log_probs, InferResponse* resp) {
  const int64_t beams = static_cast<int64_t>(res.beams.size());
  int64_t longest = 0, longest_lp = 0;
  for (const BeamOutput& b : res.beams) {
    longest = std::max<int64_t>(longest, static_cast<int64_t>(b.output_token_ids.size()));
    longest_lp = std::max<int64_t>(longest_lp, static_cast<int64_t>(b.log_probs.size()));
  }
  std::vector<int32_t> ids(static_cast<size_t>(beams * longest), -1), lengths;  // -1: padding
  std::vector<float> cum, lps(static_cast<size_t>(beams * longest_lp), 0.0f);
  for (int64_t i = 0; i < beams; ++i) {
    const BeamOutput& b = res.beams[i];
    std::copy(b.output_token_ids.begin(), b.output_token_ids.end(), ids.begin() + i * longest);
    std::copy(b.log_probs.begin(), b.log_probs.end(), lps.begin() + i * longest_lp);
    lengths.push_back(static_cast<int32_t>(b.output_token_ids.size()));
    cum.push_back(b.cum_log_prob);
  }
  resp->outputs.push_back(InferTensor::Int32("output_ids", {1, beams, longest}, std::move(ids)));
  resp->outputs.push_back(InferTensor::Int32("sequence_length", {1, beams}, std::move(lengths)));
  if (log_probs) {
    resp->outputs.push_back(InferTensor::Float32("cum_log_probs", {1, beams}, std::move(cum)));
    resp->outputs.push_back(
        InferTensor::Float32("output_log_probs", {1, beams, longest_lp}, std::move(lps)));
  }
}

void AddPerfMetrics(const RequestStats& st, InferResponse* resp) {
  auto i32 = [&](const char* name, int32_t v) {
    resp->outputs.push_back(InferTensor::Int32(name, {1, 1}, {v}));
  };
  auto i64 = [&](const char* name, int64_t v) {
    resp->outputs.push_back(
        InferTensor::FromDoubles(name, inference::TYPE_INT64, {1, 1}, {static_cast<double>(v)}));
  };
  i32("kv_cache_alloc_new_blocks", st.num_allocated_blocks);
  i32("kv_cache_reused_blocks", st.num_reused_blocks);
  i32("kv_cache_alloc_total_blocks", st.num_allocated_blocks + st.num_reused_blocks);
  i64("arrival_time_ns", EpochNs(st.arrival_time));
  i64("first_scheduled_time_ns", EpochNs(st.first_scheduled_time));
  i64("first_token_time_ns", EpochNs(st.first_token_time));
  i64("last_token_time_ns", EpochNs(st.last_token_time));
  const float rate = st.num_draft_tokens > 0
                         ? static_cast<float>(st.num_accepted_draft_tokens) / st.num_draft_tokens
                         : 0.0f;
  resp->outputs.push_back(InferTensor::Float32("acceptance_rate", {1, 1}, {rate}));
  i32("total_accepted_draft_tokens", st.num_accepted_draft_tokens);
  i32("total_draft_tokens", st.num_draft_tokens);
  // The time between the request's tokens (every token after its first; 0 with fewer than 2).
  const LatencyHistogram& itl = st.inter_token_latency;
  resp->outputs.push_back(InferTensor::Float32("inter_token_latency_p50_ms", {1, 1},
                                               {static_cast<float>(itl.Percentile(0.5))}));
  resp->outputs.push_back(InferTensor::Float32("inter_token_latency_p99_ms", {1, 1},
                                               {static_cast<float>(itl.Percentile(0.99))}));
}

// Results of one row the delivery thread may leave untaken before the row is cancelled
// (it only falls that far behind when the process is starved; frontends bound their own
// clients' unread output much lower).
constexpr size_t kMaxUnreadResultBytes = 256 << 20;
// A request that came without an OutputCredit (no frontend counts its client's unread output)
// still pauses while this much of its results waits for the delivery thread.
constexpr int64_t kPauseUnreadResultBytes = 4 << 20;

// What one Triton request became in the executor: one executor request per batch row.
struct Pending {
  std::mutex mu;
  ResponseSink sink;
  std::string model_name, version;
  std::string live_key;        // LiveKey of the request ("" when it has no id)
  std::vector<RequestId> ids;  // executor ids of the rows enqueued so far
  int64_t rows_outstanding = 0;
  bool batched = false;         // B > 1: responses carry batch_index
  bool multi_sequence = false;  // num_return_sequences > 1: responses carry sequence_index
  bool return_log_probs = false;
  bool perf_metrics = false;    // return_perf_metrics: KV reuse and timing outputs
  bool finish_reason = false;   // parameter return_finish_reason: sequence-final responses name why
  bool handoff_to_shm = false;  // context_phase_transport shm: the hand-off goes in a segment
  std::shared_ptr<CancelToken> cancel;  // set when the client went away
  std::shared_ptr<UsageMeter> usage;    // the tenant's token count, when limited
  Status failure;                       // the first error; the final response carries it
  bool done = false;
};

class LlmBackend : public ModelBackend {
 public:
  // `model` is null when a tensor/pipeline-parallel runner holds the shards (model_config is
  // then the whole model's); holds_mpi_world: leader mode, released when the model goes.
  LlmBackend(std::unique_ptr<Model> model, const inflight::ModelConfig& model_config,
             std::unique_ptr<Model> draft_model, std::unique_ptr<Executor> executor,
             const LlmParams& params, const inference::ModelConfig& config,
             const BackendContext& context, std::unique_ptr<KvHandoffShm> handoff_shm,
             bool holds_mpi_world = false)
      : model_(std::move(model)),
        model_config_(model_config),
        holds_mpi_world_(holds_mpi_world),
        draft_model_(std::move(draft_model)),
        executor_(std::move(executor)),
        params_(params),
        config_(config),
        context_(context),
        loras_(static_cast<size_t>(params.lora_cache_bytes)),
        handoff_shm_(std::move(handoff_shm)) {
    // max_queue_size 0 (unbounded in the reference) is bounded here: a request waiting
    // needs at least one KV block to ever run, so the cache's block count bounds the queue.
    // A negative max_queue_size is unbounded.
    if (params_.executor.max_queue_size == 0 && !params_.unbounded_queue)
      queue_bound_ = std::max<int64_t>(64, executor_->num_kv_blocks());
    stats_thread_ = std::thread([this] { StatsLoop(); });
  }

  ~LlmBackend() override {
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      stop_ = true;
    }
    stats_cv_.notify_all();
    stats_thread_.join();
    unloading_ = true;  // requests the shutdown cancels end with an error, not as complete
    executor_->Shutdown();
    delivery_.Stop();   // after the executor's last results have been delivered
    executor_.reset();  // a parallel runner stops its followers here
    if (holds_mpi_world_) parallel::ReleaseWorld();
  }

  void Execute(InferRequest request, ResponseSink sink) override;
  std::shared_ptr<const Tokenizer> tokenizer() const override { return tokenizer_; }
  int64_t context_length() const override { return executor_->context_length(); }
  Status Health() const override { return executor_->Health(); }
  StatusOr<serving::KvEventsPage> KvEvents(uint64_t after_id, size_t max) const override {
    auto read = executor_->KvEvents(after_id, max);
    if (!read.ok()) return read.status();
    serving::KvEventsPage page;
    page.gap = read->gap;
    page.last_id = read->last_id;
    page.dropped = executor_->num_kv_events_dropped();
    for (const KvCacheEvent& e : read->events) page.events.push_back(ToRecord(e));
    return page;
  }
  StatusOr<serving::KvCacheListing> KvCacheBlocks() const override {
    auto snap = executor_->KvSnapshot(std::chrono::seconds(10));
    if (!snap.ok()) return snap.status();
    serving::KvCacheListing listing;
    listing.last_event_id = snap->last_event_id;
    for (const KvCacheEvent& e : snap->blocks) listing.blocks.push_back(ToRecord(e));
    return listing;
  }
  bool LiveSnapshot(LlmLiveSnapshot* out) const override {
    out->model = context_.model_name;
    out->max_batch_size = params_.executor.max_batch_size;
    out->max_num_tokens = params_.executor.max_num_tokens;
    out->tokens_per_block = params_.executor.tokens_per_block;
    out->num_unfinished = executor_->num_unfinished_requests();
    out->num_queued = executor_->num_queued_requests();
    out->blocks = ToKvBlocks(executor_->KvBlockCounts());
    out->window_blocks = ToKvBlocks(executor_->WindowKvBlockCounts());
    out->kv_window = KvWindow(out->window_blocks);
    live_stats_.Fill(out);
    return true;
  }
  void set_tokenizer(std::shared_ptr<const Tokenizer> t) {
    tokenizer_ = std::move(t);
    guides_ = std::make_unique<GuideCache>(tokenizer_);
  }

 private:
  // embedding_bias ([vocab] or [B, vocab]): row b's non-zero entries become logit biases.
  Status ReadEmbeddingBias(const InferTensor& t, int64_t row, SamplingParams* sampling) const;
  StatusOr<Request> BuildRow(const InferRequest& r, int64_t row, const std::vector<int64_t>& ids,
                             int64_t width, bool* perf_metrics, DisaggregatedRow* disaggregated);
  void OnResult(const std::shared_ptr<Pending>& p, int64_t row, Result&& result);
  void StatsLoop();
  // The window group's sliding window in tokens: the model's sliding_window, which the engine
  // gives the group (LocalModelRunner); 0 when the cache has no window group. Known before the
  // first step, unlike IterationStats::kv_window.
  int32_t KvWindow(const KvBlocks& window_blocks) const {
    return window_blocks.total > 0 ? model_config_.sliding_window : 0;
  }
  void StopRequest(const InferRequest& r, const ResponseSink& sink);

  std::unique_ptr<Model> model_;  // null under tensor/pipeline parallelism
  const inflight::ModelConfig model_config_;
  const bool holds_mpi_world_;
  std::unique_ptr<Model> draft_model_;  // speculative_decoding_mode draft_model
  std::unique_ptr<Executor> executor_;  // declared after the models: stops before they go
  LlmParams params_;
  inference::ModelConfig config_;
  BackendContext context_;
  std::shared_ptr<const Tokenizer> tokenizer_;  // the weights' own (OpenAI frontend); may be null
  std::unique_ptr<GuideCache> guides_;          // guided decoding over tokenizer_'s vocabulary
  LoraCache loras_;                             // LoRA adapters by lora_task_id
  const std::unique_ptr<KvHandoffShm> handoff_shm_;  // context_phase_shm_dir (null: none)

 public:
  // lora_prefetch_dir: every subfolder named by a task id holding a PEFT adapter.
  Status PrefetchLoras(const std::string& dir) {
    auto loaded = serving::PrefetchLoras(dir, model_config_, loras_);
    if (!loaded.ok()) return loaded.status();
    INFLIGHT_LOG(kInfo) << "model '" << context_.model_name << "': " << *loaded
                        << " LoRA adapters from " << dir;
    return OkStatus();
  }

 private:
  LlmLiveStats live_stats_;  // the web dashboard's view

  std::mutex ids_mu_;  // LiveKey (tenant and Triton id) -> live executor ids, for `stop` requests
  std::unordered_multimap<std::string, RequestId> live_;

  std::atomic<bool> unloading_{false};
  // Results leave the engine thread here (one serving thread, in order): the LLM response,
  // the ensemble steps downstream of it (detokenizer), statistics and the frontends' sinks
  // all run on it instead of between engine steps.
  SerialWorker delivery_;
  int64_t queue_bound_ = 0;  // derived admission bound; 0 when the executor's own applies

  std::mutex stats_mu_;
  std::condition_variable stats_cv_;
  bool stop_ = false;
  std::thread stats_thread_;
};

// The key `stop` requests find a request by: its id within its sender's tenant, so one
// tenant cannot stop another's requests by naming their ids.
std::string LiveKey(const InferRequest& r) {
  if (r.id.empty()) return {};
  // Length-prefixed, so no tenant name and id can spell another pair.
  return std::to_string(r.tenant.size()) + ':' + r.tenant + r.id;
}

void LlmBackend::StopRequest(const InferRequest& r, const ResponseSink& sink) {
  InferResponse resp;
  resp.final = true;
  if (r.id.empty()) {
    resp.error = InvalidArgumentError("Trying to stop a request but request ID is not provided");
    sink(std::move(resp));
    return;
  }
  std::vector<RequestId> ids;
  {
    std::lock_guard<std::mutex> lock(ids_mu_);
    auto range = live_.equal_range(LiveKey(r));
    for (auto it = range.first; it != range.second; ++it) ids.push_back(it->second);
  }
  for (RequestId id : ids) executor_->Cancel(id);
  sink(std::move(resp));
}

void LlmBackend::Execute(InferRequest r, ResponseSink sink) {
  auto fail = [&](const Status& s) { sink(ErrorResponse(s)); };
  const bool decoupled = IsDecoupled(config_);
  Inputs in(r);
  auto stop = in.Scalar("stop", 0);
  if (!stop.ok()) return fail(stop.status());
  if (stop->value_or(0) != 0) return StopRequest(r, sink);

  const InferTensor* ids_tensor = r.FindInput("input_ids");
  if (!ids_tensor) return fail(InvalidArgumentError("input_ids is not present in the request"));
  if (!r.FindInput("request_output_len")) {
    return fail(InvalidArgumentError("request_output_len is not present in the request"));
  }
  auto ids = ids_tensor->AsInt64();
  if (!ids.ok()) return fail(ids.status());
  // [B, L] with a batch dimension, [L] without one.
  int64_t batch = 1, width = ids_tensor->num_elements();
  if (config_.max_batch_size() > 0 && ids_tensor->shape.size() >= 2) {
    batch = ids_tensor->shape[0];
    width = batch > 0 ? ids_tensor->num_elements() / batch : 0;
  }
  if (batch < 1) return fail(InvalidArgumentError("input_ids has no rows"));
  if (batch > 1 && !decoupled) {
    return fail(
        InvalidArgumentError("Batch size > 1 requires the tensorrt_llm backend to be using "
                             "decoupled transaction policy"));
  }
  std::vector<Request> rows;
  bool perf_metrics = false;
  DisaggregatedRow disaggregated;
  for (int64_t b = 0; b < batch; ++b) {
    auto row = BuildRow(r, b, *ids, width, &perf_metrics, &disaggregated);
    if (!row.ok()) return fail(row.status());
    if (row->streaming && !decoupled) {
      return fail(InvalidArgumentError(
          "Streaming is only supported if model is deployed using decoupled mode."));
    }
    rows.push_back(std::move(row).value());
  }

  if (queue_bound_ > 0 && executor_->num_queued_requests() + batch > queue_bound_) {
    return fail(ResourceExhaustedError("Maximum queue size of " + std::to_string(queue_bound_) +
                                       " has been reached, please try again later"));
  }
  // A shared-memory hand-off is taken (read once) only now that the request's inputs and the
  // queue bound passed (an engine that then refuses it, unhealthy or full, consumed it).
  if (!disaggregated.segment.empty()) {
    Status taken = TakeHandoffSegment(*handoff_shm_, disaggregated.segment, &rows[0]);
    if (!taken.ok()) return fail(taken);
  }
  auto p = std::make_shared<Pending>();
  p->sink = std::move(sink);
  p->model_name = context_.model_name;
  p->version = std::to_string(context_.version);
  p->live_key = LiveKey(r);
  p->batched = batch > 1;
  p->perf_metrics = perf_metrics;
  p->handoff_to_shm = disaggregated.to_shm;
  if (auto it = r.parameters.find("return_finish_reason"); it != r.parameters.end()) {
    const bool* v = std::get_if<bool>(&it->second);
    p->finish_reason = v && *v;
  }
  p->cancel = r.cancel;
  p->usage = r.usage;
  p->rows_outstanding = batch;
  const std::shared_ptr<OutputCredit> credit =
      r.output_credit ? r.output_credit : std::make_shared<OutputCredit>(kPauseUnreadResultBytes);
  for (int64_t b = 0; b < batch; ++b) {
    Request& row = rows[b];
    // Beam search returns its beams together in one response ([1, beams, L]).
    p->multi_sequence = row.num_return_sequences > 1 && row.beam_width == 1;
    p->return_log_probs = row.return_log_probs;
    // The engine thread only pushes into the row's output stream; its notification schedules
    // the response path on delivery_ (weak: the stream must not own itself).
    // Back-pressure: the row's results count in the request's output credit (the frontend's,
    // which also counts what waits on the connection) from the engine's push until the
    // response path has handed them on; the engine pauses the row while it is past its bound.
    auto stream = std::make_shared<OutputStream>(kMaxUnreadResultBytes);
    stream->SetCredit(credit);
    stream->SetNotify([this, p, b, weak = std::weak_ptr<OutputStream>(stream)] {
      auto s = weak.lock();  // alive: the executor is pushing into it
      if (!s) return;
      delivery_.Post([this, p, b, s] {
        std::vector<Result> results = s->Take(/*keep_credit=*/true);
        int64_t held = 0;
        for (const Result& r : results) held += static_cast<int64_t>(OutputStream::ResultBytes(r));
        // Released once the frontend has counted the responses (the sinks run synchronously).
        struct ReleaseAtEnd {
          OutputCredit* credit;
          int64_t bytes;
          ~ReleaseAtEnd() {
            if (bytes > 0) credit->Release(bytes);
          }
        } release{s->credit().get(), held};
        for (Result& r : results) {
          if (r.is_final && s->overflowed() && r.error.ok()) {
            r.error = ResourceExhaustedError("the server's response path fell behind (more than " +
                                             std::to_string(kMaxUnreadResultBytes) +
                                             " bytes of results unread)");
          }
          OnResult(p, b, std::move(r));
        }
      });
    });
    row.output = std::move(stream);
    std::unique_lock<std::mutex> lock(p->mu);  // results may arrive before Enqueue returns
    auto id = executor_->Enqueue(std::move(row));
    if (!id.ok()) {
      // Rows already running are cancelled; the error goes out when they have ended.
      p->failure = id.status();
      p->rows_outstanding -= batch - b;
      std::vector<RequestId> started = p->ids;
      const bool finish_now = p->rows_outstanding == 0 && !p->done;
      if (finish_now) p->done = true;
      lock.unlock();
      for (RequestId started_id : started) executor_->Cancel(started_id);
      if (finish_now) p->sink(ErrorResponse(p->failure));
      return;
    }
    p->ids.push_back(*id);
    lock.unlock();
    std::lock_guard<std::mutex> g(ids_mu_);
    if (!p->live_key.empty()) live_.emplace(p->live_key, *id);
  }
  std::weak_ptr<Pending> weak = p;
  r.cancel->OnCancel([this, weak] {
    auto pending = weak.lock();
    if (!pending) return;
    std::vector<RequestId> ids;
    {
      std::lock_guard<std::mutex> lock(pending->mu);
      ids = pending->ids;
    }
    for (RequestId id : ids) executor_->Cancel(id);
  });
}

StatusOr<Request> LlmBackend::BuildRow(const InferRequest& r, int64_t b,
                                       const std::vector<int64_t>& ids, int64_t width,
                                       bool* perf_metrics, DisaggregatedRow* disaggregated) {
  Inputs in(r);
  Request q;
  int64_t len = width;
  auto input_len = in.Scalar("input_lengths", b);
  if (!input_len.ok()) return input_len.status();
  if (*input_len) len = static_cast<int64_t>(**input_len);
  if (len < 0 || len > width) {
    return InvalidArgumentError("input_lengths " + std::to_string(len) + " is outside [0, " +
                                std::to_string(width) + "]");
  }
  for (int64_t i = 0; i < len; ++i) {
    const int64_t id = ids[b * width + i];
    if (id < 0 || id > INT32_MAX)
      return InvalidArgumentError("input_ids holds an invalid token id " + std::to_string(id));
    q.prompt_ids.push_back(static_cast<int32_t>(id));
  }
  auto get = [&](const char* name) -> StatusOr<std::optional<double>> {
    return in.Scalar(name, b);
  };
#define INFLIGHT_READ(var, name) \
  auto var = get(name);          \
  if (!var.ok()) return var.status();
  INFLIGHT_READ(out_len, "request_output_len");
  INFLIGHT_READ(end_id, "end_id");
  INFLIGHT_READ(pad_id, "pad_id");
  INFLIGHT_READ(streaming, "streaming");
  INFLIGHT_READ(beam_width, "beam_width");
  INFLIGHT_READ(temperature, "temperature");
  INFLIGHT_READ(top_k, "runtime_top_k");
  INFLIGHT_READ(top_p, "runtime_top_p");
  INFLIGHT_READ(rep, "repetition_penalty");
  INFLIGHT_READ(min_tokens, "min_tokens");
  INFLIGHT_READ(min_length, "min_length");
  INFLIGHT_READ(presence, "presence_penalty");
  INFLIGHT_READ(frequency, "frequency_penalty");
  INFLIGHT_READ(seed, "seed");
  INFLIGHT_READ(random_seed, "random_seed");
  INFLIGHT_READ(log_probs, "return_log_probs");
  INFLIGHT_READ(ctx_logits, "return_context_logits");
  INFLIGHT_READ(gen_logits, "return_generation_logits");
  INFLIGHT_READ(exclude, "exclude_input_in_output");
  INFLIGHT_READ(nrs, "num_return_sequences");
  INFLIGHT_READ(perf, "return_perf_metrics");
  INFLIGHT_READ(num_draft, "num_draft_tokens");
  INFLIGHT_READ(len_penalty, "len_penalty");
  INFLIGHT_READ(early_stopping, "early_stopping");
  INFLIGHT_READ(diversity, "beam_search_diversity_rate");
#undef INFLIGHT_READ
  const double max_tokens = out_len->value_or(0);
  if (max_tokens < 1 || max_tokens > INT32_MAX) {
    return InvalidArgumentError("request_output_len must be at least 1, got " +
                                std::to_string(static_cast<int64_t>(max_tokens)));
  }
  q.max_tokens = static_cast<int32_t>(max_tokens);
  q.end_id = static_cast<int32_t>(end_id->value_or(-1));
  q.pad_id = static_cast<int32_t>(pad_id->value_or(-1));
  q.streaming = streaming->value_or(0) != 0;
  const double beams = beam_width->value_or(1);
  if (!(beams >= 1 && beams <= params_.executor.max_beam_width)) {
    return InvalidArgumentError("beam_width " + std::to_string(static_cast<int64_t>(beams)) +
                                " is outside [1, max_beam_width " +
                                std::to_string(params_.executor.max_beam_width) + "]");
  }
  q.beam_width = static_cast<int32_t>(beams);
  q.length_penalty = static_cast<float>(len_penalty->value_or(0.0));
  q.early_stopping = static_cast<int32_t>(early_stopping->value_or(1));
  q.beam_search_diversity_rate = static_cast<float>(diversity->value_or(0.0));
  // As TensorRT-LLM: no top-k and no top-p means greedy decoding.
  const int32_t k = static_cast<int32_t>(top_k->value_or(0));
  const double pp = top_p->value_or(0);
  q.sampling.top_k = k;
  q.sampling.top_p = pp > 0 ? static_cast<float>(pp) : 1.0f;
  q.sampling.temperature = static_cast<float>(temperature->value_or(1.0));
  if ((k == 0 && pp <= 0) || k == 1) q.sampling.temperature = 0.0f;
  q.sampling.repetition_penalty = static_cast<float>(rep->value_or(1.0));
  q.sampling.presence_penalty = static_cast<float>(presence->value_or(0.0));
  q.sampling.frequency_penalty = static_cast<float>(frequency->value_or(0.0));
  q.sampling.seed = static_cast<uint64_t>(seed->value_or(random_seed->value_or(0)));
  q.min_tokens = static_cast<int32_t>(min_tokens->value_or(min_length->value_or(0)));
  q.return_log_probs = log_probs->value_or(0) != 0;
  q.return_context_logits = ctx_logits->value_or(0) != 0;
  q.return_generation_logits = gen_logits->value_or(0) != 0;
  q.exclude_input_in_output =
      exclude->has_value() ? **exclude != 0 : params_.exclude_input_in_output;
  const RequestLimits& limits = context_.request_limits;
  if (limits.max_prompt_tokens > 0 && len > limits.max_prompt_tokens) {
    return InvalidArgumentError("the prompt has " + std::to_string(len) +
                                " tokens; this server takes at most " +
                                std::to_string(limits.max_prompt_tokens));
  }
  const double n = nrs->value_or(1);
  if (n < 1 || (limits.max_n > 0 && n > static_cast<double>(limits.max_n))) {
    return InvalidArgumentError("num_return_sequences must be in [1, " +
                                std::to_string(limits.max_n > 0 ? limits.max_n : INT32_MAX) + "]");
  }
  q.num_return_sequences = static_cast<int32_t>(n);
  *perf_metrics = perf->value_or(0) != 0;
  for (const char* list : {"stop_words_list", "bad_words_list"}) {
    const InferTensor* t = r.FindInput(list);
    if (!t) continue;
    auto words = WordListRow(*t, b);
    if (!words.ok()) return words.status();
    if (limits.max_stop_words > 0 && static_cast<int64_t>(words->size()) > limits.max_stop_words) {
      return InvalidArgumentError(std::string(list) + " holds " + std::to_string(words->size()) +
                                  " words; at most " + std::to_string(limits.max_stop_words) +
                                  " are taken");
    }
    (std::string(list) == "stop_words_list" ? q.stop_words : q.bad_words) =
        std::move(words).value();
  }
  // Speculative decoding: the client's draft tokens ([k] or [B, k]; -1 pads a shorter row),
  // and how many drafts per step the server's proposer may add (0: none).
  if (const InferTensor* drafts = r.FindInput("draft_input_ids");
      drafts && drafts->num_elements() > 0) {
    auto values = drafts->AsInt64();
    if (!values.ok()) return values.status();
    const int64_t rows = drafts->shape.size() >= 2 ? drafts->shape[0] : 1;
    const int64_t k = static_cast<int64_t>(values->size()) / std::max<int64_t>(1, rows);
    const int64_t row = rows == 1 ? 0 : b;
    if (row >= rows) return InvalidArgumentError("draft_input_ids has fewer rows than input_ids");
    if (k > kMaxDraftTokens) {
      return InvalidArgumentError("draft_input_ids holds " + std::to_string(k) +
                                  " tokens; at most " + std::to_string(kMaxDraftTokens) +
                                  " are verified per step");
    }
    for (int64_t i = 0; i < k; ++i) {
      const int64_t id = (*values)[row * k + i];
      if (id == -1) break;
      if (id < 0 || id >= model_config_.vocab_size) {
        return InvalidArgumentError("draft_input_ids holds token id " + std::to_string(id) +
                                    " outside the vocabulary");
      }
      q.draft_tokens.push_back(static_cast<int32_t>(id));
    }
  }
  RETURN_IF_ERROR(ReadDraftLogits(r, b, model_config_.vocab_size, &q));
  if (num_draft->has_value()) {
    if (**num_draft < 0 || **num_draft > kMaxDraftTokens) {
      return InvalidArgumentError("num_draft_tokens must be in [0, " +
                                  std::to_string(kMaxDraftTokens) + "]");
    }
    q.num_draft_tokens = static_cast<int32_t>(**num_draft);
  }
  RETURN_IF_ERROR(ReadLookahead(r, b, params_.executor.lookahead, &q));
  RETURN_IF_ERROR(ReadDisaggregated(r, width > 0 ? static_cast<int64_t>(ids.size()) / width : 1,
                                    handoff_shm_.get(), &q, disaggregated));
  // decoder_input_ids / decoder_input_lengths are ignored: every supported model is
  // decoder-only, and the reference ensemble always sends them (one pad id per row).
  if (const InferTensor* bias = r.FindInput("embedding_bias"); bias && bias->num_elements() > 0) {
    Status st = ReadEmbeddingBias(*bias, b, &q.sampling);
    if (!st.ok()) return st;
  }
  // Extensions over the reference's inputs, as request parameters (the OpenAI frontend's
  // min_p and top_logprobs).
  if (auto it = r.parameters.find("min_p"); it != r.parameters.end()) {
    if (const double* v = std::get_if<double>(&it->second))
      q.sampling.min_p = static_cast<float>(*v);
    else if (const int64_t* i = std::get_if<int64_t>(&it->second))
      q.sampling.min_p = static_cast<float>(*i);
    else
      return InvalidArgumentError("parameter min_p must be a number");
  }
  if (auto it = r.parameters.find("num_top_logprobs"); it != r.parameters.end()) {
    const int64_t* v = std::get_if<int64_t>(&it->second);
    const int64_t most =
        limits.max_logprobs > 0 ? std::min<int64_t>(100, limits.max_logprobs) : 100;
    if (!v || *v < 0 || *v > most) {
      return InvalidArgumentError("parameter num_top_logprobs must be an integer in [0, " +
                                  std::to_string(most) + "]");
    }
    q.sampling.num_top_logprobs = static_cast<int32_t>(*v);
  }
  RETURN_IF_ERROR(ReadGuide(r, b, guides_.get(), &q));
  RETURN_IF_ERROR(ReadLora(r, b, model_config_, loras_, &q));
  RETURN_IF_ERROR(ReadPromptTable(r, b, model_config_.hidden_size, &q));
  Status s = q.sampling.Validate();
  if (!s.ok()) return s;
  if (auto it = r.parameters.find("cache_salt"); it != r.parameters.end()) {
    const std::string* salt = std::get_if<std::string>(&it->second);
    if (!salt || salt->size() > kMaxCacheSaltBytes) {
      return InvalidArgumentError("parameter cache_salt must be a string of at most " +
                                  std::to_string(kMaxCacheSaltBytes) + " bytes");
    }
    q.cache_salt = CacheSaltKey(*salt);
  }
  auto priority = r.parameters.find("priority");
  if (priority != r.parameters.end() && std::holds_alternative<int64_t>(priority->second)) {
    // Triton: level 1 is the highest. The executor: 0..1, higher first.
    const int64_t level = std::get<int64_t>(priority->second);
    if (level > 0) q.priority = static_cast<float>(1.0 / static_cast<double>(level));
  } else if (priority != r.parameters.end() && std::holds_alternative<double>(priority->second)) {
    // inflight's extension (the OpenAI frontend's): the executor's 0..1 itself.
    const double v = std::get<double>(priority->second);
    if (!(v >= 0.0 && v <= 1.0))
      return InvalidArgumentError("parameter priority as a number must be in [0, 1]");
    q.priority = static_cast<float>(v);
  }
  auto timeout = r.parameters.find("timeout");
  if (timeout != r.parameters.end() && std::holds_alternative<int64_t>(timeout->second)) {
    q.timeout_ms = std::max<int64_t>(1, std::get<int64_t>(timeout->second) / 1000);
  }
  return q;
}

Status LlmBackend::ReadEmbeddingBias(const InferTensor& t, int64_t row,
                                     SamplingParams* sampling) const {
  auto values = t.AsDouble();
  if (!values.ok()) return values.status();
  const int64_t vocab = model_config_.vocab_size;
  const int64_t n = static_cast<int64_t>(values->size());
  // [B, width] rows, or one flat row; a row may be shorter than the model's vocabulary (a
  // tokenizer's vocabulary inside a padded embedding): the rest gets no bias.
  int64_t rows = 1, width = n;
  if (t.shape.size() >= 2 && t.shape[0] > 0) {
    rows = t.shape[0];
    width = n / rows;
  } else if (n > vocab && n % vocab == 0) {
    rows = n / vocab;
    width = vocab;
  }
  if (width > vocab) {
    return InvalidArgumentError("embedding_bias holds " + std::to_string(width) +
                                " values per row, more than the vocabulary size " +
                                std::to_string(vocab));
  }
  const int64_t r = rows == 1 ? 0 : row;
  if (r >= rows) return InvalidArgumentError("embedding_bias has fewer rows than input_ids");
  for (int64_t i = 0; i < width; ++i) {
    const double v = (*values)[r * width + i];
    if (!std::isfinite(v))
      return InvalidArgumentError("embedding_bias holds a non-finite value at " +
                                  std::to_string(i));
    if (v != 0) sampling->logit_bias.emplace_back(static_cast<int32_t>(i), static_cast<float>(v));
  }
  return OkStatus();
}

void LlmBackend::OnResult(const std::shared_ptr<Pending>& p, int64_t row, Result&& res) {
  InferResponse resp;
  std::unique_lock<std::mutex> lock(p->mu);
  if (p->done) return;
  if (res.is_final) {
    --p->rows_outstanding;
    if (!p->live_key.empty()) {
      std::lock_guard<std::mutex> g(ids_mu_);
      auto range = live_.equal_range(p->live_key);
      for (auto it = range.first; it != range.second; ++it) {
        if (it->second == res.request_id) {
          live_.erase(it);
          break;
        }
      }
    }
    LlmRequestRecord record = ToRequestRecord(res.stats);
    record.speculative_mode = SpeculativeModeName(params_.executor.speculative_mode);
    record.kv_transfer = res.stats.from_handoff;
    record.kv_transfer_ms = res.stats.kv_transfer_ms;
    if (context_.metrics) context_.metrics->ObserveLlmRequest(p->model_name, p->version, record);
    live_stats_.AddFinished(record);
    if (p->usage)
      p->usage->Add(static_cast<int64_t>(res.stats.num_prompt_tokens) +
                    res.stats.num_generated_tokens);
  }
  if (res.finish_reason == FinishReason::kCancelled && p->cancel->cancelled() && p->failure.ok()) {
    // The client is gone (disconnect, cancelled stream): end as CANCELLED, not as a success.
    p->failure = CancelledError("Request was cancelled");
  } else if (res.finish_reason == FinishReason::kCancelled && unloading_ && p->failure.ok()) {
    p->failure =
        UnavailableError("the model was unloaded (server shutdown) before the request finished");
  } else if (res.error.code() == StatusCode::kCancelled && p->failure.ok()) {
    p->failure = res.error;  // its client left it paused too long (the reason is the message)
  } else if (!res.error.ok() && p->failure.ok()) {
    p->failure =
        InternalError("Executor failed process requestId " + std::to_string(res.request_id) +
                      " due to the following error: " + res.error.message());
  }
  const bool last = p->rows_outstanding == 0;
  if (!p->failure.ok()) {
    // A failed row ends the whole request with the error once every row has ended.
    std::vector<RequestId> ids = p->ids;
    if (last) {
      p->done = true;
      Status failure = p->failure;
      lock.unlock();
      p->sink(ErrorResponse(failure));
    } else {
      lock.unlock();
      for (RequestId id : ids) executor_->Cancel(id);
    }
    return;
  }
  resp.final = last;
  if (last) p->done = true;
  if (!res.beams.empty()) {
    AddBeamOutputs(res, p->return_log_probs, &resp);
    // Every response holds whole beams (re-ranked each step), not new tokens: a streaming
    // detokenizer downstream decodes each afresh.
    resp.parameters["all_generated_tokens"] = true;
  } else {
    const int64_t n = static_cast<int64_t>(res.output_token_ids.size());
    resp.outputs.push_back(InferTensor::Int32("output_ids", {1, 1, n}, res.output_token_ids));
    resp.outputs.push_back(
        InferTensor::Int32("sequence_length", {1, 1}, {static_cast<int32_t>(n)}));
    if (p->return_log_probs) {
      resp.outputs.push_back(InferTensor::Float32("cum_log_probs", {1, 1}, {res.cum_log_prob}));
      resp.outputs.push_back(InferTensor::Float32(
          "output_log_probs", {1, 1, static_cast<int64_t>(res.log_probs.size())}, res.log_probs));
    }
  }
  if (!res.top_logprobs.empty()) {
    // Extension: [1, 1, tokens, k] ids and log-probs of the most likely tokens at each step.
    const int64_t tokens = static_cast<int64_t>(res.top_logprobs.size()),
                  k = static_cast<int64_t>(res.top_logprobs[0].size());
    std::vector<int32_t> ids;
    std::vector<float> lps;
    for (const auto& step : res.top_logprobs) {
      for (int64_t j = 0; j < k; ++j) {
        ids.push_back(j < static_cast<int64_t>(step.size()) ? step[j].first : -1);
        lps.push_back(j < static_cast<int64_t>(step.size()) ? step[j].second : -INFINITY);
      }
    }
    resp.outputs.push_back(InferTensor::Int32("output_top_logprob_ids", {1, 1, tokens, k}, ids));
    resp.outputs.push_back(InferTensor::Float32("output_top_logprobs", {1, 1, tokens, k}, lps));
  }
  if (!res.context_logits.empty()) {
    const int64_t v = res.vocab_size;
    resp.outputs.push_back(InferTensor::Float32(
        "context_logits", {1, static_cast<int64_t>(res.context_logits.size()) / v, v},
        res.context_logits));
  }
  if (!res.generation_logits.empty()) {
    const int64_t v = res.vocab_size;
    resp.outputs.push_back(InferTensor::Float32(
        "generation_logits", {1, 1, static_cast<int64_t>(res.generation_logits.size()) / v, v},
        res.generation_logits));
  }
  if (p->perf_metrics && (res.is_final || res.is_sequence_final)) AddPerfMetrics(res.stats, &resp);
  if (res.context_phase) {
    resp.outputs.push_back(
        ContextPhaseOutput(*res.context_phase, p->handoff_to_shm ? handoff_shm_.get() : nullptr));
  }
  if (p->finish_reason && res.is_sequence_final)
    resp.parameters["finish_reason"] = std::string(FinishReasonName(res.finish_reason));
  if (p->finish_reason && res.is_final) {
    // Prompt tokens served from the prefix cache (OpenAI's usage.prompt_tokens_details).
    resp.parameters["cached_tokens"] =
        static_cast<int64_t>(res.stats.num_reused_blocks) * params_.executor.tokens_per_block;
  }
  if (p->batched)
    resp.outputs.push_back(InferTensor::Int32("batch_index", {1, 1}, {static_cast<int32_t>(row)}));
  if (p->multi_sequence)
    resp.outputs.push_back(InferTensor::Int32("sequence_index", {1, 1}, {res.sequence_index}));
  lock.unlock();
  // Sequences that finished without a final result of their own are already covered above.
  p->sink(std::move(resp));
}

void LlmBackend::StatsLoop() {
  auto last_sweep = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(stats_mu_);
  while (!stop_) {
    stats_cv_.wait_for(lock, std::chrono::milliseconds(params_.stats_period_ms));
    if (stop_) break;
    lock.unlock();
    // Hand-off segments nobody took expire even while no context phase writes one.
    if (handoff_shm_ && std::chrono::steady_clock::now() - last_sweep > std::chrono::seconds(1)) {
      handoff_shm_->Sweep();
      last_sweep = std::chrono::steady_clock::now();
    }
    const std::vector<EngineStep> stats = ToEngineSteps(executor_->GetLatestIterationStats());
    live_stats_.AddSteps(stats);
    if (context_.metrics) {
      LlmGaugeInput g;
      g.has_iteration = !stats.empty();
      if (!stats.empty()) g.last = stats.back();
      g.max_active = params_.executor.max_batch_size;
      g.blocks = ToKvBlocks(executor_->KvBlockCounts());
      g.window_blocks = ToKvBlocks(executor_->WindowKvBlockCounts());
      g.kv_window = KvWindow(g.window_blocks);
      g.tokens_per_block = params_.executor.tokens_per_block;
      g.static_batching = params_.executor.batching == BatchingStrategy::kStatic;
      g.num_queued = executor_->num_unfinished_requests();
      if (auto d = executor_->KvDiskStatistics()) {
        g.disk = {true,       d->files,   d->bytes,    d->hits,
                  d->written, d->dropped, d->rejected, d->evicted};
      }
      if (handoff_shm_) {
        const KvHandoffShm::Counts c = handoff_shm_->counts();
        g.handoff = {true, c.written, c.taken, c.expired, c.declined, c.live_bytes};
      }
      context_.metrics->SetLlmGauges(context_.model_name, std::to_string(context_.version), g);
      context_.metrics->RecordEngineSteps(context_.model_name, std::to_string(context_.version),
                                          stats);
    }
    lock.lock();
  }
}

}  // namespace

StatusOr<std::unique_ptr<ModelBackend>> CreateLlmBackend(const inference::ModelConfig& config,
                                                         const BackendContext& context) {
  auto params = ReadParams(config);
  if (!params.ok()) return params.status();
  auto shm = OpenHandoffShm(config, context);  // before the model loads: a bad folder fails fast
  if (!shm.ok()) return shm.status();
  auto path = GetParameter(config, "gpt_model_path");
  if (!path) return InvalidArgumentError("parameter gpt_model_path: no model path given");
  auto confined = ConfinedPath("gpt_model_path", *path, context.model_dir, context.allowed_roots);
  if (!confined.ok()) return confined.status();
  const fs::path model_path(*confined);
  if (auto disk = GetParameter(config, "kv_cache_disk_path"); disk && !disk->empty()) {
    auto dir = OwnFolderPath("kv_cache_disk_path", *disk, context.model_dir, context.allowed_roots);
    if (!dir.ok()) return dir.status();
    params->executor.kv_cache_disk_path = *dir;
    // The files hold this model file's K/V: another file (or the same path rewritten) must
    // not read them.
    std::error_code ec;
    const auto size = fs::file_size(model_path, ec);
    const auto mtime = fs::last_write_time(model_path, ec).time_since_epoch().count();
    params->executor.kv_cache_disk_fingerprint =
        model_path.string() + "|" + std::to_string(size) + "|" + std::to_string(mtime);
  }
  // The draft model: draft_model_path (default: the model's own file), cut to its first
  // draft_model_layers layers when given.
  std::unique_ptr<Model> draft;
  if (params->executor.speculative_mode == SpeculativeMode::kDraftModel) {
    auto draft_path = ConfinedPath(
        "draft_model_path", GetParameter(config, "draft_model_path").value_or(model_path.string()),
        context.model_dir, context.allowed_roots);
    if (!draft_path.ok()) return draft_path.status();
    ModelLoadOptions options;
    const int64_t layers = GetIntParameter(config, "draft_model_layers", 0);
    if (layers < 0 || layers > INT32_MAX)
      return InvalidArgumentError("parameter draft_model_layers must be >= 0");
    options.num_layers = static_cast<int32_t>(layers);
    auto d = Model::Load(*draft_path, options);
    if (!d.ok()) return Status(d.status().code(), "draft model: " + d.status().message());
    draft = std::move(d).value();
  }
  std::unique_ptr<Model> model;
  std::unique_ptr<Executor> executor;
  bool holds_world = false;
  inflight::ModelConfig parallel_config;
  if (params->parallel.tp_size * params->parallel.pp_size > 1) {
    auto runner = CreateParallelRunner(config, context, model_path.string(), *params, &holds_world);
    if (!runner.ok()) return runner.status();
    parallel_config = (*runner)->model().config();
    auto e = Executor::CreateWithRunner(std::move(runner).value(), params->executor, draft.get());
    if (!e.ok()) {
      if (holds_world) parallel::ReleaseWorld();
      return e.status();
    }
    executor = std::move(e).value();
  } else {
    auto m = Model::Load(model_path.string());
    if (!m.ok()) return m.status();
    model = std::move(m).value();
    if (params->executor.speculative_mode == SpeculativeMode::kMedusa)
      RETURN_IF_ERROR(LoadMedusaHeads(config, context, model->config(), &params->executor));
    if (params->executor.speculative_mode == SpeculativeMode::kEagle)
      RETURN_IF_ERROR(LoadEagleHead(config, context, *model, &params->executor));
    auto e = Executor::Create(*model, params->executor, draft.get());
    if (!e.ok()) return e.status();
    executor = std::move(e).value();
  }
  const inflight::ModelConfig model_config = model ? model->config() : parallel_config;
  INFLIGHT_LOG(kInfo) << "model '" << context.model_name << "': "
                      << (model
                              ? model->Describe()
                              : "tensor_parallel_size " + std::to_string(params->parallel.tp_size) +
                                    " x pipeline_parallel_size " +
                                    std::to_string(params->parallel.pp_size))
                      << ", " << executor->num_kv_blocks() << " KV blocks of "
                      << params->executor.tokens_per_block << " tokens"
                      << (executor->WindowKvBlockCounts().total > 0
                              ? " for full-attention layers, " +
                                    std::to_string(executor->WindowKvBlockCounts().total) +
                                    " for sliding-window layers (window " +
                                    std::to_string(model_config.sliding_window) + " tokens)"
                              : std::string())
                      << (draft ? ", draft model " + draft->Describe() : std::string());
  auto backend = std::make_unique<LlmBackend>(std::move(model), model_config, std::move(draft),
                                              std::move(executor), *params, config, context,
                                              std::move(shm).value(), holds_world);
  if (auto prefetch = GetParameter(config, "lora_prefetch_dir"); prefetch && !prefetch->empty()) {
    auto dir =
        ConfinedPath("lora_prefetch_dir", *prefetch, context.model_dir, context.allowed_roots);
    if (!dir.ok()) return dir.status();
    RETURN_IF_ERROR(backend->PrefetchLoras(*dir));
  }
  // The tokenizer the weights carry (GGUF, HF folder), or the one tokenizer_dir names: what
  // the OpenAI frontend speaks text with when this model is named directly. Optional.
  auto tok_path = ConfinedPath("tokenizer_dir",
                               GetParameter(config, "tokenizer_dir").value_or(model_path.string()),
                               context.model_dir, context.allowed_roots);
  if (!tok_path.ok()) return tok_path.status();
  if (auto tok = LoadTokenizer(*tok_path); tok.ok()) {
    backend->set_tokenizer(*tok);
  } else {
    INFLIGHT_LOG(kInfo) << "model '" << context.model_name << "' has no tokenizer ("
                        << tok.status().message() << "): the OpenAI API cannot name it directly";
  }
  return std::unique_ptr<ModelBackend>(std::move(backend));
}

BackendFactories LlmBackendFactories() {
  return {{BackendKind::kLlm, CreateLlmBackend},
          {BackendKind::kTokenizer, CreateTokenizerBackend},
          {BackendKind::kDetokenizer, CreateDetokenizerBackend}};
}

}  // namespace inflight::serving
