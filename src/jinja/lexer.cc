#include "jinja/lexer.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "jinja/error.h"

namespace inflight::jinja {
namespace {

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

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
        if (tokens_.size() == tokens_before + 2 &&
            tokens_[tokens_before].kind == Token::Kind::kName &&
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
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#'))
        return i;
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
    const bool line_start =
        nl != std::string::npos || text_start == 0 || src_[text_start - 1] == '\n';
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
  void Emit(Token::Kind kind, std::string text) {
    tokens_.push_back({kind, std::move(text), 0, 0, LineAt(pos_)});
  }

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
    if (end == std::string::npos)
      Fail("line " + std::to_string(LineAt(pos_)) + ": unclosed comment");
    const char sign =
        end > pos_ && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : '\0';
    pos_ = end + 2;
    AfterTagEnd(sign, /*block=*/true);
  }

  // {% raw %} ... {% endraw %}: the text between is output as is.
  void RawBlock() {
    size_t search = pos_;
    for (;;) {
      const size_t open = src_.find("{%", search);
      if (open == std::string::npos)
        Fail("line " + std::to_string(LineAt(pos_)) + ": unclosed raw block");
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
      if (src_.compare(p, 2, "%}") != 0)
        Fail("line " + std::to_string(LineAt(open)) + ": malformed endraw");
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
          if (block)
            AfterTagEnd(sign, true);
          else if (sign == '-')
            AfterTagEnd(sign, false);
          return;
        }
      }
      const char c = src_[pos_];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = pos_;
        while (e < src_.size() &&
               (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_'))
          ++e;
        Emit(Token::Kind::kName, src_.substr(pos_, e - pos_));
        pos_ = e;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        Number();
      } else if (c == '\'' || c == '"') {
        String(c);
      } else {
        static const char* kOps[] = {"==", "!=", "<=", ">=", "//", "**", "<", ">", "+",
                                     "-",  "*",  "/",  "%",  "~",  "|",  ".", ",", ":",
                                     "(",  ")",  "[",  "]",  "{",  "}",  "="};
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
        if (!matched)
          Fail("line " + std::to_string(LineAt(pos_)) + ": unexpected character '" +
               std::string(1, c) + "'");
      }
    }
  }

  void Number() {
    size_t e = pos_;
    bool is_float = false;
    std::string digits;
    auto take_digits = [&] {
      while (e < src_.size() &&
             (std::isdigit(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) {
        if (src_[e] != '_') digits += src_[e];
        ++e;
      }
    };
    take_digits();
    if (e + 1 < src_.size() && src_[e] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
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
      if (errno == ERANGE)
        Fail("line " + std::to_string(t.line) + ": integer literal out of range");
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
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case '0':
          out += '\0';
          break;
        case '\\':
          out += '\\';
          break;
        case '\'':
          out += '\'';
          break;
        case '"':
          out += '"';
          break;
        case '\n':
          break;
        case 'x':
        case 'u': {
          const int n = e == 'x' ? 2 : 4;
          if (p + n > src_.size()) Fail("line " + std::to_string(LineAt(pos_)) + ": bad escape");
          const uint32_t cp =
              static_cast<uint32_t>(std::strtoul(src_.substr(p, n).c_str(), nullptr, 16));
          p += n;
          AppendUtf8(cp, out);
          break;
        }
        default:
          out += '\\', out += e;
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
      out += static_cast<char>(0xE0 | (cp >> 12)),
          out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::string src_;
  size_t pos_ = 0;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> Tokenize(std::string source) { return Lexer(std::move(source)).Run(); }

}  // namespace inflight::jinja
