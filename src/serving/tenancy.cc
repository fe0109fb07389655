#include "serving/tenancy.h"

#include <openssl/sha.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace inflight::serving {

TenantLimits::TenantLimits(TenantLimitOptions options) : options_(options) {}

TenantLimits::Ticket::~Ticket() { owner_->Release(tenant_, usage_->tokens()); }

void TenantLimits::Refill(State* s, std::chrono::steady_clock::time_point now) const {
  if (options_.tokens_per_minute <= 0) return;
  const double per_s = static_cast<double>(options_.tokens_per_minute) / 60.0;
  const double elapsed = std::chrono::duration<double>(now - s->refilled).count();
  s->tokens = std::min<double>(static_cast<double>(options_.tokens_per_minute),
                               s->tokens + elapsed * per_s);
  s->refilled = now;
}

void TenantLimits::ForgetIdleLocked(std::chrono::steady_clock::time_point now) {
  // A tenant with nothing running and a full bucket is the same as a new one: forget it, so
  // many client addresses cannot grow the table without bound.
  for (auto it = tenants_.begin(); it != tenants_.end();) {
    Refill(&it->second, now);
    const bool full = options_.tokens_per_minute <= 0 ||
                      it->second.tokens >= static_cast<double>(options_.tokens_per_minute);
    it = it->second.in_flight == 0 && full ? tenants_.erase(it) : std::next(it);
  }
}

TenantLimits::Admission TenantLimits::Admit(const std::string& tenant) {
  Admission a;
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  if (tenants_.size() >= 4096) ForgetIdleLocked(now);
  auto [it, fresh] = tenants_.try_emplace(tenant);
  State& s = it->second;
  if (fresh) {
    s.tokens = static_cast<double>(options_.tokens_per_minute);
    s.refilled = now;
  }
  Refill(&s, now);
  if (options_.max_concurrent > 0 && s.in_flight >= options_.max_concurrent) {
    a.retry_after_s = 1;
    a.reason = "too many concurrent requests for this API key (limit " +
               std::to_string(options_.max_concurrent) + ")";
    return a;
  }
  if (options_.tokens_per_minute > 0 && s.tokens <= 0) {
    const double per_s = static_cast<double>(options_.tokens_per_minute) / 60.0;
    a.retry_after_s =
        std::max<int64_t>(1, static_cast<int64_t>(std::ceil((1.0 - s.tokens) / per_s)));
    a.reason = "token rate limit of " + std::to_string(options_.tokens_per_minute) +
               " tokens per minute reached for this API key";
    return a;
  }
  ++s.in_flight;
  a.ticket.reset(new Ticket(shared_from_this(), tenant));
  return a;
}

void TenantLimits::Release(const std::string& tenant, int64_t tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tenants_.find(tenant);
  if (it == tenants_.end()) return;
  Refill(&it->second, std::chrono::steady_clock::now());
  --it->second.in_flight;
  if (options_.tokens_per_minute > 0) it->second.tokens -= static_cast<double>(tokens);
}

std::string TenantLimits::EffectiveCacheSalt(const std::string& tenant,
                                             const std::string& client_salt) const {
  if (!options_.cache_salt_per_key || tenant.empty()) return client_salt;
  // Unit separator: no tenant name holds one, so (tenant, salt) pairs map one to one.
  return tenant + '\x1f' + client_salt;
}

uint64_t CacheSaltKey(const std::string& salt) {
  if (salt.empty()) return 0;
  unsigned char d[SHA256_DIGEST_LENGTH];
  const std::string keyed = "inflight cache salt\n" + salt;
  SHA256(reinterpret_cast<const unsigned char*>(keyed.data()), keyed.size(), d);
  uint64_t k = 0;
  std::memcpy(&k, d, sizeof k);
  return k == 0 ? 1 : k;
}

}  // namespace inflight::serving
