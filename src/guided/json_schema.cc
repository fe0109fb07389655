#include "guided/json_schema.h"

#include <climits>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "guided/regex_dfa.h"

namespace inflight::guided {
namespace {

// ordered_json: properties are emitted in the schema text's order.
using json = nlohmann::ordered_json;

constexpr int kMaxDepth = 32;
constexpr int64_t kIntLimit = 9999999999999999;  // 16 digits
constexpr const char* kComma = ",[ ]?";
constexpr const char* kColon = ":[ ]?";
// One character of a JSON string: anything but '"', '\' and controls, or an escape.
constexpr const char* kStringChar = R"(([^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4}))";
constexpr const char* kNumber = R"(-?(0|[1-9][0-9]{0,15})(\.[0-9]{1,16})?([eE][+-]?[0-9]{1,2})?)";
constexpr const char* kInteger = R"(-?(0|[1-9][0-9]{0,15}))";

std::string Digits(int64_t v) { return std::to_string(v); }

// Integers with the decimal strings lo..hi, both of the same length n (no leading zeros
// beyond what lo and hi have).
std::string SameLength(const std::string& lo, const std::string& hi) {
  if (lo.empty()) return "";
  if (lo == hi) return lo;
  if (lo[0] == hi[0]) return std::string(1, lo[0]) + SameLength(lo.substr(1), hi.substr(1));
  const size_t rest = lo.size() - 1;
  const std::string lo_rest = lo.substr(1), hi_rest = hi.substr(1);
  const bool lo_zeros = lo_rest.find_first_not_of('0') == std::string::npos;
  const bool hi_nines = hi_rest.find_first_not_of('9') == std::string::npos;
  std::vector<std::string> parts;
  char first = lo[0], last = hi[0];
  if (!lo_zeros) {
    parts.push_back(std::string(1, lo[0]) + SameLength(lo_rest, std::string(rest, '9')));
    ++first;
  }
  std::string tail;
  if (!hi_nines) {
    tail = std::string(1, hi[0]) + SameLength(std::string(rest, '0'), hi_rest);
    --last;
  }
  if (first <= last) {
    std::string mid =
        first == last ? std::string(1, first) : std::string("[") + first + "-" + last + "]";
    if (rest > 0) mid += "[0-9]{" + std::to_string(rest) + "}";
    parts.push_back(mid);
  }
  if (!tail.empty()) parts.push_back(tail);
  std::string out = "(";
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? "|" : "") + parts[i];
  return out + ")";
}

std::string NonNegativeRange(int64_t a, int64_t b) {
  std::vector<std::string> parts;
  int64_t low_of_len = 0, high_of_len = 9;
  for (int len = 1; len <= 17 && low_of_len <= b; ++len) {
    const int64_t lo = std::max(a, low_of_len), hi = std::min(b, high_of_len);
    if (lo <= hi) parts.push_back(SameLength(Digits(lo), Digits(hi)));
    low_of_len = len == 1 ? 10 : low_of_len * 10;
    high_of_len = high_of_len * 10 + 9;
  }
  std::string out = "(";
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? "|" : "") + parts[i];
  return out + ")";
}

// A count keyword (minItems, maxLength, ...): its value when a whole number within
// [0, 1e6], `absent` when missing, kBadCount otherwise (a client's 1e30 must not reach an
// integer conversion).
constexpr int64_t kBadCount = INT64_MIN;
int64_t CountKeyword(const json& s, const char* key, int64_t absent) {
  if (!s.contains(key)) return absent;
  const json& v = s[key];
  if (!v.is_number()) return kBadCount;
  const double d = v.get<double>();
  if (!(d >= 0 && d <= 1e6) || d != std::floor(d)) return kBadCount;
  return static_cast<int64_t>(d);
}

class Converter {
 public:
  explicit Converter(const json& root) : root_(root) {}

