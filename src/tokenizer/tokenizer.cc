#include "tokenizer/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cstring>
#include <queue>

#include "tokenizer/unicode_nfc.h"
#include "tokenizer/utf8.h"

namespace inflight {
namespace {

constexpr const char kSpaceMarker[] = "\xE2\x96\x81";  // U+2581 "▁"

void ReplaceAll(std::string* s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s->size() + s->size() / 4);
  size_t pos = 0;
  while (true) {
    const size_t hit = s->find(from, pos);
    if (hit == std::string::npos) break;
    out.append(*s, pos, hit - pos);
    out.append(to);
    pos = hit + from.size();
  }
  out.append(*s, pos, std::string::npos);
  *s = std::move(out);
}

bool IsWhitespaceByte(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

}  // namespace

Tokenizer::Tokenizer(TokenizerSpec spec) : spec_(std::move(spec)) {}

Tokenizer::~Tokenizer() {
  for (void* re : regexes_) pcre2_code_free(static_cast<pcre2_code*>(re));
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Create(TokenizerSpec spec) {
  std::unique_ptr<Tokenizer> tok(new Tokenizer(std::move(spec)));
  RETURN_IF_ERROR(tok->Build());
  return tok;
}

Status Tokenizer::Build() {
  const int32_t n = vocab_size();
  if (n == 0) return InvalidArgumentError("tokenizer has an empty vocabulary");
  if (!spec_.scores.empty() && static_cast<int32_t>(spec_.scores.size()) != n) {
    return InvalidArgumentError("tokenizer has " + std::to_string(spec_.scores.size()) +
                                " scores for " + std::to_string(n) + " tokens");
  }
  if (!spec_.types.empty() && static_cast<int32_t>(spec_.types.size()) != n) {
    return InvalidArgumentError("tokenizer has " + std::to_string(spec_.types.size()) +
                                " token types for " + std::to_string(n) + " tokens");
  }
  if (spec_.types.empty()) spec_.types.assign(n, TokenType::kNormal);
  for (int32_t id : {spec_.bos_id, spec_.eos_id, spec_.unk_id, spec_.pad_id}) {
    if (id >= n)
      return InvalidArgumentError("special token id " + std::to_string(id) +
                                  " is outside the vocabulary of " + std::to_string(n));
  }
  for (int32_t id = 0; id < n; ++id) token_to_id_.emplace(spec_.tokens[id], id);
  for (size_t r = 0; r < spec_.merges.size(); ++r)
    merge_rank_.emplace(spec_.merges[r], static_cast<int32_t>(r));
  if (spec_.scores.empty() && spec_.merges.empty() &&
      spec_.model == TokenizerModel::kSentencePiece) {
    return InvalidArgumentError("tokenizer has neither scores nor merges");
  }

  // Tokens matched verbatim in text: added tokens, plus control / user-defined pieces.
  for (auto& a : spec_.added) {
    if (a.id < 0 || a.id >= n)
      return InvalidArgumentError("added token '" + a.content + "' has id " + std::to_string(a.id) +
                                  " outside the vocabulary");
    if (a.special)
      spec_.types[a.id] = TokenType::kControl;
    else if (spec_.types[a.id] == TokenType::kNormal)
      spec_.types[a.id] = TokenType::kUserDefined;
    if (!a.content.empty()) specials_.push_back(a);
  }
  if (spec_.added.empty()) {
    for (int32_t id = 0; id < n; ++id) {
      const TokenType t = spec_.types[id];
      if ((t == TokenType::kControl || t == TokenType::kUserDefined) && !spec_.tokens[id].empty()) {
        specials_.push_back({spec_.tokens[id], id, t == TokenType::kControl, false, false});
      }
    }
  }
  std::stable_sort(
      specials_.begin(), specials_.end(),
      [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
  for (size_t i = 0; i < specials_.size(); ++i) {
    specials_by_first_byte_[static_cast<uint8_t>(specials_[i].content[0])].push_back(
        static_cast<int32_t>(i));
  }

  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    const int32_t id = Find(name);
    byte_token_[b] = id;
  }
  // GPT-2's byte -> printable character table.
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable =
        (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const uint32_t cp = printable ? static_cast<uint32_t>(b) : static_cast<uint32_t>(next++);
    byte_to_unicode_[b] = EncodeUtf8(cp);
    unicode_to_byte_[cp] = static_cast<uint8_t>(b);
  }
  for (const std::string& pattern : spec_.pre_regexes) {
    int err = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code* re =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                      PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &offset, nullptr);
    if (re == nullptr) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      return InvalidArgumentError("pre-tokenizer regex does not compile at offset " +
                                  std::to_string(offset) + ": " + reinterpret_cast<char*>(msg));
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT fails
    regexes_.push_back(re);
  }
  return OkStatus();
}

int32_t Tokenizer::Find(std::string_view text) const {
  auto it = token_to_id_.find(std::string(text));
  return it == token_to_id_.end() ? -1 : it->second;
}

bool Tokenizer::IsControl(int32_t id) const {
  return id >= 0 && id < vocab_size() && spec_.types[id] == TokenType::kControl;
}

bool Tokenizer::IsEndOfGeneration(int32_t id) const {
  if (id == spec_.eos_id) return true;
  return std::find(spec_.extra_eos_ids.begin(), spec_.extra_eos_ids.end(), id) !=
         spec_.extra_eos_ids.end();
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
  std::vector<int32_t> out;
  if (add_special && spec_.add_bos && spec_.bos_id >= 0) out.push_back(spec_.bos_id);
  bool after_special = true;  // the dummy prefix goes at the start and after a special token
  size_t frag_start = 0;
  size_t i = 0;
  auto flush_text = [&](size_t end) {
    if (end > frag_start)
      EncodeText(text.substr(frag_start, end - frag_start), after_special, &out);
    if (end > frag_start) after_special = false;
  };
  while (parse_special && i < text.size()) {
    const AddedToken* hit = nullptr;
    for (int32_t index : specials_by_first_byte_[static_cast<uint8_t>(text[i])]) {
      const AddedToken& s = specials_[index];
      if (text.compare(i, s.content.size(), s.content) == 0) {
        hit = &s;
        break;  // longest first
      }
    }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    size_t text_end = i;
    if (hit->lstrip) {
      while (text_end > frag_start && IsWhitespaceByte(text[text_end - 1])) --text_end;
    }
    flush_text(text_end);
    out.push_back(hit->id);
    after_special = true;
    i += hit->content.size();
    if (hit->rstrip) {
      while (i < text.size() && IsWhitespaceByte(text[i])) ++i;
    }
    frag_start = i;
  }
  flush_text(text.size());
  if (add_special && spec_.add_eos && spec_.eos_id >= 0) out.push_back(spec_.eos_id);
  return out;
}

void Tokenizer::EncodeText(std::string_view text, bool first_fragment,
                           std::vector<int32_t>* out) const {
  // The normalizer runs on each stretch of text between added tokens (Hugging Face's order).
  std::string normalized;
  if (spec_.nfc) {
    normalized = NfcNormalize(text);
    text = normalized;
  }
  if (spec_.model == TokenizerModel::kSentencePiece) {
    EncodeSentencePiece(text, first_fragment, out);
  } else {
    EncodeByteLevel(text, out);
  }
}

void Tokenizer::EncodeSentencePiece(std::string_view text, bool first_fragment,
                                    std::vector<int32_t>* out) const {
  std::string s;
  if (spec_.add_space_prefix && first_fragment) s = " ";
  s.append(text);
  ReplaceAll(&s, " ", kSpaceMarker);
  MergeWord(s, out);
}

void Tokenizer::EncodeByteLevel(std::string_view text, std::vector<int32_t>* out) const {
  // The regexes run in UTF mode without PCRE2's own check (speed), which is only safe on
  // well-formed UTF-8: every malformed byte becomes a piece of its own, and only the valid
  // runs between them are split by the regexes.
  std::vector<std::string_view> pieces;
  std::vector<bool> valid;  // per piece: well-formed (regex input) or one malformed byte
  for (size_t pos = 0, run = 0; pos <= text.size();) {
    const size_t len = pos < text.size() ? ValidUtf8CharLength(text, pos) : 0;
    if (len > 0) {
      pos += len;
      continue;
    }
    if (pos > run) {
      pieces.push_back(text.substr(run, pos - run));
      valid.push_back(true);
    }
    if (pos < text.size()) {
      pieces.push_back(text.substr(pos, 1));
      valid.push_back(false);
    }
    run = ++pos;
  }
  pcre2_match_data* md = regexes_.empty() ? nullptr : pcre2_match_data_create(4, nullptr);
  for (void* re_ptr : regexes_) {
    auto* re = static_cast<pcre2_code*>(re_ptr);
    std::vector<std::string_view> next;
    std::vector<bool> next_valid;
    for (size_t pi = 0; pi < pieces.size(); ++pi) {
      const std::string_view piece = pieces[pi];
      if (!valid[pi]) {
        next.push_back(piece);
        next_valid.push_back(false);
        continue;
      }
      size_t pos = 0;
      while (pos < piece.size()) {
        const int rc = pcre2_match(re, reinterpret_cast<PCRE2_SPTR>(piece.data()), piece.size(),
                                   pos, PCRE2_NO_UTF_CHECK, md, nullptr);
        if (rc < 0) break;
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        if (ov[0] > pos) next.push_back(piece.substr(pos, ov[0] - pos));  // gap (Isolated)
        if (ov[1] == ov[0]) {  // empty match: step one char
          const size_t step = std::max<size_t>(1, ValidUtf8CharLength(piece, ov[0]));
          next.push_back(piece.substr(ov[0], std::min(step, piece.size() - ov[0])));
          pos = ov[0] + step;
          continue;
        }
        next.push_back(piece.substr(ov[0], ov[1] - ov[0]));
        pos = ov[1];
      }
      if (pos < piece.size()) next.push_back(piece.substr(pos));
      next_valid.resize(next.size(), true);
    }
    pieces = std::move(next);
    valid = std::move(next_valid);
  }
  if (md) pcre2_match_data_free(md);
  std::string mapped;
  for (std::string_view piece : pieces) {
    mapped.clear();
    for (unsigned char c : piece) mapped += byte_to_unicode_[c];
    if (spec_.ignore_merges) {
      const int32_t id = Find(mapped);
      if (id >= 0) {
        out->push_back(id);
        continue;
      }
    }
    MergeWord(mapped, out);
  }
}

// The greedy BPE loop: repeatedly merge the best adjacent pair (highest piece score, or
// lowest merge rank), leftmost first on ties, until no pair can merge.
void Tokenizer::MergeWord(const std::string& word, std::vector<int32_t>* out) const {
  struct Symbol {
    uint32_t start, len;
    int32_t prev, next;
  };
  std::vector<Symbol> syms;
  for (size_t i = 0; i < word.size();) {
    // A malformed byte is a symbol of its own (byte fallback keeps it lossless).
    const size_t len = std::max<size_t>(1, ValidUtf8CharLength(word, i));
    syms.push_back({static_cast<uint32_t>(i), static_cast<uint32_t>(len),
                    static_cast<int32_t>(syms.size()) - 1, static_cast<int32_t>(syms.size()) + 1});
    i += len;
  }
  if (syms.empty()) return;
  syms.back().next = -1;
  struct Bigram {
    double priority;
    int32_t left, right;
    uint32_t len;
  };
  auto worse = [](const Bigram& a, const Bigram& b) {
    if (a.priority != b.priority) return a.priority < b.priority;
    return a.left > b.left;
  };
  std::priority_queue<Bigram, std::vector<Bigram>, decltype(worse)> queue(worse);
  const bool by_score = !spec_.scores.empty();
  std::string key;
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const Symbol& a = syms[left];
    const Symbol& b = syms[right];
    double priority;
    if (by_score) {
      auto it = token_to_id_.find(word.substr(a.start, a.len + b.len));
      if (it == token_to_id_.end()) return;
      priority = spec_.scores[it->second];
    } else {
      key.assign(word, a.start, a.len);
      key += ' ';
      key.append(word, b.start, b.len);
      auto it = merge_rank_.find(key);
      if (it == merge_rank_.end()) return;
      priority = -static_cast<double>(it->second);
    }
    queue.push({priority, left, right, a.len + b.len});
  };
  for (size_t i = 1; i < syms.size(); ++i)
    try_add(static_cast<int32_t>(i) - 1, static_cast<int32_t>(i));
  while (!queue.empty()) {
    const Bigram bg = queue.top();
    queue.pop();
    Symbol& left = syms[bg.left];
    Symbol& right = syms[bg.right];
    if (left.len == 0 || right.len == 0 || left.len + right.len != bg.len || left.next != bg.right)
      continue;
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (right.next >= 0) syms[right.next].prev = bg.left;
    try_add(left.prev, bg.left);
    try_add(bg.left, left.next);
  }
  for (int32_t i = 0; i >= 0; i = syms[i].next) {
    EmitSymbol(std::string_view(word).substr(syms[i].start, syms[i].len), out);
  }
}

void Tokenizer::EmitSymbol(std::string_view sym, std::vector<int32_t>* out) const {
  const int32_t id = Find(sym);
  if (id >= 0) {
    out->push_back(id);
    return;
  }
  if (spec_.byte_fallback) {
    bool all = true;
    for (unsigned char c : sym) all = all && byte_token_[c] >= 0;
    if (all) {
      for (unsigned char c : sym) out->push_back(byte_token_[c]);
      return;
    }
  }
  if (spec_.unk_id >= 0) out->push_back(spec_.unk_id);
}

std::string Tokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return "";
  const std::string& text = spec_.tokens[id];
  const TokenType type = spec_.types[id];
  if (type == TokenType::kByte ||
      (text.size() == 6 && text.compare(0, 3, "<0x") == 0 && text[5] == '>' &&
       byte_token_[std::strtol(text.substr(3, 2).c_str(), nullptr, 16) & 255] == id)) {
    return std::string(1, static_cast<char>(std::strtol(text.substr(3, 2).c_str(), nullptr, 16)));
  }
  if (type == TokenType::kControl || type == TokenType::kUserDefined) {
    if (spec_.model == TokenizerModel::kSentencePiece) {
      std::string s = text;
      ReplaceAll(&s, kSpaceMarker, " ");
      return s;
    }
    return text;
  }
  if (spec_.model == TokenizerModel::kSentencePiece) {
    std::string s = text;
    ReplaceAll(&s, kSpaceMarker, " ");
    return s;
  }
  std::string bytes;
  for (size_t i = 0; i < text.size();) {
    const size_t len = std::max<size_t>(1, ValidUtf8CharLength(text, i));
    const uint32_t cp = DecodeUtf8(std::string_view(text).substr(i, len));
    auto it = unicode_to_byte_.find(cp);
    if (it != unicode_to_byte_.end()) {
      bytes += static_cast<char>(it->second);
    } else {
      bytes.append(text, i, len);
    }
    i += len;
  }
  return bytes;
}

