// libFuzzer target: arbitrary text through byte-level BPE (GPT-2's regex; GPT-4o's with NFC as
// Qwen normalizes) and SentencePiece tokenizers made from small in-file vocabularies;
// decode(encode(s)) must give s back (NFC(s) with NFC: byte-level BPE maps every byte,
// SentencePiece has byte fallback and no normaliser here). The incremental detokenizer must
// agree with Decode, and NFC must be idempotent.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_nfc.h"

namespace {

std::unique_ptr<inflight::Tokenizer> MakeSentencePiece() {
  inflight::TokenizerSpec spec;
  spec.tokens = {"<unk>", "<s>", "</s>"};
  spec.types = {inflight::TokenType::kUnknown, inflight::TokenType::kControl,
                inflight::TokenType::kControl};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    spec.tokens.push_back(buf);
    spec.types.push_back(inflight::TokenType::kByte);
  }
  for (const char* p : {"\u2581", "\u2581t", "he", "\u2581the", "in", "an", "\u2581a", "er"}) {
    spec.tokens.push_back(p);
    spec.types.push_back(inflight::TokenType::kNormal);
  }
  spec.scores.assign(spec.tokens.size(), 0.0f);
  for (size_t i = 259; i < spec.tokens.size(); ++i) spec.scores[i] = -static_cast<float>(i);
  spec.unk_id = 0, spec.bos_id = 1, spec.eos_id = 2;
  spec.add_space_prefix = false;
  auto t = inflight::Tokenizer::Create(std::move(spec));
  if (!t.ok()) std::abort();
  return std::move(t).value();
}

constexpr const char kGpt2Regex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
constexpr const char kGpt4oRegex[] =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

std::unique_ptr<inflight::Tokenizer> MakeByteLevel(const char* regex, bool nfc) {
  inflight::TokenizerSpec spec;
  spec.model = inflight::TokenizerModel::kByteLevelBpe;
  // GPT-2's byte-to-unicode alphabet as the base vocabulary.
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    int cp = b;
    if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))) {
      cp = next++;
    }
    std::string s;
    if (cp < 0x80)
      s.push_back(static_cast<char>(cp));
    else {
      s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    spec.tokens.push_back(s);
  }
  spec.tokens.push_back("th");
  spec.tokens.push_back("the");
  spec.merges = {"t h", "th e"};
  spec.byte_fallback = false;
  spec.add_space_prefix = false;
  spec.pre_regexes = {regex};
  spec.nfc = nfc;
  auto t = inflight::Tokenizer::Create(std::move(spec));
  if (!t.ok()) {
    std::fprintf(stderr, "%s\n", t.status().ToString().c_str());
    std::abort();
  }
  return std::move(t).value();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto spm = MakeSentencePiece();
  static const auto bpe = MakeByteLevel(kGpt2Regex, false);
  static const auto nfc_bpe = MakeByteLevel(kGpt4oRegex, true);
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string nfc = inflight::NfcNormalize(text);
  if (inflight::NfcNormalize(nfc) != nfc) std::abort();
  {
    const std::vector<int32_t> ids =
        nfc_bpe->Encode(text, /*add_special=*/false, /*parse_special=*/false);
    if (nfc_bpe->Decode(ids, false) != nfc) std::abort();
  }
  for (const inflight::Tokenizer* t : {spm.get(), bpe.get()}) {
    const std::vector<int32_t> ids =
        t->Encode(text, /*add_special=*/false, /*parse_special=*/false);
    for (int32_t id : ids) {
      if (id < 0 || id >= t->vocab_size()) std::abort();
    }
    // SentencePiece writes spaces as U+2581 and decodes every U+2581 back to a space, so a
    // text that contains U+2581 itself does not round-trip (as with SentencePiece proper).
    const bool lossless = t == bpe.get() || text.find("\u2581") == std::string::npos;
    if (lossless && t->Decode(ids, false) != text) std::abort();
    inflight::IncrementalDetokenizer detok(t, false);
    std::string streamed;
    for (int32_t id : ids) streamed += detok.Add(id);
    streamed += detok.Flush();
    // The streamed text equals Decode's up to invalid UTF-8, which Flush marks with U+FFFD.
    if (lossless && inflight::CompleteUtf8Prefix(text) == text.size() && streamed != text)
      std::abort();
  }
  return 0;
}
