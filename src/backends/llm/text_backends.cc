#include "backends/llm/text_backends.h"

#include <cmath>
#include <filesystem>

#include "format/gguf.h"
#include "serving/model_config_util.h"
#include "serving/model_paths.h"
#include "serving/word_list.h"

namespace inflight::serving {
namespace {

namespace fs = std::filesystem;

// The tokenizer a config names, confined to the repository and the allowed folders.
StatusOr<std::string> TokenizerPath(const std::string& path, const BackendContext& context) {
  return ConfinedPath("tokenizer_dir", path, context.model_dir, context.allowed_roots);
}

// Per-row strings of a [B, ...] BYTES tensor (all elements of row b).
StatusOr<std::vector<std::string>> RowStrings(const InferTensor* t, int64_t b, int64_t batch) {
  if (!t) return std::vector<std::string>();
  auto all = t->AsStrings();
  if (!all.ok()) return all.status();
  if (batch <= 1 || t->shape.empty() || t->shape[0] == 1) return all;
  const int64_t per_row = static_cast<int64_t>(all->size()) / batch;
  return std::vector<std::string>(all->begin() + b * per_row, all->begin() + (b + 1) * per_row);
}

StatusOr<std::vector<double>> RowDoubles(const InferTensor* t, int64_t b, int64_t batch) {
  if (!t) return std::vector<double>();
  auto all = t->AsDouble();
  if (!all.ok()) return all.status();
  if (batch <= 1 || t->shape.empty() || t->shape[0] == 1) return all;
  const int64_t per_row = static_cast<int64_t>(all->size()) / batch;
  return std::vector<double>(all->begin() + b * per_row, all->begin() + (b + 1) * per_row);
}

StatusOr<int64_t> RowInt(const InferTensor* t, int64_t b, int64_t fallback) {
  if (!t) return fallback;
  auto v = t->AsInt64();
  if (!v.ok()) return v.status();
  if (v->empty()) return fallback;
  return (*v)[v->size() == 1 ? 0 : std::min<size_t>(b, v->size() - 1)];
}

// Rows of token ids as one [B, longest] tensor, each row right-padded with its pad id.
InferTensor RightPadded(const std::string& name, const std::vector<std::vector<int32_t>>& rows,
                        const std::vector<int32_t>& pad_ids) {
  size_t width = 0;
  for (const auto& row : rows) width = std::max(width, row.size());
  std::vector<int32_t> flat;
  for (size_t b = 0; b < rows.size(); ++b) {
    flat.insert(flat.end(), rows[b].begin(), rows[b].end());
    flat.insert(flat.end(), width - rows[b].size(), pad_ids[b]);
  }
  return InferTensor::Int32(name, {static_cast<int64_t>(rows.size()), static_cast<int64_t>(width)},
                            flat);
}

class TokenizerBackend : public ModelBackend {
 public:
  TokenizerBackend(std::shared_ptr<const Tokenizer> tok, bool add_special)
      : tok_(std::move(tok)), add_special_(add_special) {}
  std::shared_ptr<const Tokenizer> tokenizer() const override { return tok_; }

  void Execute(InferRequest r, ResponseSink sink) override {
    auto out = Run(r);
    if (!out.ok()) return sink(ErrorResponse(out.status()));
    InferResponse resp;
    resp.final = true;
    resp.outputs = std::move(out).value();
    sink(std::move(resp));
  }

