#include "guided/regex_dfa.h"

#include <algorithm>
#include <string>
#include <utility>

#include "guided/literal_scan.h"

namespace inflight::guided {
namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr int kMaxDepth = 100;    // nesting of groups
constexpr int kMaxRepeat = 1000;  // {n,m} bounds

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;  // code point ranges

struct Node {
  enum Kind { kEmpty, kSet, kConcat, kAlt, kRepeat, kScan } kind = kEmpty;
  Ranges set;
  std::shared_ptr<const LiteralScan> scan;  // kScan: shared by the copies a repeat builds
  std::vector<std::unique_ptr<Node>> children;
  int min = 0, max = -1;  // kRepeat; max -1 = unbounded
};

Ranges Normalize(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (const auto& [lo, hi] : r) {
    if (!out.empty() && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.emplace_back(lo, hi);
    }
  }
  return out;
}

Ranges Complement(const Ranges& r) {
  Ranges n = Normalize(r), out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : n) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  return out;
}

class Parser {
 public:
  explicit Parser(std::string_view p) : p_(p) {}

  StatusOr<std::unique_ptr<Node>> Parse() {
    if (!p_.empty() && p_[0] == '^') ++i_;
    auto n = Alt(0);
    if (!n.ok()) return n;
    if (i_ < p_.size()) return Error("unexpected ')'");
    return n;
  }

 private:
  Status Error(const std::string& what) const {
    return InvalidArgumentError("regex: " + what + " at offset " + std::to_string(i_));
  }

  bool AtEnd() const {
    // A trailing unescaped $ ends the pattern.
    return i_ >= p_.size() || (p_[i_] == '$' && i_ + 1 == p_.size());
  }

  StatusOr<std::unique_ptr<Node>> Alt(int depth) {
    if (depth > kMaxDepth) return Error("groups nested too deeply");
    auto alt = std::make_unique<Node>();
    alt->kind = Node::kAlt;
    while (true) {
      auto c = Concat(depth);
      if (!c.ok()) return c;
      alt->children.push_back(std::move(c).value());
      if (i_ < p_.size() && p_[i_] == '|') {
        ++i_;
        continue;
      }
      break;
    }
    if (alt->children.size() == 1) return std::move(alt->children[0]);
    return alt;
  }

  StatusOr<std::unique_ptr<Node>> Concat(int depth) {
    auto cat = std::make_unique<Node>();
    cat->kind = Node::kConcat;
    while (!AtEnd() && p_[i_] != '|' && p_[i_] != ')') {
      auto a = Atom(depth);
      if (!a.ok()) return a;
      std::unique_ptr<Node> node = std::move(a).value();
      while (i_ < p_.size() && (p_[i_] == '*' || p_[i_] == '+' || p_[i_] == '?' || p_[i_] == '{')) {
        int mn = 0, mx = -1;
        const char q = p_[i_];
        if (q == '{') {
          auto r = Bounds(&mn, &mx);
          if (!r.ok()) return r;
        } else {
          ++i_;
          mn = q == '+' ? 1 : 0;
          mx = q == '?' ? 1 : -1;
        }
        if (i_ < p_.size() && p_[i_] == '?') ++i_;  // lazy: same language
        auto rep = std::make_unique<Node>();
        rep->kind = Node::kRepeat;
        rep->min = mn;
        rep->max = mx;
        rep->children.push_back(std::move(node));
        node = std::move(rep);
      }
      cat->children.push_back(std::move(node));
    }
    if (AtEnd() && i_ < p_.size()) ++i_;  // the trailing $
    return cat;
  }

  Status Bounds(int* mn, int* mx) {
    ++i_;  // {
    auto number = [&](int* out) -> bool {
      size_t start = i_;
      long v = 0;
      while (i_ < p_.size() && p_[i_] >= '0' && p_[i_] <= '9') {
        v = v * 10 + (p_[i_] - '0');
        if (v > kMaxRepeat) return false;
        ++i_;
      }
      *out = static_cast<int>(v);
      return i_ > start;
    };
    if (!number(mn))
      return Error("bad or too large repetition bound (at most " + std::to_string(kMaxRepeat) +
                   ")");
    *mx = *mn;
    if (i_ < p_.size() && p_[i_] == ',') {
      ++i_;
      if (i_ < p_.size() && p_[i_] == '}') {
        *mx = -1;
      } else if (!number(mx)) {
        return Error("bad or too large repetition bound (at most " + std::to_string(kMaxRepeat) +
                     ")");
      }
    }
    if (i_ >= p_.size() || p_[i_] != '}') return Error("unterminated {");
    ++i_;
    if (*mx >= 0 && *mx < *mn) return Error("repetition {n,m} with m < n");
    return OkStatus();
  }

