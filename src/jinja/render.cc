// The evaluator: walks the parsed statements with a stack of variable frames (a for loop
// and a macro call open one; if does not, as in jinja2), writing into a bounded output.
#include <cmath>
#include <new>
#include <unordered_set>

#include "jinja/ast.h"
#include "jinja/builtins.h"
#include "jinja/error.h"
#include "jinja/parser.h"
#include "jinja/template.h"

namespace inflight::jinja {
namespace {

// Lists and dicts nested deeper than this fail (printing, comparing and hashing them recurse).
constexpr int kMaxValueDepth = 256;
// Elements one list may hold (a Value is ~90 bytes).
constexpr size_t kMaxListItems = 200'000;

enum class Flow { kNormal, kBreak, kContinue };

class Renderer final : public StepCounter {
 public:
  Renderer(const RenderLimits& limits, const Value& context) : limits_(limits) {
    frames_.emplace_back(GlobalFunctions(*this));
    if (context.is_mapping()) {
      for (const auto& [k, v] : context.Entries()) Set(k, v);
    }
  }

  ~Renderer() override {
    for (const Value& ns : mutated_namespaces_) ns.MutableNamespace().items.clear();
  }

  std::string Run(const Body& body) {
    std::string out;
    out_ = &out;
    if (RenderBody(body) != Flow::kNormal) Fail("break or continue outside a loop");
    return out;
  }

  void Charge(int64_t n) override {
    steps_ += n;
    if (steps_ > limits_.max_steps)
      throw LimitError{"the template ran more than " + std::to_string(limits_.max_steps) +
                       " steps"};
  }
  size_t MaxBytes() const override { return limits_.max_output_bytes; }

 private:
  using Frame = DictItems;

  void Write(const std::string& s) {
    if (out_->size() + s.size() > limits_.max_output_bytes) {
      throw LimitError{"the rendered prompt exceeds " + std::to_string(limits_.max_output_bytes) +
                       " bytes"};
    }
    *out_ += s;
  }

  Value Lookup(const std::string& name) const {
    for (auto f = frames_.rbegin(); f != frames_.rend(); ++f) {
      for (const auto& [k, v] : *f) {
        if (k == name) return v;
      }
    }
    return Value::Undefined(name);
  }

  void Set(const std::string& name, Value v) {
    Frame& f = frames_.back();
    for (auto& [k, old] : f) {
      if (k == name) {
        old = std::move(v);
        return;
      }
    }
    f.emplace_back(name, std::move(v));
  }

  void Assign(const std::vector<std::string>& targets, const Value& v) {
    if (targets.size() == 1) return Set(targets[0], v);
    const std::vector<Value> items = IterItems(v);
    if (items.size() != targets.size()) {
      Fail("cannot unpack " + std::to_string(items.size()) + " values into " +
           std::to_string(targets.size()) + " names");
    }
    for (size_t i = 0; i < targets.size(); ++i) Set(targets[i], items[i]);
  }

