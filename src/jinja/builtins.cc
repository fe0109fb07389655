#include "jinja/builtins.h"

#include <algorithm>
#include <cmath>
#include <ctime>

#include "jinja/error.h"

namespace inflight::jinja {

void StepCounter::CheckSize(size_t size) const {
  if (size > MaxBytes())
    throw LimitError{"a value of the template grew past " + std::to_string(MaxBytes()) + " bytes"};
}

namespace {

constexpr int64_t kMaxSequence = 200'000;  // elements a range may produce
// String methods have no access to the render's limits: their results are capped here (the
// renderer then applies its own, smaller, output bound).
constexpr size_t kMaxMethodResultBytes = size_t{64} << 20;

bool IsWhite(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// The byte offsets where each code point of a UTF-8 string starts, plus the end.
std::vector<size_t> CodePointStarts(const std::string& s) {
  std::vector<size_t> starts;
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) starts.push_back(i);
  }
  starts.push_back(s.size());
  return starts;
}

const std::string& StringArg(const Value& v, const char* what) {
  if (!v.is_string()) Fail(std::string(what) + " expects a string, got " + v.TypeName());
  return v.AsString();
}

std::string Strip(const std::string& s, const Value& chars, bool left, bool right) {
  auto strip_char = [&](char c) {
    return chars.is_string() ? chars.AsString().find(c) != std::string::npos : IsWhite(c);
  };
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e && strip_char(s[b])) ++b;
  }
  if (right) {
    while (e > b && strip_char(s[e - 1])) --e;
  }
  return s.substr(b, e - b);
}

Value Split(const std::string& s, const Value& sep, int64_t max_split) {
  std::vector<Value> parts;
  if (!sep.is_string()) {  // runs of whitespace, no empty parts
    size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && IsWhite(s[i])) ++i;
      if (i >= s.size()) break;
      size_t e = i;
      if (max_split >= 0 && static_cast<int64_t>(parts.size()) >= max_split) {
        e = s.size();
        while (e > i && IsWhite(s[e - 1])) --e;
      } else {
        while (e < s.size() && !IsWhite(s[e])) ++e;
      }
      parts.emplace_back(s.substr(i, e - i));
      i = e;
    }
    return Value::List(std::move(parts));
  }
  const std::string& d = sep.AsString();
  if (d.empty()) Fail("split: empty separator");
  size_t start = 0;
  for (;;) {
    if (max_split >= 0 && static_cast<int64_t>(parts.size()) >= max_split) break;
    const size_t at = s.find(d, start);
    if (at == std::string::npos) break;
    parts.emplace_back(s.substr(start, at - start));
    start = at + d.size();
  }
  parts.emplace_back(s.substr(start));
  return Value::List(std::move(parts));
}

std::string Replace(const std::string& s, const std::string& from, const std::string& to,
                    int64_t count, size_t max_bytes = SIZE_MAX) {
  if (from.empty()) return s;
  std::string out;
  size_t start = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    const size_t at = s.find(from, start);
    if (at == std::string::npos) break;
    out.append(s, start, at - start);
    out += to;
    start = at + from.size();
    if (out.size() > max_bytes)
      throw LimitError{"replace: the result grew past " + std::to_string(max_bytes) + " bytes"};
  }
  out.append(s, start);
  return out;
}

// Case mapping of the scripts chat messages mostly use beyond ASCII (Latin-1, Latin
// Extended-A, Greek, Cyrillic), as Python's str.upper()/lower() do; other code points stay.
uint32_t MapCase(uint32_t c, bool upper) {
  if (c < 0x80)
    return upper ? static_cast<uint32_t>(std::toupper(static_cast<int>(c)))
                 : static_cast<uint32_t>(std::tolower(static_cast<int>(c)));
  if (upper) {
    if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 0x20;
    if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 &&
        c != 0x17F) {
      const bool odd_lower = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
      if (odd_lower ? (c % 2 == 0) : (c % 2 == 1)) return c - 1;
      return c;
    }
    if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 0x20;
    if (c >= 0x430 && c <= 0x44F) return c - 0x20;
    if (c >= 0x450 && c <= 0x45F) return c - 0x50;
    return c;
  }
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 0x20;
  if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 &&
      c != 0x17F) {
    const bool odd_lower = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    if (odd_lower ? (c % 2 == 1) : (c % 2 == 0)) return c + 1;
    return c;
  }
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 0x20;
  if (c >= 0x410 && c <= 0x42F) return c + 0x20;
  if (c >= 0x400 && c <= 0x40F) return c + 0x50;
  return c;
}