  StatusOr<uint32_t> CodePoint() {
    // One UTF-8 encoded code point of the pattern.
    const auto b = static_cast<uint8_t>(p_[i_]);
    int len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (len == 0 || i_ + len > p_.size()) return Error("invalid UTF-8");
    uint32_t cp = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
    for (int k = 1; k < len; ++k) {
      const auto c = static_cast<uint8_t>(p_[i_ + k]);
      if ((c & 0xC0) != 0x80) return Error("invalid UTF-8");
      cp = (cp << 6) | (c & 0x3F);
    }
    i_ += len;
    return cp;
  }

  StatusOr<uint32_t> Hex(int digits) {
    uint32_t v = 0;
    for (int k = 0; k < digits; ++k) {
      if (i_ >= p_.size()) return Error("short hex escape");
      const char c = p_[i_++];
      int d = c >= '0' && c <= '9'   ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                     : -1;
      if (d < 0) return Error("bad hex digit");
      v = v * 16 + d;
    }
    return v;
  }

  // After a backslash: the escape's code point ranges.
  StatusOr<Ranges> Escape() {
    if (i_ >= p_.size()) return Error("trailing backslash");
    const char c = p_[i_++];
    const Ranges digit = {{'0', '9'}}, word = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}},
                 space = {{'\t', '\r'}, {' ', ' '}};
    switch (c) {
      case 'd':
        return digit;
      case 'w':
        return word;
      case 's':
        return space;
      case 'D':
        return Complement(digit);
      case 'W':
        return Complement(word);
      case 'S':
        return Complement(space);
      case 'n':
        return Ranges{{'\n', '\n'}};
      case 't':
        return Ranges{{'\t', '\t'}};
      case 'r':
        return Ranges{{'\r', '\r'}};
      case 'f':
        return Ranges{{'\f', '\f'}};
      case 'v':
        return Ranges{{'\v', '\v'}};
      case '0':
        return Ranges{{0, 0}};
      case 'x': {
        auto v = Hex(2);
        if (!v.ok()) return v.status();
        return Ranges{{*v, *v}};
      }
      case 'u': {
        auto v = Hex(4);
        if (!v.ok()) return v.status();
        if (*v >= 0xD800 && *v <= 0xDFFF) return Error("surrogate code point");
        return Ranges{{*v, *v}};
      }
      default:
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
          return Error(std::string("unsupported escape \\") + c);
        }
        --i_;
        auto cp = CodePoint();
        if (!cp.ok()) return cp.status();
        return Ranges{{*cp, *cp}};
    }
  }

  StatusOr<Ranges> Class() {
    ++i_;  // [
    bool negate = false;
    if (i_ < p_.size() && p_[i_] == '^') {
      negate = true;
      ++i_;
    }
    Ranges r;
    bool first = true;
    while (true) {
      if (i_ >= p_.size()) return Error("unterminated [");
      if (p_[i_] == ']' && !first) {
        ++i_;
        break;
      }
      first = false;
      Ranges item;
      if (p_[i_] == '\\') {
        ++i_;
        auto e = Escape();
        if (!e.ok()) return e.status();
        item = *e;
      } else {
        auto cp = CodePoint();
        if (!cp.ok()) return cp.status();
        item = {{*cp, *cp}};
      }
      if (item.size() == 1 && item[0].first == item[0].second && i_ + 1 < p_.size() &&
          p_[i_] == '-' && p_[i_ + 1] != ']') {
        ++i_;
        Ranges hi_item;
        if (p_[i_] == '\\') {
          ++i_;
          auto e = Escape();
          if (!e.ok()) return e.status();
          hi_item = *e;
        } else {
          auto cp = CodePoint();
          if (!cp.ok()) return cp.status();
          hi_item = {{*cp, *cp}};
        }
        if (hi_item.size() != 1 || hi_item[0].first != hi_item[0].second)
          return Error("bad class range");
        if (hi_item[0].first < item[0].first) return Error("class range out of order");
        item = {{item[0].first, hi_item[0].first}};
      }
      r.insert(r.end(), item.begin(), item.end());
    }
    return negate ? Complement(r) : Normalize(r);
  }

  StatusOr<std::unique_ptr<Node>> Atom(int depth) {
    auto node = std::make_unique<Node>();
    const char c = p_[i_];
    if (c == '(') {
      ++i_;
      bool json_safe = false;
      if (i_ + 1 < p_.size() && p_[i_] == '?') {
        // (?J:...): an extension for JSON schema patterns: only characters a JSON string
        // holds unescaped (no '"', '\\', controls).
        if (i_ + 2 < p_.size() && p_[i_ + 1] == 'J' && p_[i_ + 2] == ':') {
          json_safe = true;
          ++i_;
        } else if (p_[i_ + 1] == '~' || p_[i_ + 1] == '*') {
          return ScanGroup();
        } else if (p_[i_ + 1] != ':') {
          return Error("unsupported group (?" + std::string(1, p_[i_ + 1]) + "...)");
        }
        i_ += 2;
      }
      if (json_safe) ++json_safe_;
      auto inner = Alt(depth + 1);
      if (json_safe) --json_safe_;
      if (!inner.ok()) return inner;
      if (i_ >= p_.size() || p_[i_] != ')') return Error("unterminated (");
      ++i_;
      return inner;
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') return Error("nothing to repeat");
    node->kind = Node::kSet;
    if (c == '[') {
      auto r = Class();
      if (!r.ok()) return r.status();
      node->set = *r;
    } else if (c == '.') {
      ++i_;
      node->set = Complement({{'\n', '\n'}});
    } else if (c == '\\') {
      ++i_;
      auto e = Escape();
      if (!e.ok()) return e.status();
      node->set = *e;
    } else if (c == '^' || c == '$') {
      return Error("anchors are only accepted at the pattern's ends");
    } else {
      auto cp = CodePoint();
      if (!cp.ok()) return cp.status();
      node->set = {{*cp, *cp}};
    }
    // Surrogates are never valid UTF-8.
    Ranges valid;
    Ranges set = node->set;
    if (json_safe_ > 0) {
      Ranges banned = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
      Ranges keep;
      for (auto [lo, hi] : Complement(banned)) keep.emplace_back(lo, hi);
      set = Intersect(Normalize(set), keep);
    }
    for (auto [lo, hi] : Normalize(set)) {
      if (lo <= 0xDFFF && hi >= 0xD800) {
        if (lo < 0xD800) valid.emplace_back(lo, 0xD7FF);
        if (hi > 0xDFFF) valid.emplace_back(0xE000, hi);
      } else {
        valid.emplace_back(lo, hi);
      }
    }
    node->set = valid;
    return node;
  }

  // (?~L1|L2|...) or (?*L1|L2|...), at the '?': literal characters and escapes of one
  // character each, compiled to a LiteralScan.
  StatusOr<std::unique_ptr<Node>> ScanGroup() {
    const size_t open = i_ - 1;
    const bool until = p_[i_ + 1] == '*';
    if (json_safe_ > 0) return Error("(?~...) and (?*...) cannot be used in a JSON string");
    i_ += 2;
    std::vector<std::string> literals(1);
    while (true) {
      if (i_ >= p_.size()) return Error("unterminated (?" + std::string(until ? "*" : "~"));
      const char c = p_[i_];
      if (c == ')' || c == '|') {
        ++i_;
        if (c == ')') break;
        literals.emplace_back();
        continue;
      }
      uint32_t cp;
      if (c == '\\') {
        ++i_;
        auto e = Escape();
        if (!e.ok()) return e.status();
        if (e->size() != 1 || (*e)[0].first != (*e)[0].second)
          return Error("(?~...) and (?*...) hold literal characters only");
        cp = (*e)[0].first;
      } else if (std::string_view("()[]{}.*+?^$").find(c) != std::string_view::npos) {
        return Error(std::string("'") + c + "' must be escaped in (?~...) and (?*...)");
      } else {
        auto v = CodePoint();
        if (!v.ok()) return v.status();
        cp = *v;
      }
      AppendUtf8(cp, &literals.back());
    }
    auto scan = BuildLiteralScan(literals, until);
    if (!scan.ok()) {
      i_ = open;
      return Error(scan.status().message());
    }
    if (scan->Empty()) {
      i_ = open;
      return Error("(?*...) matches no text: another literal occurs wherever the first could end");
    }
    auto node = std::make_unique<Node>();
    node->kind = Node::kScan;
    node->scan = std::make_shared<const LiteralScan>(std::move(scan).value());
    return node;
  }

  static void AppendUtf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      *out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      *out += static_cast<char>(0xC0 | (cp >> 6));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      *out += static_cast<char>(0xE0 | (cp >> 12));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      *out += static_cast<char>(0xF0 | (cp >> 18));
      *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  static Ranges Intersect(const Ranges& a, const Ranges& b) {
    Ranges out;
    for (const auto& [alo, ahi] : a) {
      for (const auto& [blo, bhi] : b) {
        const uint32_t lo = std::max(alo, blo), hi = std::min(ahi, bhi);
        if (lo <= hi) out.emplace_back(lo, hi);
      }
    }
    return out;
  }

  std::string_view p_;
  size_t i_ = 0;
  int json_safe_ = 0;
};