  Flow RenderBody(const Body& body) {
    for (const NodePtr& n : body) {
      const Flow f = RenderNode(*n);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  Flow RenderNode(const Node& n) {
    Charge(1);
    switch (n.kind) {
      case Node::Kind::kText:
        Write(n.text);
        return Flow::kNormal;
      case Node::Kind::kOutput:
        Write(Eval(*n.expr).Str(limits_.max_output_bytes));
        return Flow::kNormal;
      case Node::Kind::kIf:
        for (const auto& [cond, body] : n.branches) {
          if (Eval(*cond).Truthy()) return RenderBody(body);
        }
        return RenderBody(n.else_body);
      case Node::Kind::kFor:
        return RenderFor(n);
      case Node::Kind::kSet: {
        const Value v = Eval(*n.expr);
        if (n.attr.empty()) {
          Assign(n.targets, v);
        } else {
          const Value ns = Lookup(n.targets[0]);
          if (ns.kind() != Value::Kind::kNamespace)
            Fail("cannot assign attribute '" + n.attr + "' on a non-namespace");
          DictData& d = ns.MutableNamespace();
          if (mutated_.insert(&d).second) mutated_namespaces_.push_back(ns);
          bool found = false;
          for (auto& [k, old] : d.items) {
            if (k == n.attr) old = v, found = true;
          }
          if (!found) d.items.emplace_back(n.attr, v);
        }
        return Flow::kNormal;
      }
      case Node::Kind::kSetBlock: {
        std::string captured;
        std::string* saved = out_;
        out_ = &captured;
        const Flow f = RenderBody(n.body);
        out_ = saved;
        Set(n.targets[0], Value(std::move(captured)));
        return f;
      }
      case Node::Kind::kMacro:
        DefineMacro(n);
        return Flow::kNormal;
      case Node::Kind::kBreak:
        return Flow::kBreak;
      case Node::Kind::kContinue:
        return Flow::kContinue;
      case Node::Kind::kScope:
        return RenderBody(n.body);
      default:
        Fail("unsupported statement");
    }
  }

  Flow RenderFor(const Node& n) {
    std::vector<Value> items = IterItems(Eval(*n.expr));
    if (n.filter) {  // {% for x in xs if cond %}: loop.* counts the kept items only
      std::vector<Value> kept;
      for (const Value& item : items) {
        frames_.emplace_back();
        Assign(n.targets, item);
        const bool keep = Eval(*n.filter).Truthy();
        frames_.pop_back();
        if (keep) kept.push_back(item);
      }
      items = std::move(kept);
    }
    const int64_t len = static_cast<int64_t>(items.size());
    // Each iteration gets a fresh frame: what the body sets is gone in the next iteration
    // and after the loop (jinja2's scoping; namespaces carry state across).
    struct PopFrame {
      std::vector<Frame>& frames;
      ~PopFrame() { frames.pop_back(); }
    };
    for (int64_t i = 0; i < len; ++i) {
      Charge(1);
      frames_.emplace_back();
      PopFrame pop{frames_};
      Assign(n.targets, items[i]);
      DictItems loop = {{"index0", Value(i)},
                        {"index", Value(i + 1)},
                        {"revindex0", Value(len - i - 1)},
                        {"revindex", Value(len - i)},
                        {"first", Value(i == 0)},
                        {"last", Value(i == len - 1)},
                        {"length", Value(len)},
                        {"depth", Value(1)},
                        {"depth0", Value(0)},
                        {"previtem", i > 0 ? items[i - 1] : Value::Undefined("previtem")},
                        {"nextitem", i + 1 < len ? items[i + 1] : Value::Undefined("nextitem")}};
      loop.emplace_back("cycle", Value::Func("cycle", [i](CallArgs& a) {
                          if (a.positional.empty()) Fail("loop.cycle needs arguments");
                          return a.positional[static_cast<size_t>(i) % a.positional.size()];
                        }));
      Set("loop", Value::Dict(std::move(loop)));
      if (RenderBody(n.body) == Flow::kBreak) break;
    }
    if (len == 0) return RenderBody(n.else_body);
    return Flow::kNormal;
  }

  void DefineMacro(const Node& n) {
    const Node* macro = &n;
    Set(n.text, Value::Func(n.text, [this, macro](CallArgs& a) { return CallMacro(*macro, a); }));
  }

  Value CallMacro(const Node& m, CallArgs& a) {
    if (++call_depth_ > limits_.max_call_depth)
      throw LimitError{"macro calls nested deeper than " + std::to_string(limits_.max_call_depth)};
    // A macro sees the template's globals and its parameters, not its caller's locals.
    std::vector<Frame> saved = std::move(frames_);
    frames_ = {saved.front(), Frame{}};
    for (size_t i = 0; i < m.params.size(); ++i) {
      Value v = a.Get(i, m.params[i].first);
      if (v.is_undefined() && m.params[i].second) v = Eval(*m.params[i].second);
      Set(m.params[i].first, v);
    }
    std::string captured;
    std::string* saved_out = out_;
    out_ = &captured;
    struct Restore {
      Renderer& r;
      std::vector<Frame>& frames;
      std::string* out;
      ~Restore() {
        r.frames_ = std::move(frames);
        r.out_ = out;
        --r.call_depth_;
      }
    } restore{*this, saved, saved_out};
    RenderBody(m.body);
    return Value(std::move(captured));
  }

  CallArgs Arguments(const Expr& e, size_t first) {
    CallArgs a;
    for (size_t i = first; i < e.args.size(); ++i) a.positional.push_back(Eval(*e.args[i]));
    for (const auto& [k, v] : e.kwargs) a.keyword.emplace_back(k, Eval(*v));
    return a;
  }

  // Every value an expression makes is bounded: strings by the output limit, lists by
  // kMaxListItems, nesting by kMaxValueDepth (a template cannot build what would exhaust the
  // memory or the stack).
  Value Eval(const Expr& e) {
    Value v = EvalUnchecked(e);
    if (v.is_string()) {
      CheckSize(v.AsString().size());
    } else if (v.is_list() || v.kind() == Value::Kind::kDict) {
      if (v.Depth() > kMaxValueDepth)
        throw LimitError{"a value of the template is nested deeper than " +
                         std::to_string(kMaxValueDepth)};
      const size_t n = v.is_list() ? v.Items().size() : v.Entries().size();
      if (n > kMaxListItems)
        throw LimitError{"a list of the template holds more than " + std::to_string(kMaxListItems) +
                         " items"};
    }
    return v;
  }

  Value EvalUnchecked(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.literal;
      case Expr::Kind::kName:
        return Lookup(e.name);
      case Expr::Kind::kList:
      case Expr::Kind::kTuple: {
        std::vector<Value> items;
        for (const ExprPtr& a : e.args) items.push_back(Eval(*a));
        return Value::List(std::move(items), e.kind == Expr::Kind::kTuple);
      }
      case Expr::Kind::kDict: {
        DictItems items;
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          const Value key = Eval(*e.args[i]);
          if (!key.is_string()) Fail("dict keys must be strings in this Jinja engine");
          items.emplace_back(key.AsString(), Eval(*e.args[i + 1]));
        }
        return Value::Dict(std::move(items));
      }
      case Expr::Kind::kAttr:
        return GetAttribute(Eval(*e.args[0]), e.name);
      case Expr::Kind::kItem:
        return GetItem(Eval(*e.args[0]), Eval(*e.args[1]));
      case Expr::Kind::kSlice: {
        auto part = [&](int i) { return e.args[i] ? Eval(*e.args[i]) : Value(); };
        return Slice(Eval(*e.args[0]), part(1), part(2), part(3));
      }
      case Expr::Kind::kCall: {
        const Value fn = Eval(*e.args[0]);
        if (fn.kind() != Value::Kind::kFunction) {
          Fail("line " + std::to_string(e.line) + ": '" +
               (fn.is_undefined() ? fn.UndefinedName() : std::string(fn.TypeName())) +
               "' is not callable");
        }
        CallArgs a = Arguments(e, 1);
        Charge(1);
        return fn.AsFunction()(a);
      }
      case Expr::Kind::kFilter: {
        const Value v = Eval(*e.args[0]);
        CallArgs a = Arguments(e, 1);
        return ApplyFilter(e.name, v, a, *this);
      }
      case Expr::Kind::kTest: {
        // `x is defined` must not fail on a missing x's attributes: evaluate leniently.
        const Value v = e.name == "defined" || e.name == "undefined" ? EvalLenient(*e.args[0])
                                                                     : Eval(*e.args[0]);
        const CallArgs a = Arguments(e, 1);
        return Value(ApplyTest(e.name, v, a) != e.negated);
      }
      case Expr::Kind::kUnary: {
        const Value v = Eval(*e.args[0]);
        if (e.name == "not") return Value(!v.Truthy());
        if (!v.is_number())
          Fail("bad operand type for unary " + e.name + ": '" + v.TypeName() + "'");
        if (e.name == "+") return v.kind() == Value::Kind::kBool ? Value(v.AsInt()) : v;
        return v.kind() == Value::Kind::kFloat ? Value(-v.AsFloat()) : Value(-v.AsInt());
      }
      case Expr::Kind::kBinary:
        return Binary(e);
      case Expr::Kind::kCompare:
        return Compare(e);
      case Expr::Kind::kCondition: {
        if (Eval(*e.args[1]).Truthy()) return Eval(*e.args[0]);
        return e.args[2] ? Eval(*e.args[2]) : Value::Undefined();
      }
    }
    return Value();
  }

