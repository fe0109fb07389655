#include "guided/grammar.h"

#include <algorithm>
#include <map>
#include <set>

namespace inflight::guided {
namespace {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;
constexpr int kMaxRepeat = 1000;
constexpr int kMaxElements = 200000;

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '.';
}

class Parser {
 public:
  explicit Parser(std::string_view t) : t_(t) {}

  Status Run(std::vector<Grammar::Rule>* rules, int32_t* root) {
    rules_ = rules;
    SkipSpace(true);
    while (i_ < t_.size()) {
      const std::string name = Name();
      if (name.empty()) return Error("expected a rule name");
      SkipSpace(true);
      if (t_.substr(i_, 3) != "::=") return Error("expected '::=' after rule name '" + name + "'");
      i_ += 3;
      const int32_t id = RuleId(name);
      if (defined_.count(id)) return Error("rule '" + name + "' is defined twice");
      defined_.insert(id);
      std::vector<Grammar::Sequence> alts;
      RETURN_IF_ERROR(Alternatives(0, &alts));
      (*rules_)[id].alternatives = std::move(alts);
      SkipSpace(true);
    }
    for (size_t r = 0; r < rules_->size(); ++r) {
      if ((*rules_)[r].alternatives.empty() && !defined_.count(static_cast<int32_t>(r))) {
        return InvalidArgumentError("ebnf grammar: rule '" + (*rules_)[r].name +
                                    "' is used but not defined");
      }
    }
    auto it = ids_.find("root");
    if (it == ids_.end()) return InvalidArgumentError("ebnf grammar: no 'root' rule");
    *root = it->second;
    return OkStatus();
  }

 private:
  Status Error(const std::string& what) const {
    int line = 1;
    for (size_t k = 0; k < i_ && k < t_.size(); ++k) line += t_[k] == '\n';
    return InvalidArgumentError("ebnf grammar: " + what + " (line " + std::to_string(line) + ")");
  }

  // Spaces and comments; newlines only when `newlines` (a rule's body may span lines, but a
  // new line that starts `name ::=` begins the next rule: checked by the caller).
  void SkipSpace(bool newlines) {
    while (i_ < t_.size()) {
      const char c = t_[i_];
      if (c == '#') {
        while (i_ < t_.size() && t_[i_] != '\n') ++i_;
      } else if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
        ++i_;
      } else {
        break;
      }
    }
  }

  std::string Name() {
    const size_t start = i_;
    while (i_ < t_.size() && IsNameChar(t_[i_])) ++i_;
    return std::string(t_.substr(start, i_ - start));
  }

  // Whether a `name ::=` starts at i_ (after spaces): the end of the current rule's body.
  bool AtRuleStart() {
    size_t k = i_;
    while (k < t_.size() && IsNameChar(t_[k])) ++k;
    if (k == i_) return false;
    while (k < t_.size() && (t_[k] == ' ' || t_[k] == '\t' || t_[k] == '\r' || t_[k] == '\n')) ++k;
    return t_.substr(k, 3) == "::=";
  }

  int32_t RuleId(const std::string& name) {
    auto it = ids_.find(name);
    if (it != ids_.end()) return it->second;
    rules_->push_back({name, {}});
    const int32_t id = static_cast<int32_t>(rules_->size()) - 1;
    ids_[name] = id;
    return id;
  }

  int32_t NewRule(std::vector<Grammar::Sequence> alts) {
    rules_->push_back({"(anonymous " + std::to_string(rules_->size()) + ")", std::move(alts)});
    defined_.insert(static_cast<int32_t>(rules_->size()) - 1);
    return static_cast<int32_t>(rules_->size()) - 1;
  }

  Status Alternatives(int depth, std::vector<Grammar::Sequence>* alts) {
    if (depth > 64) return Error("groups nested too deeply");
    while (true) {
      Grammar::Sequence seq;
      RETURN_IF_ERROR(SequenceOf(depth, &seq));
      alts->push_back(std::move(seq));
      SkipSpace(true);
      if (i_ < t_.size() && t_[i_] == '|') {
        ++i_;
        continue;
      }
      return OkStatus();
    }
  }

