#include "parallel/parallel_runner.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <fstream>
#include <thread>
#include <unordered_map>

#include "base/logging.h"
#include "kvcache/kv_storage.h"
#include "parallel/model_group.h"
#include "parallel/wire.h"

namespace inflight::parallel {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int32_t kProtocolVersion = 2;
enum Command : int64_t { kStep = 1, kShutdown = 2 };
constexpr int kHiddenTag = 100;   // + micro-batch: hidden states to the next stage
constexpr int kLogitsTag = 5000;  // + micro-batch: logits to the leader

double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// Waits for a request with no group to watch yet (the load handshake): polls with sleeps.
void WaitPolling(MPI_Request* request) {
  for (int64_t polls = 0;; ++polls) {
    int done = 0;
    MPI_Test(request, &done, MPI_STATUS_IGNORE);
    if (done) return;
    if (polls > 1000) std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
}

// What every rank must agree on: the file (size and a hash of its head, where the metadata
// is) and the architecture read from it.
std::string Fingerprint(const std::string& path, const ModelConfig& c) {
  std::string head(64 << 10, '\0');
  uint64_t hash = 1469598103934665603ull;
  struct stat st {};
  std::string file = path;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) file = path + "/config.json";
  ::stat(file.c_str(), &st);
  std::ifstream in(file, std::ios::binary);
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  for (std::streamsize i = 0; i < in.gcount(); ++i)
    hash = (hash ^ static_cast<uint8_t>(head[i])) * 1099511628211ull;
  return std::string(ArchitectureName(c.arch)) + " layers " + std::to_string(c.num_layers) +
         " hidden " + std::to_string(c.hidden_size) + " heads " + std::to_string(c.num_heads) +
         "/" + std::to_string(c.num_kv_heads) + " vocab " + std::to_string(c.vocab_size) +
         ", file of " + std::to_string(st.st_size) + " bytes, head hash " + std::to_string(hash);
}

struct LoadRequest {
  std::string model_path;
  ParallelConfig parallel;
  ExecutorConfig executor;  // the KV settings and compute threads

  void Encode(WireWriter* w) const {
    w->Put<int32_t>(kProtocolVersion);
    w->PutString(model_path);
    w->Put(parallel.tp_size), w->Put(parallel.pp_size), w->Put(parallel.micro_batches);
    w->Put(parallel.moe_ep_size), w->Put(parallel.moe_tp_size);
    w->Put(parallel.heartbeat_ms), w->Put(parallel.failure_timeout_ms),
        w->Put<int32_t>(parallel.share_host_cores ? 1 : 0);
    w->Put(executor.tokens_per_block), w->Put(static_cast<int32_t>(executor.kv_dtype)),
        w->Put(executor.num_threads);
    w->Put(executor.kv_cache_free_mem_fraction), w->Put(executor.max_tokens_in_paged_kv_cache),
        w->Put(executor.max_batch_size);
  }
  Status Decode(WireReader& r) {
    int32_t version = 0, dtype = 0;
    RETURN_IF_ERROR(r.Get(&version));
    if (version != kProtocolVersion) {
      return FailedPreconditionError("the leader speaks protocol " + std::to_string(version) +
                                     ", this rank " + std::to_string(kProtocolVersion) +
                                     ": every rank must run the same inflight build");
    }
    RETURN_IF_ERROR(r.GetString(&model_path, 1 << 16));
    RETURN_IF_ERROR(r.Get(&parallel.tp_size));
    RETURN_IF_ERROR(r.Get(&parallel.pp_size));
    RETURN_IF_ERROR(r.Get(&parallel.micro_batches));
    RETURN_IF_ERROR(r.Get(&parallel.moe_ep_size));
    RETURN_IF_ERROR(r.Get(&parallel.moe_tp_size));
    RETURN_IF_ERROR(r.Get(&parallel.heartbeat_ms));
    RETURN_IF_ERROR(r.Get(&parallel.failure_timeout_ms));
    int32_t share = 1;
    RETURN_IF_ERROR(r.Get(&share));
    parallel.share_host_cores = share != 0;
    RETURN_IF_ERROR(r.Get(&executor.tokens_per_block));
    RETURN_IF_ERROR(r.Get(&dtype));
    RETURN_IF_ERROR(r.Get(&executor.num_threads));
    RETURN_IF_ERROR(r.Get(&executor.kv_cache_free_mem_fraction));
    RETURN_IF_ERROR(r.Get(&executor.max_tokens_in_paged_kv_cache));
    RETURN_IF_ERROR(r.Get(&executor.max_batch_size));
    executor.kv_dtype = static_cast<DType>(dtype);
    return OkStatus();
  }
};

// Broadcasts bytes from rank 0 of `comm` (size first); followers wait with `wait`.
template <typename WaitFn>
Status BroadcastBytes(MPI_Comm comm, std::string* bytes, WaitFn wait) {
  int64_t size = static_cast<int64_t>(bytes->size());
  MPI_Request request;
  MPI_Ibcast(&size, 1, MPI_INT64_T, 0, comm, &request);
  RETURN_IF_ERROR(wait(&request));
  if (size < 0 || size > INT_MAX)
    return DataLossError("a parallel message of " + std::to_string(size) + " bytes");
  bytes->resize(static_cast<size_t>(size));
  MPI_Ibcast(bytes->data(), static_cast<int>(size), MPI_BYTE, 0, comm, &request);
  return wait(&request);
}

}  // namespace

