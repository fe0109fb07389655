// Unicode Normalization Form C (canonical decomposition, then canonical composition), as the
// "NFC" normalizer of Hugging Face tokenizers (Qwen2/Qwen3) applies it before pre-tokenizing.
// Tables come from unicode_nfc_gen.py (Python's unicodedata). Thread-safe (no state).
#pragma once

#include <string>
#include <string_view>

namespace inflight {

// NFC of `text`. Bytes that are not well-formed UTF-8 are kept as they are, and the valid runs
// between them are normalized each on its own. Text without a code point at or above U+0300
// is returned unchanged without decoding (every such text is already NFC). O(n log n).
std::string NfcNormalize(std::string_view text);

// The Unicode version of the tables.
const char* NfcUnicodeVersion();

}  // namespace inflight