// UTF-8 byte-range sequences covering the code points [lo, hi] (no surrogates inside).
void Utf8Sequences(uint32_t lo, uint32_t hi,
                   std::vector<std::vector<std::pair<uint8_t, uint8_t>>>* out) {
  static const uint32_t kLimits[] = {0x7F, 0x7FF, 0xFFFF};
  for (uint32_t limit : kLimits) {
    if (lo <= limit && hi > limit) {
      Utf8Sequences(lo, limit, out);
      Utf8Sequences(limit + 1, hi, out);
      return;
    }
  }
  if (hi <= 0x7F) {
    out->push_back({{static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)}});
    return;
  }
  const int len = hi <= 0x7FF ? 2 : hi <= 0xFFFF ? 3 : 4;
  for (int k = 1; k < len; ++k) {
    const uint32_t m = (1u << (6 * k)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        Utf8Sequences(lo, lo | m, out);
        Utf8Sequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        Utf8Sequences(lo, (hi & ~m) - 1, out);
        Utf8Sequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  auto encode = [len](uint32_t cp, uint8_t* b) {
    if (len == 2) {
      b[0] = static_cast<uint8_t>(0xC0 | (cp >> 6));
      b[1] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    } else if (len == 3) {
      b[0] = static_cast<uint8_t>(0xE0 | (cp >> 12));
      b[1] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
      b[2] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    } else {
      b[0] = static_cast<uint8_t>(0xF0 | (cp >> 18));
      b[1] = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
      b[2] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
      b[3] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    }
  };
  uint8_t a[4], b[4];
  encode(lo, a);
  encode(hi, b);
  std::vector<std::pair<uint8_t, uint8_t>> seq;
  for (int k = 0; k < len; ++k) seq.emplace_back(a[k], b[k]);
  out->push_back(seq);
}

}  // namespace