Status ParallelConfig::Validate() const {
  if (tp_size < 1 || tp_size > 256)
    return InvalidArgumentError("tensor_parallel_size must be in [1, 256]");
  if (pp_size < 1 || pp_size > 256)
    return InvalidArgumentError("pipeline_parallel_size must be in [1, 256]");
  if (micro_batches < 0 || micro_batches > 64)
    return InvalidArgumentError("pipeline_micro_batches must be in [0, 64]");
  if (moe_ep_size < 0 || moe_tp_size < 0 || (moe_ep_size > 0 && tp_size % moe_ep_size != 0) ||
      (moe_tp_size > 0 && tp_size % moe_tp_size != 0) ||
      (moe_ep_size > 0 && moe_tp_size > 0 && moe_ep_size * moe_tp_size != tp_size)) {
    return InvalidArgumentError("moe_ep_size " + std::to_string(moe_ep_size) + " x moe_tp_size " +
                                std::to_string(moe_tp_size) + " must equal tensor_parallel_size " +
                                std::to_string(tp_size) + " (0 derives one from the other)");
  }
  if (heartbeat_ms < 10 || failure_timeout_ms < 5 * heartbeat_ms) {
    return InvalidArgumentError(
        "the failure timeout must be at least 5 heartbeats of at least 10 ms");
  }
  return OkStatus();
}

int32_t ParallelConfig::ResolvedMoeEpSize() const {
  if (moe_ep_size > 0) return moe_ep_size;
  return moe_tp_size > 0 ? tp_size / moe_tp_size : 1;
}

// One rank's shard and what runs it: its KV pool, scratch and compute threads, and the step
// loop shared by the leader and the followers. One thread at a time (the leader's engine
// thread, a follower's main thread).
class ShardExecutor {
 public:
  // Collective over `comm`: builds the group, loads this rank's shard and agrees on the pool.
  static StatusOr<std::unique_ptr<ShardExecutor>> Create(MPI_Comm comm, const LoadRequest& load);

  // Runs the step: copies, then every micro-batch through this rank's stage. On the leader
  // `logits` receives [plan.num_logit_rows(), vocab].
  Status RunStep(const std::vector<parallel::BlockCopy>& copies, const BatchPlan& plan,
                 float* logits);
  // Followers: waits for the leader's next command. false: stop (cleanly, or `status` says why).
  bool NextStep(Status* status);
  // Leader: sends a step (or the stop) to the followers.
  Status SendStep(const std::vector<parallel::BlockCopy>& copies, const BatchPlan& plan);
  // Leader: adapters the followers lack go with the step; the least recently used beyond
  // kAdapterBudgetBytes are dropped (never one this step uses).
  void TrackAdapters(const BatchPlan& plan);
  void SendShutdown();

  ModelGroup& group() { return *group_; }
  const Model& model() const { return *model_; }
  int32_t num_blocks() const { return storage_->config().num_blocks; }
  // The window group's blocks and window (0: none), the same on every rank.
  int32_t num_window_blocks() const { return num_window_blocks_; }
  int32_t window() const { return view_.window; }
  ThreadPool& pool() { return *pool_; }
  CommStats stats() const {
    CommStats s = stats_;
    const ModelGroup::TensorCounters& t = group_->tensor_counters();
    s.collectives += t.collectives, s.bytes += t.bytes, s.comm_ms += t.wait_ms;
    return s;
  }

