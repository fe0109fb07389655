#include "jinja/parser.h"

#include <cctype>
#include <cstdlib>

#include "jinja/error.h"
#include "jinja/lexer.h"

namespace inflight::jinja {
namespace {

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  Body Template() {
    Body body = Statements({});
    if (Peek().kind != Token::Kind::kEnd) Error("unexpected '" + std::string(end_tag_) + "'");
    return body;
  }

 private:
  const Token& Peek(size_t ahead = 0) const { return t_[std::min(i_ + ahead, t_.size() - 1)]; }
  const Token& Next() { return t_[std::min(i_++, t_.size() - 1)]; }
  [[noreturn]] void Error(const std::string& what) const {
    Fail("line " + std::to_string(Peek().line) + ": " + what);
  }
  bool IsOp(const char* op, size_t ahead = 0) const {
    return Peek(ahead).kind == Token::Kind::kOp && Peek(ahead).text == op;
  }
  bool IsName(const char* name, size_t ahead = 0) const {
    return Peek(ahead).kind == Token::Kind::kName && Peek(ahead).text == name;
  }
  void ExpectOp(const char* op) {
    if (!IsOp(op)) Error(std::string("expected '") + op + "'");
    ++i_;
  }
  std::string ExpectName() {
    if (Peek().kind != Token::Kind::kName) Error("expected a name");
    return Next().text;
  }
  void ExpectBlockEnd() {
    if (Peek().kind != Token::Kind::kBlockEnd) Error("expected end of tag '%}'");
    ++i_;
  }
  struct DepthGuard {
    explicit DepthGuard(Parser& p) : p(p) {
      if (++p.depth_ > kMaxParseDepth) p.Error("template nested too deeply");
    }
    ~DepthGuard() { --p.depth_; }
    Parser& p;
  };

  // Statements until a block tag whose name is in `ends` (left unconsumed) or the end.
  Body Statements(const std::vector<std::string>& ends) {
    DepthGuard guard(*this);
    Body body;
    for (;;) {
      const Token& t = Peek();
      if (t.kind == Token::Kind::kEnd) {
        if (!ends.empty()) Error("missing '{% " + ends.back() + " %}'");
        return body;
      }
      if (t.kind == Token::Kind::kText) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kText;
        n->text = Next().text;
        body.push_back(std::move(n));
      } else if (t.kind == Token::Kind::kVarBegin) {
        ++i_;
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kOutput;
        n->line = t.line;
        n->expr = Expression();
        if (Peek().kind != Token::Kind::kVarEnd) Error("expected end of expression '}}'");
        ++i_;
        body.push_back(std::move(n));
      } else {
        const Token& name = Peek(1);
        if (name.kind != Token::Kind::kName) Error("expected a statement name after '{%'");
        for (const std::string& e : ends) {
          if (name.text == e) return body;
        }
        i_ += 2;
        body.push_back(Statement(name.text, name.line));
      }
    }
  }