// Builds the NFA of a parsed pattern (Thompson construction; repeats are expanded copies).
class RegexCompiler {
 public:
  explicit RegexCompiler(RegexDfa* dfa) : d_(dfa) {}

  struct Frag {
    int32_t in, out;
  };

  StatusOr<Frag> Build(const Node& n) {
    // Every call adds states: checked here, repeats of empty groups stay bounded too.
    if (Full()) return TooLarge();
    switch (n.kind) {
      case Node::kEmpty: {
        const int32_t s = New();
        return Frag{s, s};
      }
      case Node::kSet: {
        const int32_t in = New(), out = New();
        std::vector<std::vector<std::pair<uint8_t, uint8_t>>> seqs;
        for (const auto& [lo, hi] : n.set) Utf8Sequences(lo, hi, &seqs);
        for (const auto& seq : seqs) {
          int32_t cur = New();
          d_->nfa_[in].eps.push_back(cur);
          for (size_t k = 0; k < seq.size(); ++k) {
            const int32_t next = k + 1 == seq.size() ? out : New();
            d_->nfa_[cur].lo = seq[k].first;
            d_->nfa_[cur].hi = seq[k].second;
            d_->nfa_[cur].next = next;
            cur = next;
          }
        }
        if (Full()) return TooLarge();
        return Frag{in, out};
      }
      case Node::kConcat: {
        const int32_t in = New();
        int32_t cur = in;
        for (const auto& c : n.children) {
          auto f = Build(*c);
          if (!f.ok()) return f;
          d_->nfa_[cur].eps.push_back(f->in);
          cur = f->out;
        }
        return Frag{in, cur};
      }
      case Node::kAlt: {
        const int32_t in = New(), out = New();
        for (const auto& c : n.children) {
          auto f = Build(*c);
          if (!f.ok()) return f;
          d_->nfa_[in].eps.push_back(f->in);
          d_->nfa_[f->out].eps.push_back(out);
        }
        return Frag{in, out};
      }
      case Node::kRepeat: {
        const int32_t in = New();
        int32_t cur = in;
        for (int k = 0; k < n.min; ++k) {
          auto f = Build(*n.children[0]);
          if (!f.ok()) return f;
          d_->nfa_[cur].eps.push_back(f->in);
          cur = f->out;
        }
        if (n.max < 0) {
          auto f = Build(*n.children[0]);
          if (!f.ok()) return f;
          const int32_t out = New();
          d_->nfa_[cur].eps.push_back(f->in);
          d_->nfa_[cur].eps.push_back(out);
          d_->nfa_[f->out].eps.push_back(f->in);
          d_->nfa_[f->out].eps.push_back(out);
          return Frag{in, out};
        }
        const int32_t out = New();
        for (int k = n.min; k < n.max; ++k) {
          d_->nfa_[cur].eps.push_back(out);
          auto f = Build(*n.children[0]);
          if (!f.ok()) return f;
          d_->nfa_[cur].eps.push_back(f->in);
          cur = f->out;
        }
        d_->nfa_[cur].eps.push_back(out);
        return Frag{in, out};
      }
      case Node::kScan:
        return BuildScan(*n.scan);
    }
    return InternalError("regex: unknown node");
  }

