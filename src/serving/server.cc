#include "serving/server.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "base/logging.h"
#include "serving/model_config_util.h"
#include "serving/model_paths.h"

namespace inflight::serving {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// A failed load as a client sees it: paths inside the repository named relative to it (the
// server's own log keeps the full ones), and a truncated or corrupt file (DATA_LOSS) an
// INVALID_ARGUMENT like every other bad file of the repository (HTTP 400, not 500).
Status ForClients(const Status& s, const std::string& repository) {
  if (s.ok()) return s;
  std::set<std::string, std::greater<>> prefixes;  // longer ones first, where one holds another
  std::error_code ec;
  for (fs::path p :
       {fs::path(repository), fs::absolute(repository, ec), fs::weakly_canonical(repository, ec)}) {
    std::string text = p.lexically_normal().string();
    while (text.size() > 1 && text.back() == '/') text.pop_back();
    if (!text.empty() && text != "." && text != "/") prefixes.insert(text + "/");
  }
  std::string m = s.message();
  for (const std::string& prefix : prefixes) {
    for (size_t at = m.find(prefix); at != std::string::npos; at = m.find(prefix, at)) {
      const char before = at == 0 ? ' ' : m[at - 1];
      if (std::isalnum(static_cast<unsigned char>(before)) || before == '_' || before == '-' ||
          before == '.' || before == '/') {
        at += prefix.size();
        continue;
      }
      m.erase(at, prefix.size());
    }
  }
  const StatusCode code =
      s.code() == StatusCode::kDataLoss ? StatusCode::kInvalidArgument : s.code();
  return Status(code, std::move(m));
}

uint64_t NsSince(Clock::time_point t) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t).count());
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

const char* TypeName(inference::DataType t) { return DataTypeProtocolName(t); }

// Triton core's checks of a request against the model config.
Status ValidateRequest(const InferRequest& r, const inference::ModelConfig& c) {
  const std::string model = "'" + c.name() + "'";
  std::set<std::string> given;
  int64_t batch = -1;
  for (const InferTensor& t : r.inputs) {
    const inference::ModelInput* spec = nullptr;
    for (const auto& in : c.input()) {
      if (in.name() == t.name) spec = &in;
    }
    if (!spec)
      return InvalidArgumentError("unexpected inference input '" + t.name + "' for model " + model);
    if (!given.insert(t.name).second) {
      return InvalidArgumentError("input '" + t.name + "' is given more than once");
    }
    if (t.dtype != spec->data_type()) {
      return InvalidArgumentError("inference input '" + t.name + "' data-type is '" +
                                  TypeName(t.dtype) + "', but model " + model + " expects '" +
                                  TypeName(spec->data_type()) + "'");
    }
    std::vector<int64_t> dims(t.shape.begin(), t.shape.end());
    if (c.max_batch_size() > 0) {
      if (dims.empty()) {
        return InvalidArgumentError("input '" + t.name + "' has no batch dimension for model " +
                                    model);
      }
      const int64_t b = dims[0];
      if (b < 1 || b > c.max_batch_size()) {
        return InvalidArgumentError("inference request batch-size must be <= " +
                                    std::to_string(c.max_batch_size()) + " for " + model);
      }
      if (batch >= 0 && b != batch && !spec->allow_ragged_batch()) {
        // Inputs of one request share the batch dimension.
        return InvalidArgumentError("input '" + t.name + "' batch size " + std::to_string(b) +
                                    " differs from the other inputs' " + std::to_string(batch));
      }
      batch = std::max(batch, b);
      dims.erase(dims.begin());
    }
    bool match = dims.size() == static_cast<size_t>(spec->dims_size());
    for (size_t i = 0; match && i < dims.size(); ++i) {
      match = spec->dims(static_cast<int>(i)) == -1 || spec->dims(static_cast<int>(i)) == dims[i];
    }
    // A [1]-dims input may also come as a bare batch vector ([B]), as Triton accepts.
    if (!match && spec->dims_size() == 1 && spec->dims(0) == 1 && dims.empty()) match = true;
    if (!match) {
      std::vector<int64_t> expected(spec->dims().begin(), spec->dims().end());
      if (c.max_batch_size() > 0) expected.insert(expected.begin(), -1);
      return InvalidArgumentError("unexpected shape for input '" + t.name + "' for model " + model +
                                  ". Expected " + ShapeText(expected) + ", got " +
                                  ShapeText(t.shape));
    }
    Status s = t.CheckSize();
    if (!s.ok()) return s;
  }
  std::vector<std::string> missing;
  for (const auto& in : c.input()) {
    if (!in.optional() && !given.count(in.name())) missing.push_back(in.name());
  }
  if (!missing.empty()) {
    std::string got, miss;
    for (const auto& g : given) got += (got.empty() ? "'" : ",'") + g + "'";
    for (const auto& m : missing) miss += (miss.empty() ? "'" : ",'") + m + "'";
    return InvalidArgumentError("expected " + std::to_string(c.input_size()) + " inputs but got " +
                                std::to_string(given.size()) + " inputs for model " + model +
                                ". Got input(s) [" + got + "], but missing required input(s) [" +
                                miss + "]. Please provide all required input(s).");
  }
  for (const std::string& o : r.requested_outputs) {
    bool known = false;
    for (const auto& out : c.output()) known = known || out.name() == o;
    if (!known)
      return InvalidArgumentError("unexpected inference output '" + o + "' for model " + model);
  }
  return OkStatus();
}