 private:
  StatusOr<std::vector<InferTensor>> Run(const InferRequest& r) {
    const InferTensor* query = r.FindInput("QUERY");
    if (!query) return InvalidArgumentError("QUERY is not present in the request");
    auto texts = query->AsStrings();
    if (!texts.ok()) return texts.status();
    const int64_t batch = static_cast<int64_t>(texts->size());
    if (batch < 1) return InvalidArgumentError("QUERY is empty");
    const int32_t pad_default = tok_->spec().pad_id >= 0 ? tok_->spec().pad_id : tok_->eos_id();
    std::vector<std::vector<int32_t>> ids(batch);
    std::vector<WordList> stop(batch), bad(batch);
    std::vector<int32_t> lengths, out_lens, end_ids, pad_ids;
    for (int64_t b = 0; b < batch; ++b) {
      ids[b] = tok_->Encode((*texts)[b], add_special_);
      lengths.push_back(static_cast<int32_t>(ids[b].size()));
      auto out_len = RowInt(r.FindInput("REQUEST_OUTPUT_LEN"), b, -1);
      if (!out_len.ok()) return out_len.status();
      if (*out_len < 0)
        return InvalidArgumentError("REQUEST_OUTPUT_LEN is not present in the request");
      out_lens.push_back(static_cast<int32_t>(*out_len));
      auto end_id = RowInt(r.FindInput("END_ID"), b, tok_->eos_id());
      auto pad_id = RowInt(r.FindInput("PAD_ID"), b, pad_default);
      if (!end_id.ok()) return end_id.status();
      if (!pad_id.ok()) return pad_id.status();
      end_ids.push_back(static_cast<int32_t>(*end_id));
      pad_ids.push_back(static_cast<int32_t>(*pad_id));
      for (auto [name, list] :
           {std::pair{"STOP_WORDS_DICT", &stop}, std::pair{"BAD_WORDS_DICT", &bad}}) {
        auto words = RowStrings(r.FindInput(name), b, batch);
        if (!words.ok()) return words.status();
        for (const std::string& w : *words) {
          // Words are tokenised without special tokens (with them nothing could ever match).
          std::vector<int32_t> t = tok_->Encode(w, /*add_special=*/false);
          if (!t.empty()) (*list)[b].push_back(std::move(t));
        }
      }
    }
    // Embedding bias: each word's tokens get its weight added (summed where words share a
    // token), a [B, vocab] row per request; [B, 0] when no row has words. Words are encoded
    // without special tokens (the reference's encode adds BOS, which would bias BOS too).
    std::vector<float> bias;
    const InferTensor* bias_words = r.FindInput("EMBEDDING_BIAS_WORDS");
    const InferTensor* bias_weights = r.FindInput("EMBEDDING_BIAS_WEIGHTS");
    const int64_t vocab = tok_->vocab_size();
    if (bias_words && bias_words->num_elements() > 0) {
      bias.assign(static_cast<size_t>(batch * vocab), 0.0f);
      for (int64_t b = 0; b < batch; ++b) {
        auto words = RowStrings(bias_words, b, batch);
        if (!words.ok()) return words.status();
        auto weights = RowDoubles(bias_weights, b, batch);
        if (!weights.ok()) return weights.status();
        if (words->size() != weights->size()) {
          return InvalidArgumentError(
              "Embedding bias words must have same dimension as embedding bias weights (" +
              std::to_string(words->size()) + " words, " + std::to_string(weights->size()) +
              " weights)");
        }
        for (size_t i = 0; i < words->size(); ++i) {
          if (!std::isfinite((*weights)[i]))
            return InvalidArgumentError("embedding_bias_weights holds a non-finite value");
          for (int32_t id : tok_->Encode((*words)[i], /*add_special=*/false)) {
            if (id >= 0 && id < vocab)
              bias[static_cast<size_t>(b * vocab + id)] += static_cast<float>((*weights)[i]);
          }
        }
      }
    }
    // Without a decoder query the reference emits one pad id per row (length 1).
    std::vector<std::vector<int32_t>> decoder_ids(batch);
    std::vector<int32_t> decoder_lengths;
    for (int64_t b = 0; b < batch; ++b) {
      auto query = RowStrings(r.FindInput("DECODER_QUERY"), b, batch);
      if (!query.ok()) return query.status();
      if (!query->empty()) decoder_ids[b] = tok_->Encode(query->front(), add_special_);
      if (decoder_ids[b].empty()) decoder_ids[b] = {pad_ids[b]};
      decoder_lengths.push_back(static_cast<int32_t>(decoder_ids[b].size()));
    }
    std::vector<InferTensor> out;
    out.push_back(RightPadded("INPUT_ID", ids, pad_ids));
    out.push_back(InferTensor::Int32("REQUEST_INPUT_LEN", {batch, 1}, lengths));
    out.push_back(RightPadded("DECODER_INPUT_ID", decoder_ids, pad_ids));
    out.push_back(InferTensor::Int32("REQUEST_DECODER_INPUT_LEN", {batch, 1}, decoder_lengths));
    out.push_back(InferTensor::Float32("EMBEDDING_BIAS", {batch, bias.empty() ? 0 : vocab}, bias));
    out.push_back(InferTensor::Int32("REQUEST_OUTPUT_LEN", {batch, 1}, out_lens));
    out.push_back(PackWordLists("STOP_WORDS_IDS", stop));
    out.push_back(PackWordLists("BAD_WORDS_IDS", bad));
    out.push_back(InferTensor::Int32("OUT_END_ID", {batch, 1}, end_ids));
    out.push_back(InferTensor::Int32("OUT_PAD_ID", {batch, 1}, pad_ids));
    return out;
  }

