#include "frontends/kv_events_http.h"

#include <algorithm>
#include <charconv>
#include <nlohmann/json.hpp>

#include "frontends/kserve_json.h"

namespace inflight::frontends {
namespace {

using nlohmann::json;

json RecordJson(const serving::KvEventRecord& e, bool with_id) {
  json j = json::object();
  if (with_id) j["event_id"] = e.id;
  j["type"] = e.stored ? "stored" : e.updated ? "updated" : "removed";
  if (e.updated) j["cache_level"] = e.cache_level;
  j["group"] = e.group;
  j["block_hash"] = std::to_string(e.block_hash);
  if (e.stored) {
    j["parent_hash"] = std::to_string(e.parent_hash);
    j["tokens"] = e.tokens;
    j["priority"] = e.priority;
    j["cache_level"] = e.cache_level;
  }
  return j;
}

int StatusOf(const Status& s) {
  switch (s.code()) {
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kUnimplemented:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kInvalidArgument:
      return 400;
    default:
      return 503;
  }
}

HttpResponse ErrorResponse(const Status& s) {
  return {StatusOf(s), "application/json", Dump(json{{"error", s.message()}}), {}};
}

// A non-negative integer query parameter; false when present and malformed.
bool QueryNumber(const std::string& query, const std::string& key, uint64_t* out) {
  size_t at = 0;
  while (at <= query.size()) {
    size_t end = query.find('&', at);
    if (end == std::string::npos) end = query.size();
    const std::string_view pair(query.data() + at, end - at);
    if (pair.substr(0, key.size() + 1) == key + "=") {
      const std::string_view v = pair.substr(key.size() + 1);
      auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), *out);
      return ec == std::errc() && p == v.data() + v.size() && !v.empty();
    }
    at = end + 1;
  }
  return true;
}

json PageJson(const serving::KvEventsPage& page) {
  json events = json::array();
  for (const serving::KvEventRecord& e : page.events) events.push_back(RecordJson(e, true));
  return {{"events", std::move(events)},
          {"gap", page.gap},
          {"last_id", page.last_id},
          {"dropped", page.dropped}};
}

}  // namespace

HttpResponse KvEventsResponse(const serving::Server& server, const std::string& model,
                              const std::string& version, const std::string& query) {
  uint64_t after = 0, max = 1000;
  if (!QueryNumber(query, "after", &after) || !QueryNumber(query, "max", &max))
    return ErrorResponse(InvalidArgumentError("'after' and 'max' must be non-negative integers"));
  max = std::clamp<uint64_t>(max, 1, 10000);
  auto page = server.KvEvents(model, version, after, static_cast<size_t>(max));
  if (!page.ok()) return ErrorResponse(page.status());
  return {200, "application/json", Dump(PageJson(*page)), {}};
}

bool KvEventsStreamed(const std::string& query) {
  for (size_t at = 0; at <= query.size();) {
    size_t end = query.find('&', at);
    if (end == std::string::npos) end = query.size();
    if (std::string_view(query).substr(at, end - at) == "stream=true") return true;
    at = end + 1;
  }
  return false;
}

void KvEventStreams::Start(const std::shared_ptr<HttpReply>& reply, const std::string& model,
                           const std::string& version, const std::string& query) {
  uint64_t after = 0;
  if (!QueryNumber(query, "after", &after))
    return reply->Send(
        ErrorResponse(InvalidArgumentError("'after' must be a non-negative integer")));
  // Errors (unknown model, events off) before the stream starts, as a plain answer.
  if (auto probe = server_->KvEvents(model, version, after, 1); !probe.ok())
    return reply->Send(ErrorResponse(probe.status()));
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_) return reply->Send({503, "text/plain", "shutting down\n", {{"Retry-After", "1"}}});
  if (streams_.size() >= kMaxStreams)
    return reply->Send({503, "text/plain", "too many KV event streams\n", {{"Retry-After", "5"}}});
  reply->StartStream(200, "text/event-stream; charset=utf-8");
  streams_.push_back({reply, model, version, after, std::chrono::steady_clock::now()});
  if (!thread_.joinable()) thread_ = std::thread([this] { Poll(); });
  cv_.notify_all();
}

bool KvEventStreams::Next(Stream& s, std::string* message) const {
  message->clear();
  auto page = server_->KvEvents(s.model, s.version, s.cursor, 1000);
  if (!page.ok()) {
    *message = "data: " + Dump(json{{"error", page.status().message()}}) + "\n\n";
    return false;
  }
  if (page->events.empty() && !page->gap) return true;
  if (!page->events.empty()) s.cursor = page->events.back().id;
  *message = "data: " + Dump(PageJson(*page)) + "\n\n";
  return true;
}

void KvEventStreams::Poll() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, kPeriod);
    if (stop_) break;
    std::string message;
    // A stream whose client left, or that reads too slowly (Write says so), is dropped.
    const auto now = std::chrono::steady_clock::now();
    std::erase_if(streams_, [&](Stream& s) {
      const bool go_on = Next(s, &message);
      if (message.empty() && now - s.last_write >= kKeepAlive) message = ": keep-alive\n\n";
      if (!message.empty()) {
        if (!s.reply->Write(message)) return true;
        s.last_write = now;
      }
      if (!go_on) s.reply->EndStream();
      return !go_on;
    });
  }
  for (Stream& s : streams_) s.reply->EndStream();
  streams_.clear();
}

void KvEventStreams::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

HttpResponse KvBlocksResponse(const serving::Server& server, const std::string& model,
                              const std::string& version) {
  auto listing = server.KvCacheBlocks(model, version);
  if (!listing.ok()) return ErrorResponse(listing.status());
  json blocks = json::array();
  for (const serving::KvEventRecord& b : listing->blocks) blocks.push_back(RecordJson(b, false));
  return {200,
          "application/json",
          Dump(json{{"last_event_id", listing->last_event_id}, {"blocks", std::move(blocks)}}),
          {}};
}

}  // namespace inflight::frontends
