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
  j["type"] = e.stored ? "stored" : "removed";
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

}  // namespace

HttpResponse KvEventsResponse(const serving::Server& server, const std::string& model,
                              const std::string& version, const std::string& query) {
  uint64_t after = 0, max = 1000;
  if (!QueryNumber(query, "after", &after) || !QueryNumber(query, "max", &max))
    return ErrorResponse(InvalidArgumentError("'after' and 'max' must be non-negative integers"));
  max = std::clamp<uint64_t>(max, 1, 10000);
  auto page = server.KvEvents(model, version, after, static_cast<size_t>(max));
  if (!page.ok()) return ErrorResponse(page.status());
  json events = json::array();
  for (const serving::KvEventRecord& e : page->events) events.push_back(RecordJson(e, true));
  return {200,
          "application/json",
          Dump(json{{"events", std::move(events)},
                    {"gap", page->gap},
                    {"last_id", page->last_id},
                    {"dropped", page->dropped}}),
          {}};
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