 private:
  Status RunMicroBatch(int32_t mb, const BatchPlan& plan, int64_t logit_row, float* logits,
                       std::vector<MPI_Request>* sends);

  LoadRequest load_;
  std::unique_ptr<ModelGroup> group_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<KvStorage> storage_;
  int32_t num_window_blocks_ = 0;
  KvCacheView view_;
  ForwardScratch scratch_;
  std::unique_ptr<ThreadPool> pool_;
  std::vector<BatchPlan> micro_;            // this step's micro-batches
  std::vector<std::vector<float>> hidden_;  // per micro-batch: hidden states sent on / received
  std::vector<std::vector<float>> logits_;  // per micro-batch on the last stage's TP rank 0
  OwnedPlan received_;
  // Leader: adapters the followers hold (id -> bytes, last step used) and this step's changes.
  struct SentAdapter {
    size_t bytes;
    int64_t last_step;
  };
  std::unordered_map<uint64_t, SentAdapter> sent_adapters_;
  size_t sent_adapter_bytes_ = 0;
  int64_t adapter_step_ = 0;
  std::vector<uint64_t> adapter_drops_, chunk_adapter_ids_;
  std::vector<const LoraAdapter*> fresh_adapters_;
  // Followers: the adapters sent so far, by id.
  std::unordered_map<uint64_t, std::shared_ptr<const LoraAdapter>> adapters_;
  static constexpr size_t kAdapterBudgetBytes = size_t{1} << 30;
  std::vector<parallel::BlockCopy> received_copies_;
  std::string message_;
  CommStats stats_;
};