std::string FailureReason(const Status& s) {
  switch (s.code()) {
    case StatusCode::kCancelled:
      return "CANCELED";
    case StatusCode::kResourceExhausted:
    case StatusCode::kUnavailable:
      return "REJECTED";
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotFound:
      return "OTHER";
    default:
      return "BACKEND";
  }
}

// Times of one request as the core sees it, for statistics.
struct CallTimes {
  Clock::time_point arrival, handed, last;
  uint64_t index = 0;  // responses so far
  double first_response_ms = -1;
};

uint64_t Ns(Clock::duration d) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
}

void KeepRequestedOutputs(const std::vector<std::string>& wanted, InferResponse* resp) {
  if (wanted.empty()) return;
  std::vector<InferTensor> kept;
  for (InferTensor& t : resp->outputs) {
    if (std::find(wanted.begin(), wanted.end(), t.name) != wanted.end())
      kept.push_back(std::move(t));
  }
  resp->outputs = std::move(kept);
}

// Per-response statistics, and the request's on its final response. Caller holds the lock.
void RecordResponse(const InferResponse& resp, Clock::time_point now, CallTimes* call,
                    ModelStatistics* st) {
  ResponseStats& rs = st->response_stats[call->index];
  const uint64_t since = Ns(now - (call->index == 0 ? call->handed : call->last));
  if (!resp.error.ok()) {
    rs.fail.Add(since);
  } else if (resp.empty()) {
    rs.empty_response.Add(since);
  } else {
    rs.compute_infer.Add(since);
    rs.success.Add(since);
    if (call->first_response_ms < 0) {
      call->first_response_ms =
          std::chrono::duration<double, std::milli>(now - call->arrival).count();
    }
  }
  ++call->index;
  call->last = now;
  if (!resp.final) return;
  const uint64_t total = Ns(now - call->arrival), input = Ns(call->handed - call->arrival);
  st->last_inference_ms =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count());
  if (!resp.error.ok()) {
    st->fail.Add(total);
    return;
  }
  // As the TRT-LLM backend reports: one execution of batch size 1 per request.
  st->success.Add(total);
  st->queue.Add(0);
  st->compute_input.Add(input);
  st->compute_infer.Add(total - std::min(total, input));
  st->compute_output.Add(0);
  ++st->inference_count;
  ++st->execution_count;
  st->batch1_input.Add(input);
  st->batch1_infer.Add(total - std::min(total, input));
  st->batch1_output.Add(0);
}

InferenceRecord FinalRecord(const CallTimes& call, const Status& error, Clock::time_point now) {
  InferenceRecord rec;
  rec.success = error.ok();
  rec.failure_reason = FailureReason(error);
  rec.request_us =
      std::chrono::duration_cast<std::chrono::microseconds>(now - call.arrival).count();
  rec.compute_input_us =
      std::chrono::duration_cast<std::chrono::microseconds>(call.handed - call.arrival).count();
  rec.compute_infer_us = rec.request_us - rec.compute_input_us;
  rec.first_response_ms = call.first_response_ms;
  return rec;
}

constexpr char kInvalidName[] =
    "invalid model name: it must be 1-255 bytes without '/', '\\', NUL or control characters, and "
    "not '.' or '..'";

}  // namespace

struct Server::Loaded {
  std::string name;
  int64_t version = 0;
  inference::ModelConfig config;
  std::atomic<int64_t> inflight{0};
  std::mutex stats_mu;
  ModelStatistics stats;
  std::unique_ptr<ModelBackend> backend;  // last: destroyed first, while the rest is alive
};

struct Server::Entry {
  std::string state = "UNKNOWN";
  std::string reason;
  std::map<int64_t, std::shared_ptr<Loaded>> versions;
  int retiring = 0;  // replaced versions still finishing their requests (RetireLoop)
  fs::file_time_type config_time{};
};

