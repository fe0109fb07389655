#include "backends/llm/llm_inputs.h"

#include <climits>
#include <cmath>
#include <filesystem>
#include <memory>
#include <vector>

namespace inflight::serving {
namespace {

// Batch item `row`'s [rows, cols] matrix of a 2-D tensor (shared by every item) or a 3-D one
// ([B, rows, cols]). `expect` names the shape in the error for any other rank.
Status BatchItemMatrix(const InferTensor& t, int64_t row, const std::string& expect, int64_t* rows,
                       int64_t* cols, std::vector<double>* values) {
  if (t.shape.size() != 2 && t.shape.size() != 3)
    return InvalidArgumentError(t.name + " must be " + expect +
                                ", or 3-D with the batch dimension");
  *rows = t.shape[t.shape.size() - 2];
  *cols = t.shape.back();
  if (t.shape.size() == 3 && row >= t.shape[0])
    return InvalidArgumentError(t.name + " has no row for batch item " + std::to_string(row));
  auto v = t.AsDouble();
  if (!v.ok()) return v.status();
  const int64_t off = t.shape.size() == 3 ? row * *rows * *cols : 0;
  values->assign(v->begin() + off, v->begin() + off + *rows * *cols);
  return OkStatus();
}

bool Given(const InferTensor* t) { return t != nullptr && t->num_elements() > 0; }

}  // namespace

StatusOr<std::optional<double>> ScalarInput(const InferRequest& r, const char* name, int64_t row) {
  const InferTensor* t = r.FindInput(name);
  if (!t) return std::optional<double>();
  auto v = t->AsDouble();
  if (!v.ok()) return v.status();
  if (v->empty()) return std::optional<double>();
  const size_t i = v->size() == 1 ? 0 : static_cast<size_t>(row);
  if (i >= v->size())
    return InvalidArgumentError(std::string("input '") + name + "' has fewer rows than input_ids");
  return std::optional<double>((*v)[i]);
}

Status ReadDraftLogits(const InferRequest& r, int64_t row, int32_t vocab, Request* q) {
  const InferTensor* t = r.FindInput("draft_logits");
  if (!Given(t)) return OkStatus();
  // Speculative sampling against these logits' distribution instead of a certain draft.
  const std::string expect = "[draft tokens, " + std::to_string(vocab) + "] (the vocabulary)";
  int64_t rows = 0, cols = 0;
  std::vector<double> values;
  if (t->shape.size() >= 2 && t->shape.back() != vocab)
    return InvalidArgumentError("draft_logits must be " + expect +
                                ", or 3-D with the batch dimension");
  RETURN_IF_ERROR(BatchItemMatrix(*t, row, expect, &rows, &cols, &values));
  // (Rows past the drafts, of -1 padding in draft_input_ids, are not read.)
  const int64_t k = static_cast<int64_t>(q->draft_tokens.size());
  if (rows < k)
    return InvalidArgumentError("draft_logits has " + std::to_string(rows) + " rows for " +
                                std::to_string(k) + " draft_input_ids");
  q->draft_logits.assign(values.begin(), values.begin() + k * vocab);
  return OkStatus();
}

Status ReadGuide(const InferRequest& r, int64_t row, GuideCache* guides, Request* q) {
  const InferTensor* type = r.FindInput("guided_decoding_guide_type");
  if (!Given(type)) return OkStatus();
  // [1] or [B] strings; the guide is optional for type json.
  auto types = type->AsStrings();
  if (!types.ok()) return types.status();
  std::vector<std::string> texts;
  if (const InferTensor* g = r.FindInput("guided_decoding_guide"); Given(g)) {
    auto v = g->AsStrings();
    if (!v.ok()) return v.status();
    texts = std::move(v).value();
  }
  auto pick = [row](const std::vector<std::string>& v) {
    return v.empty() ? std::string() : v[std::min<size_t>(row, v.size() - 1)];
  };
  if (guides == nullptr)
    return FailedPreconditionError(
        "guided decoding needs the model's tokenizer; this model has none (set tokenizer_dir)");
  auto guide = guides->Get(pick(*types), pick(texts));
  if (!guide.ok()) return guide.status();
  q->guide = std::move(guide).value();
  return OkStatus();
}

Status ReadLora(const InferRequest& r, int64_t row, const inflight::ModelConfig& c,
                LoraCache& loras, Request* q) {
  const InferTensor* id_t = r.FindInput("lora_task_id");
  const InferTensor* w_t = r.FindInput("lora_weights");
  const InferTensor* c_t = r.FindInput("lora_config");
  if (!Given(id_t) && !Given(w_t) && !Given(c_t)) return OkStatus();
  if (!Given(id_t))
    return InvalidArgumentError(
        "lora_weights and lora_config need a lora_task_id to cache them under");
  if (Given(w_t) != Given(c_t))
    return InvalidArgumentError("lora_weights and lora_config come together");
  auto ids = id_t->AsInt64();
  if (!ids.ok()) return ids.status();
  const uint64_t task = static_cast<uint64_t>((*ids)[std::min<size_t>(row, ids->size() - 1)]);
  q->lora_task_id = task;
  if (!Given(w_t)) {
    auto cached = loras.Get(task);
    if (!cached.ok()) return InvalidArgumentError(cached.status().message());
    q->lora = *cached;
    return OkStatus();
  }
  int64_t rows = 0, cols = 0, crows = 0, ccols = 0;
  std::vector<double> weights, config;
  RETURN_IF_ERROR(BatchItemMatrix(*w_t, row, "2-D", &rows, &cols, &weights));
  RETURN_IF_ERROR(BatchItemMatrix(*c_t, row, "2-D", &crows, &ccols, &config));
  if (ccols != 3 || crows != rows) {
    return InvalidArgumentError(
        "lora_config must be [" + std::to_string(rows) +
        ", 3] (module id, layer, adapter size), one row per lora_weights row");
  }
  std::vector<int32_t> cfg;
  for (double v : config) {
    if (!(v >= INT32_MIN && v <= INT32_MAX))
      return InvalidArgumentError("lora_config holds an out-of-range value");
    cfg.push_back(static_cast<int32_t>(v));
  }
  auto adapter = LoraAdapter::FromTensors(c, std::vector<float>(weights.begin(), weights.end()),
                                          rows, cols, cfg);
  if (!adapter.ok()) return adapter.status();
  RETURN_IF_ERROR(loras.Put(task, *adapter));
  q->lora = *adapter;
  return OkStatus();
}

Status ReadPromptTable(const InferRequest& r, int64_t row, int32_t hidden, Request* q) {
  // Prompt ids vocab_size + i take row i; prompt_vocab_size, when given, is how many rows
  // count. (prompt_table_extra_ids only key the reference's block reuse: here the table's
  // content keys it.)
  const InferTensor* t = r.FindInput("prompt_embedding_table");
  if (!Given(t)) return OkStatus();
  const std::string expect = "[rows, " + std::to_string(hidden) + "] (the model's hidden size)";
  if (t->shape.size() >= 2 && t->shape.back() != hidden) {
    return InvalidArgumentError("prompt_embedding_table must be " + expect +
                                ", or 3-D with the batch dimension");
  }
  int64_t rows = 0, cols = 0;
  std::vector<double> values;
  RETURN_IF_ERROR(BatchItemMatrix(*t, row, expect, &rows, &cols, &values));
  if (auto pv = ScalarInput(r, "prompt_vocab_size", row); pv.ok() && pv->has_value()) {
    const double v = **pv;
    if (!(v >= 1 && v <= static_cast<double>(rows))) {
      return InvalidArgumentError("prompt_vocab_size must be in [1, " + std::to_string(rows) +
                                  "] (the table's rows)");
    }
    rows = static_cast<int64_t>(v);
  }
  auto table = std::make_shared<std::vector<float>>(static_cast<size_t>(rows * hidden));
  for (int64_t i = 0; i < rows * hidden; ++i) {
    if (!std::isfinite(values[i]))
      return InvalidArgumentError("prompt_embedding_table holds a non-finite value");
    (*table)[i] = static_cast<float>(values[i]);
  }
  q->prompt_table = std::move(table);
  return OkStatus();
}

StatusOr<int> PrefetchLoras(const std::string& dir, const inflight::ModelConfig& c,
                            LoraCache& loras) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return NotFoundError("lora_prefetch_dir '" + dir + "' is not a directory");
  int loaded = 0;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (!entry.is_directory()) continue;
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.size() > 19 ||
        name.find_first_not_of("0123456789") != std::string::npos) {
      return InvalidArgumentError("lora_prefetch_dir: subfolder '" + name +
                                  "' is not named by a task id (a decimal number)");
    }
    auto adapter = LoraAdapter::FromPeftFolder(c, entry.path().string());
    if (!adapter.ok())
      return Status(adapter.status().code(), "lora_prefetch_dir: " + adapter.status().message());
    RETURN_IF_ERROR(loras.Put(std::stoull(name), *adapter));
    ++loaded;
  }
  return loaded;
}