  // An expression whose failure to resolve (undefined parent) means "undefined".
  Value EvalLenient(const Expr& e) {
    try {
      return Eval(e);
    } catch (const TemplateError&) {
      return Value::Undefined();
    }
  }

  Value Binary(const Expr& e) {
    if (e.name == "and") {
      Value l = Eval(*e.args[0]);
      return l.Truthy() ? Eval(*e.args[1]) : l;
    }
    if (e.name == "or") {
      Value l = Eval(*e.args[0]);
      return l.Truthy() ? l : Eval(*e.args[1]);
    }
    const Value l = Eval(*e.args[0]), r = Eval(*e.args[1]);
    const std::string& op = e.name;
    if (op == "~") {
      const size_t max = limits_.max_output_bytes;
      std::string s = l.Str(max);
      CheckSize(s.size());
      s += r.Str(max);
      return Value(std::move(s));
    }
    if (l.is_undefined() || r.is_undefined()) {
      const Value& u = l.is_undefined() ? l : r;
      Fail("line " + std::to_string(e.line) + ": '" +
           (u.UndefinedName().empty() ? std::string("value") : u.UndefinedName()) +
           "' is undefined");
    }
    if (op == "+") {
      if (l.is_string() && r.is_string()) {
        CheckSize(l.AsString().size() + r.AsString().size());
        return Value(l.AsString() + r.AsString());
      }
      if (l.is_list() && r.is_list()) {
        if (l.Items().size() + r.Items().size() > kMaxListItems)
          throw LimitError{"a list of the template grew too long"};
        std::vector<Value> items = l.Items();
        items.insert(items.end(), r.Items().begin(), r.Items().end());
        Charge(static_cast<int64_t>(items.size()));
        return Value::List(std::move(items));
      }
    }
    if (op == "*" && (l.is_string() || l.is_list()) && r.kind() == Value::Kind::kInt)
      return Repeat(l, r.AsInt());
    if (l.is_number() && r.is_number()) return Arithmetic(op, l, r, e.line);
    Fail("line " + std::to_string(e.line) + ": unsupported operand types for " + op + ": '" +
         l.TypeName() + "' and '" + r.TypeName() + "'");
  }

