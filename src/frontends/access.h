// The security settings every frontend applies the same way: who may call (API keys,
// restricted groups), what a tenant may use (concurrency, tokens per minute, cache salt) and
// how large one request may be.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "serving/auth.h"
#include "serving/infer.h"
#include "serving/tenancy.h"

namespace inflight::frontends {

struct AccessPolicy {
  std::shared_ptr<const serving::Authenticator> auth = std::make_shared<serving::Authenticator>();
  std::shared_ptr<serving::TenantLimits> limits = std::make_shared<serving::TenantLimits>();
  serving::RequestLimits request_limits;
};

// A caller's tenant: its key's, or "addr:<address>" when it needed none.
std::string TenantOf(const serving::Principal& p, std::string_view remote_address);

struct Admitted {
  std::shared_ptr<serving::TenantLimits::Ticket> ticket;  // null: refused (429)
  int64_t retry_after_s = 0;
  std::string reason;
};

// Admits one inference request of `tenant`: takes a concurrency slot and hands the request
// a usage meter, and replaces its cache_salt parameter by the effective one.
Admitted AdmitInference(const AccessPolicy& policy, const std::string& tenant,
                        serving::InferRequest* r);

// `sink`, holding `ticket` until the final response has been delivered.
serving::ResponseSink HoldUntilFinal(std::shared_ptr<serving::TenantLimits::Ticket> ticket,
                                     serving::ResponseSink sink);

}  // namespace inflight::frontends
