#include "frontends/web_frontend.h"

#include <nlohmann/json.hpp>

#include "frontends/kserve_json.h"
#include "frontends/web_assets.h"

namespace inflight::frontends {
namespace {

using nlohmann::json;

json StepJson(const serving::EngineStep& s) {
  json j = {{"iteration", s.iteration},
            {"step_ms", s.step_ms},
            {"forward_ms", s.forward_ms},
            {"active", s.num_active},
            {"queued", s.num_queued},
            {"context_seqs", s.num_scheduled_context},
            {"generation_seqs", s.num_scheduled_generation},
            {"context_tokens", s.num_context_tokens},
            {"generation_tokens", s.num_generation_tokens},
            {"paused", s.num_paused},
            {"kv_used", s.kv_blocks_used},
            {"kv_free", s.kv_blocks_free},
            {"kv_cached", s.kv_blocks_cached},
            {"kv_reused", s.kv_blocks_reused},
            {"kv_reused_disk", s.kv_blocks_reused_from_disk},
            {"waiting_kv_cache", s.waiting_for_kv_cache},
            {"waiting_token_budget", s.waiting_for_max_num_tokens},
            {"waiting_batch_size", s.waiting_for_max_batch_size},
            {"waiting_static_batch", s.waiting_for_static_batch},
            {"waiting_latency_budget", s.waiting_for_latency_budget},
            {"latency_target_ms", s.latency_target_ms}};
  // kv_*: the full group. The window group's blocks (sliding-window layers) are a pool of their
  // own, shown beside it; only a model that has one sends them.
  if (s.window_kv_blocks_total > 0) {
    j["window_kv_used"] = s.window_kv_blocks_used;
    j["window_kv_free"] = s.window_kv_blocks_free;
    j["window_kv_cached"] = s.window_kv_blocks_cached;
  }
  return j;
}

}  // namespace

WebFrontend::WebFrontend(serving::Server* server) : server_(server) {}

WebFrontend::~WebFrontend() { Stop(); }

std::string WebFrontend::SnapshotJson(const std::vector<serving::LlmLiveSnapshot>& models) {
  json out = {{"time_ms", std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count()},
              {"models", json::array()}};
  for (const serving::LlmLiveSnapshot& m : models) {
    json steps = json::array();
    for (const serving::EngineStep& s : m.steps) steps.push_back(StepJson(s));
    // Requests running = holding state (not queued); paused ones are queued again under
    // max_utilization and show in the last step's count.
    json model = {{"model", m.model},
                  {"max_batch_size", m.max_batch_size},
                  {"max_num_tokens", m.max_num_tokens},
                  {"tokens_per_block", m.tokens_per_block},
                  {"running", std::max<int64_t>(0, m.num_unfinished - m.num_queued)},
                  {"queued", m.num_queued},
                  {"paused", m.steps.empty() ? 0 : m.steps.back().num_paused},
                  {"kv_blocks",
                   {{"total", m.blocks.total},
                    {"used", m.blocks.used},
                    {"free", m.blocks.free},
                    {"cached", m.blocks.cached}}},
                  {"generated_tokens_per_s", m.generated_tokens_per_s},
                  {"finished", m.num_finished},
                  {"ttft_bounds_ms", m.ttft_bounds_ms},
                  {"ttft_counts", m.ttft_counts},
                  {"itl_bounds_ms", m.itl_bounds_ms},
                  {"itl_counts", m.itl_counts},
                  {"latency_ms",
                   {{"ttft_p50", m.ttft_p50_ms},
                    {"ttft_p99", m.ttft_p99_ms},
                    {"itl_p50", m.itl_p50_ms},
                    {"itl_p99", m.itl_p99_ms},
                    {"queue_p50", m.queue_p50_ms},
                    {"queue_p99", m.queue_p99_ms}}},
                  {"steps", steps}};
    // kv_blocks counts the full group (layers attending to the whole context); a model with
    // sliding-window layers also has window_kv_blocks, their own pool (absent otherwise).
    if (m.window_blocks.total > 0) {
      model["window_kv_blocks"] = {{"total", m.window_blocks.total},
                                   {"used", m.window_blocks.used},
                                   {"free", m.window_blocks.free},
                                   {"cached", m.window_blocks.cached},
                                   {"window", m.kv_window}};
    }
    out["models"].push_back(std::move(model));
  }
  return Dump(out);
}

bool WebFrontend::Handle(const HttpRequest& req, const std::shared_ptr<HttpReply>& reply) {
  if (req.path == "/" || req.path == "/index.html") {
    if (req.method != "GET")
      return reply->Send({405, "text/plain", "method not allowed\n", {}}), true;
    reply->Send({200,
                 "text/html; charset=utf-8",
                 std::string(kIndexHtml),
                 {{"Cache-Control", "no-cache"},
                  {"X-Content-Type-Options", "nosniff"},
                  {"Content-Security-Policy",
                   "default-src 'self'; img-src 'self' data:; style-src 'unsafe-inline'; "
                   "script-src 'unsafe-inline'"}}});
    return true;
  }
  if (req.path == "/inflight/snapshot") {
    if (req.method != "GET")
      return reply->Send({405, "text/plain", "method not allowed\n", {}}), true;
    reply->Send({200,
                 "application/json",
                 SnapshotJson(server_->LiveSnapshots()),
                 {{"Cache-Control", "no-cache"}}});
    return true;
  }
  if (req.path != "/inflight/live") return false;
  if (req.method != "GET")
    return reply->Send({405, "text/plain", "method not allowed\n", {}}), true;
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_)
    return reply->Send({503, "text/plain", "shutting down\n", {{"Retry-After", "1"}}}), true;
  if (dashboards_.size() >= kMaxDashboards) {
    reply->Send({503, "text/plain", "too many live dashboards\n", {{"Retry-After", "5"}}});
    return true;
  }
  reply->StartStream(200, "text/event-stream; charset=utf-8");
  reply->Write("data: " + SnapshotJson(server_->LiveSnapshots()) + "\n\n");
  dashboards_.push_back(reply);
  if (!thread_.joinable()) thread_ = std::thread([this] { Broadcast(); });
  return true;
}

void WebFrontend::Broadcast() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, kPeriod);
    if (stop_ || dashboards_.empty()) continue;
    lock.unlock();
    const std::string event = "data: " + SnapshotJson(server_->LiveSnapshots()) + "\n\n";
    lock.lock();
    // A dashboard whose client left, or that reads too slowly, is dropped (Write says so).
    std::erase_if(dashboards_,
                  [&](const std::shared_ptr<HttpReply>& r) { return !r->Write(event); });
  }
  for (const auto& r : dashboards_) r->EndStream();
  dashboards_.clear();
}

void WebFrontend::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& r : dashboards_) r->EndStream();
  dashboards_.clear();
}

}  // namespace inflight::frontends
