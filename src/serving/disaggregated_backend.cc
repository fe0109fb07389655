#include "serving/disaggregated_backend.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <list>
#include <mutex>
#include <set>
#include <system_error>
#include <thread>

#include "base/logging.h"
#include "grpc_service.grpc.pb.h"
#include "serving/infer_params.h"

namespace inflight::serving {
namespace {

using OnResponse = std::function<void(InferResponse&&)>;

// Where one phase runs: a model of this server or of another one.
class Target {
 public:
  virtual ~Target() = default;
  // Runs `request` until its final response, passing each response on (on this thread).
  // Returns the error that ended it early (transport, remote server gone), else OK.
  virtual Status Run(InferRequest request, const OnResponse& on_response) = 0;
  virtual Status Health() const { return OkStatus(); }
  virtual void Stop() {}
  const std::string& name() const { return name_; }

 protected:
  explicit Target(std::string name) : name_(std::move(name)) {}
  std::string name_;  // "context model 'ctx' at host:port", for errors
};

class LocalTarget : public Target {
 public:
  LocalTarget(std::string name, InferenceRunner* runner)
      : Target(std::move(name)), runner_(runner) {}

  Status Run(InferRequest request, const OnResponse& on_response) override {
    struct Queue {
      std::mutex mu;
      std::condition_variable cv;
      std::deque<InferResponse> items;
    };
    auto q = std::make_shared<Queue>();
    runner_->Infer(std::move(request), [q](InferResponse&& r) {
      std::lock_guard<std::mutex> lock(q->mu);
      q->items.push_back(std::move(r));
      q->cv.notify_one();
    });
    for (;;) {
      InferResponse r;
      {
        std::unique_lock<std::mutex> lock(q->mu);
        q->cv.wait(lock, [&] { return !q->items.empty(); });
        r = std::move(q->items.front());
        q->items.pop_front();
      }
      const bool final = r.final || !r.error.ok();
      on_response(std::move(r));
      if (final) return OkStatus();
    }
  }

 private:
  InferenceRunner* runner_;
};

void ToProto(const InferRequest& r, inference::ModelInferRequest* p) {
  p->set_model_name(r.model_name);
  p->set_id(r.id);
  for (const auto& [k, v] : r.parameters) ParamToProto(v, &(*p->mutable_parameters())[k]);
  // The final response is flagged even when it carries no tensor.
  (*p->mutable_parameters())["triton_enable_empty_final_response"].set_bool_param(true);
  for (const InferTensor& t : r.inputs) {
    auto* in = p->add_inputs();
    in->set_name(t.name);
    in->set_datatype(DataTypeProtocolName(t.dtype));
    for (int64_t d : t.shape) in->add_shape(d);
    p->add_raw_input_contents(t.data);
  }
  for (const std::string& o : r.requested_outputs) p->add_outputs()->set_name(o);
}

InferResponse FromProto(const inference::ModelInferResponse& p) {
  InferResponse r;
  r.model_name = p.model_name();
  r.model_version = p.model_version();
  r.id = p.id();
  for (const auto& [k, v] : p.parameters()) {
    if (k == "triton_final_response") {
      r.final = v.bool_param();
      continue;
    }
    if (auto value = ParamFromProto(v)) r.parameters[k] = *value;
  }
  for (int i = 0; i < p.outputs_size() && i < p.raw_output_contents_size(); ++i) {
    InferTensor t;
    t.name = p.outputs(i).name();
    t.dtype = DataTypeFromProtocolName(p.outputs(i).datatype());
    for (int64_t d : p.outputs(i).shape()) t.shape.push_back(d);
    t.data = p.raw_output_contents(i);
    r.outputs.push_back(std::move(t));
  }
  return r;
}

// A model of another server, over KServe gRPC (ModelStreamInfer), with a liveness check.
class RemoteTarget : public Target {
 public:
  RemoteTarget(std::string name, const std::string& url, int64_t health_ms)
      : Target(std::move(name)), url_(url), health_ms_(health_ms) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);  // a hand-off holds a prompt's K/V
    args.SetMaxSendMessageSize(-1);
    // Reconnect quickly once a restarted server is back.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    channel_ = grpc::CreateCustomChannel(url, grpc::InsecureChannelCredentials(), args);
    stub_ = inference::GRPCInferenceService::NewStub(channel_);
    checker_ = std::thread([this] { CheckLoop(); });
  }
  ~RemoteTarget() override { Stop(); }