std::string MapCaseUtf8(const std::string& s, bool upper) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const unsigned char b = static_cast<unsigned char>(s[i]);
    const int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 1;
    if (n != 2 || i + 1 >= s.size()) {  // the mapped ranges are all 1- or 2-byte sequences
      const uint32_t c = n == 1 ? MapCase(b, upper) : b;
      if (n == 1)
        out += static_cast<char>(c);
      else
        out.append(s, i, std::min<size_t>(n, s.size() - i));
      i += n;
      continue;
    }
    const uint32_t cp = ((b & 0x1F) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3F);
    const uint32_t m = MapCase(cp, upper);
    out += static_cast<char>(0xC0 | (m >> 6));
    out += static_cast<char>(0x80 | (m & 0x3F));
    i += 2;
  }
  return out;
}

std::string Upper(const std::string& s) { return MapCaseUtf8(s, true); }
std::string Lower(const std::string& s) { return MapCaseUtf8(s, false); }
std::string Capitalize(const std::string& s) {
  std::string out = Lower(s);
  if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
  return out;
}
// Python's str.title(): a letter after a non-letter starts a word.
std::string PyTitle(const std::string& s) {
  std::string out = s;
  bool prev_letter = false;
  for (char& c : out) {
    const bool letter = std::isalpha(static_cast<unsigned char>(c));
    if (letter)
      c = static_cast<char>(prev_letter ? std::tolower(static_cast<unsigned char>(c))
                                        : std::toupper(static_cast<unsigned char>(c)));
    prev_letter = letter;
  }
  return out;
}
// jinja2's title filter: words begin after '-', whitespace, or an opening bracket.
std::string JinjaTitle(const std::string& s) {
  std::string out = s;
  bool start = true;
  for (char& c : out) {
    const bool sep = c == '-' || IsWhite(c) || c == '(' || c == '{' || c == '[' || c == '<';
    if (sep) {
      start = true;
    } else {
      c = static_cast<char>(start ? std::toupper(static_cast<unsigned char>(c))
                                  : std::tolower(static_cast<unsigned char>(c)));
      start = false;
    }
  }
  return out;
}

bool StartsOrEnds(const std::string& s, const Value& what, bool starts) {
  auto one = [&](const Value& p) {
    const std::string& x = StringArg(p, starts ? "startswith" : "endswith");
    return x.size() <= s.size() && (starts ? s.compare(0, x.size(), x) == 0
                                           : s.compare(s.size() - x.size(), x.size(), x) == 0);
  };
  if (what.is_list()) return std::any_of(what.Items().begin(), what.Items().end(), one);
  return one(what);
}

// Python's str.format for what templates use: {} / {0} / {name} fields with an optional !s
// or !r conversion, and "{{" / "}}". Format specs ("{:>8}") and attribute or index fields
// ("{0.name}") fail naming themselves.
Value Format(const std::string& s, const CallArgs& a) {
  std::string out;
  size_t next_auto = 0;
  bool automatic = false, manual = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '}') {
      if (i + 1 < s.size() && s[i + 1] == '}')
        ++i;
      else
        Fail("Single '}' encountered in format string");
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < s.size() && s[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const size_t close = s.find('}', i);
    if (close == std::string::npos) Fail("Single '{' encountered in format string");
    std::string field = s.substr(i + 1, close - i - 1);
    i = close;
    if (const size_t colon = field.find(':'); colon != std::string::npos) {
      if (colon + 1 < field.size())
        Fail("str.format: format specs ('" + field.substr(colon) + "') are not supported");
      field.resize(colon);
    }
    std::string conversion;
    if (const size_t bang = field.find('!'); bang != std::string::npos) {
      conversion = field.substr(bang + 1);
      field.resize(bang);
      if (conversion != "s" && conversion != "r")
        Fail("Unknown conversion specifier " + conversion);
    }
    Value arg;
    if (field.empty() || std::all_of(field.begin(), field.end(), [](char d) {
          return std::isdigit(static_cast<unsigned char>(d));
        })) {
      size_t index;
      if (field.empty()) {
        if (manual)
          Fail("cannot switch from manual field specification to automatic field numbering");
        automatic = true;
        index = next_auto++;
      } else {
        if (automatic)
          Fail("cannot switch from automatic field numbering to manual field specification");
        manual = true;
        index = field.size() > 6 ? SIZE_MAX : std::stoul(field);
      }
      if (index >= a.positional.size())
        Fail("Replacement index " + field + " out of range for positional args tuple");
      arg = a.positional[index];
    } else if (field.find_first_of(".[") != std::string::npos) {
      Fail("str.format: attribute and index fields ('" + field + "') are not supported");
    } else {
      const auto it = std::find_if(a.keyword.begin(), a.keyword.end(),
                                   [&](const auto& kw) { return kw.first == field; });
      if (it == a.keyword.end()) Fail("'" + field + "'");
      arg = it->second;
    }
    out += conversion == "r" ? arg.Repr(kMaxMethodResultBytes) : arg.Str(kMaxMethodResultBytes);
    if (out.size() > kMaxMethodResultBytes) throw LimitError{"format: the result is too large"};
  }
  return Value(std::move(out));
}

