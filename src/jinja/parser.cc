#include "jinja/parser.h"

#include <cctype>
#include <cstdlib>

#include "jinja/error.h"

namespace inflight::jinja {
namespace {

// ---- Lexer ----

struct Token {
  enum class Kind { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEnd };
  Kind kind;
  std::string text;  // text, name, string value, operator
  int64_t int_value = 0;
  double float_value = 0;
  int line = 0;
};

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {}

  std::vector<Token> Run() {
    size_t text_start = 0;
    while (pos_ < src_.size()) {
      const size_t open = FindTagStart(pos_);
      if (open == std::string::npos) break;
      const char type = src_[open + 1];
      const char sign = open + 2 < src_.size() ? src_[open + 2] : '\0';
      std::string text = src_.substr(text_start, open - text_start);
      if (sign == '-') {
        while (!text.empty() && IsSpace(text.back())) text.pop_back();
      } else if (type != '{' && sign != '+') {
        LstripBlock(text, text_start);
      }
      EmitText(std::move(text), text_start);
      pos_ = open + 2 + (sign == '-' || sign == '+' ? 1 : 0);
      if (type == '#') {
        SkipComment();
      } else if (type == '{') {
        Emit(Token::Kind::kVarBegin, "");
        TagTokens(/*block=*/false);
      } else {
        Emit(Token::Kind::kBlockBegin, "");
        const size_t tokens_before = tokens_.size();
        TagTokens(/*block=*/true);
        if (tokens_.size() == tokens_before + 2 && tokens_[tokens_before].kind == Token::Kind::kName &&
            tokens_[tokens_before].text == "raw") {
          RawBlock();
        }
      }
      text_start = pos_;
    }
    EmitText(src_.substr(std::min(text_start, src_.size())), text_start);
    Emit(Token::Kind::kEnd, "");
    return std::move(tokens_);
  }

 private:
  size_t FindTagStart(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  int LineAt(size_t p) const {
    int line = 1;
    for (size_t i = 0; i < p && i < src_.size(); ++i) line += src_[i] == '\n';
    return line;
  }

  // lstrip_blocks: spaces and tabs between the start of a line and a block or comment tag.
  void LstripBlock(std::string& text, size_t text_start) const {
    const size_t nl = text.rfind('\n');
    const bool line_start = nl != std::string::npos || text_start == 0 || src_[text_start - 1] == '\n';
    if (!line_start) return;
    const size_t from = nl == std::string::npos ? 0 : nl + 1;
    for (size_t i = from; i < text.size(); ++i) {
      if (!IsSpace(text[i])) return;
    }
    text.resize(from);
  }

  void EmitText(std::string text, size_t at) {
    if (text.empty()) return;
    tokens_.push_back({Token::Kind::kText, std::move(text), 0, 0, LineAt(at)});
  }
  void Emit(Token::Kind kind, std::string text) { tokens_.push_back({kind, std::move(text), 0, 0, LineAt(pos_)}); }

  // After a block or comment end: "-" strips all following whitespace; otherwise trim_blocks
  // drops one newline ("+" keeps it).
  void AfterTagEnd(char sign, bool block) {
    if (sign == '-') {
      while (pos_ < src_.size() && IsSpace(src_[pos_])) ++pos_;
    } else if (block && sign != '+' && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
    }
  }

  void SkipComment() {
    const size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) Fail("line " + std::to_string(LineAt(pos_)) + ": unclosed comment");
    const char sign = end > pos_ && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : '\0';
    pos_ = end + 2;
    AfterTagEnd(sign, /*block=*/true);
  }

