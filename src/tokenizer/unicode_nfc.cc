#include "tokenizer/unicode_nfc.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <tuple>
#include <utility>
#include <vector>

#include "tokenizer/utf8.h"

namespace inflight {
namespace {

struct CombiningClassRange {
  uint32_t first, last;
  uint8_t ccc;
};
struct Decomposition {
  uint32_t cp, first, second;  // second is 0 for a singleton
};
struct Composition {
  uint32_t first, second, cp;
};

#include "tokenizer/unicode_nfc_data.inc"

// Hangul syllables decompose and compose algorithmically (Unicode 3.12).
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr uint32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

uint8_t CombiningClass(uint32_t cp) {
  if (cp < 0x300) return 0;
  const auto* end = std::end(kCombiningClasses);
  const auto* it =
      std::upper_bound(std::begin(kCombiningClasses), end, cp,
                       [](uint32_t c, const CombiningClassRange& r) { return c < r.first; });
  if (it == std::begin(kCombiningClasses)) return 0;
  --it;
  return cp <= it->last ? it->ccc : 0;
}

void Decompose(uint32_t cp, std::vector<uint32_t>* out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out->push_back(kTBase + s % kTCount);
    return;
  }
  const auto* end = std::end(kDecompositions);
  const auto* it = std::lower_bound(std::begin(kDecompositions), end, cp,
                                    [](const Decomposition& d, uint32_t c) { return d.cp < c; });
  if (cp < 0xC0 || it == end || it->cp != cp) {
    out->push_back(cp);
    return;
  }
  // Canonical decompositions nest a few levels at most (the tables are finite and acyclic).
  Decompose(it->first, out);
  if (it->second != 0) Decompose(it->second, out);
}

// The primary composite of (a, b), or 0.
uint32_t Compose(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount)
    return a + (b - kTBase);
  const auto* end = std::end(kCompositions);
  const auto* it =
      std::lower_bound(std::begin(kCompositions), end, std::make_pair(a, b),
                       [](const Composition& c, const std::pair<uint32_t, uint32_t>& k) {
                         return c.first != k.first ? c.first < k.first : c.second < k.second;
                       });
  return it != end && it->first == a && it->second == b ? it->cp : 0;
}

// NFC of well-formed UTF-8.
void NormalizeValid(std::string_view text, std::string* out) {
  std::vector<uint32_t> cps;
  cps.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const size_t len = Utf8CharLength(static_cast<uint8_t>(text[pos]));
    Decompose(DecodeUtf8(text.substr(pos, len)), &cps);
    pos += len;
  }
  // Canonical ordering: each run of non-starters sorted by combining class, stably.
  std::vector<uint8_t> ccc(cps.size());
  for (size_t i = 0; i < cps.size(); ++i) ccc[i] = CombiningClass(cps[i]);
  for (size_t i = 0; i < cps.size();) {
    if (ccc[i] == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && ccc[j] != 0) ++j;
    if (j - i > 1) {
      std::vector<std::pair<uint8_t, uint32_t>> run;
      for (size_t k = i; k < j; ++k) run.emplace_back(ccc[k], cps[k]);
      std::stable_sort(run.begin(), run.end(),
                       [](const auto& x, const auto& y) { return x.first < y.first; });
      for (size_t k = i; k < j; ++k) std::tie(ccc[k], cps[k]) = run[k - i];
    }
    i = j;
  }
  // Canonical composition: a character joins the last starter unless a character of the
  // same or a higher class stands between them (blocked).
  size_t kept = 0;
  size_t starter = 0;
  int last_class = -1;  // -1: no starter yet
  for (size_t i = 0; i < cps.size(); ++i) {
    const int cls = ccc[i];
    if (last_class >= 0 && (last_class < cls || last_class == 0)) {
      if (const uint32_t c = Compose(cps[starter], cps[i]); c != 0) {
        cps[starter] = c;
        continue;
      }
    }
    if (cls == 0) {
      starter = kept;
      last_class = 0;
    } else if (last_class >= 0) {
      last_class = cls;
    }
    cps[kept] = cps[i];
    ccc[kept] = ccc[i];
    ++kept;
  }
  for (size_t i = 0; i < kept; ++i) out->append(EncodeUtf8(cps[i]));
}

}  // namespace

std::string NfcNormalize(std::string_view text) {
  // Lead bytes below 0xCC start code points below U+0300, all NFC-stable with class 0.
  if (std::none_of(text.begin(), text.end(),
                   [](char c) { return static_cast<uint8_t>(c) >= 0xCC; })) {
    return std::string(text);
  }
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  size_t run = 0;
  for (size_t pos = 0; pos <= text.size();) {
    const size_t len = pos < text.size() ? ValidUtf8CharLength(text, pos) : 0;
    if (len > 0) {
      pos += len;
      continue;
    }
    if (pos > run) NormalizeValid(text.substr(run, pos - run), &out);
    if (pos < text.size()) out += text[pos];
    run = ++pos;
  }
  return out;
}

const char* NfcUnicodeVersion() { return kUnicodeVersion; }

}  // namespace inflight