StatusOr<ModelControlMode> ModelControlModeFromName(const std::string& name) {
  if (name == "none") return ModelControlMode::kNone;
  if (name == "poll") return ModelControlMode::kPoll;
  if (name == "explicit") return ModelControlMode::kExplicit;
  return InvalidArgumentError("--model-control-mode must be none, poll or explicit, got '" + name +
                              "'");
}

Server::Server(const ServerOptions& options) : options_(options), tracer_(options.trace_file) {
  std::vector<std::string> folders = {options.repository};
  folders.insert(folders.end(), options.allowed_model_paths.begin(),
                 options.allowed_model_paths.end());
  allowed_roots_ = CanonicalRoots(folders);
}

StatusOr<std::unique_ptr<Server>> Server::Create(const ServerOptions& options) {
  std::error_code ec;
  if (!fs::is_directory(options.repository, ec)) {
    return InvalidArgumentError("--model-repository '" + options.repository +
                                "' is not a directory");
  }
  std::unique_ptr<Server> server(new Server(options));
  std::vector<std::string> names = server->ScanRepository();
  std::vector<std::string> to_load;
  if (options.control_mode == ModelControlMode::kExplicit) {
    for (const std::string& m : options.load_models) {
      if (m == "*") {
        to_load = names;
        break;
      }
      to_load.push_back(m);
    }
  } else {
    to_load = names;
  }
  server->retire_thread_ = std::thread([s = server.get()] { s->RetireLoop(); });
  std::unique_lock<std::mutex> lock(server->mu_);
  for (const std::string& n : names) server->models_[n] = std::make_shared<Entry>();
  // Composing models first, so an ensemble finds its steps ready.
  std::stable_sort(to_load.begin(), to_load.end(), [&](const std::string& a, const std::string& b) {
    auto is_ensemble = [&](const std::string& n) {
      std::ifstream in(fs::path(options.repository) / n / "config.pbtxt");
      std::stringstream ss;
      ss << in.rdbuf();
      return ss.str().find("ensemble_scheduling") != std::string::npos;
    };
    return !is_ensemble(a) && is_ensemble(b);
  });
  for (const std::string& n : to_load) {
    Status s = server->LoadLocked(n, std::nullopt, lock);
    if (!s.ok()) {
      INFLIGHT_LOG(kError) << "failed to load '" << n << "': " << s.message();
    }
  }
  lock.unlock();
  if (options.control_mode == ModelControlMode::kPoll) {
    server->poll_thread_ = std::thread([s = server.get()] { s->PollLoop(); });
  }
  return server;
}

Server::~Server() { Shutdown(); }

