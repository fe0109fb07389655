// Optional fields of a client's JSON object read without exceptions (nlohmann's .value()
// throws when a field has another type than its default: a client's "is_error": "yes" must be
// a 400, not an exception).
#pragma once

#include <string>

namespace inflight::frontends {

// The field as a string; "" when absent or not a string.
template <typename Json>
std::string StringField(const Json& o, const char* key) {
  if (!o.is_object()) return "";
  auto it = o.find(key);
  return it != o.end() && it->is_string() ? it->template get<std::string>() : std::string();
}

// Whether the field is the boolean true.
template <typename Json>
bool TrueField(const Json& o, const char* key) {
  if (!o.is_object()) return false;
  auto it = o.find(key);
  return it != o.end() && it->is_boolean() && it->template get<bool>();
}

}  // namespace inflight::frontends
