#include "jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace inflight::jinja {

const Value* DictData::Find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

Value Value::List(std::vector<Value> items, bool tuple) {
  Value v(Kind::kList);
  int depth = 0;
  for (const Value& item : items) depth = std::max(depth, item.Depth());
  v.list_ = std::make_shared<ListData>(ListData{std::move(items), tuple, depth + 1});
  return v;
}

Value Value::Dict(DictItems items) {
  Value v(Kind::kDict);
  int depth = 0;
  for (const auto& [k, item] : items) depth = std::max(depth, item.Depth());
  v.dict_ = std::make_shared<DictData>(DictData{std::move(items), depth + 1});
  return v;
}

int Value::Depth() const {
  if (kind_ == Kind::kList) return list_->depth;
  if (kind_ == Kind::kDict) return dict_->depth;
  return 0;
}

Value Value::Namespace(DictItems items) {
  Value v = Dict(std::move(items));
  v.kind_ = Kind::kNamespace;
  return v;
}

Value Value::Func(std::string name, Function fn) {
  Value v(Kind::kFunction);
  v.fn_ = std::make_shared<FunctionData>(FunctionData{std::move(name), std::move(fn)});
  return v;
}

const std::string& Value::UndefinedName() const {
  static const std::string kEmpty;
  return str_ ? *str_ : kEmpty;
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
    case Kind::kInt:
      return int_ != 0;
    case Kind::kFloat:
      return float_ != 0;
    case Kind::kString:
      return !str_->empty();
    case Kind::kList:
      return !list_->items.empty();
    case Kind::kDict:
      return !dict_->items.empty();
    default:
      return true;
  }
}

Value Value::Get(std::string_view key) const {
  if (!is_mapping()) return Undefined(std::string(key));
  const Value* v = dict_->Find(key);
  return v != nullptr ? *v : Undefined(std::string(key));
}

int64_t Value::Length() const {
  switch (kind_) {
    case Kind::kString: {
      int64_t n = 0;
      for (unsigned char c : *str_) n += (c & 0xC0) != 0x80;
      return n;
    }
    case Kind::kList:
      return static_cast<int64_t>(list_->items.size());
    case Kind::kDict:
    case Kind::kNamespace:
      return static_cast<int64_t>(dict_->items.size());
    case Kind::kUndefined:
      return 0;
    default:
      return -1;
  }
}

