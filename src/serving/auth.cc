#include "serving/auth.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <cctype>
#include <fstream>
#include <sstream>

namespace inflight::serving {
namespace {

constexpr std::pair<ApiGroup, std::string_view> kGroupNames[] = {
    {ApiGroup::kHealth, "health"},
    {ApiGroup::kMetadata, "metadata"},
    {ApiGroup::kInference, "inference"},
    {ApiGroup::kSharedMemory, "shared-memory"},
    {ApiGroup::kModelConfig, "model-config"},
    {ApiGroup::kModelRepository, "model-repository"},
    {ApiGroup::kStatistics, "statistics"},
    {ApiGroup::kTrace, "trace"},
    {ApiGroup::kLogging, "logging"},
    {ApiGroup::kMetrics, "metrics"},
};

std::array<unsigned char, 32> Sha256(std::string_view s) {
  std::array<unsigned char, 32> d{};
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), d.data());
  return d;
}

std::string Trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The token of "Bearer <token>" (scheme case-insensitive); "" otherwise.
std::string_view BearerToken(std::string_view authorization) {
  constexpr std::string_view kScheme = "bearer ";
  if (authorization.size() <= kScheme.size()) return {};
  for (size_t i = 0; i < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != kScheme[i]) return {};
  }
  authorization.remove_prefix(kScheme.size());
  while (!authorization.empty() && authorization.front() == ' ') authorization.remove_prefix(1);
  while (!authorization.empty() && authorization.back() == ' ') authorization.remove_suffix(1);
  return authorization;
}

}  // namespace

std::string_view ApiGroupName(ApiGroup g) {
  for (const auto& [group, name] : kGroupNames) {
    if (group == g) return name;
  }
  return "?";
}

StatusOr<std::set<ApiGroup>> ParseApiGroups(std::string_view list) {
  std::set<ApiGroup> out;
  if (Trim(list) == "none") return out;
  std::stringstream in{std::string(list)};
  std::string item;
  while (std::getline(in, item, ',')) {
    const std::string name = Lower(Trim(item));
    if (name.empty()) continue;
    bool found = false;
    for (const auto& [group, n] : kGroupNames) {
      if (n == name) out.insert(group), found = true;
    }
    if (!found) {
      return InvalidArgumentError(
          "unknown API group '" + name +
          "' (health, metadata, inference, shared-memory, model-config, model-repository, "
          "statistics, trace, logging, metrics)");
    }
  }
  if (out.empty()) return InvalidArgumentError("no API group named in '" + std::string(list) + "'");
  return out;
}

StatusOr<RestrictedApi> ParseRestrictedApi(std::string_view spec) {
  const size_t colon = spec.find(':');
  const size_t eq = colon == std::string_view::npos ? colon : spec.find('=', colon);
  if (colon == std::string_view::npos || eq == std::string_view::npos) {
    return InvalidArgumentError("restricted API '" + std::string(spec) +
                                "': expected GROUPS:KEY=VALUE");
  }
  auto groups = ParseApiGroups(spec.substr(0, colon));
  if (!groups.ok()) return groups.status();
  RestrictedApi r;
  r.groups = std::move(*groups);
  r.header = Lower(Trim(spec.substr(colon + 1, eq - colon - 1)));
  r.value = Trim(spec.substr(eq + 1));
  if (r.header.empty() || r.value.empty()) {
    return InvalidArgumentError("restricted API '" + std::string(spec) +
                                "': KEY and VALUE must not be empty");
  }
  for (char c : r.header) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') {
      return InvalidArgumentError("restricted API: header name '" + r.header +
                                  "' may hold letters, digits, '-' and '_'");
    }
  }
  if (r.header == "authorization")
    return InvalidArgumentError("restricted API: the header cannot be 'authorization'");
  return r;
}

StatusOr<std::vector<ApiKey>> ReadApiKeyFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFoundError("cannot open the key file '" + path + "'");
  std::vector<ApiKey> out;
  std::string line;
  while (std::getline(in, line)) {
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    ApiKey k;
    if (!(words >> k.key)) continue;
    words >> k.tenant;
    out.push_back(std::move(k));
  }
  if (out.empty()) return InvalidArgumentError("the key file '" + path + "' holds no key");
  return out;
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  const auto da = Sha256(a), db = Sha256(b);
  return CRYPTO_memcmp(da.data(), db.data(), da.size()) == 0;
}

Authenticator::Authenticator(AuthOptions options) : options_(std::move(options)) {
  auto add = [&](const ApiKey& k, bool admin) {
    StoredKey s{Sha256(k.key), k.tenant, admin};
    if (s.tenant.empty()) {
      static const char* kHex = "0123456789abcdef";
      s.tenant = "key-";
      for (int i = 0; i < 4; ++i) s.tenant += {kHex[s.digest[i] >> 4], kHex[s.digest[i] & 15]};
    }
    keys_.push_back(std::move(s));
  };
  for (const ApiKey& k : options_.api_keys) add(k, false);
  for (const ApiKey& k : options_.admin_keys) add(k, true);
}

const Authenticator::StoredKey* Authenticator::FindKey(std::string_view presented) const {
  // Every stored key is compared, so the time does not tell which (or whether one) matched.
  const auto digest = Sha256(presented);
  const StoredKey* found = nullptr;
  for (const StoredKey& k : keys_) {
    const bool match = CRYPTO_memcmp(digest.data(), k.digest.data(), digest.size()) == 0;
    if (match && !found) found = &k;
  }
  return found;
}

std::variant<Principal, AuthFailure> Authenticator::Check(Protocol protocol, ApiGroup group,
                                                          std::string_view authorization,
                                                          const HeaderLookup& header,
                                                          bool server_probe) const {
  const auto& restricted =
      protocol == Protocol::kHttp ? options_.http_restricted : options_.grpc_restricted;
  const StoredKey* key = nullptr;
  if (keys_required()) {
    const std::string_view token = BearerToken(authorization);
    if (!token.empty()) key = FindKey(token);
  }
  for (const RestrictedApi& r : restricted) {
    if (r.groups.count(group) == 0) continue;
    const std::optional<std::string> presented = header(r.header);
    if (presented && ConstantTimeEquals(*presented, r.value)) {
      return Principal{key ? key->tenant : std::string(), true};
    }
    return key ? AuthFailure::kForbidden : AuthFailure::kUnauthenticated;
  }
  if (!keys_required()) return Principal{};
  if (server_probe && !options_.health_needs_key) {
    return key ? Principal{key->tenant, key->admin} : Principal{};
  }
  if (!key) return AuthFailure::kUnauthenticated;
  if (!key->admin && options_.admin_groups.count(group) != 0) return AuthFailure::kForbidden;
  return Principal{key->tenant, key->admin};
}

}  // namespace inflight::serving
