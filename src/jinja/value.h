// The values a Jinja template computes with, with Python's semantics where templates can see
// them (str() and repr() of numbers, lists and dicts, truthiness, equality, ordering), since
// chat templates are written against Python's jinja2. Dicts keep insertion order (a request's
// JSON object order survives into tojson). Lists and dicts are shared and never mutated after
// construction (templates run sandboxed, as Hugging Face's ImmutableSandboxedEnvironment);
// namespaces are the one mutable object. Not thread-safe to mutate; a Template renders with
// its own values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace inflight::jinja {

class Value;
struct CallArgs;

using DictItems = std::vector<std::pair<std::string, Value>>;
struct ListData {
  std::vector<Value> items;
  bool tuple = false;  // repr (a, b) instead of [a, b]
  int depth = 1;       // nesting of lists and dicts, this one included
};
struct DictData {
  DictItems items;
  int depth = 1;
  const Value* Find(std::string_view key) const;
};
// A function a template can call (builtin, bound method or macro).
using Function = std::function<Value(CallArgs&)>;

class Value {
 public:
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,
    kFunction
  };

  Value() = default;  // undefined
  static Value Undefined(std::string name = "") {
    Value v;
    v.str_ = std::make_shared<std::string>(std::move(name));
    return v;
  }
  static Value None() { return Value(Kind::kNone); }
  Value(bool b) : kind_(Kind::kBool), int_(b) {}       // NOLINT
  Value(int64_t i) : kind_(Kind::kInt), int_(i) {}     // NOLINT
  Value(int i) : kind_(Kind::kInt), int_(i) {}         // NOLINT
  Value(double f) : kind_(Kind::kFloat), float_(f) {}  // NOLINT
  Value(std::string s)
      : kind_(Kind::kString), str_(std::make_shared<std::string>(std::move(s))) {}  // NOLINT
  Value(const char* s) : Value(std::string(s)) {}                                   // NOLINT
  static Value List(std::vector<Value> items, bool tuple = false);
  static Value Dict(DictItems items);
  static Value Namespace(DictItems items);
  static Value Func(std::string name, Function fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_number() const {
    return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool;
  }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_mapping() const { return kind_ == Kind::kDict || kind_ == Kind::kNamespace; }

  bool AsBool() const { return int_ != 0; }
  int64_t AsInt() const { return kind_ == Kind::kFloat ? static_cast<int64_t>(float_) : int_; }
  double AsFloat() const { return kind_ == Kind::kFloat ? float_ : static_cast<double>(int_); }
  const std::string& AsString() const { return *str_; }
  const std::vector<Value>& Items() const { return list_->items; }
  bool IsTuple() const { return list_->tuple; }
  const DictItems& Entries() const { return dict_->items; }
  DictData& MutableNamespace() const { return *dict_; }  // namespaces only
  const Function& AsFunction() const { return fn_->fn; }
  const std::string& FunctionName() const { return fn_->name; }
  // The name an undefined value was looked up by ("" if unknown).
  const std::string& UndefinedName() const;

  // Python truthiness.
  bool Truthy() const;
  // Key lookup in a dict or namespace; undefined when absent.
  Value Get(std::string_view key) const;
  // Python's len() for strings (code points), lists and mappings; -1 otherwise.
  int64_t Length() const;

  // Python str() and repr(). They stop adding elements of a list or dict once the text is
  // longer than max_bytes (a bound for the caller to check, not a truncation to rely on).
  std::string Str(size_t max_bytes = SIZE_MAX) const;
  std::string Repr(size_t max_bytes = SIZE_MAX) const;
  // json.dumps(value, ensure_ascii=..., indent=..., separators=..., sort_keys=...): what
  // Hugging Face's tojson filter writes (its defaults: ensure_ascii=False, sort_keys=False).
  // Fails on undefined and functions, and when the text would pass max_bytes.
  struct JsonOptions {
    std::optional<std::string> indent;  // each level's indentation; none: one line
    bool ensure_ascii = false;
    bool sort_keys = false;
    // Python's defaults: (", ", ": ") without indent, (",", ": ") with it.
    std::optional<std::pair<std::string, std::string>> separators;
  };
  StatusOr<std::string> ToJson(const JsonOptions& options, size_t max_bytes = SIZE_MAX) const;
  StatusOr<std::string> ToJson(int indent = -1, size_t max_bytes = SIZE_MAX) const {
    JsonOptions options;
    if (indent >= 0) options.indent = std::string(indent, ' ');
    return ToJson(options, max_bytes);
  }
  // Nesting of lists and dicts (0 for anything else; a namespace counts as 0: nothing walks
  // into it but tojson, which bounds itself).
  int Depth() const;
  const char* TypeName() const;

 private:
  explicit Value(Kind k) : kind_(k) {}
  struct FunctionData {
    std::string name;
    Function fn;
  };
  Kind kind_ = Kind::kUndefined;
  int64_t int_ = 0;
  double float_ = 0;
  std::shared_ptr<std::string> str_;  // string, or the name of an undefined value
  std::shared_ptr<ListData> list_;
  std::shared_ptr<DictData> dict_;
  std::shared_ptr<FunctionData> fn_;
};

// Python ==, and ordering (<) where Python defines it; Compare fails for unorderable types.
bool Equal(const Value& a, const Value& b);
StatusOr<bool> Less(const Value& a, const Value& b);

// Python's repr() of a float ("1.0", "0.1", "1e-05", "inf").
std::string FloatRepr(double f);

// A JSON document as a Value (objects keep their key order). INVALID_ARGUMENT on bad JSON.
StatusOr<Value> ValueFromJson(std::string_view json);

// Arguments of a call: positional, then keyword.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // The argument at `index` or named `name`, else `fallback`.
  Value Get(size_t index, std::string_view name, Value fallback = Value()) const;
};

}  // namespace inflight::jinja
