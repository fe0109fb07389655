// TokenizerSpec from a SentencePiece tokenizer.model, read with the SentencePiece library.
#include <sentencepiece_processor.h>

#include "tokenizer/tokenizer.h"

namespace inflight {

StatusOr<TokenizerSpec> Tokenizer::SpecFromSentencePieceModel(const std::string& path) {
  sentencepiece::SentencePieceProcessor sp;
  const auto status = sp.Load(path);
  if (!status.ok()) return InvalidArgumentError("cannot load SentencePiece model '" + path + "': " + status.ToString());
  TokenizerSpec spec;
  spec.model = TokenizerModel::kSentencePiece;
  const int n = sp.GetPieceSize();
  for (int i = 0; i < n; ++i) {
    spec.tokens.push_back(sp.IdToPiece(i));
    spec.scores.push_back(sp.GetScore(i));
    TokenType t = TokenType::kNormal;
    if (sp.IsControl(i)) t = TokenType::kControl;
    else if (sp.IsUnknown(i)) t = TokenType::kUnknown;
    else if (sp.IsUnused(i)) t = TokenType::kUnused;
    else if (sp.IsByte(i)) t = TokenType::kByte;
    spec.types.push_back(t);
  }
  spec.bos_id = sp.bos_id();
  spec.eos_id = sp.eos_id();
  spec.unk_id = sp.unk_id();
  spec.pad_id = sp.pad_id();
  spec.add_bos = spec.bos_id >= 0;
  spec.add_space_prefix = true;
  spec.byte_fallback = true;
  return spec;
}

}  // namespace inflight