  Status SequenceOf(int depth, Grammar::Sequence* seq) {
    while (true) {
      SkipSpace(true);
      if (i_ >= t_.size() || t_[i_] == '|' || t_[i_] == ')' || (depth == 0 && AtRuleStart()))
        return OkStatus();
      std::vector<Grammar::Element> item;
      RETURN_IF_ERROR(Item(depth, &item));
      // Quantifiers apply to the item as one element (a literal of several characters or
      // a group becomes a rule of its own).
      while (i_ < t_.size() && (t_[i_] == '*' || t_[i_] == '+' || t_[i_] == '?' || t_[i_] == '{')) {
        int mn = 0, mx = -1;
        RETURN_IF_ERROR(Quantifier(&mn, &mx));
        Grammar::Element x = item.size() == 1 ? item[0] : Grammar::Element{NewRule({item}), {}};
        item = {Repeat(x, mn, mx)};
      }
      for (auto& e : item) seq->push_back(std::move(e));
      elements_ += static_cast<int64_t>(item.size());
      if (elements_ > kMaxElements || static_cast<int>(rules_->size()) > Grammar::kMaxRules)
        return Error("the grammar is too large");
    }
  }

  Status Quantifier(int* mn, int* mx) {
    const char q = t_[i_++];
    if (q == '*')
      *mn = 0, *mx = -1;
    else if (q == '+')
      *mn = 1, *mx = -1;
    else if (q == '?')
      *mn = 0, *mx = 1;
    else {
      auto number = [&](int* out) {
        const size_t start = i_;
        long v = 0;
        while (i_ < t_.size() && t_[i_] >= '0' && t_[i_] <= '9' && v <= kMaxRepeat)
          v = v * 10 + (t_[i_++] - '0');
        *out = static_cast<int>(v);
        return i_ > start && v <= kMaxRepeat;
      };
      if (!number(mn))
        return Error("bad or too large repetition bound (at most " + std::to_string(kMaxRepeat) +
                     ")");
      *mx = *mn;
      if (i_ < t_.size() && t_[i_] == ',') {
        ++i_;
        if (i_ < t_.size() && t_[i_] == '}')
          *mx = -1;
        else if (!number(mx))
          return Error("bad or too large repetition bound (at most " + std::to_string(kMaxRepeat) +
                       ")");
      }
      if (i_ >= t_.size() || t_[i_] != '}') return Error("unterminated {");
      ++i_;
      if (*mx >= 0 && *mx < *mn) return Error("repetition {n,m} with m < n");
    }
    return OkStatus();
  }

  // x{mn,mx} as a rule: mn copies, then (mx - mn) nested optional copies or, unbounded, a
  // right-recursive star.
  Grammar::Element Repeat(const Grammar::Element& x, int mn, int mx) {
    Grammar::Element tail;
    bool has_tail = false;
    if (mx < 0) {
      // S ::= x S | ()
      const int32_t s = NewRule({});
      (*rules_)[s].alternatives = {{x, Grammar::Element{s, {}}}, {}};
      tail = {s, {}};
      has_tail = true;
    } else {
      for (int k = mn; k < mx; ++k) {
        Grammar::Sequence more = {x};
        if (has_tail) more.push_back(tail);
        tail = {NewRule({more, {}}), {}};
        has_tail = true;
      }
    }
    Grammar::Sequence body(static_cast<size_t>(mn), x);
    if (has_tail) body.push_back(tail);
    elements_ += static_cast<int64_t>(body.size());
    return {NewRule({body}), {}};
  }