  std::shared_ptr<const Tokenizer> tok_;
  bool add_special_;
};

// Streaming state of one request's sequences, kept in the ensemble's request context so the
// detokenizer sees each sequence's tokens as one text (the reference decodes every response
// alone, which breaks multi-byte characters and drops SentencePiece spaces).
struct DetokState {
  std::mutex mu;
  std::map<std::pair<int64_t, int64_t>, std::unique_ptr<IncrementalDetokenizer>> seqs;
};

class DetokenizerBackend : public ModelBackend {
 public:
  DetokenizerBackend(std::shared_ptr<const Tokenizer> tok, bool skip_special, std::string key)
      : tok_(std::move(tok)), skip_special_(skip_special), key_(std::move(key)) {}
  std::shared_ptr<const Tokenizer> tokenizer() const override { return tok_; }

  void Execute(InferRequest r, ResponseSink sink) override {
    auto out = Run(r);
    if (!out.ok()) return sink(ErrorResponse(out.status()));
    InferResponse resp;
    resp.final = true;
    resp.outputs.push_back(std::move(out).value());
    sink(std::move(resp));
  }

 private:
  StatusOr<InferTensor> Run(const InferRequest& r) {
    const InferTensor* tokens = r.FindInput("TOKENS_BATCH");
    if (!tokens) return InvalidArgumentError("TOKENS_BATCH is not present in the request");
    auto ids = tokens->AsInt64();
    if (!ids.ok()) return ids.status();
    // [B, beams, L] (or [B, L]).
    const auto& sh = tokens->shape;
    const int64_t batch = sh.empty() ? 1 : sh[0];
    const int64_t beams = sh.size() >= 3 ? sh[1] : 1;
    const int64_t len = sh.empty() ? 0 : sh.back();
    std::vector<int64_t> lengths;
    if (const InferTensor* sl = r.FindInput("SEQUENCE_LENGTH")) {
      auto v = sl->AsInt64();
      if (!v.ok()) return v.status();
      lengths = *v;
    }
    // Which sequence of the request these tokens belong to, for the streaming state.
    // (an ensemble passes them as parameters from the upstream response).
    const int64_t batch_index = IntParam(r, "batch_index");
    const int64_t sequence_index = IntParam(r, "sequence_index");
    std::shared_ptr<DetokState> state;
    if (r.context) state = r.context->GetOrCreate<DetokState>(key_);
    auto final_it = r.parameters.find("upstream_final");
    const bool upstream_final = final_it != r.parameters.end() &&
                                std::get_if<bool>(&final_it->second) &&
                                std::get<bool>(final_it->second);
    // Beam search: each response holds the beams' whole outputs so far.
    auto all_it = r.parameters.find("all_generated_tokens");
    const bool whole_outputs = all_it != r.parameters.end() && std::get_if<bool>(&all_it->second) &&
                               std::get<bool>(all_it->second);
    std::vector<std::string> texts;
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t k = 0; k < beams; ++k) {
        const int64_t idx = b * beams + k;
        int64_t n = idx < static_cast<int64_t>(lengths.size()) ? lengths[idx] : len;
        n = std::clamp<int64_t>(n, 0, len);
        std::vector<int32_t> seq;
        for (int64_t i = 0; i < n; ++i) {
          const int64_t id = (*ids)[idx * len + i];
          if (id < 0 || id >= tok_->vocab_size()) {
            return InvalidArgumentError("TOKENS_BATCH holds token id " + std::to_string(id) +
                                        " outside the vocabulary");
          }
          seq.push_back(static_cast<int32_t>(id));
        }
        if (!state) {
          texts.push_back(tok_->Decode(seq, skip_special_));
          continue;
        }
        if (whole_outputs) {
          // As a fresh stream would decode them (same spaces as the non-beam path).
          const bool whole = !seq.empty() && seq[0] == tok_->bos_id();
          IncrementalDetokenizer fresh(tok_.get(), skip_special_, !whole);
          std::string text;
          for (int32_t id : seq) text += fresh.Add(id);
          texts.push_back(text + fresh.Flush());
          continue;
        }
        std::lock_guard<std::mutex> lock(state->mu);
        auto& detok = state->seqs[{batch_index + b, sequence_index + k}];
        if (!detok) {
          // Text that starts with BOS is a whole text (prompt included); otherwise the tokens
          // continue the prompt and keep their leading space.
          const bool whole = !seq.empty() && seq[0] == tok_->bos_id();
          detok = std::make_unique<IncrementalDetokenizer>(tok_.get(), skip_special_, !whole);
        }
        std::string text;
        for (int32_t id : seq) text += detok->Add(id);
        if (upstream_final) text += detok->Flush();
        texts.push_back(std::move(text));
      }
    }
    return InferTensor::Strings("OUTPUT", {static_cast<int64_t>(texts.size())}, texts);
  }