std::vector<std::string> Server::ScanRepository() const {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(options_.repository, ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && IsValidModelName(name) && fs::exists(e.path() / "config.pbtxt"))
      names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

Status Server::LoadLocked(const std::string& name, const std::optional<std::string>& config_json,
                          std::unique_lock<std::mutex>& lock) {
  if (!IsValidModelName(name)) return InvalidArgumentError(kInvalidName);
  const fs::path dir = fs::path(options_.repository) / name;
  auto& entry = models_[name];
  if (!entry) entry = std::make_shared<Entry>();
  std::shared_ptr<Entry> e = entry;
  // A failed load leaves a serving model as it was; a name with no folder in the repository
  // leaves no trace in the index.
  auto fail = [&](const Status& full) {
    if (full.message() != ForClients(full, options_.repository).message())
      INFLIGHT_LOG(kWarning) << "failed to load '" << name << "': " << full.message();
    const Status s = ForClients(full, options_.repository);
    std::error_code ec;
    if (!e->versions.empty()) return s;
    if (!fs::is_directory(dir, ec)) {
      auto it = models_.find(name);
      if (it != models_.end() && it->second == e) models_.erase(it);
      return s;
    }
    e->state = "UNAVAILABLE";
    e->reason = s.message();
    return s;
  };
  inference::ModelConfig config;
  if (config_json) {
    auto st = google::protobuf::util::JsonStringToMessage(*config_json, &config);
    if (!st.ok())
      return fail(InvalidArgumentError("load parameter 'config': " + std::string(st.message())));
  } else {
    std::ifstream in(dir / "config.pbtxt");
    if (!in) return fail(NotFoundError("model '" + name + "': no config.pbtxt in " + dir.string()));
    std::stringstream text;
    text << in.rdbuf();
    auto parsed = ParseModelConfigText(text.str());
    if (!parsed.ok())
      return fail(InvalidArgumentError("model '" + name + "' " + parsed.status().message()));
    config = std::move(parsed).value();
    std::error_code ec;
    e->config_time = fs::last_write_time(dir / "config.pbtxt", ec);
  }
  if (config.name().empty()) config.set_name(name);
  if (config.name() != name) {
    return fail(InvalidArgumentError("model '" + name + "': config name '" + config.name() +
                                     "' does not match the directory name"));
  }
  // Versions: numeric folders, chosen by the version policy (default: the newest one).
  std::vector<int64_t> versions;
  std::error_code ec;
  for (const auto& d : fs::directory_iterator(dir, ec)) {
    const std::string v = d.path().filename().string();
    if (d.is_directory() && !v.empty() && v.size() < 18 &&
        std::all_of(v.begin(), v.end(), ::isdigit)) {
      versions.push_back(std::stoll(v));
    }
  }
  std::sort(versions.rbegin(), versions.rend());
  const auto& policy = config.version_policy();
  if (policy.has_all()) {
  } else if (policy.has_specific()) {
    std::set<int64_t> wanted(policy.specific().versions().begin(),
                             policy.specific().versions().end());
    versions.erase(std::remove_if(versions.begin(), versions.end(),
                                  [&](int64_t v) { return !wanted.count(v); }),
                   versions.end());
  } else {
    const size_t n =
        std::max<uint32_t>(1, policy.has_latest() ? policy.latest().num_versions() : 1);
    if (versions.size() > n) versions.resize(n);
  }
  if (versions.empty()) {
    return fail(InvalidArgumentError(
        "at least one version must be available under the version policy of model '" + name + "'"));
  }
  // An ensemble's steps load first; the ensemble is decoupled when any step is.
  if (config.platform() == "ensemble") {
    for (const auto& step : config.ensemble_scheduling().step()) {
      auto it = models_.find(step.model_name());
      if (it == models_.end() || it->second->state != "READY") {
        if (step.model_name() == name)
          return fail(InvalidArgumentError("ensemble '" + name + "' names itself"));
        Status s = LoadLocked(step.model_name(), std::nullopt, lock);
        if (!s.ok()) {
          return fail(UnavailableError("ensemble '" + name + "' depends on '" + step.model_name() +
                                       "' which is not available: " + s.message()));
        }
      }
      auto loaded = models_[step.model_name()]->versions;
      for (const auto& [v, l] : loaded) {
        if (IsDecoupled(l->config)) config.mutable_model_transaction_policy()->set_decoupled(true);
      }
    }
  }
  // At most two copies of a model: a reload waits for the previous reload's old version to
  // finish its requests first (Shutdown ends that wait), for a while.
  const auto patience =
      Clock::now() + std::chrono::seconds(std::max(30, options_.exit_timeout_secs));
  if (!cv_.wait_until(lock, patience, [&] { return e->retiring == 0 || shutting_down_; })) {
    return UnavailableError("the previous version of '" + name +
                            "' is still finishing its requests; load it again later");
  }
  if (shutting_down_) return UnavailableError("the server is shutting down");
  // A serving model keeps serving while its new version loads; the two swap at the end.
  if (e->versions.empty()) {
    e->state = "LOADING";
    e->reason.clear();
  }
  std::map<int64_t, std::shared_ptr<Loaded>> loaded;
  for (int64_t v : versions) {
    const auto start = Clock::now();
    BackendContext ctx;
    ctx.model_name = name;
    ctx.version = v;
    ctx.model_dir = dir.string();
    ctx.version_dir = (dir / std::to_string(v)).string();
    ctx.runner = this;
    ctx.metrics = &metrics_;
    ctx.allowed_roots = allowed_roots_;
    ctx.request_limits = options_.request_limits;
    // Backends load outside the lock (a model file may take seconds).
    lock.unlock();
    auto backend = CreateBackend(config, ctx, options_.backends);
    lock.lock();
    if (!backend.ok()) return fail(backend.status());
    auto l = std::make_shared<Loaded>();
    l->name = name;
    l->version = v;
    l->config = config;
    l->stats.name = name;
    l->stats.version = std::to_string(v);
    l->backend = std::move(backend).value();
    loaded[v] = std::move(l);
    metrics_.SetModelLoadDuration(name, std::to_string(v), NsSince(start) / 1e9);
  }
  std::map<int64_t, std::shared_ptr<Loaded>> previous = std::move(e->versions);
  e->versions = std::move(loaded);
  e->state = "READY";
  e->reason.clear();
  INFLIGHT_LOG(kInfo) << "successfully loaded '" << name << "' version " << versions.front();
  if (!previous.empty()) {
    // Triton's reload: the old version serves its running requests to their end, and is not
    // cancelled at a deadline (a slow machine made that cut streams mid-answer).
    ++e->retiring;
    retiring_.push_back({e, std::move(previous)});
    cv_.notify_all();
  }
  return OkStatus();
}

void Server::RetireLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait_for(lock, std::chrono::milliseconds(retiring_.empty() ? 1000 : 10));
    const bool cut = Clock::now().time_since_epoch().count() >= retire_cut_ns_.load();
    if (shutting_down_ && retiring_.empty() && cut) return;
    for (size_t i = 0; i < retiring_.size();) {
      // Drained: nothing runs on it and no request holds it (Infer finds a version before
      // it counts itself in inflight).
      bool drained = true;
      for (const auto& [v, l] : retiring_[i].versions)
        drained = drained && l->inflight.load() == 0 && l.use_count() == 1;
      if (!drained && !cut) {
        ++i;
        continue;
      }
      Retiring r = std::move(retiring_[i]);
      retiring_.erase(retiring_.begin() + static_cast<std::ptrdiff_t>(i));
      std::string names;
      for (const auto& [v, l] : r.versions)
        names += (names.empty() ? "'" : ", '") + l->name + "' version " + std::to_string(v);
      RetireLocked(std::move(r.versions), lock, Clock::now());  // unlocks while it destroys
      INFLIGHT_LOG(kInfo) << "retired " << names << " (replaced by a reload)";
      --r.entry->retiring;
      cv_.notify_all();
      i = 0;  // the list may have changed while unlocked
    }
  }
}

