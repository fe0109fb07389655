// OpenAI's Responses API (POST /v1/responses, GET and DELETE /v1/responses/{id}): input
// items (messages, function calls and their outputs), instructions, function tools, reasoning
// effort, text formats, previous_response_id over a bounded in-memory store per tenant, and
// streaming in the API's own events (response.created ... response.completed). A request
// runs as a one-choice chat completion (openai_frontend.h) whose output this encoder writes.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "frontends/chat_encoder.h"
#include "frontends/openai_json.h"

namespace inflight::frontends {

struct ResponseStoreLimits {
  size_t max_entries = 4096;
  size_t max_bytes = size_t{256} << 20;
  size_t max_tenant_entries = 1024;
  size_t max_tenant_bytes = size_t{64} << 20;
};

// Stored responses, per tenant, for previous_response_id and GET: each holds the
// conversation up to and including its output (as chat messages) and the response object.
// Bounded by entries and bytes in all and per tenant (one tenant's responses evict its own
// oldest first, never another's until the whole store is full); the oldest goes first.
// Thread-safe.
class ResponseStore {
 public:
  struct Entry {
    nlohmann::ordered_json conversation;  // chat messages
    nlohmann::ordered_json response;      // the response object
  };
  using Limits = ResponseStoreLimits;
  ResponseStore() : limits_() {}
  explicit ResponseStore(Limits limits) : limits_(limits) {}

  void Put(const std::string& tenant, const std::string& id, Entry entry);
  // Null when unknown (never stored, evicted, deleted, or another tenant's).
  std::shared_ptr<const Entry> Get(const std::string& tenant, const std::string& id) const;
  bool Delete(const std::string& tenant, const std::string& id);
  size_t size() const;

 private:
  using Key = std::pair<std::string, std::string>;  // tenant, id
  struct Stored {
    std::shared_ptr<const Entry> entry;
    size_t bytes;
    std::list<Key>::iterator age;
  };
  struct Usage {
    size_t entries = 0, bytes = 0;
  };
  void EraseLocked(std::map<Key, Stored>::iterator it);

  const Limits limits_;
  mutable std::mutex mu_;
  std::map<Key, Stored> entries_;
  std::list<Key> oldest_first_;
  std::map<std::string, Usage> tenants_;
  size_t bytes_ = 0;
};

// What a Responses request asked for beyond the chat request it becomes: echoed in the
// response object, and what to store.
struct ResponsesRequest {
  OpenAiRequest chat;
  nlohmann::ordered_json echo;          // instructions, tools, tool_choice, ... as given
  nlohmann::ordered_json conversation;  // chat messages without the instructions
  bool store = true;
};

// INVALID_ARGUMENT (or NOT_FOUND for an unknown previous_response_id) with *param naming the
// field in the Responses API's terms.
StatusOr<ResponsesRequest> ParseResponsesRequest(std::string_view body, const ResponseStore& store,
                                                 const std::string& tenant, std::string* param);

class ResponsesEncoder : public ChatEncoder {
 public:
  ResponsesEncoder(ResponsesRequest request, std::shared_ptr<ResponseStore> store,
                   std::string tenant);
  const std::string& id() const override { return id_; }
  HttpResponse Error(const Status& s, const std::string& param) const override;
  HttpResponse RateLimited(const std::string& message, int64_t retry_after_s) const override;
  void StartStream(HttpReply& reply, int64_t prompt_tokens) override;
  void Delta(HttpReply& reply, const chat::OutputDelta& delta) override;
  void Finish(HttpReply& reply, const ChatResult& result, bool streaming) override;
  void Fail(HttpReply& reply, const Status& s, bool streaming) override;

 private:
  enum class Kind { kNone, kReasoning, kMessage, kCall };
  nlohmann::ordered_json Response(const char* status) const;
  nlohmann::ordered_json Usage(const ChatResult& r) const;
  void Event(HttpReply& reply, const char* type, nlohmann::ordered_json data);
  void Open(HttpReply& reply, Kind kind, const chat::ToolCallDelta* call);
  void Close(HttpReply& reply);

  ResponsesRequest request_;
  std::shared_ptr<ResponseStore> store_;
  std::string tenant_;
  std::string id_;
  int64_t created_ = 0;
  int64_t sequence_ = 0;
  // Streaming: the item being written, and the finished ones.
  Kind open_ = Kind::kNone;
  nlohmann::ordered_json item_;
  std::string text_;
  nlohmann::ordered_json output_ = nlohmann::ordered_json::array();
  nlohmann::ordered_json usage_;
};

}  // namespace inflight::frontends