  StatusOr<uint32_t> Escape() {
    if (i_ >= t_.size()) return Error("unterminated escape");
    const char c = t_[i_++];
    auto hex = [&](int n) -> StatusOr<uint32_t> {
      uint32_t v = 0;
      for (int k = 0; k < n; ++k) {
        if (i_ >= t_.size()) return Error("short escape");
        const char h = t_[i_++];
        const int d = h >= '0' && h <= '9'   ? h - '0'
                      : h >= 'a' && h <= 'f' ? h - 'a' + 10
                      : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                             : -1;
        if (d < 0) return Error("bad hex digit in escape");
        v = v * 16 + static_cast<uint32_t>(d);
      }
      return v;
    };
    switch (c) {
      case 'n':
        return uint32_t{'\n'};
      case 't':
        return uint32_t{'\t'};
      case 'r':
        return uint32_t{'\r'};
      case '0':
        return uint32_t{0};
      case 'x':
        return hex(2);
      case 'u':
        return hex(4);
      case 'U':
        return hex(8);
      default:
        return static_cast<uint32_t>(static_cast<unsigned char>(c));
    }
  }

  StatusOr<uint32_t> CodePoint() {
    const auto b = static_cast<uint8_t>(t_[i_]);
    const int len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (len == 0 || i_ + len > t_.size()) return Error("invalid UTF-8");
    uint32_t cp = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
    for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<uint8_t>(t_[i_ + k]) & 0x3F);
    i_ += len;
    return cp;
  }

  StatusOr<uint32_t> Char() {
    if (t_[i_] == '\\') {
      ++i_;
      return Escape();
    }
    return CodePoint();
  }

  Status Item(int depth, std::vector<Grammar::Element>* out) {
    const char c = t_[i_];
    if (c == '"') {
      ++i_;
      while (true) {
        if (i_ >= t_.size() || t_[i_] == '\n') return Error("unterminated string literal");
        if (t_[i_] == '"') {
          ++i_;
          break;
        }
        auto cp = Char();
        if (!cp.ok()) return cp.status();
        out->push_back({-1, {{*cp, *cp}}});
      }
      if (out->empty()) out->push_back({NewRule({{}}), {}});  // "" matches the empty text
      return OkStatus();
    }
    if (c == '[') {
      ++i_;
      bool negate = false;
      if (i_ < t_.size() && t_[i_] == '^') {
        negate = true;
        ++i_;
      }
      Ranges r;
      while (true) {
        if (i_ >= t_.size()) return Error("unterminated [");
        if (t_[i_] == ']') {
          ++i_;
          break;
        }
        auto lo = Char();
        if (!lo.ok()) return lo.status();
        uint32_t hi = *lo;
        if (i_ + 1 < t_.size() && t_[i_] == '-' && t_[i_ + 1] != ']') {
          ++i_;
          auto h = Char();
          if (!h.ok()) return h.status();
          hi = *h;
          if (hi < *lo) return Error("class range out of order");
        }
        r.emplace_back(*lo, hi);
      }
      std::sort(r.begin(), r.end());
      if (negate) {
        Ranges n;
        uint32_t next = 0;
        for (auto [lo, hi] : r) {
          if (lo > next) n.emplace_back(next, lo - 1);
          next = std::max(next, hi + 1);
        }
        if (next <= 0x10FFFF) n.emplace_back(next, 0x10FFFF);
        r = n;
      }
      out->push_back({-1, r});
      return OkStatus();
    }
    if (c == '(') {
      ++i_;
      std::vector<Grammar::Sequence> alts;
      RETURN_IF_ERROR(Alternatives(depth + 1, &alts));
      SkipSpace(true);
      if (i_ >= t_.size() || t_[i_] != ')') return Error("unterminated (");
      ++i_;
      out->push_back({NewRule(std::move(alts)), {}});
      return OkStatus();
    }
    if (IsNameChar(c)) {
      out->push_back({RuleId(Name()), {}});
      return OkStatus();
    }
    return Error(std::string("unexpected '") + c + "'");
  }

  std::string_view t_;
  size_t i_ = 0;
  std::vector<Grammar::Rule>* rules_ = nullptr;
  std::map<std::string, int32_t> ids_;
  std::set<int32_t> defined_;
  int64_t elements_ = 0;
};