void Server::RetireLocked(std::map<int64_t, std::shared_ptr<Loaded>> versions,
                          std::unique_lock<std::mutex>& lock, Clock::time_point deadline) {
  lock.unlock();
  for (auto& [v, l] : versions) {
    while (l->inflight.load() > 0 && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (l->inflight.load() > 0) {
      INFLIGHT_LOG(kWarning) << l->inflight.load() << " requests still running on '" << l->name
                             << "' version " << v << " at the unload deadline are cancelled";
    }
  }
  const bool freed = !versions.empty();
  versions.clear();  // destroys the backends (an executor cancels what still runs)
#ifdef __GLIBC__
  // Give the freed weights and KV pool back to the system. Without this glibc keeps them in the
  // arena of the thread that loaded them (its mmap threshold grows past such sizes once one is
  // freed), and every reload added a model's worth of RSS (the soak saw 105 -> 376 MB).
  if (freed) malloc_trim(0);
#endif
  lock.lock();
}

void Server::UnloadLocked(const std::string& name, std::unique_lock<std::mutex>& lock,
                          Clock::time_point deadline) {
  auto it = models_.find(name);
  if (it == models_.end()) return;
  std::shared_ptr<Entry> e = it->second;
  std::map<int64_t, std::shared_ptr<Loaded>> versions = std::move(e->versions);
  e->versions.clear();
  e->state = "UNLOADING";
  // New requests no longer find the model; running ones finish (or time out) first.
  RetireLocked(std::move(versions), lock, deadline);
  if (e->versions.empty()) e->state = "UNAVAILABLE";
  e->reason = "unloaded";
  INFLIGHT_LOG(kInfo) << "successfully unloaded '" << name << "'";
}

Status Server::LoadModel(const std::string& name, const std::optional<std::string>& config_json) {
  if (options_.control_mode != ModelControlMode::kExplicit) {
    return UnavailableError("explicit model load / unload is not allowed if polling is enabled");
  }
  if (!IsValidModelName(name)) return InvalidArgumentError(kInvalidName);
  std::unique_lock<std::mutex> lock(mu_);
  if (!config_json && !fs::exists(fs::path(options_.repository) / name / "config.pbtxt")) {
    return NotFoundError("failed to load '" + name + "', failed to poll from model repository");
  }
  return LoadLocked(name, config_json, lock);
}

Status Server::UnloadModel(const std::string& name, bool unload_dependents) {
  if (options_.control_mode != ModelControlMode::kExplicit) {
    return UnavailableError("explicit model load / unload is not allowed if polling is enabled");
  }
  if (!IsValidModelName(name)) return InvalidArgumentError(kInvalidName);
  std::unique_lock<std::mutex> lock(mu_);
  auto it = models_.find(name);
  if (it == models_.end())
    return NotFoundError("failed to unload '" + name + "', no version is available");
  std::vector<std::string> steps;
  if (unload_dependents) {
    for (const auto& [v, l] : it->second->versions) {
      for (const auto& s : l->config.ensemble_scheduling().step()) steps.push_back(s.model_name());
    }
  }
  UnloadLocked(name, lock, UnloadDeadline());
  for (const std::string& s : steps) UnloadLocked(s, lock, UnloadDeadline());
  return OkStatus();
}

void Server::PollLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!shutting_down_) {
    cv_.wait_for(lock, std::chrono::seconds(options_.repository_poll_secs));
    if (shutting_down_) break;
    lock.unlock();
    std::vector<std::string> names = ScanRepository();
    lock.lock();
    std::set<std::string> present(names.begin(), names.end());
    for (const std::string& n : names) {
      auto it = models_.find(n);
      std::error_code ec;
      const auto t = fs::last_write_time(fs::path(options_.repository) / n / "config.pbtxt", ec);
      if (it == models_.end() || it->second->config_time != t) {
        Status s = LoadLocked(n, std::nullopt, lock);
        if (!s.ok()) {
          INFLIGHT_LOG(kError) << "poll: failed to load '" << n << "': " << s.message();
        }
      }
    }
    std::vector<std::string> gone;
    for (const auto& [n, e] : models_) {
      if (!present.count(n) && !e->versions.empty()) gone.push_back(n);
    }
    for (const std::string& n : gone) UnloadLocked(n, lock, UnloadDeadline());
  }
}

