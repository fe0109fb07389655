// Tokenizers: SentencePiece-style BPE (Llama 2, Mistral, Gemma: "▁" for spaces, byte
// fallback) and byte-level BPE (GPT-2, Llama 3, Qwen: bytes mapped to printable characters,
// a pre-tokenizer regex). One merge loop serves both; merge priority comes from piece scores
// (SentencePiece, GGUF "llama") or from the merge list's ranks (tokenizer.json, GGUF "gpt2").
//
// Thread-safety: a built Tokenizer is immutable; Encode/Decode may run on any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"

namespace inflight {

class GgufFile;

enum class TokenizerModel { kSentencePiece, kByteLevelBpe };

// SentencePiece / GGUF token types.
enum class TokenType : int32_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = true;
  bool lstrip = false;
  bool rstrip = false;
};

// Everything needed to build a tokenizer, filled from GGUF metadata or tokenizer.json.
struct TokenizerSpec {
  TokenizerModel model = TokenizerModel::kSentencePiece;
  std::vector<std::string> tokens;       // piece text as stored ("▁the", "Ġthe", "<0x0A>")
  std::vector<float> scores;             // SentencePiece scores; empty when merges rank pieces
  std::vector<TokenType> types;          // empty: all normal
  std::vector<std::string> merges;       // "left right", in rank order
  std::vector<AddedToken> added;         // matched verbatim in text before anything else
  std::vector<std::string> pre_regexes;  // byte-level split patterns, applied in sequence
  bool byte_fallback = true;             // unknown characters become <0xXX> tokens
  bool add_space_prefix = true;          // SentencePiece "dummy prefix"
  bool ignore_merges = false;            // a whole pre-token in the vocab is taken as is (Llama 3)
  bool nfc = false;                      // NFC-normalize text between added tokens (Qwen)
  bool add_bos = false;
  bool add_eos = false;
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t unk_id = -1;
  int32_t pad_id = -1;
  std::vector<int32_t> extra_eos_ids;  // e.g. <|eot_id|>, <|im_end|>
  // The model's Jinja chat template (GGUF tokenizer.chat_template, tokenizer_config.json
  // chat_template), empty if it has none.
  std::string chat_template;
};

class Tokenizer {
 public:
  // Validates the spec (ids in range, merges naming real tokens). INVALID_ARGUMENT on error.
  static StatusOr<std::unique_ptr<Tokenizer>> Create(TokenizerSpec spec);
  // From a GGUF file's tokenizer.ggml.* metadata.
  static StatusOr<std::unique_ptr<Tokenizer>> FromGguf(const GgufFile& gguf);
  // From a Hugging Face tokenizer.json (and tokenizer_config.json beside it, if any).
  static StatusOr<std::unique_ptr<Tokenizer>> FromHuggingFaceFile(const std::string& path);
  static StatusOr<TokenizerSpec> SpecFromHuggingFaceJson(const std::string& tokenizer_json,
                                                         const std::string& config_json);
  static StatusOr<TokenizerSpec> SpecFromGguf(const GgufFile& gguf);
  // From a SentencePiece tokenizer.model (Llama 2).
  static StatusOr<TokenizerSpec> SpecFromSentencePieceModel(const std::string& path);

  // Text -> ids. add_special adds BOS/EOS by the model's rules; parse_special matches added
  // and control tokens written in the text.
  std::vector<int32_t> Encode(std::string_view text, bool add_special = true,
                              bool parse_special = true) const;
  // Ids -> text. skip_special drops control tokens. Invalid UTF-8 is kept as bytes.
  std::string Decode(const std::vector<int32_t>& ids, bool skip_special = true) const;
  // The raw bytes one token stands for (byte tokens decoded, "▁" -> " "); no prefix strip.
  std::string TokenBytes(int32_t id) const;

  int32_t vocab_size() const { return static_cast<int32_t>(spec_.tokens.size()); }
  const TokenizerSpec& spec() const { return spec_; }
  int32_t bos_id() const { return spec_.bos_id; }
  int32_t eos_id() const { return spec_.eos_id; }
  bool IsEndOfGeneration(int32_t id) const;
  bool IsControl(int32_t id) const;
  const std::string& TokenText(int32_t id) const { return spec_.tokens[id]; }
  // Whether decoding drops the first token's leading space (SentencePiece dummy prefix).
  bool StripsLeadingSpace() const {
    return spec_.model == TokenizerModel::kSentencePiece && spec_.add_space_prefix;
  }
  // Id of a token text, or -1.
  int32_t Find(std::string_view text) const;

 private:
  explicit Tokenizer(TokenizerSpec spec);
  Status Build();
  void EncodeText(std::string_view text, bool first_fragment, std::vector<int32_t>* out) const;
  void EncodeSentencePiece(std::string_view text, bool first_fragment,
                           std::vector<int32_t>* out) const;
  void EncodeByteLevel(std::string_view text, std::vector<int32_t>* out) const;
  // Merges the symbols (each a UTF-8 character) of one word and appends the ids.
  void MergeWord(const std::string& word, std::vector<int32_t>* out) const;
  void EmitSymbol(std::string_view sym, std::vector<int32_t>* out) const;

  TokenizerSpec spec_;
  std::unordered_map<std::string, int32_t> token_to_id_;
  std::unordered_map<std::string, int32_t> merge_rank_;  // "left right" -> rank
  std::vector<AddedToken> specials_;                     // matched in text, longest first
  std::vector<int32_t> specials_by_first_byte_[256];     // indices into specials_, longest first
  std::vector<void*> regexes_;                           // pcre2_code*, owned
  int32_t byte_token_[256];                              // <0xXX> ids, or -1
  std::string byte_to_unicode_[256];                     // byte-level mapping
  std::unordered_map<uint32_t, uint8_t> unicode_to_byte_;

 public:
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;
};

// Turns a stream of token ids into text pieces that never split a UTF-8 character: bytes of
// an unfinished character wait for the next token. Not thread-safe (one per stream).
class IncrementalDetokenizer {
 public:
  // continues_text: the tokens follow text already shown (a prompt), so the first piece
  // keeps its leading space instead of losing it as the start of a SentencePiece text.
  explicit IncrementalDetokenizer(const Tokenizer* tokenizer, bool skip_special = true,
                                  bool continues_text = false)
      : tokenizer_(tokenizer), skip_special_(skip_special), first_(!continues_text) {}
  // Returns the text that became complete with this token (possibly empty).
  std::string Add(int32_t id);
  // Returns what is left at the end (an unfinished character becomes U+FFFD).
  std::string Flush();

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  bool first_;
  std::string pending_;
};

// The llama.cpp name of a byte-level spec's pre-tokenizer (GGUF tokenizer.ggml.pre, the
// inverse of what SpecFromGguf reads): "gpt-2", "llama-bpe", "qwen2" or "gpt-4o"; empty when
// its regexes are none of these.
std::string GgufPreTokenizerName(const TokenizerSpec& spec);

// Length of the longest prefix of s that is complete UTF-8 (a truncated final character is
// left out; invalid bytes count as complete single characters).
size_t CompleteUtf8Prefix(std::string_view s);

}  // namespace inflight