StatusOr<std::unique_ptr<ShardExecutor>> ShardExecutor::Create(MPI_Comm comm,
                                                               const LoadRequest& load) {
  RETURN_IF_ERROR(load.parallel.Validate());
  std::unique_ptr<ShardExecutor> e(new ShardExecutor());
  e->load_ = load;
  ASSIGN_OR_RETURN(
      e->group_,
      ModelGroup::Create(comm, {load.parallel.tp_size, load.parallel.pp_size,
                                load.parallel.heartbeat_ms, load.parallel.failure_timeout_ms}));
  ModelGroup& g = *e->group_;
  // Ranks on one host share its memory for their KV pools.
  MPI_Comm host_comm;
  int ranks_here = 1;
  MPI_Comm_split_type(g.comm(), MPI_COMM_TYPE_SHARED, g.rank(), MPI_INFO_NULL, &host_comm);
  MPI_Comm_size(host_comm, &ranks_here);
  MPI_Comm_free(&host_comm);

  // Load this rank's shard and report (status, fingerprint, pool capacity) to the leader.
  ModelLoadOptions options;
  options.shard = ModelShard{g.tp_rank(), g.tp_size(), g.stage(), g.pp_size(),
                             load.parallel.ResolvedMoeEpSize()};
  auto model = Model::Load(load.model_path, options);
  WireWriter report;
  report.Put<int32_t>(model.ok() ? 0 : static_cast<int32_t>(model.status().code()));
  report.PutString(model.ok() ? Fingerprint(load.model_path, (*model)->config())
                              : model.status().message());
  const KvCacheSizes sizes =
      model.ok() ? ComputeKvCacheSizes(**model, load.executor, 1.0 / ranks_here) : KvCacheSizes{};
  report.Put<int32_t>(sizes.num_blocks);
  report.Put<int32_t>(sizes.num_window_blocks);
  const int size = g.size();
  int length = static_cast<int>(report.bytes().size());
  std::vector<int> lengths(size), offsets(size);
  MPI_Request request;
  MPI_Igather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, g.comm(), &request);
  RETURN_IF_ERROR(g.Wait(&request));
  std::string all;
  if (g.rank() == 0) {
    for (int r = 1; r < size; ++r) offsets[r] = offsets[r - 1] + lengths[r - 1];
    all.resize(static_cast<size_t>(offsets[size - 1] + lengths[size - 1]));
  }
  MPI_Igatherv(report.bytes().data(), length, MPI_BYTE, all.data(), lengths.data(), offsets.data(),
               MPI_BYTE, 0, g.comm(), &request);
  RETURN_IF_ERROR(g.Wait(&request));

  // The leader decides: the smallest pool every rank can hold, or why the model cannot run.
  WireWriter decision;
  if (g.rank() == 0) {
    std::string error, fingerprint0;
    // A window group when some rank's shard has window layers: as many blocks as every such
    // rank can hold (ranks without window layers report none and keep no window pool).
    int32_t blocks = INT32_MAX, window_blocks = INT32_MAX;
    for (int r = 0; r < size && error.empty(); ++r) {
      const std::string one = all.substr(offsets[r], lengths[r]);
      WireReader in(one);
      int32_t code = 0, rank_blocks = 0, rank_window_blocks = 0;
      std::string text;
      if (!in.Get(&code).ok() || !in.GetString(&text, 1 << 20).ok() || !in.Get(&rank_blocks).ok() ||
          !in.Get(&rank_window_blocks).ok()) {
        error = "rank " + std::to_string(r) + " sent a bad load report";
      } else if (code != 0) {
        error = "rank " + std::to_string(r) + " could not load its shard: " + text;
      } else if (r == 0) {
        fingerprint0 = text;
      } else if (text != fingerprint0) {
        error = "ranks disagree on the model '" + load.model_path + "': rank 0 has " +
                fingerprint0 + ", rank " + std::to_string(r) + " has " + text;
      }
      blocks = std::min(blocks, rank_blocks);
      if (rank_window_blocks > 0) window_blocks = std::min(window_blocks, rank_window_blocks);
    }
    decision.PutString(error);
    decision.Put<int32_t>(blocks);
    decision.Put<int32_t>(window_blocks == INT32_MAX ? 0 : window_blocks);
  }
  RETURN_IF_ERROR(
      BroadcastBytes(g.comm(), &decision.bytes(), [&](MPI_Request* r) { return g.Wait(r); }));
  WireReader in(decision.bytes());
  std::string error;
  int32_t blocks = 0, window_blocks = 0;
  RETURN_IF_ERROR(in.GetString(&error, 1 << 22));
  RETURN_IF_ERROR(in.Get(&blocks));
  RETURN_IF_ERROR(in.Get(&window_blocks));
  if (!error.empty()) return FailedPreconditionError(error);
  if (!model.ok()) return model.status();
  e->model_ = std::move(model).value();
  e->storage_ = std::make_unique<KvStorage>(
      KvStorageConfigFor(*e->model_, KvCacheSizes{blocks, window_blocks}, load.executor));
  e->num_window_blocks_ = window_blocks;
  e->view_.layers = e->storage_->LayerViews();
  e->view_.num_blocks = blocks;
  // A shard without window layers keeps no window pool but still receives the tables.
  e->view_.layer_group = e->storage_->config().layer_group;
  e->view_.num_window_blocks = window_blocks;
  e->view_.window = window_blocks > 0 ? e->model_->config().sliding_window : 0;
  const int threads = load.parallel.share_host_cores ? std::max(1, DefaultNumThreads() / ranks_here)
                                                     : load.executor.num_threads;
  e->pool_ = std::make_unique<ThreadPool>(std::max(1, threads));
  return e;
}

void ShardExecutor::TrackAdapters(const BatchPlan& plan) {
  ++adapter_step_;
  adapter_drops_.clear();
  fresh_adapters_.clear();
  chunk_adapter_ids_.assign(plan.chunks.size(), 0);
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    const LoraAdapter* a = plan.chunks[i].lora;
    if (a == nullptr) continue;
    chunk_adapter_ids_[i] = a->id();
    auto [it, fresh] = sent_adapters_.try_emplace(a->id(), SentAdapter{a->bytes(), adapter_step_});
    it->second.last_step = adapter_step_;
    if (fresh) {
      fresh_adapters_.push_back(a);
      sent_adapter_bytes_ += a->bytes();
    }
  }
  while (sent_adapter_bytes_ > kAdapterBudgetBytes) {
    auto oldest = sent_adapters_.end();
    for (auto it = sent_adapters_.begin(); it != sent_adapters_.end(); ++it) {
      if (it->second.last_step < adapter_step_ &&
          (oldest == sent_adapters_.end() || it->second.last_step < oldest->second.last_step)) {
        oldest = it;
      }
    }
    if (oldest == sent_adapters_.end()) break;  // all in this step
    sent_adapter_bytes_ -= oldest->second.bytes;
    adapter_drops_.push_back(oldest->first);
    sent_adapters_.erase(oldest);
  }
}