  Value Repeat(const Value& v, int64_t times) {
    times = std::max<int64_t>(times, 0);
    const int64_t unit = v.is_string() ? static_cast<int64_t>(v.AsString().size())
                                       : static_cast<int64_t>(v.Items().size());
    const int64_t cap = v.is_string() ? static_cast<int64_t>(limits_.max_output_bytes)
                                      : static_cast<int64_t>(kMaxListItems);
    if (unit > 0 && times > cap / unit) throw LimitError{"a repetition is too large"};
    Charge(unit * times / 64 + 1);
    if (v.is_string()) {
      std::string out;
      for (int64_t i = 0; i < times; ++i) out += v.AsString();
      return Value(std::move(out));
    }
    std::vector<Value> items;
    for (int64_t i = 0; i < times; ++i)
      items.insert(items.end(), v.Items().begin(), v.Items().end());
    return Value::List(std::move(items));
  }

  static Value Arithmetic(const std::string& op, const Value& l, const Value& r, int line) {
    const bool ints = l.kind() != Value::Kind::kFloat && r.kind() != Value::Kind::kFloat;
    const int64_t a = l.AsInt(), b = r.AsInt();
    const double x = l.AsFloat(), y = r.AsFloat();
    auto div_zero = [&] { Fail("line " + std::to_string(line) + ": division by zero"); };
    if (op == "+" || op == "-" || op == "*") {
      if (ints) {
        int64_t out;
        const bool overflow = op == "+"   ? __builtin_add_overflow(a, b, &out)
                              : op == "-" ? __builtin_sub_overflow(a, b, &out)
                                          : __builtin_mul_overflow(a, b, &out);
        if (overflow) Fail("line " + std::to_string(line) + ": integer overflow");
        return Value(out);
      }
      return Value(op == "+" ? x + y : op == "-" ? x - y : x * y);
    }
    if (op == "/") {
      if (y == 0) div_zero();
      return Value(x / y);
    }
    if (op == "//" || op == "%") {
      if (ints) {
        if (b == 0) div_zero();
        if (a == INT64_MIN && b == -1) Fail("line " + std::to_string(line) + ": integer overflow");
        int64_t q = a / b, m = a % b;
        if (m != 0 && ((m < 0) != (b < 0))) --q, m += b;  // Python floors
        return Value(op == "//" ? q : m);
      }
      if (y == 0) div_zero();
      const double q = std::floor(x / y);
      return Value(op == "//" ? q : x - q * y);
    }
    if (op == "**") {
      if (ints && b >= 0) {
        int64_t out = 1;
        for (int64_t i = 0; i < b; ++i) {
          if (__builtin_mul_overflow(out, a, &out))
            Fail("line " + std::to_string(line) + ": integer overflow");
          if (out == 0 || out == 1) break;
        }
        return Value(out);
      }
      return Value(std::pow(x, y));
    }
    Fail("unknown operator " + op);
  }