  // {% raw %} ... {% endraw %}: the text between is output as is.
  void RawBlock() {
    size_t search = pos_;
    for (;;) {
      const size_t open = src_.find("{%", search);
      if (open == std::string::npos) Fail("line " + std::to_string(LineAt(pos_)) + ": unclosed raw block");
      size_t p = open + 2;
      const char sign = p < src_.size() && (src_[p] == '-' || src_[p] == '+') ? src_[p] : '\0';
      if (sign) ++p;
      while (p < src_.size() && IsSpace(src_[p])) ++p;
      if (src_.compare(p, 6, "endraw") != 0) {
        search = open + 2;
        continue;
      }
      p += 6;
      while (p < src_.size() && IsSpace(src_[p])) ++p;
      char end_sign = '\0';
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) end_sign = src_[p++];
      if (src_.compare(p, 2, "%}") != 0) Fail("line " + std::to_string(LineAt(open)) + ": malformed endraw");
      std::string text = src_.substr(pos_, open - pos_);
      if (sign == '-') {
        while (!text.empty() && IsSpace(text.back())) text.pop_back();
      }
      EmitText(std::move(text), pos_);
      pos_ = p + 2;
      Emit(Token::Kind::kBlockBegin, "");
      Emit(Token::Kind::kName, "endraw");
      Emit(Token::Kind::kBlockEnd, "");
      AfterTagEnd(end_sign, /*block=*/true);
      return;
    }
  }

  void TagTokens(bool block) {
    int depth = 0;  // open brackets: a '}' inside them is not a tag end
    for (;;) {
      while (pos_ < src_.size() && IsSpace(src_[pos_])) ++pos_;
      if (pos_ >= src_.size()) Fail("line " + std::to_string(LineAt(pos_)) + ": unclosed tag");
      if (depth == 0) {
        char sign = '\0';
        size_t p = pos_;
        if (src_[p] == '-' || (block && src_[p] == '+')) sign = src_[p++];
        if (src_.compare(p, 2, block ? "%}" : "}}") == 0) {
          pos_ = p + 2;
          Emit(block ? Token::Kind::kBlockEnd : Token::Kind::kVarEnd, "");
          if (block) AfterTagEnd(sign, true);
          else if (sign == '-') AfterTagEnd(sign, false);
          return;
        }
      }
      const char c = src_[pos_];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = pos_;
        while (e < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
        Emit(Token::Kind::kName, src_.substr(pos_, e - pos_));
        pos_ = e;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        Number();
      } else if (c == '\'' || c == '"') {
        String(c);
      } else {
        static const char* kOps[] = {"==", "!=", "<=", ">=", "//", "**", "<", ">", "+", "-", "*", "/", "%", "~",
                                     "|",  ".",  ",",  ":",  "(",  ")",  "[", "]", "{", "}", "="};
        bool matched = false;
        for (const char* op : kOps) {
          const size_t n = std::char_traits<char>::length(op);
          if (src_.compare(pos_, n, op) == 0) {
            if (op[0] == '(' || op[0] == '[' || op[0] == '{') ++depth;
            if ((op[0] == ')' || op[0] == ']' || op[0] == '}') && n == 1) --depth;
            Emit(Token::Kind::kOp, op);
            pos_ += n;
            matched = true;
            break;
          }
        }
        if (!matched) Fail("line " + std::to_string(LineAt(pos_)) + ": unexpected character '" + std::string(1, c) + "'");
      }
    }
  }