Status ShardExecutor::SendStep(const std::vector<parallel::BlockCopy>& copies,
                               const BatchPlan& plan) {
  TrackAdapters(plan);
  WireWriter w;
  w.Put<int64_t>(kStep);
  const ModelConfig& c = model_->config();
  EncodeAdapters(adapter_drops_, fresh_adapters_, &w);
  EncodeStep(copies, plan, load_.executor.tokens_per_block, c.vocab_size, c.hidden_size,
             chunk_adapter_ids_, &w);
  message_ = std::move(w.bytes());
  return BroadcastBytes(group_->comm(), &message_, [&](MPI_Request* r) { return group_->Wait(r); });
}

void ShardExecutor::SendShutdown() {
  WireWriter w;
  w.Put<int64_t>(kShutdown);
  message_ = std::move(w.bytes());
  (void)BroadcastBytes(group_->comm(), &message_, [&](MPI_Request* r) { return group_->Wait(r); });
}

bool ShardExecutor::NextStep(Status* status) {
  *status =
      BroadcastBytes(group_->comm(), &message_, [&](MPI_Request* r) { return group_->Wait(r); });
  if (!status->ok()) return false;
  WireReader in(message_);
  int64_t command = 0;
  if (!(*status = in.Get(&command)).ok()) return false;
  if (command == kShutdown) return false;
  if (command != kStep) {
    *status = DataLossError("unknown parallel command " + std::to_string(command));
    return false;
  }
  std::vector<uint64_t> drops;
  std::vector<std::pair<uint64_t, std::shared_ptr<const LoraAdapter>>> fresh;
  if (!(*status = DecodeAdapters(in, model_->config(), &drops, &fresh)).ok()) return false;
  for (uint64_t id : drops) adapters_.erase(id);
  for (auto& [id, adapter] : fresh) adapters_[id] = std::move(adapter);
  if (!(*status = DecodeStep(in, model_->config().hidden_size, &received_copies_, &received_)).ok())
    return false;
  for (size_t i = 0; i < received_.chunks.size(); ++i) {
    const uint64_t id = received_.chunks[i].lora_id;
    if (id == 0) continue;
    auto it = adapters_.find(id);
    if (it == adapters_.end()) {
      *status = DataLossError("a step names LoRA adapter " + std::to_string(id) +
                              ", which this rank was never sent");
      return false;
    }
    received_.plan.chunks[i].lora = it->second.get();
  }
  *status = RunStep(received_copies_, received_.plan, nullptr);
  return status->ok();
}

Status ShardExecutor::RunStep(const std::vector<parallel::BlockCopy>& copies, const BatchPlan& plan,
                              float* logits) {
  const Clock::time_point start = Clock::now();
  for (const BlockCopy& c : copies) {
    const int32_t limit = c.group == kFullGroup     ? num_blocks()
                          : c.group == kWindowGroup ? num_window_blocks_
                                                    : 0;
    if (c.src < 0 || c.dst < 0 || c.src >= limit || c.dst >= limit)
      return DataLossError("a block copy names a block out of range");
    storage_->CopyBlock(c.group, c.src, c.dst);  // no-op on a shard without the group's layers
  }
  // Micro-batches: contiguous runs of chunks with about equal token counts.
  const int32_t wanted = load_.parallel.pp_size == 1
                             ? 1
                             : (load_.parallel.micro_batches > 0 ? load_.parallel.micro_batches
                                                                 : load_.parallel.pp_size);
  const int64_t num = std::min<int64_t>(wanted, static_cast<int64_t>(plan.chunks.size()));
  micro_.resize(static_cast<size_t>(num));
  for (BatchPlan& m : micro_) m.chunks.clear();
  const int64_t total = plan.num_tokens();
  int64_t seen = 0;
  size_t next = 0;
  for (int64_t m = 0; m < num; ++m) {
    // Leave at least one chunk for each later micro-batch.
    while (next < plan.chunks.size() &&
           (micro_[m].chunks.empty() ||
            (seen < total * (m + 1) / num &&
             plan.chunks.size() - next > static_cast<size_t>(num - m - 1)))) {
      seen += plan.chunks[next].num_tokens;
      micro_[m].chunks.push_back(plan.chunks[next++]);
    }
  }
  while (next < plan.chunks.size()) micro_.back().chunks.push_back(plan.chunks[next++]);
  if (hidden_.size() < micro_.size()) hidden_.resize(micro_.size()), logits_.resize(micro_.size());

  ModelGroup& g = *group_;
  const int32_t vocab = model_->config().vocab_size;
  const bool last_stage = g.stage() == g.pp_size() - 1;
  std::vector<MPI_Request> sends;
  int64_t row = 0;
  Status status;
  for (size_t m = 0; m < micro_.size() && status.ok(); ++m) {
    status = RunMicroBatch(static_cast<int32_t>(m), micro_[m], row, logits, &sends);
    row += micro_[m].num_logit_rows();
  }
  // The leader takes the logits the last stage computed.
  if (status.ok() && g.rank() == 0 && !last_stage) {
    row = 0;
    for (size_t m = 0; m < micro_.size() && status.ok(); ++m) {
      const int64_t n = micro_[m].num_logit_rows() * vocab;
      MPI_Request request;
      const Clock::time_point wait = Clock::now();
      MPI_Irecv(logits + row * vocab, static_cast<int>(n), MPI_FLOAT, g.RankOf(g.pp_size() - 1, 0),
                kLogitsTag + static_cast<int>(m), g.comm(), &request);
      status = g.Wait(&request);
      stats_.comm_ms += MsSince(wait);
      row += micro_[m].num_logit_rows();
    }
  }
  for (MPI_Request& r : sends) {
    if (status.ok()) {
      const Clock::time_point wait = Clock::now();
      status = g.Wait(&r);
      stats_.comm_ms += MsSince(wait);
    }
  }
  ++stats_.steps;
  stats_.forward_ms += MsSince(start);
  return status;
}

