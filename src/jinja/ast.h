// The parsed form of a template: expressions and statements (internal to the module).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/value.h"

namespace inflight::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,   // literal
    kName,      // name
    kList,      // args
    kTuple,     // args
    kDict,      // kwargs: (key expression in args[i], value in args[i + 1]) pairs
    kAttr,      // args[0].name
    kItem,      // args[0][args[1]]
    kSlice,     // args[0][args[1]:args[2]:args[3]] (null parts allowed)
    kCall,      // args[0](args[1..], kwargs)
    kFilter,    // args[0] | name(args[1..], kwargs)
    kTest,      // args[0] is [not] name(args[1..]); negated
    kUnary,     // name in {"-", "+", "not"} args[0]
    kBinary,    // args[0] name args[1]; name in + - * / // % ** ~ and or
    kCompare,   // args[0] ops[0] args[1] ops[1] args[2] ...
    kCondition  // args[0] if args[1] else args[2] (args[2] may be null)
  };
  Kind kind = Kind::kLiteral;
  Value literal;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  bool negated = false;
  int line = 0;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind {
    kText,       // text
    kOutput,     // {{ expr }}
    kIf,         // branches (cond, body); else_body
    kFor,        // targets in expr [if filter]: body [else else_body]
    kSet,        // targets = expr, or target.attr = expr (attr non-empty)
    kSetBlock,   // {% set targets[0] %}body{% endset %}
    kMacro,      // name(params) body
    kCallBlock,  // not supported: kept out by the parser
    kBreak,
    kContinue,
    kScope  // body rendered in place ({% generation %}, {% raw %} text)
  };
  Kind kind = Kind::kText;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;
  std::vector<std::string> targets;
  std::string attr;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body, else_body;
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro parameters and defaults
  bool recursive = false;
  int line = 0;
};

}  // namespace inflight::jinja