Value StringMethod(const std::string& s, const std::string& name) {
  auto bind = [&](auto fn) {
    return Value::Func(name, [s, fn](CallArgs& a) -> Value { return fn(s, a); });
  };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool l = name != "rstrip", r = name != "lstrip";
    return bind([l, r](const std::string& s, CallArgs& a) {
      return Value(Strip(s, a.Get(0, "chars"), l, r));
    });
  }
  if (name == "split") {
    return bind([](const std::string& s, CallArgs& a) {
      const Value max = a.Get(1, "maxsplit", Value(-1));
      return Split(s, a.Get(0, "sep"), max.AsInt());
    });
  }
  if (name == "startswith" || name == "endswith") {
    const bool st = name == "startswith";
    return bind([st](const std::string& s, CallArgs& a) {
      return Value(StartsOrEnds(s, a.Get(0, "prefix"), st));
    });
  }
  if (name == "upper") return bind([](const std::string& s, CallArgs&) { return Value(Upper(s)); });
  if (name == "lower") return bind([](const std::string& s, CallArgs&) { return Value(Lower(s)); });
  if (name == "title")
    return bind([](const std::string& s, CallArgs&) { return Value(PyTitle(s)); });
  if (name == "capitalize")
    return bind([](const std::string& s, CallArgs&) { return Value(Capitalize(s)); });
  if (name == "replace") {
    return bind([](const std::string& s, CallArgs& a) {
      return Value(Replace(s, StringArg(a.Get(0, "old"), "replace"),
                           StringArg(a.Get(1, "new"), "replace"),
                           a.Get(2, "count", Value(-1)).AsInt(), kMaxMethodResultBytes));
    });
  }
  if (name == "find") {
    return bind([](const std::string& s, CallArgs& a) {
      const size_t at = s.find(StringArg(a.Get(0, "sub"), "find"));
      return Value(at == std::string::npos ? int64_t{-1} : static_cast<int64_t>(at));
    });
  }
  if (name == "count") {
    return bind([](const std::string& s, CallArgs& a) {
      const std::string& sub = StringArg(a.Get(0, "sub"), "count");
      int64_t n = 0;
      for (size_t at = s.find(sub); !sub.empty() && at != std::string::npos;
           at = s.find(sub, at + sub.size()))
        ++n;
      return Value(n);
    });
  }
  if (name == "join") {
    return bind([](const std::string& s, CallArgs& a) {
      std::string out;
      bool first = true;
      for (const Value& v : IterItems(a.Get(0, "iterable"))) {
        if (!first) out += s;
        first = false;
        out += StringArg(v, "join");
        if (out.size() > kMaxMethodResultBytes) throw LimitError{"join: the result is too large"};
      }
      return Value(std::move(out));
    });
  }
  if (name == "format") return bind([](const std::string& s, CallArgs& a) { return Format(s, a); });
  if (name == "isdigit" || name == "isspace" || name == "isalpha") {
    return bind([name](const std::string& s, CallArgs&) {
      auto pred = [&](unsigned char c) {
        return name == "isdigit"   ? std::isdigit(c) != 0
               : name == "isspace" ? IsWhite(static_cast<char>(c))
                                   : std::isalpha(c) != 0;
      };
      return Value(!s.empty() && std::all_of(s.begin(), s.end(), pred));
    });
  }
  return Value::Undefined(name);
}