std::string FloatRepr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  // Shortest round-trip digits, laid out as Python's repr: positional for decimal exponents
  // -4 <= e < 16, else d.ddde+XX.
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
  std::string sci(buf, end);
  const size_t e_pos = sci.find('e');
  std::string mantissa = sci.substr(0, e_pos);
  const int exp10 = std::stoi(sci.substr(e_pos + 1));
  const bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  std::string out;
  if (exp10 >= -4 && exp10 < 16) {
    if (exp10 < 0) {
      out = "0." + std::string(-exp10 - 1, '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exp10 + 1) {
      out = digits + std::string(exp10 + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, exp10 + 1) + "." + digits.substr(exp10 + 1);
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char e[16];
    std::snprintf(e, sizeof e, "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
    out += e;
  }
  return negative ? "-" + out : out;
}

namespace {

std::string StringRepr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos,
             has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c == static_cast<unsigned char>(quote)) {
          out += '\\';
          out += static_cast<char>(c);
        } else if (c < 0x20 || c == 0x7f) {
          char e[8];
          std::snprintf(e, sizeof e, "\\x%02x", c);
          out += e;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + quote;
}

void JsonString(const std::string& s, bool ensure_ascii, std::string& out) {
  out += '"';
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default: {
        char e[16];
        if (c < 0x20 || (ensure_ascii && c == 0x7F)) {
          std::snprintf(e, sizeof e, "\\u%04x", c);
          out += e;
        } else if (ensure_ascii && c >= 0x80) {
          // Python writes \uXXXX, a surrogate pair above U+FFFF; a malformed byte (which
          // no JSON input can make) becomes U+FFFD.
          size_t len = 0;
          uint32_t cp = 0xFFFD;
          if ((c & 0xE0) == 0xC0) len = 2;
          if ((c & 0xF0) == 0xE0) len = 3;
          if ((c & 0xF8) == 0xF0) len = 4;
          bool ok = len > 0 && i + len <= s.size();
          for (size_t k = 1; ok && k < len; ++k)
            ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
          if (ok) {
            cp = c & (0xFF >> (len + 1));
            for (size_t k = 1; k < len; ++k)
              cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
            i += len - 1;
          }
          if (cp >= 0x10000) {
            const uint32_t v = cp - 0x10000;
            std::snprintf(e, sizeof e, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
          } else {
            std::snprintf(e, sizeof e, "\\u%04x", cp);
          }
          out += e;
        } else {
          out += static_cast<char>(c);
        }
      }
    }
  }
  out += '"';
}

constexpr int kMaxJsonDepth = 128;

Status JsonDump(const Value& v, const Value::JsonOptions& o, int level, size_t max_bytes,
                std::string& out) {
  if (level > kMaxJsonDepth) return InvalidArgumentError("tojson: value nested too deeply");
  if (out.size() > max_bytes)
    return ResourceExhaustedError("tojson: the JSON text is larger than " +
                                  std::to_string(max_bytes) + " bytes");
  auto newline = [&](int l) {
    if (!o.indent) return;
    out += '\n';
    for (int i = 0; i < l && out.size() <= max_bytes; ++i) out += *o.indent;
  };
  const std::string_view item_sep = o.separators ? std::string_view(o.separators->first)
                                    : !o.indent  ? std::string_view(", ")
                                                 : std::string_view(",");
  const std::string_view key_sep =
      o.separators ? std::string_view(o.separators->second) : std::string_view(": ");
  switch (v.kind()) {
    case Value::Kind::kNone:
      out += "null";
      return OkStatus();
    case Value::Kind::kBool:
      out += v.AsBool() ? "true" : "false";
      return OkStatus();
    case Value::Kind::kInt:
      out += std::to_string(v.AsInt());
      return OkStatus();
    case Value::Kind::kFloat: {
      const double f = v.AsFloat();
      out += std::isnan(f)   ? "NaN"
             : std::isinf(f) ? (f > 0 ? "Infinity" : "-Infinity")
                             : FloatRepr(f);
      return OkStatus();
    }
    case Value::Kind::kString:
      JsonString(v.AsString(), o.ensure_ascii, out);
      return OkStatus();
    case Value::Kind::kList: {
      if (v.Items().empty()) {
        out += "[]";
        return OkStatus();
      }
      out += '[';
      bool first = true;
      for (const Value& item : v.Items()) {
        if (!first) out += item_sep;
        first = false;
        newline(level + 1);
        RETURN_IF_ERROR(JsonDump(item, o, level + 1, max_bytes, out));
      }
      newline(level);
      out += ']';
      return OkStatus();
    }
    case Value::Kind::kDict: {
      if (v.Entries().empty()) {
        out += "{}";
        return OkStatus();
      }
      out += '{';
      bool first = true;
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& entry : v.Entries()) entries.push_back(&entry);
      if (o.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto* a, const auto* b) { return a->first < b->first; });
      }
      for (const auto* entry : entries) {
        const auto& [k, item] = *entry;
        if (!first) out += item_sep;
        first = false;
        newline(level + 1);
        JsonString(k, o.ensure_ascii, out);
        out += key_sep;
        RETURN_IF_ERROR(JsonDump(item, o, level + 1, max_bytes, out));
      }
      newline(level);
      out += '}';
      return OkStatus();
    }
    default:
      return InvalidArgumentError(std::string("tojson: object of type ") + v.TypeName() +
                                  " is not JSON serializable");
  }
}

}  // namespace

std::string Value::Str(size_t max_bytes) const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kString:
      return *str_;
    default:
      return Repr(max_bytes);
  }
}

std::string Value::Repr(size_t max_bytes) const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return int_ ? "True" : "False";
    case Kind::kInt:
      return std::to_string(int_);
    case Kind::kFloat:
      return FloatRepr(float_);
    case Kind::kString:
      return StringRepr(*str_);
    case Kind::kList: {
      std::string out = list_->tuple ? "(" : "[";
      for (size_t i = 0; i < list_->items.size() && out.size() <= max_bytes; ++i) {
        if (i > 0) out += ", ";
        out += list_->items[i].Repr(max_bytes - std::min(max_bytes, out.size()));
      }
      if (list_->tuple && list_->items.size() == 1) out += ",";
      return out + (list_->tuple ? ")" : "]");
    }
    case Kind::kDict: {
      std::string out = "{";
      for (size_t i = 0; i < dict_->items.size() && out.size() <= max_bytes; ++i) {
        if (i > 0) out += ", ";
        out += StringRepr(dict_->items[i].first) + ": " +
               dict_->items[i].second.Repr(max_bytes - std::min(max_bytes, out.size()));
      }
      return out + "}";
    }
    case Kind::kNamespace:
      return "<Namespace>";
    case Kind::kFunction:
      return "<function " + fn_->name + ">";
  }
  return "";
}