std::string Tokenizer::Decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string out;
  bool first = true;
  for (int32_t id : ids) {
    if (skip_special && IsControl(id)) continue;
    std::string piece = TokenBytes(id);
    if (first && StripsLeadingSpace() && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    first = false;
    out += piece;
  }
  return out;
}

size_t CompleteUtf8Prefix(std::string_view s) {
  // Only the last up-to-3 bytes can belong to an unfinished character.
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto c = static_cast<uint8_t>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    const size_t need = Utf8CharLength(c);
    if (need > back && (c & 0xC0) == 0xC0) return n - back;  // lead byte still waiting
    return n;
  }
  return n;
}

std::string IncrementalDetokenizer::Add(int32_t id) {
  if (skip_special_ && tokenizer_->IsControl(id)) return "";
  std::string piece = tokenizer_->TokenBytes(id);
  if (first_ && tokenizer_->StripsLeadingSpace() && !piece.empty() && piece[0] == ' ')
    piece.erase(0, 1);
  first_ = false;
  pending_ += piece;
  const size_t ready = CompleteUtf8Prefix(pending_);
  std::string out = pending_.substr(0, ready);
  pending_.erase(0, ready);
  return out;
}

std::string IncrementalDetokenizer::Flush() {
  if (pending_.empty()) return "";
  pending_.clear();
  return "\xEF\xBF\xBD";
}

}  // namespace inflight
