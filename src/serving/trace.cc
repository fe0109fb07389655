#include "serving/trace.h"

#include <fstream>
#include <nlohmann/json.hpp>

namespace inflight::serving {
namespace {

std::optional<int64_t> ParseInt(const std::string& s) {
  if (s.empty() || s.size() > 18) return std::nullopt;
  size_t i = s[0] == '-' ? 1 : 0;
  if (i == s.size()) return std::nullopt;
  for (size_t j = i; j < s.size(); ++j) {
    if (s[j] < '0' || s[j] > '9') return std::nullopt;
  }
  return std::stoll(s);
}

Status Apply(TraceSettings* t, const std::string& key, const std::string& v) {
  if (key == "trace_level") {
    if (v == "TENSORS")
      return UnimplementedError("trace level TENSORS is not supported (TIMESTAMPS and OFF are)");
    if (v != "OFF" && v != "TIMESTAMPS")
      return InvalidArgumentError("trace_level must be OFF or TIMESTAMPS");
    t->level = v;
    return OkStatus();
  }
  auto n = ParseInt(v);
  if (key == "trace_rate") {
    if (!n || *n < 1) return InvalidArgumentError("trace_rate must be a positive integer");
    t->rate = *n;
  } else if (key == "trace_count") {
    if (!n || *n < -1)
      return InvalidArgumentError("trace_count must be -1 or a non-negative integer");
    t->count = *n;
  } else if (key == "log_frequency") {
    if (!n || *n < 0) return InvalidArgumentError("log_frequency must be a non-negative integer");
    t->log_frequency = *n;
  } else {
    return InvalidArgumentError("unknown trace setting '" + key + "'");
  }
  return OkStatus();
}

}  // namespace

Tracer::Tracer(std::string trace_file) : file_(std::move(trace_file)) {}

Tracer::~Tracer() { Flush(); }

uint64_t Tracer::NowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

TraceSettings Tracer::EffectiveLocked(const std::string& model) const {
  TraceSettings t = global_;
  auto it = overrides_.find(model);
  if (it != overrides_.end()) {
    for (const auto& [k, v] : it->second) (void)Apply(&t, k, v);
  }
  return t;
}

std::map<std::string, std::vector<std::string>> Tracer::Settings(const std::string& model) const {
  std::lock_guard<std::mutex> lock(mu_);
  const TraceSettings t = EffectiveLocked(model);
  return {{"trace_file", {file_}},
          {"trace_level", {t.level}},
          {"trace_rate", {std::to_string(t.rate)}},
          {"trace_count", {std::to_string(t.count)}},
          {"log_frequency", {std::to_string(t.log_frequency)}},
          {"trace_mode", {"triton"}}};
}

Status Tracer::Update(
    const std::string& model,
    const std::map<std::string, std::optional<std::vector<std::string>>>& values) {
  std::lock_guard<std::mutex> lock(mu_);
  TraceSettings check = EffectiveLocked(model);
  for (const auto& [key, v] : values) {
    if (key == "trace_file")
      return UnimplementedError("trace file location can not be updated through network protocol");
    if (key == "trace_mode") continue;
    if (!v) {
      if (model.empty())
        return InvalidArgumentError("null clears a model's setting; the global '" + key +
                                    "' has no default to fall back to");
      continue;
    }
    if (v->size() != 1) return InvalidArgumentError("trace setting '" + key + "' takes one value");
    Status s = Apply(&check, key, v->front());
    if (!s.ok()) return s;
  }
  // All valid: apply.
  for (const auto& [key, v] : values) {
    if (key == "trace_mode") continue;
    if (model.empty()) {
      (void)Apply(&global_, key, v->front());
    } else if (!v) {
      overrides_[model].erase(key);
    } else {
      overrides_[model][key] = v->front();
    }
  }
  return OkStatus();
}

uint64_t Tracer::Sample(const std::string& model) {
  std::lock_guard<std::mutex> lock(mu_);
  const TraceSettings t = EffectiveLocked(model);
  if (t.level == "OFF" || t.count == 0) return 0;
  if (seen_[model]++ % t.rate != 0) return 0;
  if (t.count > 0) {
    // The count belongs to whichever level set it.
    auto it = overrides_.find(model);
    if (it != overrides_.end() && it->second.count("trace_count")) {
      it->second["trace_count"] = std::to_string(t.count - 1);
    } else {
      global_.count = t.count - 1;
    }
  }
  return next_id_++;
}

void Tracer::Record(RequestTrace trace) {
  std::lock_guard<std::mutex> lock(mu_);
  ++recorded_;
  pending_.push_back(std::move(trace));
  const TraceSettings t = EffectiveLocked(pending_.back().model);
  if (t.log_frequency > 0 && static_cast<int64_t>(pending_.size()) >= t.log_frequency)
    WriteLocked();
}

void Tracer::Flush() {
  std::lock_guard<std::mutex> lock(mu_);
  WriteLocked();
}

size_t Tracer::num_recorded() const {
  std::lock_guard<std::mutex> lock(mu_);
  return recorded_;
}

void Tracer::WriteLocked() {
  if (pending_.empty() || file_.empty()) return;
  // Triton's layout: per trace, a model record then a timestamps record. Each flush rewrites
  // nothing: it appends a JSON array of its own (log_frequency > 0 writes several).
  nlohmann::json out = nlohmann::json::array();
  for (const RequestTrace& t : pending_) {
    out.push_back({{"id", t.id},
                   {"model_name", t.model},
                   {"model_version", std::stoll(t.version.empty() ? "0" : t.version)}});
    nlohmann::json ts = nlohmann::json::array();
    for (const auto& [name, ns] : t.timestamps) ts.push_back({{"name", name}, {"ns", ns}});
    out.push_back({{"id", t.id}, {"timestamps", ts}});
  }
  std::ofstream f(file_, wrote_any_ ? std::ios::app : std::ios::trunc);
  f << out.dump() << "\n";
  wrote_any_ = true;
  pending_.clear();
}

}  // namespace inflight::serving
