// A byte-level recognizer of JSON text (RFC 8259) whose root is an object or an array, as
// the guide type `json` (xgrammar's builtin JSON grammar) asks: a pushdown automaton with an
// explicit stack of open containers. Every prefix it accepts can still be completed, so a
// guided output that ends is valid JSON. Bounds keep outputs finite and states few: at most
// kMaxDepth open containers, kMaxWhitespace consecutive whitespace bytes, kMaxNumberLength
// bytes per number, kMaxExponentDigits exponent digits (so every number is a finite double).
#pragma once

#include <cstdint>
#include <string>

namespace inflight::guided {

struct JsonState {
  uint8_t mode = 0;
  uint8_t aux =
      0;  // per mode: whitespace run, digits, hex digits or UTF-8 bytes left, literal index
  uint8_t aux2 = 0;   // literal id, or the range the first UTF-8 continuation byte must be in
  bool key = false;   // the string being read is an object key
  std::string stack;  // open containers, 'o' or 'a'

  // Steps one byte; false (state unspecified) when the byte cannot continue valid JSON.
  bool Step(uint8_t byte);
  bool Done() const;
  // A compact encoding of the whole state (the key of cached token masks).
  std::string Key() const;

  static constexpr int kMaxDepth = 32;
  static constexpr int kMaxWhitespace = 16;
  static constexpr int kMaxNumberLength = 32;
  static constexpr int kMaxExponentDigits = 2;
};

}  // namespace inflight::guided
