// What one tenant (an API key, or a client address without keys) may use: concurrent
// requests and tokens per minute (429 with Retry-After beyond), the per-request limits every
// client gets (n, log-probs, prompt length, stop words), and the cache salt that keeps
// tenants' prefix-cache blocks apart. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "serving/infer.h"

namespace inflight::serving {

// Limits on one request's size, for every client (0: no limit beyond the model's own).
struct RequestLimits {
  int64_t max_n = 128;            // OpenAI n, num_return_sequences
  int64_t max_logprobs = 20;      // OpenAI logprobs / top_logprobs, num_top_logprobs
  int64_t max_prompt_tokens = 0;  // 0: the model's context length
  int64_t max_stop_words = 64;    // stop strings / stop_words_list entries
};

struct TenantLimitOptions {
  int64_t max_concurrent = 0;       // requests in flight per tenant; 0: unlimited
  int64_t tokens_per_minute = 0;    // prompt + generated tokens per tenant; 0: unlimited
  bool cache_salt_per_key = false;  // every tenant's prefix cache is its own
};

class TenantLimits : public std::enable_shared_from_this<TenantLimits> {
 public:
  explicit TenantLimits(TenantLimitOptions options = {});

  // Held while a request runs: releases its concurrency slot and charges its tokens (the
  // meter the LLM backend fills) when destroyed.
  class Ticket {
   public:
    ~Ticket();
    const std::shared_ptr<UsageMeter>& usage() const { return usage_; }

   private:
    friend class TenantLimits;
    Ticket(std::shared_ptr<TenantLimits> owner, std::string tenant)
        : owner_(std::move(owner)), tenant_(std::move(tenant)) {}
    std::shared_ptr<TenantLimits> owner_;
    std::string tenant_;
    std::shared_ptr<UsageMeter> usage_ = std::make_shared<UsageMeter>();
  };

  struct Admission {
    std::shared_ptr<Ticket> ticket;  // null: refused
    int64_t retry_after_s = 0;
    std::string reason;
  };
  // A ticket, or why not and when to come back. Only for a TenantLimits held by a shared_ptr.
  Admission Admit(const std::string& tenant);

  // The salt a request's prefix-cache blocks are keyed under: the client's, and in
  // per-key mode the tenant's in front of it.
  std::string EffectiveCacheSalt(const std::string& tenant, const std::string& client_salt) const;

  const TenantLimitOptions& options() const { return options_; }
  bool limited() const { return options_.max_concurrent > 0 || options_.tokens_per_minute > 0; }

 private:
  struct State {
    int64_t in_flight = 0;
    double tokens = 0;  // the bucket; below 0 after a request overdrew it
    std::chrono::steady_clock::time_point refilled;
  };
  void Refill(State* s, std::chrono::steady_clock::time_point now) const;
  void Release(const std::string& tenant, int64_t tokens);
  void ForgetIdleLocked(std::chrono::steady_clock::time_point now);

  const TenantLimitOptions options_;
  std::mutex mu_;
  std::map<std::string, State> tenants_;
};

// The engine's 64-bit salt for a cache_salt string: a SHA-256 prefix, so a client cannot
// choose a salt that collides with another tenant's. 0 for "".
uint64_t CacheSaltKey(const std::string& salt);
inline constexpr size_t kMaxCacheSaltBytes = 1024;

}  // namespace inflight::serving