  static int64_t IntParam(const InferRequest& r, const char* key) {
    auto it = r.parameters.find(key);
    if (it == r.parameters.end() || !std::holds_alternative<int64_t>(it->second)) return 0;
    return std::get<int64_t>(it->second);
  }

  std::shared_ptr<const Tokenizer> tok_;
  bool skip_special_;
  std::string key_;
};

}  // namespace

StatusOr<std::shared_ptr<const Tokenizer>> LoadTokenizer(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return NotFoundError("tokenizer_dir: '" + path + "' does not exist");
  StatusOr<std::unique_ptr<Tokenizer>> tok = NotFoundError("");
  if (fs::is_directory(path)) {
    if (fs::exists(fs::path(path) / "tokenizer.json")) {
      tok = Tokenizer::FromHuggingFaceFile((fs::path(path) / "tokenizer.json").string());
    } else if (fs::exists(fs::path(path) / "tokenizer.model")) {
      auto spec =
          Tokenizer::SpecFromSentencePieceModel((fs::path(path) / "tokenizer.model").string());
      if (!spec.ok()) return spec.status();
      tok = Tokenizer::Create(std::move(spec).value());
    } else {
      return NotFoundError("tokenizer_dir: '" + path +
                           "' has no tokenizer.json or tokenizer.model");
    }
  } else if (fs::path(path).extension() == ".model") {
    auto spec = Tokenizer::SpecFromSentencePieceModel(path);
    if (!spec.ok()) return spec.status();
    tok = Tokenizer::Create(std::move(spec).value());
  } else if (fs::path(path).extension() == ".json") {
    tok = Tokenizer::FromHuggingFaceFile(path);
  } else {
    auto gguf = GgufFile::Open(path);
    if (!gguf.ok()) return gguf.status();
    tok = Tokenizer::FromGguf(**gguf);
  }
  if (!tok.ok()) return tok.status();
  return std::shared_ptr<const Tokenizer>(std::move(tok).value());
}

StatusOr<std::unique_ptr<ModelBackend>> CreateTokenizerBackend(const inference::ModelConfig& config,
                                                               const BackendContext& context) {
  auto dir = GetParameter(config, "tokenizer_dir");
  if (!dir) return InvalidArgumentError("parameter tokenizer_dir is required");
  auto path = TokenizerPath(*dir, context);
  if (!path.ok()) return path.status();
  auto tok = LoadTokenizer(*path);
  if (!tok.ok()) return tok.status();
  return std::unique_ptr<ModelBackend>(
      new TokenizerBackend(*tok, GetBoolParameter(config, "add_special_tokens", true)));
}

StatusOr<std::unique_ptr<ModelBackend>> CreateDetokenizerBackend(
    const inference::ModelConfig& config, const BackendContext& context) {
  auto dir = GetParameter(config, "tokenizer_dir");
  if (!dir) return InvalidArgumentError("parameter tokenizer_dir is required");
  auto path = TokenizerPath(*dir, context);
  if (!path.ok()) return path.status();
  auto tok = LoadTokenizer(*path);
  if (!tok.ok()) return tok.status();
  return std::unique_ptr<ModelBackend>(new DetokenizerBackend(
      *tok, GetBoolParameter(config, "skip_special_tokens", true), "detok:" + context.model_name));
}

}  // namespace inflight::serving