// Left recursion: a rule reachable from itself without consuming a character.
Status CheckLeftRecursion(const std::vector<Grammar::Rule>& rules) {
  const size_t n = rules.size();
  std::vector<char> nullable(n, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (const auto& seq : rules[r].alternatives) {
        bool all = true;
        for (const auto& e : seq) all = all && e.rule >= 0 && nullable[e.rule];
        if (all) {
          nullable[r] = changed = true;
          break;
        }
      }
    }
  }
  std::vector<std::vector<int32_t>> first(n);  // rules that can start r
  for (size_t r = 0; r < n; ++r) {
    for (const auto& seq : rules[r].alternatives) {
      for (const auto& e : seq) {
        if (e.rule < 0) break;
        first[r].push_back(e.rule);
        if (!nullable[e.rule]) break;
      }
    }
  }
  std::vector<int> color(n, 0);  // 0 new, 1 on the path, 2 done
  for (size_t s = 0; s < n; ++s) {
    if (color[s]) continue;
    std::vector<std::pair<int32_t, size_t>> path = {{static_cast<int32_t>(s), 0}};
    color[s] = 1;
    while (!path.empty()) {
      auto& [r, k] = path.back();
      if (k < first[r].size()) {
        const int32_t next = first[r][k++];
        if (color[next] == 1)
          return InvalidArgumentError("ebnf grammar: rule '" + rules[next].name +
                                      "' is left-recursive");
        if (color[next] == 0) {
          color[next] = 1;
          path.push_back({next, 0});
        }
      } else {
        color[r] = 2;
        path.pop_back();
      }
    }
  }
  return OkStatus();
}

bool Contains(const Ranges& r, uint32_t cp) {
  for (const auto& [lo, hi] : r) {
    if (cp >= lo && cp <= hi) return true;
  }
  return false;
}

}  // namespace

StatusOr<std::shared_ptr<const Grammar>> Grammar::Parse(std::string_view text) {
  auto g = std::shared_ptr<Grammar>(new Grammar());
  Parser p(text);
  RETURN_IF_ERROR(p.Run(&g->rules_, &g->root_));
  RETURN_IF_ERROR(CheckLeftRecursion(g->rules_));
  GrammarState start(g.get());
  if (!start.Accepting() && !start.CanContinue())
    return InvalidArgumentError("ebnf grammar: 'root' matches nothing");
  return std::shared_ptr<const Grammar>(g);
}

GrammarState::GrammarState(const Grammar* g) : g_(g) {
  int64_t work = 0;
  for (size_t a = 0; a < g_->rules()[g_->root()].alternatives.size(); ++a) {
    Expand({Frame{g_->root(), static_cast<int32_t>(a), 0}}, &stacks_, 0, &work);
  }
  std::sort(stacks_.begin(), stacks_.end());
  stacks_.erase(std::unique(stacks_.begin(), stacks_.end()), stacks_.end());
}

void GrammarState::Expand(Stack stack, std::vector<Stack>* out, int depth, int64_t* work) const {
  if (++*work > Grammar::kMaxExpansions) return;
  while (true) {
    if (stack.empty()) {
      out->push_back(std::move(stack));
      return;
    }
    const Frame top = stack.back();
    const Grammar::Sequence& seq = g_->rules()[top.rule].alternatives[top.alt];
    if (top.pos == static_cast<int32_t>(seq.size())) {
      stack.pop_back();  // the rule is complete: its parent continues
      continue;
    }
    const Grammar::Element& e = seq[top.pos];
    if (e.rule < 0) {
      if (static_cast<int>(out->size()) < Grammar::kMaxStacks) out->push_back(std::move(stack));
      return;
    }
    // Enter the rule; the parent frame resumes after it (and is dropped when that is its end,
    // so right recursion does not grow the stack).
    stack.back().pos++;
    if (stack.back().pos == static_cast<int32_t>(seq.size())) stack.pop_back();
    if (static_cast<int>(stack.size()) >= Grammar::kMaxDepth || depth > 4 * Grammar::kMaxDepth)
      return;
    const auto& alts = g_->rules()[e.rule].alternatives;
    for (size_t a = 0; a < alts.size(); ++a) {
      Stack next = stack;
      next.push_back({e.rule, static_cast<int32_t>(a), 0});
      Expand(std::move(next), out, depth + 1, work);
    }
    return;
  }
}