  void Stop() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      stop_ = true;
      for (const auto& c : calls_) c->TryCancel();
    }
    cv_.notify_all();
    if (checker_.joinable()) checker_.join();
  }

  Status Health() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return health_;
  }

  Status Run(InferRequest request, const OnResponse& on_response) override {
    {
      Status h = Health();
      if (!h.ok()) return h;
    }
    auto ctx = std::make_shared<grpc::ClientContext>();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return UnavailableError(name_ + ": the router is shutting down");
      calls_.insert(ctx);
    }
    // The client went away: so does this call (its server cancels the engine request).
    std::weak_ptr<grpc::ClientContext> weak = ctx;
    request.cancel->OnCancel([weak] {
      if (auto c = weak.lock()) c->TryCancel();
    });
    inference::ModelInferRequest q;
    ToProto(request, &q);
    request.inputs.clear();  // the copy in q is the one sent
    auto stream = stub_->ModelStreamInfer(ctx.get());
    Status result = OkStatus();
    bool final = false;
    if (stream->Write(q)) {
      stream->WritesDone();
      inference::ModelStreamInferResponse resp;
      while (!final && stream->Read(&resp)) {
        if (!resp.error_message().empty()) {
          InferResponse err;
          err.error = InternalError(resp.error_message());
          err.final = true;
          final = true;
          on_response(std::move(err));
          break;
        }
        InferResponse r = FromProto(resp.infer_response());
        final = r.final;
        on_response(std::move(r));
      }
    }
    if (!final) ctx->TryCancel();
    grpc::Status s = stream->Finish();
    {
      std::lock_guard<std::mutex> lock(mu_);
      calls_.erase(ctx);
      if (!final) {
        if (!health_.ok())
          result = health_;
        else if (request.cancel->cancelled())
          result = CancelledError("Request was cancelled");
        else
          result = UnavailableError(name_ + " failed: " + s.error_message());
      }
    }
    return result;
  }

 private:
  void CheckLoop() {
    int misses = 0;
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      lock.unlock();
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(std::max<int64_t>(health_ms_, 200)));
      inference::ServerLiveRequest req;
      inference::ServerLiveResponse resp;
      const grpc::Status s = stub_->ServerLive(&ctx, req, &resp);
      lock.lock();
      if (stop_) break;
      const bool live = s.ok() && resp.live();
      misses = live ? 0 : misses + 1;
      if (live && !health_.ok()) {
        INFLIGHT_LOG(kInfo) << name_ << " answers again";
        health_ = OkStatus();
      } else if (misses >= 2 && health_.ok()) {
        health_ = UnavailableError(
            name_ + " is not reachable: " + (s.ok() ? std::string("not live") : s.error_message()));
        INFLIGHT_LOG(kWarning) << health_.message();
        for (const auto& c : calls_) c->TryCancel();  // its requests end now, naming it
      }
      cv_.wait_for(lock, std::chrono::milliseconds(health_ms_), [&] { return stop_; });
    }
  }

  std::string url_;
  int64_t health_ms_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  Status health_ = OkStatus();
  std::set<std::shared_ptr<grpc::ClientContext>> calls_;
  std::thread checker_;
};

const InferTensor* FindOutput(const InferResponse& r, const std::string& name) {
  for (const InferTensor& t : r.outputs)
    if (t.name == name) return &t;
  return nullptr;
}

bool BoolInput(const InferRequest& r, const char* name) {
  const InferTensor* t = r.FindInput(name);
  if (!t) return false;
  auto v = t->AsInt64();
  return v.ok() && !v->empty() && (*v)[0] != 0;
}

int64_t IntInput(const InferRequest& r, const char* name, int64_t fallback) {
  const InferTensor* t = r.FindInput(name);
  if (!t) return fallback;
  auto v = t->AsInt64();
  return v.ok() && !v->empty() ? (*v)[0] : fallback;
}

class DisaggregatedBackend : public ModelBackend {
 public:
  DisaggregatedBackend(std::string model_name, std::string context_model,
                       std::string generation_model, std::unique_ptr<Target> context,
                       std::unique_ptr<Target> generation, bool handoff_in_shm)
      : model_name_(std::move(model_name)),
        context_model_(std::move(context_model)),
        generation_model_(std::move(generation_model)),
        context_(std::move(context)),
        generation_(std::move(generation)),
        handoff_in_shm_(handoff_in_shm) {}

