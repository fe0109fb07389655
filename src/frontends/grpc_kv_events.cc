#include "frontends/grpc_kv_events.h"

#include <string>
#include <utility>

#include "frontends/grpc_access.h"

namespace inflight::frontends {
namespace {

constexpr uint32_t kDefaultMaxEvents = 1000;

void FillBlock(const serving::KvEventRecord& r, KvBlock* b) {
  b->set_block_hash(r.block_hash);
  b->set_parent_hash(r.parent_hash);
  for (int32_t t : r.tokens) b->add_tokens(t);
  b->set_priority(r.priority);
  b->set_group(r.group);
  b->set_cache_level(r.cache_level);
}

void FillPage(const serving::KvEventsPage& page, KvEventsResponse* out) {
  out->Clear();
  for (const serving::KvEventRecord& r : page.events) {
    KvEvent* e = out->add_events();
    e->set_event_id(r.id);
    e->set_type(r.stored ? KvEvent::STORED : r.updated ? KvEvent::UPDATED : KvEvent::REMOVED);
    FillBlock(r, e->mutable_block());
  }
  out->set_gap(page.gap);
  out->set_last_id(page.last_id);
  out->set_dropped(page.dropped);
}

// A call refused before it started.
class RefusedEvents final : public grpc::ServerWriteReactor<KvEventsResponse> {
 public:
  explicit RefusedEvents(const grpc::Status& s) { Finish(s); }
  void OnDone() override { delete this; }
};

}  // namespace

// One Events call. Its state is the service's mutex's: the poller writes to it, gRPC's
// callbacks end it.
class KvEventsService::Stream final : public grpc::ServerWriteReactor<KvEventsResponse> {
 public:
  Stream(KvEventsService* service, std::string model, std::string version, uint64_t cursor,
         size_t max)
      : service_(service),
        model_(std::move(model)),
        version_(std::move(version)),
        cursor_(cursor),
        max_(max) {}

  // Writes the events after the cursor, if any and no write is pending (under the mutex).
  // `always`: write even an empty page (the one answer of a call without follow).
  void MaybeWriteLocked(bool always) {
    if (writing_ || finished_) return;
    auto page = service_->server_->KvEvents(model_, version_, cursor_, max_);
    if (!page.ok()) return FinishLocked(ToGrpc(page.status()));  // the model went away
    if (page->events.empty() && !page->gap && !always) return;
    FillPage(*page, &response_);
    if (!page->events.empty()) cursor_ = page->events.back().id;
    if (page->gap) cursor_ = page->last_id;  // the router resyncs; the stream goes on
    writing_ = true;
    if (always) {
      finished_ = true;
      StartWriteAndFinish(&response_, grpc::WriteOptions(), grpc::Status::OK);
    } else {
      StartWrite(&response_);
    }
  }
  void FinishLocked(const grpc::Status& s) {
    if (finished_) return;
    if (writing_) {  // after the pending write (OnWriteDone)
      finish_status_ = s;
      finish_pending_ = true;
      return;
    }
    finished_ = true;
    Finish(s);
  }
  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(service_->mu_);
    writing_ = false;
    if (finish_pending_) {
      finish_pending_ = false;
      FinishLocked(finish_status_);
    } else if (!ok) {
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "the client left"));
    }
  }
  void OnCancel() override {
    std::lock_guard<std::mutex> lock(service_->mu_);
    FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
  }
  void OnDone() override {
    service_->Remove(this);
    delete this;
  }

 private:
  KvEventsService* service_;
  std::string model_, version_;
  uint64_t cursor_;
  size_t max_;
  KvEventsResponse response_;
  bool writing_ = false, finished_ = false, finish_pending_ = false;
  grpc::Status finish_status_;
};

KvEventsService::KvEventsService(const serving::Server* server, const AccessPolicy* access)
    : server_(server), access_(*access) {
  thread_ = std::thread([this] { Poll(); });
}

KvEventsService::~KvEventsService() { Shutdown(); }

void KvEventsService::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    stop_ = true;
    for (Stream* s : streams_)
      s->FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server is shutting down"));
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void KvEventsService::Poll() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, kPeriod);
    if (stop_) break;
    for (Stream* s : streams_) s->MaybeWriteLocked(false);
  }
}

void KvEventsService::Remove(Stream* s) {
  std::lock_guard<std::mutex> lock(mu_);
  streams_.erase(s);
}

grpc::ServerWriteReactor<KvEventsResponse>* KvEventsService::Events(
    grpc::CallbackServerContext* ctx, const KvEventsRequest* request) {
  auto who = AuthorizeGrpc(access_, serving::ApiGroup::kStatistics, *ctx);
  if (auto* refused = std::get_if<grpc::Status>(&who)) return new RefusedEvents(*refused);
  const size_t max = request->max_events() == 0 ? kDefaultMaxEvents : request->max_events();
  if (max > 100000) {
    return new RefusedEvents(
        grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "max_events must be at most 100000"));
  }
  // Unknown model, no KV cache, events off: answered at once.
  if (auto probe = server_->KvEvents(request->model_name(), request->model_version(),
                                     request->after_id(), 1);
      !probe.ok()) {
    return new RefusedEvents(ToGrpc(probe.status()));
  }
  auto* s =
      new Stream(this, request->model_name(), request->model_version(), request->after_id(), max);
  std::lock_guard<std::mutex> lock(mu_);
  if (!request->follow()) {
    s->MaybeWriteLocked(true);
    return s;
  }
  if (stop_ || streams_.size() >= kMaxStreams) {
    s->FinishLocked(grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        "too many KV event streams are open (at most " + std::to_string(kMaxStreams) + ")"));
    return s;
  }
  streams_.insert(s);
  s->MaybeWriteLocked(false);  // what is there already goes out at once
  return s;
}

grpc::ServerUnaryReactor* KvEventsService::Blocks(grpc::CallbackServerContext* ctx,
                                                  const KvBlocksRequest* request,
                                                  KvBlocksResponse* response) {
  auto* reactor = ctx->DefaultReactor();
  auto who = AuthorizeGrpc(access_, serving::ApiGroup::kStatistics, *ctx);
  if (auto* refused = std::get_if<grpc::Status>(&who)) {
    reactor->Finish(*refused);
    return reactor;
  }
  auto listing = server_->KvCacheBlocks(request->model_name(), request->model_version());
  if (!listing.ok()) {
    reactor->Finish(ToGrpc(listing.status()));
    return reactor;
  }
  response->set_last_event_id(listing->last_event_id);
  for (const serving::KvEventRecord& r : listing->blocks) FillBlock(r, response->add_blocks());
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace inflight::frontends
