#include "bench/workload.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace inflight::bench {

PromptMaker::PromptMaker(const Tokenizer* tok, int32_t vocab_size, uint64_t seed)
    : tok_(tok), vocab_size_(vocab_size), rng_(seed) {
  if (!tok_) return;
  // Whole words with a leading space: they encode alone and in any sequence as one token.
  for (int32_t id = 0; id < tok_->vocab_size(); ++id) {
    if (tok_->IsControl(id)) continue;
    const std::string bytes = tok_->TokenBytes(id);
    if (bytes.size() < 3 || bytes[0] != ' ') continue;
    bool letters = true;
    for (size_t i = 1; i < bytes.size(); ++i)
      letters = letters && std::isalpha(static_cast<unsigned char>(bytes[i]));
    // SentencePiece adds the word-start space itself (dummy prefix).
    const std::string alone = tok_->StripsLeadingSpace() ? bytes.substr(1) : bytes;
    const auto ids = tok_->Encode(alone, false);
    if (letters && ids.size() == 1 && ids[0] == id) words_.push_back(id);
  }
}

StatusOr<BenchItem> PromptMaker::Make(int64_t n, bool token_ids) {
  BenchItem item;
  item.input_tokens = n;
  if (!tok_) {
    if (!token_ids || vocab_size_ <= 10)
      return InvalidArgumentError("text prompts need --tokenizer");
    std::uniform_int_distribution<int32_t> pick(10, vocab_size_ - 1);
    for (int64_t i = 0; i < n; ++i) item.request.input_ids.push_back(pick(rng_));
    return item;
  }
  if (words_.empty())
    return InvalidArgumentError("the tokenizer has no single-token words to build prompts from");
  const bool bos = tok_->spec().add_bos && tok_->bos_id() >= 0;
  const int64_t num_words = n - (bos ? 1 : 0);
  if (num_words < 1)
    return InvalidArgumentError("prompt length " + std::to_string(n) + " is too short");
  std::uniform_int_distribution<size_t> pick(0, words_.size() - 1);
  for (int attempt = 0; attempt < 20; ++attempt) {
    std::vector<int32_t> ids;
    if (bos) ids.push_back(tok_->bos_id());
    std::string text;
    for (int64_t i = 0; i < num_words; ++i) {
      const int32_t id = words_[pick(rng_)];
      ids.push_back(id);
      text += tok_->TokenBytes(id);
    }
    // A SentencePiece text starts without the space its first word carries.
    if (tok_->StripsLeadingSpace() && !text.empty()) text.erase(0, 1);
    if (tok_->Encode(text, true) == ids) {
      item.request.text = text;
      if (token_ids) item.request.input_ids = ids;
      return item;
    }
  }
  return InvalidArgumentError("could not make a prompt of exactly " + std::to_string(n) +
                              " tokens");
}

StatusOr<std::vector<BenchItem>> TokenNormDist(PromptMaker& maker, const WorkloadOptions& o,
                                               double input_mean, double input_stdev,
                                               double output_mean, double output_stdev,
                                               double long_fraction, int64_t long_input_len) {
  std::uniform_real_distribution<double> coin(0, 1);
  std::normal_distribution<double> in(input_mean, std::max(0.0, input_stdev)),
      out(output_mean, std::max(0.0, output_stdev));
  std::vector<BenchItem> items;
  for (int64_t tries = 0;
       static_cast<int64_t>(items.size()) < o.num_requests && tries < o.num_requests * 20;
       ++tries) {
    int64_t n = std::max<int64_t>(2, static_cast<int64_t>(std::ceil(in(maker.rng()))));
    if (long_fraction > 0 && coin(maker.rng()) < long_fraction) n = long_input_len;
    const int32_t m = static_cast<int32_t>(std::max(1.0, std::ceil(out(maker.rng()))));
    if (n > o.max_input_len) continue;
    auto item = maker.Make(n, o.token_ids);
    if (!item.ok()) return item.status();
    item->request.max_tokens = m;
    items.push_back(std::move(item).value());
  }
  return items;
}

StatusOr<std::vector<BenchItem>> Dataset(const std::string& file, const Tokenizer* tok,
                                         const WorkloadOptions& o, int32_t default_output_len) {
  std::ifstream f(file);
  if (!f) return NotFoundError("cannot open dataset '" + file + "'");
  std::stringstream ss;
  ss << f.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_array())
    return InvalidArgumentError("dataset '" + file + "' must be a JSON list");
  std::vector<BenchItem> items;
  for (const auto& rec : j) {
    if (static_cast<int64_t>(items.size()) >= o.num_requests) break;
    if (!rec.is_object() || !rec.contains("prompt") || !rec["prompt"].is_string()) {
      return InvalidArgumentError("dataset '" + file + "': every record needs a string \"prompt\"");
    }
    BenchItem item;
    item.request.text = rec["prompt"].get<std::string>();
    item.reference_output = rec.value("output", "");
    if (tok) {
      const auto ids = tok->Encode(item.request.text, true);
      item.input_tokens = static_cast<int64_t>(ids.size());
      if (o.token_ids) item.request.input_ids = ids;
    } else if (o.token_ids) {
      return InvalidArgumentError("a dataset over token ids needs --tokenizer");
    }
    if (item.input_tokens > o.max_input_len) continue;
    int32_t out = default_output_len;
    if (rec.contains("max_tokens") && rec["max_tokens"].is_number_integer()) {
      out = rec["max_tokens"].get<int32_t>();
    } else if (!item.reference_output.empty() && tok) {
      out = static_cast<int32_t>(tok->Encode(item.reference_output, false).size());
    }
    item.request.max_tokens = std::max(1, out);
    items.push_back(std::move(item));
  }
  if (items.empty()) return InvalidArgumentError("dataset '" + file + "' gave no usable prompt");
  return items;
}

StatusOr<std::vector<BenchItem>> SharedPrefix(PromptMaker& maker, const WorkloadOptions& o,
                                              int64_t prefix_len, int64_t suffix_len,
                                              int32_t output_len) {
  auto prefix = maker.Make(prefix_len, true);
  if (!prefix.ok()) return prefix.status();
  std::vector<BenchItem> items;
  for (int64_t i = 0; i < o.num_requests; ++i) {
    auto suffix = maker.Make(suffix_len + 1, true);  // +1: its BOS is dropped below
    if (!suffix.ok()) return suffix.status();
    BenchItem item;
    item.input_tokens = prefix_len + suffix_len;
    item.request.max_tokens = output_len;
    std::vector<int32_t> ids = prefix->request.input_ids;
    const auto& sfx = suffix->request.input_ids;
    ids.insert(ids.end(), sfx.end() - suffix_len, sfx.end());
    if (o.token_ids) item.request.input_ids = ids;
    item.request.text =
        prefix->request.text + (prefix->request.text.empty() ? "" : " ") + suffix->request.text;
    items.push_back(std::move(item));
  }
  return items;
}

}  // namespace inflight::bench
