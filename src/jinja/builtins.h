// The filters, tests, methods and global functions templates call (internal to the module).
// Each throws TemplateError on bad arguments.
#pragma once

#include <string>

#include "jinja/value.h"

namespace inflight::jinja {

// Counts work (a step per element processed) against the render's budget, and bounds the
// strings builtins build.
class StepCounter {
 public:
  virtual ~StepCounter() = default;
  virtual void Charge(int64_t steps) = 0;
  virtual size_t MaxBytes() const = 0;
  // Throws LimitError when `size` bytes would pass MaxBytes().
  void CheckSize(size_t size) const;
};

Value ApplyFilter(const std::string& name, const Value& value, CallArgs& args, StepCounter& steps);
bool ApplyTest(const std::string& name, const Value& value, const CallArgs& args);
// value.name: a dict key, or a bound string / dict method; undefined otherwise.
Value GetAttribute(const Value& value, const std::string& name);
// value[key] for dicts, lists and strings (negative indexes count from the end).
Value GetItem(const Value& value, const Value& key);
// value[start:stop:step] of a list or string, with Python's clamping (undefined / none parts
// are omitted parts).
Value Slice(const Value& value, const Value& start, const Value& stop, const Value& step);
// The functions every template sees: range, namespace, dict, raise_exception, strftime_now.
DictItems GlobalFunctions(StepCounter& steps);
// Iteration over a list, the keys of a dict, or the characters of a string.
std::vector<Value> IterItems(const Value& value);

}  // namespace inflight::jinja