 private:
  // A LiteralScan's states as NFA states: a hub per state, its byte ranges as edges from it.
  StatusOr<Frag> BuildScan(const LiteralScan& scan) {
    const int64_t needed = static_cast<int64_t>(scan.edges.size()) + scan.num_edges() + 2;
    if (static_cast<int64_t>(d_->nfa_.size()) + needed > RegexDfa::kMaxNfaStates) {
      return TooLarge();
    }
    const int32_t out = New();
    const int32_t hub0 = static_cast<int32_t>(d_->nfa_.size());
    for (size_t s = 0; s < scan.edges.size(); ++s) New();
    for (size_t s = 0; s < scan.edges.size(); ++s) {
      const int32_t hub = hub0 + static_cast<int32_t>(s);
      if (scan.accepting[s]) d_->nfa_[hub].eps.push_back(out);
      for (const LiteralScan::Edge& e : scan.edges[s]) {
        const int32_t r = New();
        d_->nfa_[r].lo = e.lo;
        d_->nfa_[r].hi = e.hi;
        d_->nfa_[r].next = e.next == LiteralScan::kMatched ? out : hub0 + e.next;
        d_->nfa_[hub].eps.push_back(r);
      }
    }
    return Frag{hub0, out};
  }

  int32_t New() {
    d_->nfa_.emplace_back();
    return static_cast<int32_t>(d_->nfa_.size()) - 1;
  }
  bool Full() const { return static_cast<int32_t>(d_->nfa_.size()) > RegexDfa::kMaxNfaStates; }
  static Status TooLarge() {
    return InvalidArgumentError("regex: the pattern is too large (over " +
                                std::to_string(RegexDfa::kMaxNfaStates) +
                                " automaton states; bound its repetitions)");
  }