void Server::Shutdown() {
  {
    // Set under the mutex: a thread between checking it and waiting on cv_ cannot miss it.
    std::lock_guard<std::mutex> lock(mu_);
    if (shutting_down_.exchange(true)) return;
  }
  cv_.notify_all();
  if (poll_thread_.joinable()) poll_thread_.join();
  const auto deadline = Clock::now() + std::chrono::seconds(options_.exit_timeout_secs);
  while (inflight_.load() > 0 && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  // Versions a reload replaced end now, cancelling what they still run.
  retire_cut_ns_ = Clock::now().time_since_epoch().count();
  cv_.notify_all();
  if (retire_thread_.joinable()) retire_thread_.join();
  std::unique_lock<std::mutex> lock(mu_);
  // LLM models first: unloading one cancels what still runs there, and those requests end
  // with an error that still flows through the ensembles and text models calling them.
  std::vector<std::string> names;
  for (const auto& [n, e] : models_) names.push_back(n);
  for (int pass = 0; pass < 2; ++pass) {
    for (const std::string& n : names) {
      auto& e = models_[n];
      if (e->versions.empty()) continue;
      bool ensemble = false;
      for (const auto& [v, l] : e->versions)
        ensemble =
            ensemble || l->config.platform() == "ensemble" || l->config.backend() == "python";
      if ((pass == 1) == ensemble) UnloadLocked(n, lock, deadline);
    }
  }
  tracer_.Flush();
}

bool Server::ready() const {
  if (shutting_down_) return false;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [n, e] : models_) {
    if (e->state == "LOADING" || (e->state == "UNAVAILABLE" && e->reason != "unloaded" &&
                                  options_.control_mode != ModelControlMode::kExplicit)) {
      return false;
    }
    // A loaded model that can no longer serve (a parallel rank died).
    for (const auto& [v, loaded] : e->versions) {
      if (loaded->backend && !loaded->backend->Health().ok()) return false;
    }
  }
  return true;
}

std::shared_ptr<Server::Loaded> Server::FindByNumber(const std::string& name,
                                                     int64_t version) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = models_.find(name);
  if (it == models_.end() || it->second->versions.empty()) return nullptr;
  const auto& vs = it->second->versions;
  if (version < 0) return vs.rbegin()->second;
  auto v = vs.find(version);
  return v == vs.end() ? nullptr : v->second;
}

StatusOr<std::shared_ptr<Server::Loaded>> Server::Find(const std::string& name,
                                                       const std::string& version) const {
  int64_t v = -1;
  if (!version.empty()) {
    if (!std::all_of(version.begin(), version.end(), ::isdigit) || version.size() > 18) {
      return InvalidArgumentError("model version '" + version + "' is not a number");
    }
    v = std::stoll(version);
  }
  auto l = FindByNumber(name, v);
  if (!l) {
    if (v >= 0 && FindByNumber(name, -1)) {
      return NotFoundError("Request for unknown model: '" + name + "' version " + version +
                           " is not found");
    }
    return NotFoundError("Request for unknown model: '" + name + "' is not found");
  }
  return l;
}

StatusOr<std::shared_ptr<const Tokenizer>> Server::TokenizerOf(const std::string& name) const {
  auto l = Find(name, "");
  if (!l.ok()) return l.status();
  return (*l)->backend->tokenizer();
}