  NodePtr Statement(const std::string& name, int line) {
    auto n = std::make_unique<Node>();
    n->line = line;
    if (name == "if") {
      n->kind = Node::Kind::kIf;
      ExprPtr cond = Expression();
      ExpectBlockEnd();
      for (;;) {
        Body body = Statements({"elif", "else", "endif"});
        n->branches.emplace_back(std::move(cond), std::move(body));
        ++i_;  // block begin
        const std::string tag = Next().text;
        if (tag == "elif") {
          cond = Expression();
          ExpectBlockEnd();
          continue;
        }
        ExpectBlockEnd();
        if (tag == "else") {
          n->else_body = Statements({"endif"});
          i_ += 2;
          ExpectBlockEnd();
        }
        return n;
      }
    }
    if (name == "for") {
      n->kind = Node::Kind::kFor;
      n->targets = Targets();
      if (!IsName("in")) Error("expected 'in' in a for loop");
      ++i_;
      n->expr = Ternary(/*no_condition=*/true);
      if (IsName("if")) {
        ++i_;
        n->filter = Ternary(true);
      }
      if (IsName("recursive")) Error("recursive for loops are not supported");
      ExpectBlockEnd();
      n->body = Statements({"else", "endfor"});
      ++i_;
      if (Next().text == "else") {
        ExpectBlockEnd();
        n->else_body = Statements({"endfor"});
        i_ += 2;
      }
      ExpectBlockEnd();
      return n;
    }
    if (name == "set") {
      std::vector<std::string> targets = Targets();
      if (targets.size() == 1 && IsOp(".")) {
        ++i_;
        n->attr = ExpectName();
      }
      n->targets = std::move(targets);
      if (Peek().kind == Token::Kind::kBlockEnd) {
        if (!n->attr.empty() || n->targets.size() != 1) Error("a block set takes one name");
        ++i_;
        n->kind = Node::Kind::kSetBlock;
        n->body = Statements({"endset"});
        i_ += 2;
        ExpectBlockEnd();
        return n;
      }
      n->kind = Node::Kind::kSet;
      ExpectOp("=");
      n->expr = TupleOrExpression();
      ExpectBlockEnd();
      return n;
    }
    if (name == "macro") {
      n->kind = Node::Kind::kMacro;
      n->text = ExpectName();
      ExpectOp("(");
      while (!IsOp(")")) {
        std::string param = ExpectName();
        ExprPtr def;
        if (IsOp("=")) {
          ++i_;
          def = Expression();
        }
        n->params.emplace_back(std::move(param), std::move(def));
        if (!IsOp(",")) break;
        ++i_;
      }
      ExpectOp(")");
      ExpectBlockEnd();
      n->body = Statements({"endmacro"});
      i_ += 2;
      if (Peek().kind == Token::Kind::kName) ++i_;  // {% endmacro name %}
      ExpectBlockEnd();
      return n;
    }
    if (name == "break" || name == "continue") {
      n->kind = name == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
      ExpectBlockEnd();
      return n;
    }
    if (name == "generation" || name == "raw") {
      n->kind = Node::Kind::kScope;
      ExpectBlockEnd();
      const std::string end = name == "raw" ? "endraw" : "endgeneration";
      n->body = Statements({end});
      i_ += 2;
      ExpectBlockEnd();
      return n;
    }
    --i_;
    Error("the template uses '{% " + name + " %}', which this Jinja engine does not support");
  }

  std::vector<std::string> Targets() {
    std::vector<std::string> names;
    const bool paren = IsOp("(");
    if (paren) ++i_;
    names.push_back(ExpectName());
    while (IsOp(",")) {
      ++i_;
      names.push_back(ExpectName());
    }
    if (paren) ExpectOp(")");
    return names;
  }

