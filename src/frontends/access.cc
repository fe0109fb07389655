#include "frontends/access.h"

#include <mutex>

namespace inflight::frontends {

std::string TenantOf(const serving::Principal& p, std::string_view remote_address) {
  if (!p.tenant.empty()) return p.tenant;
  return "addr:" + std::string(remote_address);
}

Admitted AdmitInference(const AccessPolicy& policy, const std::string& tenant,
                        serving::InferRequest* r) {
  Admitted out;
  auto a = policy.limits->Admit(tenant);
  if (!a.ticket) {
    out.retry_after_s = a.retry_after_s;
    out.reason = std::move(a.reason);
    return out;
  }
  out.ticket = std::move(a.ticket);
  r->usage = out.ticket->usage();
  r->tenant = tenant;
  if (policy.limits->options().cache_salt_per_key) {
    std::string client_salt;
    if (auto it = r->parameters.find("cache_salt"); it != r->parameters.end()) {
      const std::string* s = std::get_if<std::string>(&it->second);
      if (!s) return out;  // not a string: the LLM backend refuses it
      client_salt = *s;
    }
    // Anonymous callers (no keys) share the unsalted cache unless they salt it themselves.
    const std::string key_tenant = tenant.rfind("addr:", 0) == 0 ? std::string() : tenant;
    const std::string salt = policy.limits->EffectiveCacheSalt(key_tenant, client_salt);
    if (!salt.empty()) r->parameters["cache_salt"] = salt;
  }
  return out;
}

serving::ResponseSink HoldUntilFinal(std::shared_ptr<serving::TenantLimits::Ticket> ticket,
                                     serving::ResponseSink sink) {
  struct Hold {
    std::mutex mu;
    std::shared_ptr<serving::TenantLimits::Ticket> ticket;
  };
  auto hold = std::make_shared<Hold>();
  hold->ticket = std::move(ticket);
  return [hold, sink = std::move(sink)](serving::InferResponse&& r) {
    const bool final = r.final;
    sink(std::move(r));
    if (final) {
      std::lock_guard<std::mutex> lock(hold->mu);
      hold->ticket.reset();
    }
  };
}

}  // namespace inflight::frontends