StatusOr<std::string> Value::ToJson(const JsonOptions& options, size_t max_bytes) const {
  std::string out;
  RETURN_IF_ERROR(JsonDump(*this, options, 0, max_bytes, out));
  if (out.size() > max_bytes)
    return ResourceExhaustedError("tojson: the JSON text is larger than " +
                                  std::to_string(max_bytes) + " bytes");
  return out;
}

const char* Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return list_->tuple ? "tuple" : "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kFunction:
      return "function";
  }
  return "?";
}

bool Equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Value::Kind::kFloat || b.kind() == Value::Kind::kFloat)
      return a.AsFloat() == b.AsFloat();
    return a.AsInt() == b.AsInt();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.AsString() == b.AsString();
    case Value::Kind::kList: {
      if (a.Items().size() != b.Items().size()) return false;
      for (size_t i = 0; i < a.Items().size(); ++i) {
        if (!Equal(a.Items()[i], b.Items()[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      if (a.Entries().size() != b.Entries().size()) return false;
      for (const auto& [k, v] : a.Entries()) {
        const Value other = b.Get(k);
        if (other.is_undefined() || !Equal(v, other)) return false;
      }
      return true;
    }
    default:
      return false;  // namespaces and functions: identity, which copies do not keep
  }
}

StatusOr<bool> Less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Value::Kind::kFloat || b.kind() == Value::Kind::kFloat)
      return a.AsFloat() < b.AsFloat();
    return a.AsInt() < b.AsInt();
  }
  if (a.is_string() && b.is_string()) return a.AsString() < b.AsString();
  if (a.is_list() && b.is_list()) {
    const auto &x = a.Items(), &y = b.Items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (Equal(x[i], y[i])) continue;
      return Less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  return InvalidArgumentError(std::string("'<' not supported between instances of '") +
                              a.TypeName() + "' and '" + b.TypeName() + "'");
}

namespace {

Value FromJson(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::detail::value_t::null:
      return Value::None();
    case nlohmann::detail::value_t::boolean:
      return Value(j.get<bool>());
    case nlohmann::detail::value_t::number_integer:
      return Value(j.get<int64_t>());
    case nlohmann::detail::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      return u <= static_cast<uint64_t>(INT64_MAX) ? Value(static_cast<int64_t>(u))
                                                   : Value(static_cast<double>(u));
    }
    case nlohmann::detail::value_t::number_float:
      return Value(j.get<double>());
    case nlohmann::detail::value_t::string:
      return Value(j.get<std::string>());
    case nlohmann::detail::value_t::array: {
      std::vector<Value> items;
      for (const auto& e : j) items.push_back(FromJson(e));
      return Value::List(std::move(items));
    }
    case nlohmann::detail::value_t::object: {
      DictItems items;
      for (auto it = j.begin(); it != j.end(); ++it)
        items.emplace_back(it.key(), FromJson(it.value()));
      return Value::Dict(std::move(items));
    }
    default:
      return Value::None();
  }
}

}  // namespace

StatusOr<Value> ValueFromJson(std::string_view json) {
  // ordered_json keeps the document's key order; depth is bounded by the parser callback.
  bool too_deep = false;
  nlohmann::ordered_json::parser_callback_t bound =
      [&](int d, nlohmann::ordered_json::parse_event_t, nlohmann::ordered_json&) {
        if (d > kMaxJsonDepth) too_deep = true;
        return !too_deep;
      };
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(json, bound, /*allow_exceptions=*/false);
  if (too_deep)
    return InvalidArgumentError("JSON nested deeper than " + std::to_string(kMaxJsonDepth));
  if (j.is_discarded()) return InvalidArgumentError("invalid JSON");
  return FromJson(j);
}

Value CallArgs::Get(size_t index, std::string_view name, Value fallback) const {
  for (const auto& [k, v] : keyword) {
    if (k == name) return v;
  }
  if (index < positional.size()) return positional[index];
  return fallback;
}

}  // namespace inflight::jinja