  ExprPtr Make(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // a, b, c as a tuple (for set); a lone expression otherwise.
  ExprPtr TupleOrExpression() {
    ExprPtr first = Expression();
    if (!IsOp(",")) return first;
    ExprPtr tuple = Make(Expr::Kind::kTuple, first->line);
    tuple->args.push_back(std::move(first));
    while (IsOp(",")) {
      ++i_;
      tuple->args.push_back(Expression());
    }
    return tuple;
  }

  ExprPtr Expression() { return Ternary(false); }

  ExprPtr Ternary(bool no_condition) {
    DepthGuard guard(*this);
    ExprPtr value = Or();
    if (no_condition) return value;
    while (IsName("if")) {
      ++i_;
      ExprPtr cond = Or();
      ExprPtr otherwise;
      if (IsName("else")) {
        ++i_;
        otherwise = Ternary(false);
      }
      ExprPtr e = Make(Expr::Kind::kCondition, value->line);
      e->args.push_back(std::move(value));
      e->args.push_back(std::move(cond));
      e->args.push_back(std::move(otherwise));
      value = std::move(e);
    }
    return value;
  }

  ExprPtr Binary(ExprPtr left, const std::string& op, ExprPtr right) {
    ExprPtr e = Make(Expr::Kind::kBinary, left->line);
    e->name = op;
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    return e;
  }

  // operand (op operand)* for the left-associative levels; `take` consumes an operator and
  // returns it, or returns "".
  template <typename Take>
  ExprPtr LeftAssociative(ExprPtr (Parser::*operand)(), Take take) {
    ExprPtr left = (this->*operand)();
    for (std::string op = take(); !op.empty(); op = take())
      left = Binary(std::move(left), op, (this->*operand)());
    return left;
  }
  std::string TakeName(const char* name) {
    if (!IsName(name)) return "";
    ++i_;
    return name;
  }
  std::string TakeOp(std::initializer_list<const char*> ops) {
    for (const char* op : ops) {
      if (IsOp(op)) {
        ++i_;
        return op;
      }
    }
    return "";
  }

  ExprPtr Or() {
    return LeftAssociative(&Parser::And, [this] { return TakeName("or"); });
  }
  ExprPtr And() {
    return LeftAssociative(&Parser::Not, [this] { return TakeName("and"); });
  }
  ExprPtr Not() {
    if (IsName("not")) {
      DepthGuard guard(*this);
      const int line = Next().line;
      ExprPtr e = Make(Expr::Kind::kUnary, line);
      e->name = "not";
      e->args.push_back(Not());
      return e;
    }
    return Compare();
  }
  ExprPtr Compare() {
    ExprPtr first = Concat();
    ExprPtr cmp;
    for (;;) {
      std::string op;
      if (Peek().kind == Token::Kind::kOp &&
          (Peek().text == "==" || Peek().text == "!=" || Peek().text == "<" || Peek().text == ">" ||
           Peek().text == "<=" || Peek().text == ">=")) {
        op = Next().text;
      } else if (IsName("in")) {
        ++i_;
        op = "in";
      } else if (IsName("not") && IsName("in", 1)) {
        i_ += 2;
        op = "not in";
      } else {
        break;
      }
      if (!cmp) {
        cmp = Make(Expr::Kind::kCompare, first->line);
        cmp->args.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(Concat());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }
  ExprPtr Concat() {
    return LeftAssociative(&Parser::Additive, [this] { return TakeOp({"~"}); });
  }
  ExprPtr Additive() {
    return LeftAssociative(&Parser::Multiplicative, [this] { return TakeOp({"+", "-"}); });
  }
  ExprPtr Multiplicative() {
    return LeftAssociative(&Parser::Power, [this] { return TakeOp({"*", "/", "//", "%"}); });
  }
  ExprPtr Power() {
    return LeftAssociative(&Parser::UnaryWithFilters, [this] { return TakeOp({"**"}); });
  }
  ExprPtr UnaryWithFilters() { return Unary(true); }

  // Filters and tests bind to the operand of a sign: -x|abs is abs(-x), as in jinja2.
  ExprPtr Unary(bool with_filter = true) {
    DepthGuard guard(*this);
    ExprPtr e;
    if (IsOp("-") || IsOp("+")) {
      const Token& t = Next();
      e = Make(Expr::Kind::kUnary, t.line);
      e->name = t.text;
      e->args.push_back(Unary(false));
    } else {
      e = Postfix(Primary());
    }
    return with_filter ? FilterChain(std::move(e)) : std::move(e);
  }

  void CallArguments(Expr& e) {
    ExpectOp("(");
    while (!IsOp(")")) {
      if (Peek().kind == Token::Kind::kName && IsOp("=", 1)) {
        std::string key = Next().text;
        ++i_;
        e.kwargs.emplace_back(std::move(key), Expression());
      } else {
        e.args.push_back(Expression());
      }
      if (!IsOp(",")) break;
      ++i_;
    }
    ExpectOp(")");
  }

  ExprPtr FilterChain(ExprPtr value) {
    for (;;) {
      if (IsOp("|")) {
        ++i_;
        ExprPtr f = Make(Expr::Kind::kFilter, value->line);
        f->name = ExpectName();
        f->args.push_back(std::move(value));
        if (IsOp("(")) CallArguments(*f);
        value = std::move(f);
      } else if (IsName("is")) {
        ++i_;
        ExprPtr t = Make(Expr::Kind::kTest, value->line);
        if (IsName("not")) {
          ++i_;
          t->negated = true;
        }
        t->name = ExpectName();
        t->args.push_back(std::move(value));
        if (IsOp("(")) {
          CallArguments(*t);
        } else if (Peek().kind == Token::Kind::kString || Peek().kind == Token::Kind::kInt ||
                   Peek().kind == Token::Kind::kFloat ||
                   (Peek().kind == Token::Kind::kName && !IsName("and") && !IsName("or") &&
                    !IsName("else") && !IsName("if") && !IsName("is") && !IsName("in") &&
                    !IsName("not"))) {
          t->args.push_back(Postfix(Primary()));  // divisibleby 3, equalto 'x'
        }
        value = std::move(t);
      } else {
        return value;
      }
    }
  }

  ExprPtr Postfix(ExprPtr value) {
    for (;;) {
      if (IsOp(".")) {
        ++i_;
        ExprPtr e = Make(Expr::Kind::kAttr, value->line);
        if (Peek().kind == Token::Kind::kInt) {  // foo.0
          e->kind = Expr::Kind::kItem;
          e->args.push_back(std::move(value));
          ExprPtr index = Make(Expr::Kind::kLiteral, e->line);
          index->literal = Value(Next().int_value);
          e->args.push_back(std::move(index));
        } else {
          e->name = ExpectName();
          e->args.push_back(std::move(value));
        }
        value = std::move(e);
      } else if (IsOp("[")) {
        ++i_;
        value = Subscript(std::move(value));
      } else if (IsOp("(")) {
        ExprPtr call = Make(Expr::Kind::kCall, value->line);
        call->args.push_back(std::move(value));
        CallArguments(*call);
        value = std::move(call);
      } else {
        return value;
      }
    }
  }

  ExprPtr Subscript(ExprPtr value) {
    ExprPtr parts[3];
    int colons = 0;
    for (;;) {
      if (IsOp("]")) break;
      if (IsOp(":")) {
        if (++colons > 2) Error("bad slice");
        ++i_;
        continue;
      }
      parts[colons] = Expression();
    }
    ExpectOp("]");
    ExprPtr e = Make(colons == 0 ? Expr::Kind::kItem : Expr::Kind::kSlice, value->line);
    if (colons == 0 && !parts[0]) Error("empty subscript");
    e->args.push_back(std::move(value));
    for (int p = 0; p < (colons == 0 ? 1 : 3); ++p) e->args.push_back(std::move(parts[p]));
    return e;
  }

  ExprPtr Primary() {
    DepthGuard guard(*this);
    const Token& t = Peek();
    ExprPtr e = Make(Expr::Kind::kLiteral, t.line);
    switch (t.kind) {
      case Token::Kind::kName: {
        const std::string& n = Next().text;
        if (n == "true" || n == "True")
          e->literal = Value(true);
        else if (n == "false" || n == "False")
          e->literal = Value(false);
        else if (n == "none" || n == "None")
          e->literal = Value::None();
        else
          e->kind = Expr::Kind::kName, e->name = n;
        return e;
      }
      case Token::Kind::kString: {
        std::string s = Next().text;
        while (Peek().kind == Token::Kind::kString) s += Next().text;  // adjacent literals join
        e->literal = Value(std::move(s));
        return e;
      }
      case Token::Kind::kInt:
        e->literal = Value(Next().int_value);
        return e;
      case Token::Kind::kFloat:
        e->literal = Value(Next().float_value);
        return e;
      default:
        break;
    }
    if (IsOp("(")) {
      ++i_;
      if (IsOp(")")) {
        ++i_;
        e->kind = Expr::Kind::kTuple;
        return e;
      }
      ExprPtr first = Expression();
      if (IsOp(")")) {
        ++i_;
        return first;
      }
      e->kind = Expr::Kind::kTuple;
      e->args.push_back(std::move(first));
      while (IsOp(",")) {
        ++i_;
        if (IsOp(")")) break;
        e->args.push_back(Expression());
      }
      ExpectOp(")");
      return e;
    }
    if (IsOp("[")) {
      ++i_;
      e->kind = Expr::Kind::kList;
      while (!IsOp("]")) {
        e->args.push_back(Expression());
        if (!IsOp(",")) break;
        ++i_;
      }
      ExpectOp("]");
      return e;
    }
    if (IsOp("{")) {
      ++i_;
      e->kind = Expr::Kind::kDict;
      while (!IsOp("}")) {
        e->args.push_back(Expression());
        ExpectOp(":");
        e->args.push_back(Expression());
        if (!IsOp(",")) break;
        ++i_;
      }
      ExpectOp("}");
      return e;
    }
    if (t.kind == Token::Kind::kVarEnd || t.kind == Token::Kind::kBlockEnd)
      Error("expected an expression");
    Error("unexpected '" + t.text + "'");
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
  const char* end_tag_ = "end tag";
};

}  // namespace

StatusOr<Body> ParseTemplate(std::string_view source) {
  // Newlines as jinja2 normalises them, and its default of dropping one trailing newline.
  std::string src;
  src.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      src += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      src += source[i];
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();
  try {
    return Parser(Tokenize(std::move(src))).Template();
  } catch (const TemplateError& e) {
    return InvalidArgumentError("chat template: " + e.message);
  }
}

}  // namespace inflight::jinja