Value DictMethod(const Value& d, const std::string& name) {
  if (name == "items") {
    return Value::Func(name, [d](CallArgs&) {
      std::vector<Value> items;
      for (const auto& [k, v] : d.Entries()) items.push_back(Value::List({Value(k), v}, true));
      return Value::List(std::move(items));
    });
  }
  if (name == "keys" || name == "values") {
    const bool keys = name == "keys";
    return Value::Func(name, [d, keys](CallArgs&) {
      std::vector<Value> items;
      for (const auto& [k, v] : d.Entries()) items.push_back(keys ? Value(k) : v);
      return Value::List(std::move(items));
    });
  }
  if (name == "get") {
    return Value::Func(name, [d](CallArgs& a) {
      const Value key = a.Get(0, "key");
      const Value v = key.is_string() ? d.Get(key.AsString()) : Value();
      return v.is_undefined() ? a.Get(1, "default", Value::None()) : v;
    });
  }
  return Value::Undefined(name);
}

int64_t ClampIndex(int64_t i, int64_t n, bool is_start, int64_t step) {
  if (i < 0) i += n;
  if (step > 0) return std::clamp<int64_t>(i, 0, n);
  return std::clamp<int64_t>(i, -1, n - 1);
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

Value Attr(const Value& v, const std::string& path) {
  Value cur = v;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t dot = path.find('.', start);
    cur = GetAttribute(
        cur, path.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return cur;
}

// select / reject / selectattr / rejectattr: keep items whose (attribute's) test is `keep`.
Value SelectItems(const Value& seq, CallArgs& args, bool by_attr, bool keep, StepCounter& steps) {
  std::vector<Value> out;
  if (!seq.Truthy()) return Value::List({});  // jinja2: "if value:" (none selects nothing)
  const std::vector<Value> items = IterItems(seq);
  steps.Charge(static_cast<int64_t>(items.size()));
  size_t next = 0;
  std::string attr;
  if (by_attr) attr = StringArg(args.Get(next++, "attribute"), "selectattr");
  const Value test = args.Get(next++, "test");
  CallArgs test_args;
  for (size_t i = next; i < args.positional.size(); ++i)
    test_args.positional.push_back(args.positional[i]);
  for (const Value& item : items) {
    const Value subject = by_attr ? Attr(item, attr) : item;
    const bool passed = test.is_undefined()
                            ? subject.Truthy()
                            : ApplyTest(StringArg(test, "select"), subject, test_args);
    if (passed == keep) out.push_back(item);
  }
  return Value::List(std::move(out));
}

Value SortItems(const Value& seq, CallArgs& args, StepCounter& steps) {
  std::vector<Value> items = IterItems(seq);
  steps.Charge(static_cast<int64_t>(items.size()) * 8);
  const bool reverse = args.Get(0, "reverse", Value(false)).Truthy();
  const bool case_sensitive = args.Get(1, "case_sensitive", Value(false)).Truthy();
  const Value attr = args.Get(2, "attribute");
  auto key = [&](const Value& v) {
    Value k = attr.is_string() ? Attr(v, attr.AsString()) : v;
    if (!case_sensitive && k.is_string()) k = Value(Lower(k.AsString()));
    return k;
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    StatusOr<bool> less = reverse ? Less(key(b), key(a)) : Less(key(a), key(b));
    if (!less.ok()) Fail("sort: " + less.status().message());
    return *less;
  });
  return Value::List(std::move(items));
}

}  // namespace

std::vector<Value> IterItems(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kList:
      return value.Items();
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      std::vector<Value> keys;
      for (const auto& [k, v] : value.Entries()) keys.emplace_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      const std::string& s = value.AsString();
      const std::vector<size_t> cp = CodePointStarts(s);
      std::vector<Value> chars;
      for (size_t i = 0; i + 1 < cp.size(); ++i)
        chars.emplace_back(s.substr(cp[i], cp[i + 1] - cp[i]));
      return chars;
    }
    case Value::Kind::kUndefined:
      return {};
    default:
      Fail(std::string("'") + value.TypeName() + "' object is not iterable");
  }
}

Value GetAttribute(const Value& value, const std::string& name) {
  if (value.is_mapping()) {
    // jinja2 looks up d.name as an attribute first: a dict's methods win over its keys of
    // the same name (a JSON schema's "items" key is read as d['items']).
    if (value.kind() == Value::Kind::kDict) {
      Value method = DictMethod(value, name);
      if (!method.is_undefined()) return method;
    }
    return value.Get(name);
  }
  if (value.is_string()) return StringMethod(value.AsString(), name);
  if (value.is_undefined()) {
    Fail("'" + (value.UndefinedName().empty() ? std::string("value") : value.UndefinedName()) +
         "' is undefined (reading ." + name + ")");
  }
  return Value::Undefined(name);
}

