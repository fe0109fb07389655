// TokenizerSpec from a SentencePiece tokenizer.model. The file is a serialized ModelProto; we
// read the few fields we need straight from the protobuf wire format instead of linking
// libsentencepiece, whose bundled copy of protobuf clashes with the real libprotobuf the
// server links (two definitions of the same symbols; the process crashed at start-up).
#include <cstring>
#include <fstream>
#include <sstream>

#include "tokenizer/tokenizer.h"

namespace inflight {
namespace {

// A cursor over protobuf wire-format bytes. Every read reports truncation instead of
// running past the end.
class WireReader {
 public:
  WireReader(const char* p, size_t n) : p_(p), end_(p + n) {}
  bool done() const { return p_ >= end_; }

  bool Varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ >= end_) return false;
      const uint8_t b = static_cast<uint8_t>(*p_++);
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  }
  // Reads a field key; wire type in *type.
  bool Key(uint32_t* field, uint32_t* type) {
    uint64_t k;
    if (!Varint(&k)) return false;
    *field = static_cast<uint32_t>(k >> 3);
    *type = static_cast<uint32_t>(k & 7);
    return true;
  }
  bool Bytes(const char** data, size_t* n) {
    uint64_t len;
    if (!Varint(&len) || len > static_cast<uint64_t>(end_ - p_)) return false;
    *data = p_;
    *n = static_cast<size_t>(len);
    p_ += len;
    return true;
  }
  bool Fixed32(uint32_t* v) {
    if (end_ - p_ < 4) return false;
    std::memcpy(v, p_, 4);
    p_ += 4;
    return true;
  }
  bool Skip(uint32_t type) {
    uint64_t v;
    const char* d;
    size_t n;
    uint32_t f;
    switch (type) {
      case 0:
        return Varint(&v);
      case 1:
        if (end_ - p_ < 8) return false;
        p_ += 8;
        return true;
      case 2:
        return Bytes(&d, &n);
      case 5:
        return Fixed32(&f);
      default:
        return false;
    }
  }

 private:
  const char* p_;
  const char* end_;
};

}  // namespace

StatusOr<TokenizerSpec> Tokenizer::SpecFromSentencePieceModel(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("cannot open SentencePiece model '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string bytes = ss.str();
  auto bad = [&](const std::string& what) {
    return InvalidArgumentError("cannot load SentencePiece model '" + path + "': " + what);
  };
  TokenizerSpec spec;
  spec.model = TokenizerModel::kSentencePiece;
  // Defaults of TrainerSpec / NormalizerSpec when a field is absent.
  int64_t unk_id = 0, bos_id = 1, eos_id = 2, pad_id = -1;
  bool add_dummy_prefix = true, byte_fallback = false;
  WireReader model(bytes.data(), bytes.size());
  while (!model.done()) {
    uint32_t field, type;
    if (!model.Key(&field, &type)) return bad("truncated ModelProto");
    if ((field == 1 || field == 2 || field == 3) && type == 2) {
      const char* data;
      size_t n;
      if (!model.Bytes(&data, &n)) return bad("truncated ModelProto");
      WireReader sub(data, n);
      std::string piece;
      float score = 0;
      uint64_t piece_type = 1;
      while (!sub.done()) {
        uint32_t f, t;
        if (!sub.Key(&f, &t)) return bad("truncated message");
        uint64_t v = 0;
        if (field == 1 && f == 1 && t == 2) {
          const char* s;
          size_t len;
          if (!sub.Bytes(&s, &len)) return bad("truncated piece");
          piece.assign(s, len);
        } else if (field == 1 && f == 2 && t == 5) {
          uint32_t bits;
          if (!sub.Fixed32(&bits)) return bad("truncated score");
          std::memcpy(&score, &bits, 4);
        } else if (t == 0 &&
                   ((field == 1 && f == 3) || (field == 2 && (f == 35 || (f >= 40 && f <= 43))) ||
                    (field == 3 && f == 3))) {
          if (!sub.Varint(&v)) return bad("truncated varint");
          const int64_t signed_v = static_cast<int64_t>(v);
          if (field == 1) piece_type = v;
          if (field == 2 && f == 35) byte_fallback = v != 0;
          if (field == 2 && f == 40) unk_id = signed_v;
          if (field == 2 && f == 41) bos_id = signed_v;
          if (field == 2 && f == 42) eos_id = signed_v;
          if (field == 2 && f == 43) pad_id = signed_v;
          if (field == 3) add_dummy_prefix = v != 0;
        } else if (!sub.Skip(t)) {
          return bad("malformed field");
        }
      }
      if (field == 1) {
        if (piece_type < 1 || piece_type > 6)
          return bad("unknown piece type " + std::to_string(piece_type));
        spec.tokens.push_back(std::move(piece));
        spec.scores.push_back(score);
        spec.types.push_back(static_cast<TokenType>(piece_type));
      }
    } else if (!model.Skip(type)) {
      return bad("malformed field");
    }
  }
  if (spec.tokens.empty()) return bad("no pieces");
  const int64_t n = static_cast<int64_t>(spec.tokens.size());
  auto id = [&](int64_t v) { return (v >= 0 && v < n) ? static_cast<int32_t>(v) : -1; };
  spec.unk_id = id(unk_id);
  spec.bos_id = id(bos_id);
  spec.eos_id = id(eos_id);
  spec.pad_id = id(pad_id);
  spec.add_bos = spec.bos_id >= 0;
  spec.add_space_prefix = add_dummy_prefix;
  spec.byte_fallback = byte_fallback;
  return spec;
}

}  // namespace inflight