  ~DisaggregatedBackend() override {
    std::list<Worker> workers;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      for (Worker& w : workers_) w.cancel->Cancel();
      workers.swap(workers_);
    }
    context_->Stop();
    generation_->Stop();
    for (Worker& w : workers)
      if (w.thread.joinable()) w.thread.join();
  }

  Status Health() const override {
    RETURN_IF_ERROR(context_->Health());
    return generation_->Health();
  }

  void Execute(InferRequest request, ResponseSink sink) override {
    std::lock_guard<std::mutex> lock(mu_);
    // Threads of requests that ended are joined here, so they never pile up.
    for (auto it = workers_.begin(); it != workers_.end();) {
      if (it->done->load()) {
        it->thread.join();
        it = workers_.erase(it);
      } else {
        ++it;
      }
    }
    if (stopping_) {
      sink(ErrorResponse(UnavailableError("the model is being unloaded")));
      return;
    }
    workers_.emplace_back();
    Worker& w = workers_.back();
    w.cancel = request.cancel;
    w.done = std::make_shared<std::atomic<bool>>(false);
    try {
      w.thread = std::thread([this, request = std::move(request), sink, done = w.done]() mutable {
        Flow(std::move(request), sink);
        done->store(true);
      });
    } catch (const std::system_error& e) {
      workers_.pop_back();
      sink(ErrorResponse(UnavailableError(std::string("no thread for the request: ") + e.what())));
    }
  }

 private:
  struct Worker {
    std::thread thread;
    std::shared_ptr<CancelToken> cancel;
    std::shared_ptr<std::atomic<bool>> done;
  };

  static InferResponse Failure(const Status& s) { return ErrorResponse(s); }

  void Flow(InferRequest request, const ResponseSink& sink) {
    // The context phase: one final response with the first token and the hand-off.
    InferRequest ctx = request;
    ctx.model_name = context_model_;
    ctx.model_version = -1;
    ctx.parameters["request_type"] = std::string("context_only");
    // Two instances on one host: the K/V goes through a shared-memory segment, only its
    // descriptor through here.
    ctx.parameters["context_phase_transport"] = std::string(handoff_in_shm_ ? "shm" : "inline");
    ctx.requested_outputs.clear();
    // Its output_ids are then the drawn token alone: none when it drew the end token.
    std::erase_if(ctx.inputs, [](const InferTensor& t) {
      return t.name == "context_phase_params" || t.name == "exclude_input_in_output";
    });
    InferTensor exclude;
    exclude.name = "exclude_input_in_output";
    exclude.dtype = inference::TYPE_BOOL;
    exclude.shape = {1, 1};
    exclude.data = std::string(1, '\1');
    ctx.inputs.push_back(std::move(exclude));
    InferResponse context_final;
    Status error;
    Status ran = context_->Run(std::move(ctx), [&](InferResponse&& r) {
      if (!r.error.ok() && error.ok()) error = r.error;
      if (r.final) context_final = std::move(r);
    });
    if (!ran.ok() && error.ok()) error = ran;
    if (!error.ok()) {
      sink(Failure(Status(error.code(), context_->name() + ": " + error.message())));
      return;
    }
    const InferTensor* handoff = FindOutput(context_final, "context_phase_params");
    const InferTensor* ids = FindOutput(context_final, "output_ids");
    if (!handoff) {
      sink(Failure(InternalError(context_->name() +
                                 " returned no context_phase_params (is it a tensorrt_llm model "
                                 "that serves context_only requests?)")));
      return;
    }
    // The first token goes out now when it is the stream's first token as is (and there is
    // one: a first end token is not output).
    int32_t first = 0;
    const bool drew = ids && ids->data.size() == sizeof(int32_t);
    if (drew) std::memcpy(&first, ids->data.data(), sizeof first);
    const bool early = drew && BoolInput(request, "streaming") &&
                       IntInput(request, "num_return_sequences", 1) <= 1 &&
                       IntInput(request, "beam_width", 1) <= 1 &&
                       !BoolInput(request, "return_log_probs") &&
                       !BoolInput(request, "return_generation_logits") &&
                       !request.parameters.count("num_top_logprobs");
    if (early) {
      InferResponse r;
      r.model_name = model_name_;
      r.id = request.id;
      r.outputs.push_back(InferTensor::Int32("output_ids", {1, 1, 1}, {first}));
      r.outputs.push_back(InferTensor::Int32("sequence_length", {1, 1}, {1}));
      sink(std::move(r));
    }

    // The generation phase, from the hand-off.
    InferRequest gen = std::move(request);
    gen.model_name = generation_model_;
    gen.model_version = -1;
    gen.parameters["request_type"] = std::string("generation_only");
    gen.parameters.erase("context_phase_transport");  // the router's own, not the client's
    std::erase_if(gen.inputs,
                  [](const InferTensor& t) { return t.name == "context_phase_params"; });
    gen.inputs.push_back(*handoff);
    gen.inputs.back().shape = {1, static_cast<int64_t>(handoff->data.size())};
    bool skip_first = early, failed = false;
    ran = generation_->Run(std::move(gen), [&](InferResponse&& r) {
      if (failed) return;
      if (!r.error.ok()) {
        failed = true;
        sink(Failure(Status(r.error.code(), generation_->name() + ": " + r.error.message())));
        return;
      }
      InferTensor* out = nullptr;
      for (InferTensor& t : r.outputs)
        if (t.name == "output_ids") out = &t;
      if (skip_first && out && out->data.size() >= sizeof(int32_t)) {
        int32_t got = 0;
        std::memcpy(&got, out->data.data(), sizeof got);
        if (got != first) {
          failed = true;
          sink(Failure(InternalError("the generation phase drew token " + std::to_string(got) +
                                     " where the context phase drew " + std::to_string(first) +
                                     " (the two models differ?)")));
          return;
        }
        out->data.erase(0, sizeof(int32_t));
        const int64_t n = static_cast<int64_t>(out->data.size() / sizeof(int32_t));
        out->shape = {1, 1, n};
        for (InferTensor& t : r.outputs)
          if (t.name == "sequence_length")
            t = InferTensor::Int32("sequence_length", {1, 1}, {static_cast<int32_t>(n)});
        skip_first = false;
        if (n == 0 && !r.final) return;
      }
      r.model_name = model_name_;
      sink(std::move(r));
    });
    if (!ran.ok() && !failed)
      sink(Failure(Status(ran.code(), ran.code() == StatusCode::kCancelled
                                          ? ran.message()
                                          : generation_->name() + ": " + ran.message())));
  }

  std::string model_name_, context_model_, generation_model_;
  std::unique_ptr<Target> context_, generation_;
  const bool handoff_in_shm_;
  std::mutex mu_;
  bool stopping_ = false;
  std::list<Worker> workers_;
};

}  // namespace