Value GetItem(const Value& value, const Value& key) {
  if (value.is_mapping()) {
    if (key.is_string()) return value.Get(key.AsString());
    return Value::Undefined(key.Str(256));
  }
  if (value.is_list() || value.is_string()) {
    if (key.is_string()) return GetAttribute(value, key.AsString());
    if (!key.is_number()) Fail(std::string("indices must be integers, not ") + key.TypeName());
    int64_t i = key.AsInt();
    if (value.is_list()) {
      const int64_t n = static_cast<int64_t>(value.Items().size());
      if (i < 0) i += n;
      return i >= 0 && i < n ? value.Items()[i] : Value::Undefined("[" + key.Str(256) + "]");
    }
    const std::string& s = value.AsString();
    const std::vector<size_t> cp = CodePointStarts(s);
    const int64_t n = static_cast<int64_t>(cp.size()) - 1;
    if (i < 0) i += n;
    return i >= 0 && i < n ? Value(s.substr(cp[i], cp[i + 1] - cp[i]))
                           : Value::Undefined("[" + key.Str(256) + "]");
  }
  if (value.is_undefined())
    Fail("'" + (value.UndefinedName().empty() ? std::string("value") : value.UndefinedName()) +
         "' is undefined (reading [" + key.Str(256) + "])");
  return Value::Undefined(key.Str(256));
}

Value Slice(const Value& value, const Value& start, const Value& stop, const Value& step_v) {
  const int64_t step = step_v.is_undefined() || step_v.is_none() ? 1 : step_v.AsInt();
  if (step == 0) Fail("slice step cannot be zero");
  std::vector<Value> items;
  std::vector<size_t> cp;
  int64_t n;
  if (value.is_list()) {
    n = static_cast<int64_t>(value.Items().size());
  } else if (value.is_string()) {
    cp = CodePointStarts(value.AsString());
    n = static_cast<int64_t>(cp.size()) - 1;
  } else {
    Fail(std::string("'") + value.TypeName() + "' object is not subscriptable");
  }
  const bool no_start = start.is_undefined() || start.is_none(),
             no_stop = stop.is_undefined() || stop.is_none();
  int64_t b = no_start ? (step > 0 ? 0 : n - 1) : ClampIndex(start.AsInt(), n, true, step);
  int64_t e = no_stop ? (step > 0 ? n : -1) : ClampIndex(stop.AsInt(), n, false, step);
  std::string out;
  for (int64_t i = b; step > 0 ? i < e : i > e; i += step) {
    if (value.is_list())
      items.push_back(value.Items()[i]);
    else
      out.append(value.AsString(), cp[i], cp[i + 1] - cp[i]);
  }
  return value.is_list() ? Value::List(std::move(items)) : Value(std::move(out));
}