  Value Compare(const Expr& e) {
    Value left = Eval(*e.args[0]);
    for (size_t i = 0; i < e.ops.size(); ++i) {
      const Value right = Eval(*e.args[i + 1]);
      const std::string& op = e.ops[i];
      bool ok;
      if (op == "==")
        ok = Equal(left, right);
      else if (op == "!=")
        ok = !Equal(left, right);
      else if (op == "in" || op == "not in")
        ok = Contains(right, left) == (op == "in");
      else {
        StatusOr<bool> r = op == "<" || op == ">=" ? Less(left, right) : Less(right, left);
        if (!r.ok()) Fail("line " + std::to_string(e.line) + ": " + r.status().message());
        ok = op == "<" || op == ">" ? *r : !*r;
      }
      if (!ok) return Value(false);
      left = right;
    }
    return Value(true);
  }

  static bool Contains(const Value& container, const Value& item) {
    if (container.is_string()) {
      if (!item.is_string()) Fail("'in <string>' requires string as left operand");
      return container.AsString().find(item.AsString()) != std::string::npos;
    }
    if (container.is_mapping())
      return item.is_string() && !container.Get(item.AsString()).is_undefined();
    if (container.is_list()) {
      for (const Value& x : container.Items()) {
        if (Equal(x, item)) return true;
      }
      return false;
    }
    if (container.is_undefined()) return false;
    Fail(std::string("argument of type '") + container.TypeName() + "' is not iterable");
  }

  const RenderLimits& limits_;
  // Every namespace a `set ns.x = ...` changed: only such a change can make a cycle
  // (ns.x = ns) or a chain deeper than the values' recorded depth, so the destructor empties
  // them while this list still holds each one (nothing leaks, no destructor recurses).
  std::vector<Value> mutated_namespaces_;
  std::unordered_set<const DictData*> mutated_;
  std::vector<Frame> frames_;
  std::string* out_ = nullptr;
  int64_t steps_ = 0;
  int call_depth_ = 0;
};

}  // namespace

StatusOr<Template> Template::Parse(std::string_view source) {
  ASSIGN_OR_RETURN(Body body, ParseTemplate(source));
  Template t;
  t.body_ = std::make_shared<const Body>(std::move(body));
  return t;
}

StatusOr<std::string> Template::Render(const Value& context, const RenderLimits& limits) const {
  try {
    Renderer r(limits, context);
    return r.Run(*body_);
  } catch (const TemplateError& e) {
    return InvalidArgumentError(e.message);
  } catch (const LimitError& e) {
    return ResourceExhaustedError("chat template: " + e.message);
  } catch (const std::bad_alloc&) {
    return ResourceExhaustedError("chat template: out of memory");
  }
}

}  // namespace inflight::jinja