  void Number() {
    size_t e = pos_;
    bool is_float = false;
    std::string digits;
    auto take_digits = [&] {
      while (e < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) {
        if (src_[e] != '_') digits += src_[e];
        ++e;
      }
    };
    take_digits();
    if (e + 1 < src_.size() && src_[e] == '.' && std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
      is_float = true;
      digits += src_[e++];
      take_digits();
    }
    if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t f = e + 1;
      if (f < src_.size() && (src_[f] == '+' || src_[f] == '-')) ++f;
      if (f < src_.size() && std::isdigit(static_cast<unsigned char>(src_[f]))) {
        is_float = true;
        digits += 'e';
        digits.append(src_, e + 1, f - e - 1);
        e = f;
        take_digits();
      }
    }
    Token t{is_float ? Token::Kind::kFloat : Token::Kind::kInt, digits, 0, 0, LineAt(pos_)};
    if (is_float) {
      t.float_value = std::strtod(digits.c_str(), nullptr);
    } else {
      errno = 0;
      t.int_value = std::strtoll(digits.c_str(), nullptr, 10);
      if (errno == ERANGE) Fail("line " + std::to_string(t.line) + ": integer literal out of range");
    }
    tokens_.push_back(std::move(t));
    pos_ = e;
  }

  void String(char quote) {
    std::string out;
    size_t p = pos_ + 1;
    for (;;) {
      if (p >= src_.size()) Fail("line " + std::to_string(LineAt(pos_)) + ": unterminated string");
      const char c = src_[p++];
      if (c == quote) break;
      if (c != '\\' || p >= src_.size()) {
        out += c;
        continue;
      }
      const char e = src_[p++];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '0': out += '\0'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case '\n': break;
        case 'x':
        case 'u': {
          const int n = e == 'x' ? 2 : 4;
          if (p + n > src_.size()) Fail("line " + std::to_string(LineAt(pos_)) + ": bad escape");
          const uint32_t cp = static_cast<uint32_t>(std::strtoul(src_.substr(p, n).c_str(), nullptr, 16));
          p += n;
          AppendUtf8(cp, out);
          break;
        }
        default: out += '\\', out += e;
      }
    }
    Emit(Token::Kind::kString, std::move(out));
    pos_ = p;
  }

  static void AppendUtf8(uint32_t cp, std::string& out) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6)), out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xE0 | (cp >> 12)), out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::string src_;
  size_t pos_ = 0;
  std::vector<Token> tokens_;
};

// ---- Parser ----

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
  [[noreturn]] void Error(const std::string& what) const { Fail("line " + std::to_string(Peek().line) + ": " + what); }
  bool IsOp(const char* op, size_t ahead = 0) const { return Peek(ahead).kind == Token::Kind::kOp && Peek(ahead).text == op; }
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
    for (std::string op = take(); !op.empty(); op = take()) left = Binary(std::move(left), op, (this->*operand)());
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

  ExprPtr Or() { return LeftAssociative(&Parser::And, [this] { return TakeName("or"); }); }
  ExprPtr And() { return LeftAssociative(&Parser::Not, [this] { return TakeName("and"); }); }
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
  ExprPtr Concat() { return LeftAssociative(&Parser::Additive, [this] { return TakeOp({"~"}); }); }
  ExprPtr Additive() { return LeftAssociative(&Parser::Multiplicative, [this] { return TakeOp({"+", "-"}); }); }
  ExprPtr Multiplicative() {
    return LeftAssociative(&Parser::Power, [this] { return TakeOp({"*", "/", "//", "%"}); });
  }
  ExprPtr Power() { return LeftAssociative(&Parser::UnaryWithFilters, [this] { return TakeOp({"**"}); }); }
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
                   (Peek().kind == Token::Kind::kName && !IsName("and") && !IsName("or") && !IsName("else") &&
                    !IsName("if") && !IsName("is") && !IsName("in") && !IsName("not"))) {
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
        if (n == "true" || n == "True") e->literal = Value(true);
        else if (n == "false" || n == "False") e->literal = Value(false);
        else if (n == "none" || n == "None") e->literal = Value::None();
        else e->kind = Expr::Kind::kName, e->name = n;
        return e;
      }
      case Token::Kind::kString: {
        std::string s = Next().text;
        while (Peek().kind == Token::Kind::kString) s += Next().text;  // adjacent literals join
        e->literal = Value(std::move(s));
        return e;
      }
      case Token::Kind::kInt: e->literal = Value(Next().int_value); return e;
      case Token::Kind::kFloat: e->literal = Value(Next().float_value); return e;
      default: break;
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
    if (t.kind == Token::Kind::kVarEnd || t.kind == Token::Kind::kBlockEnd) Error("expected an expression");
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
    return Parser(Lexer(std::move(src)).Run()).Template();
  } catch (const TemplateError& e) {
    return InvalidArgumentError("chat template: " + e.message);
  }
}

}  // namespace inflight::jinja