bool ApplyTest(const std::string& name, const Value& v, const CallArgs& args) {
  using K = Value::Kind;
  const Value arg = args.positional.empty() ? Value() : args.positional[0];
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind() == K::kInt;
  if (name == "float") return v.kind() == K::kFloat;
  if (name == "boolean") return v.kind() == K::kBool;
  if (name == "true") return v.kind() == K::kBool && v.AsBool();
  if (name == "false") return v.kind() == K::kBool && !v.AsBool();
  if (name == "mapping") return v.kind() == K::kDict;
  if (name == "iterable") return v.is_list() || v.is_mapping() || v.is_string() || v.is_undefined();
  if (name == "sequence") return v.is_list() || v.kind() == K::kDict || v.is_string();
  if (name == "callable") return v.kind() == K::kFunction;
  if (name == "even" || name == "odd") {
    if (!v.is_number()) Fail("test '" + name + "' expects a number");
    return (v.AsInt() % 2 == 0) == (name == "even");
  }
  if (name == "divisibleby") {
    if (!v.is_number() || !arg.is_number() || arg.AsInt() == 0)
      Fail("divisibleby expects non-zero numbers");
    return v.AsInt() % arg.AsInt() == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return Equal(v, arg);
  if (name == "ne" || name == "!=") return !Equal(v, arg);
  if (name == "sameas") return Equal(v, arg) && v.kind() == arg.kind();
  auto less = [&](const Value& a, const Value& b) {
    StatusOr<bool> r = Less(a, b);
    if (!r.ok()) Fail(r.status().message());
    return *r;
  };
  if (name == "lt" || name == "lessthan" || name == "<") return less(v, arg);
  if (name == "gt" || name == "greaterthan" || name == ">") return less(arg, v);
  if (name == "le" || name == "<=") return !less(arg, v);
  if (name == "ge" || name == ">=") return !less(v, arg);
  if (name == "in") {
    if (arg.is_string())
      return v.is_string() && arg.AsString().find(v.AsString()) != std::string::npos;
    for (const Value& x : IterItems(arg)) {
      if (Equal(x, v)) return true;
    }
    return false;
  }
  if (name == "lower" || name == "upper") {
    if (!v.is_string()) return false;
    return v.AsString() == (name == "lower" ? Lower(v.AsString()) : Upper(v.AsString()));
  }
  Fail("the template uses the test '" + name + "', which this Jinja engine does not support");
}

Value ApplyFilter(const std::string& name, const Value& v, CallArgs& a, StepCounter& steps) {
  const size_t max = steps.MaxBytes();
  if (name == "trim") return Value(Strip(v.Str(max), a.Get(0, "chars"), true, true));
  if (name == "length" || name == "count") {
    const int64_t n = v.Length();
    if (n < 0) Fail(std::string("object of type '") + v.TypeName() + "' has no len()");
    return Value(n);
  }
  if (name == "upper") return Value(Upper(v.Str(max)));
  if (name == "lower") return Value(Lower(v.Str(max)));
  if (name == "title") return Value(JinjaTitle(v.Str(max)));
  if (name == "capitalize") return Value(Capitalize(v.Str(max)));
  if (name == "string") return Value(v.Str(max));
  if (name == "safe") return v;
  if (name == "escape" || name == "e") return Value(HtmlEscape(v.Str(max)));
  if (name == "tojson") {
    // Hugging Face's tojson(x, ensure_ascii=False, indent=None, separators=None,
    // sort_keys=False), which replaces jinja2's.
    Value::JsonOptions options;
    options.ensure_ascii = a.Get(0, "ensure_ascii", Value(false)).Truthy();
    const Value indent = a.Get(1, "indent", Value::None());
    if (indent.is_number()) {  // Python: that many spaces (none below 1), or the string itself
      options.indent = std::string(std::clamp<int64_t>(indent.AsInt(), 0, 64), ' ');
    } else if (indent.is_string()) {
      options.indent = indent.AsString();
    } else if (!indent.is_none() && !indent.is_undefined()) {
      Fail(std::string("tojson: indent must be a number or a string, not ") + indent.TypeName());
    }
    const Value separators = a.Get(2, "separators", Value::None());
    if (separators.is_list() && separators.Items().size() == 2 &&
        separators.Items()[0].is_string() && separators.Items()[1].is_string()) {
      options.separators.emplace(separators.Items()[0].AsString(),
                                 separators.Items()[1].AsString());
    } else if (!separators.is_none() && !separators.is_undefined()) {
      Fail("tojson: separators must be a pair of strings");
    }
    options.sort_keys = a.Get(3, "sort_keys", Value(false)).Truthy();
    steps.Charge(1000);
    StatusOr<std::string> json = v.ToJson(options, max);
    if (!json.ok() && json.status().code() == StatusCode::kResourceExhausted)
      throw LimitError{json.status().message()};
    if (!json.ok()) Fail(json.status().message());
    return Value(std::move(*json));
  }
  if (name == "default" || name == "d") {
    const bool boolean = a.Get(1, "boolean", Value(false)).Truthy();
    const bool use_default = v.is_undefined() || (boolean && !v.Truthy());
    return use_default ? a.Get(0, "default_value", Value("")) : v;
  }
  if (name == "join") {
    const Value sep = a.Get(0, "d", Value(""));
    const Value attr = a.Get(1, "attribute");
    std::string out;
    bool first = true;
    for (const Value& item : IterItems(v)) {
      if (!first) out += sep.Str(max);
      first = false;
      out += (attr.is_string() ? Attr(item, attr.AsString()) : item).Str(max);
      steps.Charge(1);
      steps.CheckSize(out.size());
    }
    return Value(std::move(out));
  }
  if (name == "first" || name == "last") {
    const std::vector<Value> items = IterItems(v);
    if (items.empty()) return Value::Undefined(name);
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") return Value::List(IterItems(v));
  if (name == "reverse") {
    if (v.is_string()) return Slice(v, Value(), Value(), Value(-1));
    std::vector<Value> items = IterItems(v);
    std::reverse(items.begin(), items.end());
    return Value::List(std::move(items));
  }
  if (name == "int") {
    if (v.is_number()) return Value(v.AsInt());
    if (v.is_string()) {
      char* end = nullptr;
      const long long i = std::strtoll(v.AsString().c_str(), &end, 10);
      if (end != v.AsString().c_str() && *end == '\0') return Value(static_cast<int64_t>(i));
    }
    return a.Get(0, "default", Value(0));
  }
  if (name == "float") {
    if (v.is_number()) return Value(v.AsFloat());
    if (v.is_string()) {
      char* end = nullptr;
      const double f = std::strtod(v.AsString().c_str(), &end);
      if (end != v.AsString().c_str() && *end == '\0') return Value(f);
    }
    return a.Get(0, "default", Value(0.0));
  }
  if (name == "abs") {
    if (v.kind() == Value::Kind::kFloat) return Value(std::fabs(v.AsFloat()));
    if (v.is_number()) return Value(v.AsInt() < 0 ? -v.AsInt() : v.AsInt());
    Fail("abs expects a number");
  }
  if (name == "round") {
    const int64_t precision = a.Get(0, "precision", Value(0)).AsInt();
    const std::string method = a.Get(1, "method", Value("common")).Str(64);
    const double scale =
        std::pow(10.0, static_cast<double>(std::clamp<int64_t>(precision, -20, 20)));
    double x = v.AsFloat() * scale;
    x = method == "floor"  ? std::floor(x)
        : method == "ceil" ? std::ceil(x)
                           : std::nearbyint(x);  // Python: half to even
    return Value(x / scale);
  }
  if (name == "replace") {
    return Value(Replace(v.Str(max), a.Get(0, "old").Str(max), a.Get(1, "new").Str(max),
                         a.Get(2, "count", Value(-1)).AsInt(), max));
  }
  if (name == "items") {
    if (!v.is_mapping()) Fail("items expects a mapping");
    std::vector<Value> items;
    for (const auto& [k, x] : v.Entries()) items.push_back(Value::List({Value(k), x}, true));
    return Value::List(std::move(items));
  }
  if (name == "dictsort") {
    if (!v.is_mapping()) Fail("dictsort expects a mapping");
    DictItems entries = v.Entries();
    std::stable_sort(entries.begin(), entries.end(),
                     [](const auto& x, const auto& y) { return Lower(x.first) < Lower(y.first); });
    std::vector<Value> items;
    for (auto& [k, x] : entries) items.push_back(Value::List({Value(k), x}, true));
    return Value::List(std::move(items));
  }
  if (name == "select" || name == "reject")
    return SelectItems(v, a, false, name == "select", steps);
  if (name == "selectattr" || name == "rejectattr")
    return SelectItems(v, a, true, name == "selectattr", steps);
  if (name == "map") {
    std::vector<Value> out;
    const Value attr = a.Get(99, "attribute");
    if (!v.Truthy()) return Value::List({});  // jinja2: "if value:" (none maps to nothing)
    for (const Value& item : IterItems(v)) {
      steps.Charge(1);
      if (attr.is_string()) {
        const Value x = Attr(item, attr.AsString());
        out.push_back(x.is_undefined() ? a.Get(99, "default", x) : x);
      } else {
        if (a.positional.empty()) Fail("map needs a filter name or attribute=");
        CallArgs rest;
        rest.positional.assign(a.positional.begin() + 1, a.positional.end());
        out.push_back(ApplyFilter(StringArg(a.positional[0], "map"), item, rest, steps));
      }
    }
    return Value::List(std::move(out));
  }
  if (name == "unique") {
    std::vector<Value> out;
    for (const Value& item : IterItems(v)) {
      steps.Charge(static_cast<int64_t>(out.size()) + 1);
      if (std::none_of(out.begin(), out.end(), [&](const Value& x) { return Equal(x, item); }))
        out.push_back(item);
    }
    return Value::List(std::move(out));
  }
  if (name == "sort") return SortItems(v, a, steps);
  if (name == "sum" || name == "min" || name == "max") {
    const std::vector<Value> items = IterItems(v);
    steps.Charge(static_cast<int64_t>(items.size()));
    if (name == "sum") {
      const Value attr = a.Get(0, "attribute");
      Value total = a.Get(1, "start", Value(0));
      for (const Value& item : items) {
        const Value x = attr.is_string() ? Attr(item, attr.AsString()) : item;
        if (!x.is_number() || !total.is_number()) Fail("sum expects numbers");
        total = x.kind() == Value::Kind::kFloat || total.kind() == Value::Kind::kFloat
                    ? Value(total.AsFloat() + x.AsFloat())
                    : Value(total.AsInt() + x.AsInt());
      }
      return total;
    }
    if (items.empty()) return Value::Undefined(name);
    Value best = items[0];
    for (const Value& item : items) {
      StatusOr<bool> less = name == "min" ? Less(item, best) : Less(best, item);
      if (!less.ok()) Fail(less.status().message());
      if (*less) best = item;
    }
    return best;
  }
  if (name == "indent") {
    const Value width_v = a.Get(0, "width", Value(4));
    const std::string pad = width_v.is_string()
                                ? width_v.AsString()
                                : std::string(std::clamp<int64_t>(width_v.AsInt(), 0, 256), ' ');
    const bool first = a.Get(1, "first", Value(false)).Truthy(),
               blank = a.Get(2, "blank", Value(false)).Truthy();
    const std::string s = v.Str(max);
    std::string out;
    size_t start = 0;
    bool first_line = true;
    for (;;) {
      steps.CheckSize(out.size());
      const size_t nl = s.find('\n', start);
      const std::string line =
          s.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
      const bool indent = first_line ? first : (blank || !Strip(line, Value(), true, true).empty());
      if (indent) out += pad;
      out += line;
      if (nl == std::string::npos) break;
      out += '\n';
      start = nl + 1;
      first_line = false;
    }
    return Value(std::move(out));
  }
  Fail("the template uses the filter '" + name + "', which this Jinja engine does not support");
}

DictItems GlobalFunctions(StepCounter& steps) {
  DictItems g;
  g.emplace_back("range", Value::Func("range", [&steps](CallArgs& a) {
                   int64_t start = 0, stop = 0, step = 1;
                   if (a.positional.size() == 1) {
                     stop = a.positional[0].AsInt();
                   } else if (a.positional.size() >= 2) {
                     start = a.positional[0].AsInt(), stop = a.positional[1].AsInt();
                     if (a.positional.size() >= 3) step = a.positional[2].AsInt();
                   }
                   if (step == 0) Fail("range() step must not be zero");
                   std::vector<Value> items;
                   for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
                     if (static_cast<int64_t>(items.size()) >= kMaxSequence)
                       throw LimitError{"range() longer than " + std::to_string(kMaxSequence)};
                     items.emplace_back(i);
                   }
                   steps.Charge(static_cast<int64_t>(items.size()));
                   return Value::List(std::move(items));
                 }));
  auto from_kwargs = [](CallArgs& a) {
    DictItems items;
    for (const Value& p : a.positional) {
      if (p.is_mapping()) items.insert(items.end(), p.Entries().begin(), p.Entries().end());
    }
    for (auto& [k, v] : a.keyword) items.emplace_back(k, v);
    return items;
  };
  g.emplace_back("namespace", Value::Func("namespace", [from_kwargs](CallArgs& a) {
                   return Value::Namespace(from_kwargs(a));
                 }));
  g.emplace_back("dict", Value::Func("dict", [from_kwargs](CallArgs& a) {
                   return Value::Dict(from_kwargs(a));
                 }));
  g.emplace_back("raise_exception", Value::Func("raise_exception", [](CallArgs& a) -> Value {
                   Fail(a.Get(0, "message", Value("raise_exception called")).Str(4096));
                 }));
  g.emplace_back("strftime_now", Value::Func("strftime_now", [](CallArgs& a) {
                   const std::string format = a.Get(0, "format", Value("%Y-%m-%d")).Str(256);
                   const std::time_t now = std::time(nullptr);
                   std::tm tm{};
                   localtime_r(&now, &tm);
                   char buf[256];
                   const size_t n = std::strftime(buf, sizeof buf, format.c_str(), &tm);
                   return Value(std::string(buf, n));
                 }));
  return g;
}

}  // namespace inflight::jinja