Status ShardExecutor::RunMicroBatch(int32_t mb, const BatchPlan& plan, int64_t logit_row,
                                    float* logits, std::vector<MPI_Request>* sends) {
  ModelGroup& g = *group_;
  const ModelConfig& c = model_->config();
  const int64_t hidden_floats = plan.num_tokens() * c.hidden_size;
  const bool first_stage = g.stage() == 0, last_stage = g.stage() == g.pp_size() - 1;
  if (hidden_floats > INT_MAX)
    return InvalidArgumentError("a micro-batch's hidden states exceed one MPI message");
  std::vector<float>& hidden = hidden_[mb];
  if (hidden.size() < static_cast<size_t>(hidden_floats))
    hidden.resize(static_cast<size_t>(hidden_floats));
  ShardIo io;
  io.tp = g.tensor_group();
  if (!first_stage) {
    MPI_Request request;
    const Clock::time_point wait = Clock::now();
    MPI_Irecv(hidden.data(), static_cast<int>(hidden_floats), MPI_FLOAT,
              g.RankOf(g.stage() - 1, g.tp_rank()), kHiddenTag + mb, g.comm(), &request);
    RETURN_IF_ERROR(g.Wait(&request));
    stats_.comm_ms += MsSince(wait);
    io.hidden_in = hidden.data();
  }
  std::vector<float>& mb_logits = logits_[mb];
  if (!last_stage) {
    // A separate buffer: the received one may still be the input.
    mb_logits.resize(std::max(mb_logits.size(), static_cast<size_t>(hidden_floats)));
    io.hidden_out = mb_logits.data();
  } else if (g.rank() == 0) {
    io.logits = logits + logit_row * c.vocab_size;
  } else {
    mb_logits.resize(
        std::max(mb_logits.size(), static_cast<size_t>(plan.num_logit_rows() * c.vocab_size)));
    io.logits = mb_logits.data();
  }
  RETURN_IF_ERROR(model_->ForwardShard(plan, view_, scratch_, *pool_, io));
  MPI_Request send = MPI_REQUEST_NULL;
  if (!last_stage) {
    MPI_Isend(mb_logits.data(), static_cast<int>(hidden_floats), MPI_FLOAT,
              g.RankOf(g.stage() + 1, g.tp_rank()), kHiddenTag + mb, g.comm(), &send);
    stats_.bytes += hidden_floats * static_cast<int64_t>(sizeof(float));
  } else if (g.tp_rank() == 0 && g.rank() != 0) {
    const int64_t n = plan.num_logit_rows() * c.vocab_size;
    if (n > INT_MAX) return InvalidArgumentError("a micro-batch's logits exceed one MPI message");
    MPI_Isend(mb_logits.data(), static_cast<int>(n), MPI_FLOAT, 0, kLogitsTag + mb, g.comm(),
              &send);
    stats_.bytes += n * static_cast<int64_t>(sizeof(float));
  }
  if (send != MPI_REQUEST_NULL) sends->push_back(send);
  return OkStatus();
}

