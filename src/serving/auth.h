// Who may call what: API keys (public and admin), Triton's restricted API groups, and the
// tenant a request belongs to. Protocol-agnostic: the HTTP and gRPC frontends name the
// endpoint's group and hand over the presented credentials; this class decides.
//
// Rules, in order:
//  1. A group restricted for this protocol (--http-restricted-api / --grpc-restricted-protocol
//     GROUPS:KEY=VALUE) needs header/metadata KEY with VALUE; that grants it alone.
//  2. With API keys configured, every other call needs `Authorization: Bearer <key>` with a
//     public or an admin key, and the admin groups (model control, metrics, ... by default)
//     need an admin key.
//  3. With no keys and no restriction, everything is open (the tenant is anonymous).
//  The server's own liveness and readiness probes (not a model's readiness) are open without
//  a key unless health_needs_key (Kubernetes probes carry none); a restriction of the health
//  group (rule 1) still applies to them.
// Keys are kept as SHA-256 digests and compared in constant time.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/status.h"

namespace inflight::serving {

// Triton's API groups, plus `metrics` (the Prometheus port and the live dashboard).
enum class ApiGroup {
  kHealth,
  kMetadata,
  kInference,
  kSharedMemory,
  kModelConfig,
  kModelRepository,
  kStatistics,
  kTrace,
  kLogging,
  kMetrics,
};
std::string_view ApiGroupName(ApiGroup g);
// "model-repository,model-config" -> groups; INVALID_ARGUMENT names an unknown one.
StatusOr<std::set<ApiGroup>> ParseApiGroups(std::string_view list);

// One --http-restricted-api / --grpc-restricted-protocol value: GROUPS:KEY=VALUE.
struct RestrictedApi {
  std::set<ApiGroup> groups;
  std::string header;  // lower case
  std::string value;
};
StatusOr<RestrictedApi> ParseRestrictedApi(std::string_view spec);

struct ApiKey {
  std::string key;
  std::string tenant;  // "" -> derived from the key's digest ("key-1a2b3c4d")
};

// Reads "KEY [TENANT]" lines ('#' starts a comment). INVALID_ARGUMENT for a file that cannot
// be read or holds no key; NOT_FOUND when it does not exist.
StatusOr<std::vector<ApiKey>> ReadApiKeyFile(const std::string& path);

struct AuthOptions {
  std::vector<ApiKey> api_keys;    // public: data plane
  std::vector<ApiKey> admin_keys;  // everything
  std::set<ApiGroup> admin_groups = {ApiGroup::kModelRepository, ApiGroup::kSharedMemory,
                                     ApiGroup::kStatistics,      ApiGroup::kTrace,
                                     ApiGroup::kLogging,         ApiGroup::kMetrics};
  std::vector<RestrictedApi> http_restricted, grpc_restricted;
  bool health_needs_key = false;  // --api-key-health: server probes need a key too
};

enum class Protocol { kHttp, kGrpc };

struct Principal {
  std::string tenant;  // "" when no key was needed
  bool admin = false;
};

enum class AuthFailure {
  kUnauthenticated,  // no or unknown credential: 401 / UNAUTHENTICATED
  kForbidden,        // a valid key without the right to this group: 403 / PERMISSION_DENIED
};

class Authenticator {
 public:
  explicit Authenticator(AuthOptions options = {});

  // Keys are configured (every call needs one).
  bool keys_required() const { return !keys_.empty(); }
  // Looks up a header (HTTP) or metadata entry (gRPC) by lower-case name; nullopt if absent.
  using HeaderLookup = std::function<std::optional<std::string>(std::string_view)>;
  // The principal, or why not. `authorization` is the Authorization value ("" if absent).
  // `server_probe`: the server's liveness/readiness (group kHealth), see the rules above.
  std::variant<Principal, AuthFailure> Check(Protocol protocol, ApiGroup group,
                                             std::string_view authorization,
                                             const HeaderLookup& header,
                                             bool server_probe = false) const;

 private:
  struct StoredKey {
    std::array<unsigned char, 32> digest;
    std::string tenant;
    bool admin;
  };
  const StoredKey* FindKey(std::string_view presented) const;

  AuthOptions options_;
  std::vector<StoredKey> keys_;
};

// Equal contents in time that depends only on the lengths' maximum, not on where they differ.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

}  // namespace inflight::serving