StatusOr<int64_t> Server::ContextLengthOf(const std::string& name) const {
  auto l = Find(name, "");
  if (!l.ok()) return l.status();
  return (*l)->backend->context_length();
}

StatusOr<KvEventsPage> Server::KvEvents(const std::string& name, const std::string& version,
                                        uint64_t after_id, size_t max) const {
  auto l = Find(name, version);
  if (!l.ok()) return l.status();
  return (*l)->backend->KvEvents(after_id, max);
}

StatusOr<KvCacheListing> Server::KvCacheBlocks(const std::string& name,
                                               const std::string& version) const {
  auto l = Find(name, version);
  if (!l.ok()) return l.status();
  return (*l)->backend->KvCacheBlocks();
}

std::vector<LlmLiveSnapshot> Server::LiveSnapshots() const {
  std::vector<std::shared_ptr<Loaded>> loaded;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [name, entry] : models_) {
      if (entry->state == "READY" && !entry->versions.empty())
        loaded.push_back(entry->versions.rbegin()->second);
    }
  }
  std::vector<LlmLiveSnapshot> out;
  for (const auto& l : loaded) {
    LlmLiveSnapshot s;
    if (l->backend && l->backend->LiveSnapshot(&s)) out.push_back(std::move(s));
  }
  return out;
}

StatusOr<ModelMetadata> Server::GetModelMetadata(const std::string& name,
                                                 const std::string& version) const {
  auto l = Find(name, version);
  if (!l.ok()) return l.status();
  const inference::ModelConfig& c = (*l)->config;
  ModelMetadata m;
  m.name = name;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [v, x] : models_.at(name)->versions) m.versions.push_back(std::to_string(v));
  }
  if (!version.empty()) m.versions = {version};
  m.platform = c.platform().empty() ? c.backend() : c.platform();
  auto shape = [&](const auto& dims) {
    std::vector<int64_t> s;
    if (c.max_batch_size() > 0) s.push_back(-1);
    s.insert(s.end(), dims.begin(), dims.end());
    return s;
  };
  for (const auto& in : c.input())
    m.inputs.push_back({in.name(), TypeName(in.data_type()), shape(in.dims())});
  for (const auto& out : c.output())
    m.outputs.push_back({out.name(), TypeName(out.data_type()), shape(out.dims())});
  return m;
}

StatusOr<inference::ModelConfig> Server::GetModelConfig(const std::string& name,
                                                        const std::string& version) const {
  auto l = Find(name, version);
  if (!l.ok()) return l.status();
  return (*l)->config;
}

StatusOr<inference::ModelConfig> Server::ModelConfigOf(const std::string& name, int64_t version) {
  auto l = FindByNumber(name, version);
  if (!l) return NotFoundError("Request for unknown model: '" + name + "' is not found");
  return l->config;
}

bool Server::ModelReady(const std::string& name, const std::string& version) const {
  auto loaded = Find(name, version);
  return loaded.ok() && !shutting_down_ && (*loaded)->backend->Health().ok();
}

std::vector<RepositoryEntry> Server::RepositoryIndex(bool ready_only) const {
  std::vector<std::string> names = ScanRepository();
  std::lock_guard<std::mutex> lock(mu_);
  std::set<std::string> all(names.begin(), names.end());
  for (const auto& [n, e] : models_) all.insert(n);
  std::vector<RepositoryEntry> out;
  for (const std::string& n : all) {
    auto it = models_.find(n);
    if (it == models_.end() || it->second->state == "UNKNOWN") {
      if (!ready_only) out.push_back({n, "", "", ""});
      continue;
    }
    const Entry& e = *it->second;
    if (ready_only && e.state != "READY") continue;
    if (e.versions.empty()) {
      out.push_back({n, "", e.state, e.reason});
    } else {
      for (const auto& [v, l] : e.versions)
        out.push_back({n, std::to_string(v), e.state, e.reason});
    }
  }
  return out;
}

StatusOr<std::vector<ModelStatistics>> Server::Statistics(const std::string& name,
                                                          const std::string& version) const {
  std::vector<std::shared_ptr<Loaded>> targets;
  if (name.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [n, e] : models_) {
      for (const auto& [v, l] : e->versions) targets.push_back(l);
    }
  } else {
    auto l = Find(name, version);
    if (!l.ok()) return l.status();
    targets.push_back(*l);
  }
  std::vector<ModelStatistics> out;
  for (const auto& l : targets) {
    std::lock_guard<std::mutex> lock(l->stats_mu);
    out.push_back(l->stats);
  }
  return out;
}