StatusOr<std::unique_ptr<ModelBackend>> CreateDisaggregatedBackend(
    const inference::ModelConfig& config, const BackendContext& context) {
  const auto context_model = GetParameter(config, "context_model_name");
  const auto generation_model = GetParameter(config, "generation_model_name");
  if (!context_model || context_model->empty() || !generation_model || generation_model->empty())
    return InvalidArgumentError(
        "a disaggregated serving model needs the parameters context_model_name and "
        "generation_model_name");
  if (!config.model_transaction_policy().decoupled())
    return InvalidArgumentError(
        "a disaggregated serving model must be decoupled (model_transaction_policy)");
  const int64_t health_ms = GetIntParameter(config, "health_check_ms", 500);
  if (health_ms < 50 || health_ms > 60000)
    return InvalidArgumentError("parameter health_check_ms must be in [50, 60000]");
  const std::string transport = GetParameter(config, "context_phase_transport").value_or("inline");
  if (transport != "inline" && transport != "shm")
    return InvalidArgumentError("parameter context_phase_transport must be inline or shm");
  auto make = [&](const char* role, const std::string& model,
                  const char* url_key) -> StatusOr<std::unique_ptr<Target>> {
    const std::string url = GetParameter(config, url_key).value_or("");
    if (url.empty()) {
      if (model == config.name())
        return InvalidArgumentError(std::string(role) + "_model_name names this model itself");
      if (!context.runner) return InvalidArgumentError("no model runner for local models");
      return std::unique_ptr<Target>(
          new LocalTarget(std::string(role) + " model '" + model + "'", context.runner));
    }
    const size_t colon = url.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == url.size() ||
        url.find_first_not_of("0123456789", colon + 1) != std::string::npos || url.size() > 255)
      return InvalidArgumentError(std::string("parameter ") + url_key +
                                  " must be host:port (the other server's gRPC endpoint)");
    return std::unique_ptr<Target>(
        new RemoteTarget(std::string(role) + " model '" + model + "' at " + url, url, health_ms));
  };
  auto ctx = make("context", *context_model, "context_model_url");
  if (!ctx.ok()) return ctx.status();
  auto gen = make("generation", *generation_model, "generation_model_url");
  if (!gen.ok()) return gen.status();
  return std::unique_ptr<ModelBackend>(
      new DisaggregatedBackend(config.name(), *context_model, *generation_model,
                               std::move(ctx).value(), std::move(gen).value(), transport == "shm"));
}

}  // namespace inflight::serving