bool GrammarState::Advance(uint32_t cp) {
  std::vector<Stack> next;
  int64_t work = 0;
  for (const Stack& s : stacks_) {
    if (s.empty()) continue;
    const Frame& top = s.back();
    const Grammar::Element& e = g_->rules()[top.rule].alternatives[top.alt][top.pos];
    if (!Contains(e.chars, cp)) continue;
    Stack moved = s;
    moved.back().pos++;
    Expand(std::move(moved), &next, 0, &work);
  }
  std::sort(next.begin(), next.end());
  next.erase(std::unique(next.begin(), next.end()), next.end());
  if (static_cast<int>(next.size()) > Grammar::kMaxStacks) next.resize(Grammar::kMaxStacks);
  stacks_ = std::move(next);
  return !stacks_.empty();
}

bool GrammarState::PrefixPossible() const {
  // The code points this UTF-8 prefix can still become (no overlong forms, no surrogates).
  const uint32_t min = len_ == 2 ? 0x80 : len_ == 3 ? 0x800 : 0x10000;
  const uint32_t lo = std::max(partial_ << (6 * need_), min);
  const uint32_t hi =
      std::min((partial_ << (6 * need_)) | ((1u << (6 * need_)) - 1), uint32_t{0x10FFFF});
  if (lo > hi || (lo >= 0xD800 && hi <= 0xDFFF)) return false;
  for (const Stack& s : stacks_) {
    if (s.empty()) continue;
    const Frame& top = s.back();
    for (const auto& [a, b] : g_->rules()[top.rule].alternatives[top.alt][top.pos].chars) {
      if (a <= hi && b >= lo) return true;
    }
  }
  return false;
}

bool GrammarState::Step(uint8_t b) {
  if (need_ == 0) {
    if (b < 0x80) return Advance(b);
    if (b >= 0xC2 && b <= 0xDF)
      need_ = 1, partial_ = b & 0x1F;
    else if (b >= 0xE0 && b <= 0xEF)
      need_ = 2, partial_ = b & 0x0F;
    else if (b >= 0xF0 && b <= 0xF4)
      need_ = 3, partial_ = b & 0x07;
    else
      return false;
    len_ = need_ + 1;
    return PrefixPossible();
  }
  if ((b & 0xC0) != 0x80) return false;
  partial_ = (partial_ << 6) | (b & 0x3F);
  --need_;
  if (need_ > 0) return PrefixPossible();
  const uint32_t cp = partial_;
  const uint32_t min = len_ == 2 ? 0x80 : len_ == 3 ? 0x800 : 0x10000;
  partial_ = 0;
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
    return false;  // overlong, surrogate
  return Advance(cp);
}

bool GrammarState::Accepting() const {
  if (need_ > 0) return false;
  for (const Stack& s : stacks_) {
    if (s.empty()) return true;
  }
  return false;
}

bool GrammarState::CanContinue() const {
  if (need_ > 0) return true;
  for (const Stack& s : stacks_) {
    if (!s.empty()) return true;
  }
  return false;
}

std::string GrammarState::Key() const {
  std::string k;
  auto put = [&k](int32_t v) { k.append(reinterpret_cast<const char*>(&v), sizeof v); };
  put(need_);
  put(static_cast<int32_t>(partial_));
  for (const Stack& s : stacks_) {
    put(static_cast<int32_t>(s.size()));
    for (const Frame& f : s) {
      put(f.rule);
      put(f.alt);
      put(f.pos);
    }
  }
  return k;
}

}  // namespace inflight::guided