void Server::RecordTextRequest(const std::string& name, Clock::time_point arrival,
                               std::optional<Clock::time_point> first_response,
                               const Status& result) {
  auto l = Find(name, "");
  if (!l.ok()) return;
  const auto now = Clock::now();
  CallTimes call;
  call.arrival = call.handed = arrival;
  call.last = first_response.value_or(arrival);
  if (first_response)
    call.first_response_ms =
        std::chrono::duration<double, std::milli>(*first_response - arrival).count();
  InferResponse final_response;
  final_response.final = true;
  final_response.error = result;
  if (result.ok()) final_response.outputs.emplace_back();  // counted as a response with data
  {
    std::lock_guard<std::mutex> lock((*l)->stats_mu);
    RecordResponse(final_response, now, &call, &(*l)->stats);
  }
  metrics_.RecordInference((*l)->name, std::to_string((*l)->version),
                           FinalRecord(call, result, now));
}

void Server::Infer(InferRequest r, ResponseSink sink) {
  const auto arrival = Clock::now();
  const uint64_t arrival_ns = Tracer::NowNs();
  auto found = Find(r.model_name, r.model_version < 0 ? "" : std::to_string(r.model_version));
  auto reject = [&](const Status& s) {
    InferResponse resp = ErrorResponse(s);
    resp.model_name = r.model_name;
    resp.id = r.id;
    sink(std::move(resp));
  };
  // An ensemble's steps (they carry its request context) still run while the server drains.
  if (shutting_down_ && !r.context) {
    return reject(UnavailableError("Server is shutting down, no new requests are accepted"));
  }
  if (!found.ok()) return reject(found.status());
  std::shared_ptr<Loaded> l = *found;
  const std::string version = std::to_string(l->version);
  Status valid = ValidateRequest(r, l->config);
  if (!valid.ok()) {
    InferenceRecord rec;
    rec.success = false;
    rec.failure_reason = "OTHER";
    metrics_.RecordInference(l->name, version, rec);
    {
      std::lock_guard<std::mutex> lock(l->stats_mu);
      l->stats.fail.Add(NsSince(arrival));
    }
    InferResponse resp = ErrorResponse(valid);
    resp.model_name = l->name;
    resp.model_version = version;
    resp.id = r.id;
    return sink(std::move(resp));
  }
  auto call = std::make_shared<CallTimes>();
  call->arrival = arrival;
  // Client requests only: an ensemble's steps belong to its trace's request.
  const uint64_t trace_id = r.context ? 0 : tracer_.Sample(l->name);
  ++inflight_;
  ++l->inflight;
  Loaded* loaded = l.get();  // alive until inflight drops (Unload waits for it)
  std::vector<std::string> wanted = r.requested_outputs;
  const std::string id = r.id;
  const uint64_t handed_ns = Tracer::NowNs();
  auto wrapped = [this, loaded, call, sink = std::move(sink), wanted, id, version, trace_id,
                  arrival_ns, handed_ns](InferResponse&& resp) {
    resp.model_name = loaded->name;
    resp.model_version = version;
    resp.id = id;
    KeepRequestedOutputs(wanted, &resp);
    const auto now = Clock::now();
    const bool final = resp.final;
    const Status error = resp.error;
    {
      std::lock_guard<std::mutex> lock(loaded->stats_mu);
      RecordResponse(resp, now, call.get(), &loaded->stats);
    }
    if (final) metrics_.RecordInference(loaded->name, version, FinalRecord(*call, error, now));
    if (final && trace_id != 0) {
      const uint64_t end_ns = Tracer::NowNs();
      tracer_.Record({trace_id,
                      loaded->name,
                      version,
                      {{"REQUEST_START", arrival_ns},
                       {"QUEUE_START", handed_ns},
                       {"COMPUTE_START", handed_ns},
                       {"COMPUTE_END", end_ns},
                       {"REQUEST_END", end_ns}}});
    }
    sink(std::move(resp));
    if (final) {
      --loaded->inflight;
      --inflight_;
    }
  };
  call->handed = Clock::now();
  call->last = call->handed;
  metrics_.AddPending(l->name, version, 1);
  l->backend->Execute(std::move(r), std::move(wrapped));
  metrics_.AddPending(l->name, version, -1);
}

const InferTensor* InferRequest::FindInput(const std::string& name) const {
  for (const InferTensor& t : inputs) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

void CancelToken::Cancel() {
  std::vector<std::function<void()>> callbacks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_.exchange(true)) return;
    callbacks.swap(callbacks_);
  }
  for (auto& fn : callbacks) fn();
}

void CancelToken::OnCancel(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!cancelled_) {
      callbacks_.push_back(std::move(fn));
      return;
    }
  }
  fn();
}

}  // namespace inflight::serving