StatusOr<std::unique_ptr<ParallelModelRunner>> ParallelModelRunner::Create(
    MPI_Comm comm, const std::string& model_path, const ExecutorConfig& config,
    const ParallelConfig& parallel) {
  RETURN_IF_ERROR(parallel.Validate());
  LoadRequest load{model_path, parallel, config};
  WireWriter w;
  load.Encode(&w);
  RETURN_IF_ERROR(BroadcastBytes(comm, &w.bytes(), [](MPI_Request* r) {
    WaitPolling(r);
    return OkStatus();
  }));
  std::unique_ptr<ParallelModelRunner> runner(new ParallelModelRunner());
  ASSIGN_OR_RETURN(runner->shard_, ShardExecutor::Create(comm, load));
  return runner;
}

ParallelModelRunner::~ParallelModelRunner() {
  if (!shard_ || shard_->group().failed()) return;
  shard_->group().StopWatching();
  shard_->SendShutdown();
}

int32_t ParallelModelRunner::vocab_size() const { return shard_->model().config().vocab_size; }
int32_t ParallelModelRunner::context_length() const {
  return shard_->model().config().context_length;
}
int32_t ParallelModelRunner::num_kv_blocks() const { return shard_->num_blocks(); }
int32_t ParallelModelRunner::num_window_kv_blocks() const { return shard_->num_window_blocks(); }
int32_t ParallelModelRunner::kv_window() const { return shard_->window(); }
int32_t ParallelModelRunner::num_layers() const { return shard_->model().config().num_layers; }
int32_t ParallelModelRunner::hidden_size() const { return shard_->model().config().hidden_size; }
ThreadPool* ParallelModelRunner::pool() { return &shard_->pool(); }
const Model& ParallelModelRunner::model() const { return shard_->model(); }
CommStats ParallelModelRunner::comm_stats() const { return shard_->stats(); }

Status ParallelModelRunner::Health() const {
  if (shard_->group().failed())
    return UnavailableError("the model's parallel group failed: " + shard_->group().failure());
  return OkStatus();
}

Status ParallelModelRunner::Forward(const BatchPlan& plan, float* logits) {
  RETURN_IF_ERROR(Health());
  RETURN_IF_ERROR(shard_->SendStep(pending_copies_, plan));
  const Status status = shard_->RunStep(pending_copies_, plan, logits);
  pending_copies_.clear();
  return status;
}

void ParallelModelRunner::CopyBlockPrefix(int32_t group, int32_t src, int32_t dst,
                                          int32_t num_tokens) {
  (void)num_tokens;
  // Made on every rank before the next step's forward pass (the next reader of dst).
  pending_copies_.push_back({group, src, dst});
}

void SendDismissal(MPI_Comm comm) {
  LoadRequest none;  // no model path: nothing more to follow
  WireWriter w;
  none.Encode(&w);
  (void)BroadcastBytes(comm, &w.bytes(), [](MPI_Request* r) {
    WaitPolling(r);
    return OkStatus();
  });
}

Status RunFollower(MPI_Comm comm, bool one_model) {
  for (;;) {
    std::string bytes;
    RETURN_IF_ERROR(BroadcastBytes(comm, &bytes, [](MPI_Request* r) {
      WaitPolling(r);
      return OkStatus();
    }));
    LoadRequest load;
    WireReader in(bytes);
    RETURN_IF_ERROR(load.Decode(in));
    if (load.model_path.empty()) return OkStatus();
    auto shard = ShardExecutor::Create(comm, load);
    if (!shard.ok()) {
      INFLIGHT_LOG(kError) << "parallel worker: " << shard.status().message();
      // A model the ranks could not load: the leader reports it and may load another.
      if (one_model || shard.status().code() == StatusCode::kUnavailable) return shard.status();
      continue;
    }
    INFLIGHT_LOG(kInfo) << "rank " << (*shard)->group().rank() << " (pid " << ::getpid()
                        << "): stage " << (*shard)->group().stage() << ", tensor-parallel rank "
                        << (*shard)->group().tp_rank() << " of '" << load.model_path << "'";
    Status status;
    while ((*shard)->NextStep(&status)) {
    }
    if (!status.ok()) return status;
    if (one_model) return OkStatus();
  }
}

}  // namespace inflight::parallel
