#include "guided/json_matcher.h"

namespace inflight::guided {
namespace {

enum Mode : uint8_t {
  kStart,        // before the root: '{' or '['
  kValue,        // a value (after ':' or ',' in an array)
  kArrayFirst,   // after '[': a value or ']'
  kObjectFirst,  // after '{': a key or '}'
  kObjectKey,    // after ',' in an object: a key
  kColon,        // after a key
  kAfterValue,   // ',' or the container's close
  kString,
  kEscape,
  kHex,   // aux: hex digits left
  kUtf8,  // aux: continuation bytes left; aux2: the first one's range
  kNumMinus,
  kNumZero,
  kNumInt,
  kNumDot,
  kNumFrac,
  kNumE,
  kNumESign,
  kNumExp,
  kLiteral,  // aux2: which, aux: bytes matched
  kDone,
};

constexpr const char* kLiterals[] = {"true", "false", "null"};

bool IsWs(uint8_t b) { return b == ' ' || b == '\n' || b == '\t' || b == '\r'; }
bool IsDigit(uint8_t b) { return b >= '0' && b <= '9'; }
bool IsHex(uint8_t b) { return IsDigit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F'); }

}  // namespace

bool JsonState::Done() const { return mode == kDone; }

std::string JsonState::Key() const {
  std::string k;
  k += static_cast<char>(mode);
  k += static_cast<char>(aux);
  k += static_cast<char>(aux2);
  k += key ? '1' : '0';
  k += stack;
  return k;
}

bool JsonState::Step(uint8_t b) {
  auto whitespace = [&]() {
    if (++aux > kMaxWhitespace) return false;
    return true;
  };
  auto open = [&](char kind) {
    if (static_cast<int>(stack.size()) >= kMaxDepth) return false;
    stack += kind;
    mode = kind == 'o' ? kObjectFirst : kArrayFirst;
    aux = 0;
    return true;
  };
  auto close = [&](char kind) {
    if (stack.empty() || stack.back() != kind) return false;
    stack.pop_back();
    mode = stack.empty() ? kDone : kAfterValue;
    aux = 0;
    return true;
  };
  auto value_start = [&]() {
    aux = 0;
    switch (b) {
      case '{':
        return open('o');
      case '[':
        return open('a');
      case '"':
        mode = kString;
        key = false;
        return true;
      case '-':
        mode = kNumMinus;
        aux = 1;
        return true;
      case 't':
      case 'f':
      case 'n':
        mode = kLiteral;
        aux2 = b == 't' ? 0 : b == 'f' ? 1 : 2;
        aux = 1;
        return true;
      default:
        if (b == '0') {
          mode = kNumZero;
          aux = 1;
          return true;
        }
        if (IsDigit(b)) {
          mode = kNumInt;
          aux = 1;
          return true;
        }
        return false;
    }
  };
  auto number_digit = [&](Mode next) {
    if (++aux > kMaxNumberLength) return false;
    mode = next;
    return true;
  };
  // A number ends at the first byte that cannot continue it; that byte is read after it.
  auto end_number = [&]() {
    mode = kAfterValue;
    aux = 0;
    return Step(b);
  };
  switch (mode) {
    case kStart:
      if (IsWs(b)) return whitespace();
      if (b == '{') return open('o');
      if (b == '[') return open('a');
      return false;
    case kValue:
      if (IsWs(b)) return whitespace();
      return value_start();
    case kArrayFirst:
      if (IsWs(b)) return whitespace();
      if (b == ']') return close('a');
      return value_start();
    case kObjectFirst:
    case kObjectKey:
      if (IsWs(b)) return whitespace();
      if (b == '}' && mode == kObjectFirst) return close('o');
      if (b == '"') {
        mode = kString;
        key = true;
        aux = 0;
        return true;
      }
      return false;
    case kColon:
      if (IsWs(b)) return whitespace();
      if (b == ':') {
        mode = kValue;
        aux = 0;
        return true;
      }
      return false;
    case kAfterValue:
      if (IsWs(b)) return whitespace();
      if (b == ',') {
        mode = stack.back() == 'o' ? kObjectKey : kValue;
        aux = 0;
        return true;
      }
      if (b == '}') return close('o');
      if (b == ']') return close('a');
      return false;
    case kString:
      if (b == '"') {
        mode = key ? kColon : kAfterValue;
        key = false;
        aux = 0;
        return true;
      }
      if (b == '\\') {
        mode = kEscape;
        return true;
      }
      if (b < 0x20) return false;
      if (b < 0x80) return true;
      // UTF-8: the lead byte fixes the length and the first continuation's range.
      if (b >= 0xC2 && b <= 0xDF) {
        aux = 1, aux2 = 0;
      } else if (b == 0xE0) {
        aux = 2, aux2 = 1;  // A0..BF
      } else if (b == 0xED) {
        aux = 2, aux2 = 2;  // 80..9F (no surrogates)
      } else if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) {
        aux = 2, aux2 = 0;
      } else if (b == 0xF0) {
        aux = 3, aux2 = 3;  // 90..BF
      } else if (b >= 0xF1 && b <= 0xF3) {
        aux = 3, aux2 = 0;
      } else if (b == 0xF4) {
        aux = 3, aux2 = 4;  // 80..8F
      } else {
        return false;
      }
      mode = kUtf8;
      return true;
    case kUtf8: {
      uint8_t lo = 0x80, hi = 0xBF;
      if (aux2 == 1) lo = 0xA0;
      if (aux2 == 2) hi = 0x9F;
      if (aux2 == 3) lo = 0x90;
      if (aux2 == 4) hi = 0x8F;
      if (b < lo || b > hi) return false;
      aux2 = 0;
      if (--aux == 0) mode = kString;
      return true;
    }
    case kEscape:
      if (b == 'u') {
        mode = kHex;
        aux = 4;
        return true;
      }
      if (b == '"' || b == '\\' || b == '/' || b == 'b' || b == 'f' || b == 'n' || b == 'r' ||
          b == 't') {
        mode = kString;
        return true;
      }
      return false;
    case kHex:
      if (!IsHex(b)) return false;
      if (--aux == 0) mode = kString;
      return true;
    case kNumMinus:
      if (b == '0') return number_digit(kNumZero);
      if (IsDigit(b)) return number_digit(kNumInt);
      return false;
    case kNumZero:
      if (b == '.') return number_digit(kNumDot);
      if (b == 'e' || b == 'E') return number_digit(kNumE);
      return end_number();
    case kNumInt:
      if (IsDigit(b)) return number_digit(kNumInt);
      if (b == '.') return number_digit(kNumDot);
      if (b == 'e' || b == 'E') return number_digit(kNumE);
      return end_number();
    case kNumDot:
      if (IsDigit(b)) return number_digit(kNumFrac);
      return false;
    case kNumFrac:
      if (IsDigit(b)) return number_digit(kNumFrac);
      if (b == 'e' || b == 'E') return number_digit(kNumE);
      return end_number();
    case kNumE:
      aux2 = 0;
      if (b == '+' || b == '-') return number_digit(kNumESign);
      if (IsDigit(b)) return ++aux2 <= kMaxExponentDigits && number_digit(kNumExp);
      return false;
    case kNumESign:
      if (IsDigit(b)) return ++aux2 <= kMaxExponentDigits && number_digit(kNumExp);
      return false;
    case kNumExp:
      if (IsDigit(b)) return ++aux2 <= kMaxExponentDigits && number_digit(kNumExp);
      aux2 = 0;
      return end_number();
    case kLiteral: {
      const char* lit = kLiterals[aux2];
      if (b != static_cast<uint8_t>(lit[aux])) return false;
      if (lit[++aux] == '\0') {
        mode = kAfterValue;
        aux = 0;
      }
      return true;
    }
    case kDone:
    default:
      return false;
  }
}

}  // namespace inflight::guided