  Status Emit(const json& s, int depth, std::string* out) {
    if (depth > kMaxDepth)
      return InvalidArgumentError("json schema: nested more than " + std::to_string(kMaxDepth) +
                                  " levels");
    if (s.is_boolean()) {
      if (!s.get<bool>()) return InvalidArgumentError("json schema: `false` matches nothing");
      *out += AnyValue(2);
      return OkStatus();
    }
    if (!s.is_object())
      return InvalidArgumentError("json schema: a schema must be an object or a boolean");
    for (const auto& [k, v] : s.items()) {
      static const std::set<std::string> kKnown = {"type",
                                                   "properties",
                                                   "required",
                                                   "additionalProperties",
                                                   "items",
                                                   "prefixItems",
                                                   "minItems",
                                                   "maxItems",
                                                   "enum",
                                                   "const",
                                                   "anyOf",
                                                   "oneOf",
                                                   "allOf",
                                                   "$ref",
                                                   "$defs",
                                                   "definitions",
                                                   "minLength",
                                                   "maxLength",
                                                   "pattern",
                                                   "format",
                                                   "minimum",
                                                   "maximum",
                                                   "exclusiveMinimum",
                                                   "exclusiveMaximum",
                                                   "title",
                                                   "description",
                                                   "default",
                                                   "examples",
                                                   "$schema",
                                                   "$id",
                                                   "$comment",
                                                   "readOnly",
                                                   "writeOnly",
                                                   "deprecated",
                                                   "nullable"};
      if (!kKnown.count(k))
        return InvalidArgumentError("json schema: keyword '" + k + "' is not supported");
    }
    if (s.contains("$ref")) return Ref(s["$ref"], depth, out);
    if (s.contains("const")) {
      *out += RegexEscape(s["const"].dump());
      return OkStatus();
    }
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty())
        return InvalidArgumentError("json schema: enum must be a non-empty array");
      *out += "(";
      bool first = true;
      for (const json& v : s["enum"]) {
        *out += (first ? "" : "|") + RegexEscape(v.dump());
        first = false;
      }
      *out += ")";
      return OkStatus();
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      if (!s[key].is_array() || s[key].empty())
        return InvalidArgumentError(std::string("json schema: ") + key +
                                    " must be a non-empty array");
      *out += "(";
      bool first = true;
      for (const json& sub : s[key]) {
        if (!first) *out += "|";
        first = false;
        RETURN_IF_ERROR(Emit(sub, depth + 1, out));
      }
      *out += ")";
      return OkStatus();
    }
    if (s.contains("allOf")) {
      if (!s["allOf"].is_array() || s["allOf"].size() != 1)
        return InvalidArgumentError("json schema: allOf is supported with one schema only");
      return Emit(s["allOf"][0], depth + 1, out);
    }
    if (!s.contains("type")) {
      if (s.contains("properties")) return Object(s, depth, out);
      if (s.contains("items") || s.contains("prefixItems")) return Array(s, depth, out);
      *out += AnyValue(2);
      return OkStatus();
    }
    const json& type = s["type"];
    if (type.is_array()) {
      if (type.empty()) return InvalidArgumentError("json schema: empty type list");
      *out += "(";
      bool first = true;
      for (const json& t : type) {
        if (!first) *out += "|";
        first = false;
        if (!t.is_string()) return InvalidArgumentError("json schema: type names must be strings");
        RETURN_IF_ERROR(Typed(s, t.get<std::string>(), depth, out));
      }
      *out += ")";
      return OkStatus();
    }
    if (!type.is_string())
      return InvalidArgumentError("json schema: type must be a string or a list");
    // (OpenAPI's `nullable` is not JSON Schema: ignored, so outputs satisfy both readings.)
    return Typed(s, type.get<std::string>(), depth, out);
  }

 private:
  Status Ref(const json& ref, int depth, std::string* out) {
    if (!ref.is_string()) return InvalidArgumentError("json schema: $ref must be a string");
    const std::string r = ref.get<std::string>();
    std::string name;
    const json* defs = nullptr;
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      if (r.rfind(prefix, 0) == 0) {
        name = r.substr(std::string(prefix).size());
        const char* key = std::string(prefix) == "#/$defs/" ? "$defs" : "definitions";
        if (root_.contains(key)) defs = &root_[key];
      }
    }
    if (r == "#") return InvalidArgumentError("json schema: recursive $ref '#' is not supported");
    if (defs == nullptr || !defs->is_object() || !defs->contains(name)) {
      return InvalidArgumentError("json schema: $ref '" + r +
                                  "' does not name an entry of #/$defs or #/definitions");
    }
    if (expanding_.count(r))
      return InvalidArgumentError("json schema: recursive $ref '" + r + "' is not supported");
    expanding_.insert(r);
    Status st = Emit((*defs)[name], depth + 1, out);
    expanding_.erase(r);
    return st;
  }

  Status Typed(const json& s, const std::string& t, int depth, std::string* out) {
    if (t == "object") return Object(s, depth, out);
    if (t == "array") return Array(s, depth, out);
    if (t == "string") return String(s, out);
    if (t == "integer") return Integer(s, out);
    if (t == "number") return Number(s, out);
    if (t == "boolean") {
      *out += "(true|false)";
      return OkStatus();
    }
    if (t == "null") {
      *out += "null";
      return OkStatus();
    }
    return InvalidArgumentError("json schema: unknown type '" + t + "'");
  }

  static std::string StringRegex(int min, int max) {
    std::string r = "\"";
    r += kStringChar;
    if (min == 0 && max < 0) {
      r += "*";
    } else {
      r += "{" + std::to_string(min) + "," + (max >= 0 ? std::to_string(max) : "") + "}";
    }
    return r + "\"";
  }

  // Any JSON value nested at most `depth` containers deep.
  static std::string AnyValue(int depth) {
    const std::string primitive = "(" + StringRegex(0, -1) + "|" + kNumber + "|true|false|null)";
    if (depth == 0) return primitive;
    const std::string inner = AnyValue(depth - 1);
    const std::string key = StringRegex(0, -1);
    return "(" + primitive + "|\\[(" + inner + "(" + kComma + inner + ")*)?\\]|\\{(" + key +
           kColon + inner + "(" + kComma + key + kColon + inner + ")*)?\\})";
  }

  Status Object(const json& s, int depth, std::string* out) {
    const json empty = json::object();
    const json& props = s.contains("properties") ? s["properties"] : empty;
    if (!props.is_object())
      return InvalidArgumentError("json schema: properties must be an object");
    std::vector<std::pair<std::string, const json*>> fields;
    for (const auto& [k, v] : props.items()) fields.emplace_back(k, &v);
    static const json kAny = true;
    if (s.contains("required")) {
      if (!s["required"].is_array())
        return InvalidArgumentError("json schema: required must be an array");
      for (const json& r : s["required"]) {
        if (!r.is_string())
          return InvalidArgumentError("json schema: required names must be strings");
        if (!props.contains(r.get<std::string>())) fields.emplace_back(r.get<std::string>(), &kAny);
      }
    }
    if (fields.empty()) {
      const json* extra = s.contains("additionalProperties") ? &s["additionalProperties"] : nullptr;
      if (extra && extra->is_boolean() && !extra->get<bool>()) {
        *out += "\\{\\}";
        return OkStatus();
      }
      std::string value;
      if (extra && extra->is_object()) {
        RETURN_IF_ERROR(Emit(*extra, depth + 1, &value));
      } else {
        value = AnyValue(1);
      }
      const std::string key = StringRegex(0, -1);
      *out += "\\{(" + key + kColon + value + "(" + kComma + key + kColon + value + ")*)?\\}";
      return OkStatus();
    }
    *out += "\\{";
    for (size_t i = 0; i < fields.size(); ++i) {
      if (i) *out += kComma;
      *out += RegexEscape(json(fields[i].first).dump()) + kColon;
      RETURN_IF_ERROR(Emit(*fields[i].second, depth + 1, out));
    }
    *out += "\\}";
    return OkStatus();
  }

  Status Array(const json& s, int depth, std::string* out) {
    const int64_t min = CountKeyword(s, "minItems", 0), max = CountKeyword(s, "maxItems", -1);
    if (min < 0 || (max >= 0 && max < min) || min > 1000 || max > 1000 || min == kBadCount ||
        max == kBadCount) {
      return InvalidArgumentError(
          "json schema: minItems / maxItems must satisfy 0 <= minItems <= maxItems <= 1000");
    }
    std::vector<std::string> prefix;
    if (s.contains("prefixItems")) {
      if (!s["prefixItems"].is_array())
        return InvalidArgumentError("json schema: prefixItems must be an array");
      for (const json& p : s["prefixItems"]) {
        std::string r;
        RETURN_IF_ERROR(Emit(p, depth + 1, &r));
        prefix.push_back(r);
      }
    }
    std::string item;
    bool items_allowed = true;
    if (s.contains("items")) {
      if (s["items"].is_boolean() && !s["items"].get<bool>()) {
        items_allowed = false;
      } else {
        RETURN_IF_ERROR(Emit(s["items"], depth + 1, &item));
      }
    } else {
      item = AnyValue(1);
    }
    // Emit the prefix items first (all of them, if the array may hold them), then the rest.
    const int64_t n_prefix = static_cast<int64_t>(prefix.size());
    const int64_t fixed = max >= 0 ? std::min(n_prefix, max) : n_prefix;
    if (!items_allowed && fixed < min)
      return InvalidArgumentError("json schema: minItems exceeds prefixItems with items false");
    *out += "\\[";
    for (int64_t i = 0; i < fixed; ++i) *out += (i ? kComma : "") + prefix[i];
    if (items_allowed) {
      const int64_t more_min = std::max<int64_t>(0, min - fixed);
      const int64_t more_max = max < 0 ? -1 : max - fixed;
      if (more_max != 0) {
        if (fixed > 0) {
          // Each further item follows a comma.
          const std::string rep = "(" + std::string(kComma) + item + ")";
          *out += rep + "{" + std::to_string(more_min) + "," +
                  (more_max >= 0 ? std::to_string(more_max) : "") + "}";
        } else {
          const std::string rest = "(" + std::string(kComma) + item + ")";
          const std::string first = item;
          const std::string bounds = "{" + std::to_string(std::max<int64_t>(0, more_min - 1)) +
                                     "," + (more_max >= 0 ? std::to_string(more_max - 1) : "") +
                                     "}";
          if (more_min == 0) {
            *out += "(" + first + rest + bounds + ")?";
          } else {
            *out += first + rest + bounds;
          }
        }
      }
    }
    *out += "\\]";
    return OkStatus();
  }

  Status String(const json& s, std::string* out) {
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string())
        return InvalidArgumentError("json schema: pattern must be a string");
      std::string p = s["pattern"].get<std::string>();
      // Whole-string match of the pattern (a subset of the strings that contain a match),
      // its characters kept to those a JSON string holds unescaped.
      if (!p.empty() && p[0] == '^') p.erase(0, 1);
      if (!p.empty() && p.back() == '$' && (p.size() < 2 || p[p.size() - 2] != '\\')) p.pop_back();
      // Parsed alone first: a pattern such as a)|(b would otherwise close the group early and
      // leave the JSON string.
      if (Status st = RegexDfa::Check(p); !st.ok()) {
        return InvalidArgumentError("json schema: pattern: " + st.message());
      }
      *out += "\"(?J:" + p + ")\"";
      return OkStatus();
    }
    if (s.contains("format")) {
      const std::string f = s["format"].is_string() ? s["format"].get<std::string>() : "";
      static const std::string kDate = "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])";
      static const std::string kTime =
          "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+\\-]([01][0-9]|2[0-3]):[0-"
          "5][0-9])";
      static const std::string kOctet = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
      std::string r;
      if (f == "date")
        r = kDate;
      else if (f == "time")
        r = kTime;
      else if (f == "date-time")
        r = kDate + "T" + kTime;
      else if (f == "uuid")
        r = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}";
      else if (f == "email")
        r = "[a-zA-Z0-9._%+\\-]{1,32}@[a-zA-Z0-9\\-]{1,32}(\\.[a-zA-Z0-9\\-]{1,32}){0,3}\\.[a-zA-Z]"
            "{2,8}";
      else if (f == "ipv4")
        r = "(" + kOctet + "\\.){3}" + kOctet;
      else
        return InvalidArgumentError("json schema: string format '" + f + "' is not supported");
      *out += "\"" + r + "\"";
      return OkStatus();
    }
    const int64_t min = CountKeyword(s, "minLength", 0), max = CountKeyword(s, "maxLength", -1);
    if (min < 0 || min > 1000 || max > 1000 || (max >= 0 && max < min) || min == kBadCount ||
        max == kBadCount) {
      return InvalidArgumentError(
          "json schema: minLength / maxLength must satisfy 0 <= minLength <= maxLength <= 1000");
    }
    *out += StringRegex(static_cast<int>(min), static_cast<int>(max));
    return OkStatus();
  }

  // [lo, hi] of an integer from minimum / maximum / exclusive bounds (numbers).
  static Status IntBounds(const json& s, int64_t* lo, int64_t* hi) {
    *lo = -kIntLimit;
    *hi = kIntLimit;
    auto num = [&](const char* k, double* v) -> Status {
      if (!s.contains(k)) return OkStatus();
      if (!s[k].is_number())
        return InvalidArgumentError(std::string("json schema: ") + k + " must be a number");
      *v = s[k].get<double>();
      if (!std::isfinite(*v) || std::fabs(*v) > static_cast<double>(kIntLimit)) {
        return InvalidArgumentError(std::string("json schema: ") + k + " is beyond 16 digits");
      }
      return OkStatus();
    };
    double v;
    if (s.contains("minimum")) {
      RETURN_IF_ERROR(num("minimum", &v));
      *lo = std::max(*lo, static_cast<int64_t>(std::ceil(v)));
    }
    if (s.contains("exclusiveMinimum")) {
      RETURN_IF_ERROR(num("exclusiveMinimum", &v));
      *lo = std::max(*lo, static_cast<int64_t>(std::floor(v)) + 1);
    }
    if (s.contains("maximum")) {
      RETURN_IF_ERROR(num("maximum", &v));
      *hi = std::min(*hi, static_cast<int64_t>(std::floor(v)));
    }
    if (s.contains("exclusiveMaximum")) {
      RETURN_IF_ERROR(num("exclusiveMaximum", &v));
      *hi = std::min(*hi, static_cast<int64_t>(std::ceil(v)) - 1);
    }
    if (*lo > *hi) return InvalidArgumentError("json schema: the bounds leave no integer");
    return OkStatus();
  }

  static Status Integer(const json& s, std::string* out) {
    if (!s.contains("minimum") && !s.contains("maximum") && !s.contains("exclusiveMinimum") &&
        !s.contains("exclusiveMaximum")) {
      *out += kInteger;
      return OkStatus();
    }
    int64_t lo, hi;
    RETURN_IF_ERROR(IntBounds(s, &lo, &hi));
    *out += IntegerRangeRegex(lo, hi);
    return OkStatus();
  }

  static Status Number(const json& s, std::string* out) {
    const bool bounded = s.contains("minimum") || s.contains("maximum") ||
                         s.contains("exclusiveMinimum") || s.contains("exclusiveMaximum");
    if (!bounded) {
      *out += kNumber;
      return OkStatus();
    }
    auto integral = [&](const char* k) {
      return !s.contains(k) ||
             (s[k].is_number() && s[k].get<double>() == std::floor(s[k].get<double>()));
    };
    if (!s.contains("minimum") || s.contains("exclusiveMinimum") ||
        s.contains("exclusiveMaximum") || !integral("minimum") || !integral("maximum") ||
        s["minimum"].get<double>() < 0) {
      return InvalidArgumentError(
          "json schema: number bounds are supported as an integer minimum >= 0 and an optional "
          "integer maximum");
    }
    int64_t lo, hi;
    RETURN_IF_ERROR(IntBounds(s, &lo, &hi));
    // x in [lo, hi]: an integer part in [lo, hi - 1] with any fraction, or hi itself.
    std::string r = "(";
    if (hi > lo) r += IntegerRangeRegex(lo, hi - 1) + "(\\.[0-9]{1,16})?|";
    r += Digits(hi) + "(\\.0{1,16})?)";
    *out += r;
    return OkStatus();
  }

 private:
  const json& root_;
  std::set<std::string> expanding_;
};

}  // namespace

std::string IntegerRangeRegex(int64_t lo, int64_t hi) {
  lo = std::max(lo, -kIntLimit);
  hi = std::min(hi, kIntLimit);
  if (hi < 0) return "-" + NonNegativeRange(-hi, -lo);
  if (lo >= 0) return NonNegativeRange(lo, hi);
  // Negative part: -1 .. lo (no "-0").
  return "(-" + NonNegativeRange(1, -lo) + "|" + NonNegativeRange(0, hi) + ")";
}

StatusOr<std::string> JsonSchemaToRegex(std::string_view schema_json) {
  const json schema = json::parse(schema_json, nullptr, false);
  if (schema.is_discarded()) return InvalidArgumentError("json schema: not valid JSON");
  Converter c(schema);
  std::string out;
  RETURN_IF_ERROR(c.Emit(schema, 0, &out));
  return out;
}

}  // namespace inflight::guided