  RegexDfa* d_;
};

Status RegexDfa::Check(std::string_view pattern) {
  Parser parser(pattern);
  return parser.Parse().status();
}

StatusOr<std::unique_ptr<RegexDfa>> RegexDfa::Compile(std::string_view pattern) {
  Parser parser(pattern);
  auto ast = parser.Parse();
  if (!ast.ok()) return ast.status();
  auto dfa = std::unique_ptr<RegexDfa>(new RegexDfa());
  RegexCompiler compiler(dfa.get());
  auto frag = compiler.Build(**ast);
  if (!frag.ok()) return frag.status();
  if (static_cast<int32_t>(dfa->nfa_.size()) > kMaxNfaStates) {
    return InvalidArgumentError("regex: the pattern is too large (over " +
                                std::to_string(kMaxNfaStates) +
                                " automaton states; bound its repetitions)");
  }
  dfa->nfa_start_ = frag->in;
  dfa->nfa_accept_ = frag->out;
  std::vector<int32_t> start{frag->in};
  dfa->Close(&start);
  dfa->AddState(std::move(start));
  return dfa;
}

void RegexDfa::Close(std::vector<int32_t>* states) const {
  if (mark_.size() != nfa_.size()) mark_.assign(nfa_.size(), 0);
  if (++stamp_ == 0) {
    std::fill(mark_.begin(), mark_.end(), 0);
    stamp_ = 1;
  }
  std::vector<int32_t> unique;
  for (int32_t s : *states) {
    if (mark_[s] != stamp_) {
      mark_[s] = stamp_;
      unique.push_back(s);
    }
  }
  *states = unique;
  std::vector<int32_t> stack = std::move(unique);
  while (!stack.empty()) {
    const int32_t s = stack.back();
    stack.pop_back();
    for (int32_t e : nfa_[s].eps) {
      if (mark_[e] != stamp_) {
        mark_[e] = stamp_;
        states->push_back(e);
        stack.push_back(e);
      }
    }
  }
  // Only states with a byte edge, and the accept state, tell DFA states apart.
  std::vector<int32_t> kept;
  for (int32_t s : *states) {
    if (nfa_[s].lo <= nfa_[s].hi || s == nfa_accept_) kept.push_back(s);
  }
  std::sort(kept.begin(), kept.end());
  *states = std::move(kept);
}

int32_t RegexDfa::AddState(std::vector<int32_t> closure) {
  auto it = index_.find(closure);
  if (it != index_.end()) return it->second;
  if (static_cast<int32_t>(dfa_.size()) >= kMaxDfaStates ||
      closure_entries_ + static_cast<int64_t>(closure.size()) > kMaxClosureEntries) {
    exhausted_ = true;
    return kDead;
  }
  closure_entries_ += static_cast<int64_t>(closure.size());
  DfaState st;
  st.accepting = std::binary_search(closure.begin(), closure.end(), nfa_accept_);
  st.next.fill(kUnknown);
  st.nfa = closure;
  const int32_t id = static_cast<int32_t>(dfa_.size());
  dfa_.push_back(std::move(st));
  index_.emplace(std::move(closure), id);
  return id;
}

int32_t RegexDfa::Next(int32_t state, uint8_t byte) {
  int32_t cached = dfa_[state].next[byte];
  if (cached != kUnknown) return cached;
  std::vector<int32_t> next;
  for (int32_t s : dfa_[state].nfa) {
    const NfaState& n = nfa_[s];
    if (n.lo <= byte && byte <= n.hi) next.push_back(n.next);
  }
  int32_t id = kDead;
  if (!next.empty()) {
    Close(&next);
    id = AddState(std::move(next));
  }
  dfa_[state].next[byte] = id;
  return id;
}

bool RegexDfa::CanContinue(int32_t state) {
  for (int32_t s : dfa_[state].nfa) {
    if (nfa_[s].lo <= nfa_[s].hi) return true;
  }
  return false;
}

std::string RegexEscape(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}-/").find(c) != std::string_view::npos) out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      static const char* kHex = "0123456789abcdef";
      out += "\\x";
      out += kHex[(c >> 4) & 0xF];
      out += kHex[c & 0xF];
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace inflight::guided