Status ReadLookahead(const InferRequest& r, int64_t row, const LookaheadConfig& model, Request* q) {
  struct Field {
    const char* name;
    int32_t model;
    int32_t* out;
  };
  const Field fields[] = {
      {"lookahead_window_size", model.window, &q->lookahead.window},
      {"lookahead_ngram_size", model.ngram, &q->lookahead.ngram},
      {"lookahead_verification_set_size", model.verification_set, &q->lookahead.verification_set}};
  bool any = false;
  std::optional<double> values[3];
  for (int i = 0; i < 3; ++i) {
    auto v = ScalarInput(r, fields[i].name, row);
    if (!v.ok()) return v.status();
    values[i] = *v;
    any |= values[i].has_value();
  }
  if (!any) return OkStatus();  // the model's (Request::lookahead all 0)
  for (int i = 0; i < 3; ++i) {
    const std::optional<double>& v = values[i];
    if (!v.has_value() || *v == 0) {
      *fields[i].out = fields[i].model;
      continue;
    }
    if (*v < 1 || *v > 1024 || *v != std::floor(*v)) {
      return InvalidArgumentError(std::string(fields[i].name) +
                                  " must be a whole number in [1, 1024] (0: the model's)");
    }
    *fields[i].out = static_cast<int32_t>(*v);
  }
  return OkStatus();
}

}  // namespace inflight::serving
