#include "model/eagle.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "format/safetensors.h"
#include "kernels/ops.h"
#include "model/head_weights.h"
#include "model/model.h"

namespace inflight {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr int64_t kMaxDim = 1 << 20;  // any hidden, head or FFN size past this is a bad file

// A whole number of config.json in [lo, kMaxDim], or `fallback` when absent.
StatusOr<int64_t> ConfigInt(const json& j, const char* key, int64_t fallback, int64_t lo = 1) {
  if (!j.contains(key)) return fallback;
  if (!j[key].is_number_integer() || j[key].get<int64_t>() < lo || j[key].get<int64_t>() > kMaxDim)
    return InvalidArgumentError(std::string("eagle head: config.json's ") + key +
                                " is not a whole number in [" + std::to_string(lo) + ", " +
                                std::to_string(kMaxDim) + "]");
  return j[key].get<int64_t>();
}

StatusOr<double> ConfigNumber(const json& j, const char* key, double fallback) {
  if (!j.contains(key)) return fallback;
  if (!j[key].is_number() || !std::isfinite(j[key].get<double>()) || j[key].get<double>() <= 0)
    return InvalidArgumentError(std::string("eagle head: config.json's ") + key +
                                " is not a positive number");
  return j[key].get<double>();
}

// The file's name for a tensor of the head: checkpoints say "midlayer." (SafeAILab) or
// "layers.0." (vLLM, speculators), with or without "model.".
std::string FileName(const SafetensorsFile& f, const std::string& name) {
  std::vector<std::string> tries = {name, "model." + name};
  if (name.rfind("layers.0.", 0) == 0) {
    const std::string mid = "midlayer." + name.substr(9);
    tries.push_back(mid);
    tries.push_back("model." + mid);
  }
  for (const std::string& t : tries)
    if (f.tensors().count(t) > 0) return t;
  return name;
}

float* Grow(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
  return v.data();
}

}  // namespace

EagleHead::~EagleHead() = default;

StatusOr<std::unique_ptr<EagleHead>> EagleHead::Load(const std::string& path, const Model& base,
                                                     DType weights) {
  RETURN_IF_ERROR(HeadWeights::CheckWeightType("eagle head", weights));
  const ModelConfig& bc = base.config();
  std::error_code ec;
  std::string file = path;
  json cfg = json::object();
  if (fs::is_directory(path, ec)) {
    std::ifstream in(path + "/config.json");
    if (!in) return NotFoundError("eagle head: " + path + "/config.json is missing");
    cfg = json::parse(in, nullptr, /*allow_exceptions=*/false, /*ignore_comments=*/false);
    if (cfg.is_discarded() || !cfg.is_object())
      return InvalidArgumentError("eagle head: " + path + "/config.json is not a JSON object");
    file = path + "/model.safetensors";
    if (!fs::exists(file, ec)) {
      std::vector<std::string> found;
      for (const auto& e : fs::directory_iterator(path, ec))
        if (e.path().extension() == ".safetensors") found.push_back(e.path().string());
      if (found.size() == 1) {
        file = found[0];
      } else if (fs::exists(path + "/pytorch_model.bin", ec)) {
        return UnimplementedError("eagle head: " + path +
                                  " holds pytorch_model.bin only; pickled checkpoints are not "
                                  "loaded (convert it to model.safetensors)");
      } else {
        return NotFoundError("eagle head: " + path + " holds no model.safetensors");
      }
    }
  }
  auto opened = SafetensorsFile::Open(file);
  if (!opened.ok()) return opened.status();
  std::unique_ptr<EagleHead> h(new EagleHead());
  h->file_ = std::move(opened).value();
  h->base_ = &base;
  const SafetensorsFile& f = *h->file_;

  // The shape: config.json where given, else the base model's (a head always has its own).
  // The speculators format (vLLM's Eagle3Speculator) keeps the layer's own keys in
  // transformer_layer_config and the head's (draft_vocab_size, target_hidden_size, the aux
  // layer ids, norm_before_residual) at the top.
  if (cfg.contains("transformer_layer_config") && cfg["transformer_layer_config"].is_object()) {
    const json layer = cfg["transformer_layer_config"];  // a copy: cfg changes below
    for (const auto& item : layer.items()) {
      if (item.key() != "transformer_layer_config") cfg[item.key()] = item.value();
    }
  }
  if (cfg.contains("num_hidden_layers") && cfg["num_hidden_layers"] != 1) {
    return UnimplementedError("eagle head: config.json's num_hidden_layers is " +
                              cfg["num_hidden_layers"].dump() +
                              "; heads of one decoder layer are supported");
  }
  ASSIGN_OR_RETURN(int64_t H, ConfigInt(cfg, "hidden_size", bc.hidden_size));
  ASSIGN_OR_RETURN(int64_t TH, ConfigInt(cfg, "target_hidden_size", H));
  ASSIGN_OR_RETURN(int64_t heads, ConfigInt(cfg, "num_attention_heads", bc.num_heads));
  ASSIGN_OR_RETURN(int64_t kv_heads, ConfigInt(cfg, "num_key_value_heads", heads));
  ASSIGN_OR_RETURN(int64_t head_dim, ConfigInt(cfg, "head_dim", H / heads));
  ASSIGN_OR_RETURN(int64_t ffn, ConfigInt(cfg, "intermediate_size", bc.ffn_size));
  ASSIGN_OR_RETURN(int64_t vocab, ConfigInt(cfg, "vocab_size", bc.vocab_size));
  ASSIGN_OR_RETURN(int64_t draft_vocab, ConfigInt(cfg, "draft_vocab_size", vocab));
  ASSIGN_OR_RETURN(double eps, ConfigNumber(cfg, "rms_norm_eps", 1e-5));
  ASSIGN_OR_RETURN(double theta, ConfigNumber(cfg, "rope_theta", 10000.0));
  // fc over two states (the embedding and the model's last state) is an EAGLE-1/2 head's.
  if (auto it = f.tensors().find(FileName(f, "fc.weight"));
      it != f.tensors().end() && it->second.shape.size() == 2 && it->second.shape[1] == 2 * TH) {
    h->version_ = 1;
  }
  const bool v1 = h->version_ == 1;
  if (TH != bc.hidden_size && !cfg.contains("target_hidden_size")) {
    return InvalidArgumentError(
        "eagle head: its hidden size (config.json's hidden_size, with no "
        "target_hidden_size) is " +
        std::to_string(TH) + " but the model's hidden size is " + std::to_string(bc.hidden_size) +
        " (a head for another model?)");
  }
  if (TH != bc.hidden_size) {
    return InvalidArgumentError("eagle head: its target hidden size is " + std::to_string(TH) +
                                " but the model's hidden size is " +
                                std::to_string(bc.hidden_size) + " (a head for another model?)");
  }
  if (vocab != bc.vocab_size) {
    return InvalidArgumentError("eagle head: config.json's vocab_size " + std::to_string(vocab) +
                                " differs from the model's vocabulary (" +
                                std::to_string(bc.vocab_size) + " tokens)");
  }
  if (v1 &&
      (cfg.contains("norm_before_residual") || cfg.contains("eagle_aux_hidden_state_layer_ids") ||
       (cfg.contains("eagle_config") && cfg["eagle_config"].is_object() &&
        cfg["eagle_config"].contains("eagle_aux_hidden_state_layer_ids")))) {
    return InvalidArgumentError(
        "eagle head: fc.weight fuses 2 states (an EAGLE-1/2 head) but config.json has EAGLE-3 "
        "keys (eagle_aux_hidden_state_layer_ids, norm_before_residual): a mismatched file?");
  }
  if (v1 && base.sharded()) {
    return UnimplementedError(
        "eagle head: an EAGLE-1/2 head reads the model's whole output projection, which tensor or "
        "pipeline parallelism splits");
  }
  if (v1 && (H != TH || draft_vocab != vocab)) {
    return InvalidArgumentError(
        "eagle head: an EAGLE-1/2 head's hidden size and vocabulary are the model's (config.json "
        "gives hidden_size " +
        std::to_string(H) + " and draft_vocab_size " + std::to_string(draft_vocab) +
        " for a model of " + std::to_string(TH) + " and " + std::to_string(vocab) + ")");
  }
  if (draft_vocab > vocab) {
    return InvalidArgumentError("eagle head: draft_vocab_size " + std::to_string(draft_vocab) +
                                " is larger than the vocabulary (" + std::to_string(vocab) + ")");
  }
  if (head_dim < 2 || heads * head_dim > kMaxDim || H > kMaxDim || ffn > kMaxDim) {
    return InvalidArgumentError("eagle head: " + std::to_string(heads) + " heads of " +
                                std::to_string(head_dim) + " dims (head_dim must be at least 2, " +
                                "heads x head_dim at most " + std::to_string(kMaxDim) + ")");
  }
  if (heads % kv_heads != 0 || head_dim % 2 != 0) {
    return InvalidArgumentError("eagle head: " + std::to_string(heads) + " heads over " +
                                std::to_string(kv_heads) + " K/V heads of " +
                                std::to_string(head_dim) +
                                " dims (heads must divide evenly, dims must be even)");
  }
  // The target layers the fc fuses.
  std::vector<int64_t> aux;
  const json* ec_json =
      cfg.contains("eagle_config") && cfg["eagle_config"].is_object() ? &cfg["eagle_config"] : &cfg;
  if (!ec_json->contains("eagle_aux_hidden_state_layer_ids")) ec_json = &cfg;
  if (v1) {
    aux = {bc.num_layers};  // the model's final normed state
  } else if (ec_json->contains("eagle_aux_hidden_state_layer_ids")) {
    const json& ids = (*ec_json)["eagle_aux_hidden_state_layer_ids"];
    if (!ids.is_array() || ids.size() != 3)
      return InvalidArgumentError(
          "eagle head: eagle_config.eagle_aux_hidden_state_layer_ids must list 3 layers");
    for (const json& id : ids) {
      if (!id.is_number_integer())
        return InvalidArgumentError(
            "eagle head: eagle_aux_hidden_state_layer_ids holds a value that is not a layer");
      aux.push_back(id.get<int64_t>());
    }
  } else {
    const int64_t L = bc.num_layers;
    if (L < 4) {
      return InvalidArgumentError("eagle head: the model has " + std::to_string(L) +
                                  " layers; EAGLE-3's default layers (2, L/2, L-3) need 4 "
                                  "(set eagle_config.eagle_aux_hidden_state_layer_ids)");
    }
    aux = {2, L / 2, L - 3};
  }
  for (int64_t id : aux) {
    if (!v1 && (id < 0 || id >= bc.num_layers)) {
      return InvalidArgumentError("eagle head: fuses the input of layer " + std::to_string(id) +
                                  " but the model has " + std::to_string(bc.num_layers) +
                                  " layers (a head for another model?)");
    }
    h->aux_layers_.push_back(static_cast<int32_t>(id));
  }
  h->hidden_ = static_cast<int32_t>(H);
  h->target_hidden_ = static_cast<int32_t>(TH);
  h->num_heads_ = static_cast<int32_t>(heads);
  h->num_kv_heads_ = static_cast<int32_t>(kv_heads);
  h->head_dim_ = static_cast<int32_t>(head_dim);
  h->ffn_ = static_cast<int32_t>(ffn);
  h->vocab_ = static_cast<int32_t>(vocab);
  h->draft_vocab_ = static_cast<int32_t>(draft_vocab);
  h->eps_ = static_cast<float>(eps);
  if (cfg.contains("norm_before_residual")) {
    if (!cfg["norm_before_residual"].is_boolean())
      return InvalidArgumentError("eagle head: config.json's norm_before_residual is not a bool");
    h->norm_before_residual_ = cfg["norm_before_residual"].get<bool>();
  }

  // RoPE as Hugging Face Llama (halves), with Llama 3 or linear scaling.
  std::vector<float> factors;
  float linear = 1.0f;
  if (cfg.contains("rope_scaling") && cfg["rope_scaling"].is_object()) {
    const json& rs = cfg["rope_scaling"];
    std::string type;
    for (const char* key : {"type", "rope_type"}) {
      if (!rs.contains(key) || rs[key].is_null()) continue;
      if (!rs[key].is_string())
        return InvalidArgumentError(std::string("eagle head: rope_scaling's ") + key +
                                    " is not a string");
      type = rs[key].get<std::string>();
    }
    ASSIGN_OR_RETURN(double factor, ConfigNumber(rs, "factor", 1.0));
    if (type == "llama3") {
      ASSIGN_OR_RETURN(double low, ConfigNumber(rs, "low_freq_factor", 1.0));
      ASSIGN_OR_RETURN(double high, ConfigNumber(rs, "high_freq_factor", 4.0));
      ASSIGN_OR_RETURN(int64_t original, ConfigInt(rs, "original_max_position_embeddings", 8192));
      if (high <= low)
        return InvalidArgumentError(
            "eagle head: rope_scaling's high_freq_factor must exceed its "
            "low_freq_factor");
      factors = Llama3RopeFactors(static_cast<float>(theta), static_cast<int>(head_dim),
                                  static_cast<float>(factor), static_cast<float>(low),
                                  static_cast<float>(high), static_cast<int>(original));
    } else if (type == "linear") {
      linear = static_cast<float>(factor);
    } else if (!type.empty() && type != "default") {
      return UnimplementedError("eagle head: rope_scaling type '" + type +
                                "' is not supported (linear, llama3)");
    }
  }
  h->inv_freq_.resize(static_cast<size_t>(head_dim / 2));
  kernels::RopeInvFreq(static_cast<float>(theta), static_cast<int>(head_dim),
                       factors.empty() ? nullptr : factors.data(), linear, h->inv_freq_.data());

  HeadWeights hw("eagle head", f, weights);
  const int64_t q_dim = heads * head_dim, kv_dim = kv_heads * head_dim;
  const std::string shape_why = "config.json gives hidden " + std::to_string(H) + ", " +
                                std::to_string(heads) + " heads of " + std::to_string(head_dim) +
                                ", " + std::to_string(kv_heads) + " K/V heads, FFN " +
                                std::to_string(ffn);
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols, const std::string& why,
                    TensorView* out) -> Status {
    ASSIGN_OR_RETURN(const SafetensorsTensor* t, hw.Get(FileName(f, name), {rows, cols}, why));
    *out = hw.Matrix(*t);
    return OkStatus();
  };
  auto vec = [&](const std::string& name, int64_t n, std::vector<float>* out) -> Status {
    ASSIGN_OR_RETURN(const SafetensorsTensor* t, hw.Get(FileName(f, name), {n}, shape_why));
    *out = HeadWeights::ToFloats(*t);
    return OkStatus();
  };
  RETURN_IF_ERROR(matrix(
      "fc.weight", H, (v1 ? 2 : 3) * TH,
      "EAGLE-3 fuses 3 states of the model's hidden size " + std::to_string(TH) + " (EAGLE-1/2: 2)",
      &h->fc_));
  if (v1 && f.tensors().count(FileName(f, "fc.bias")) > 0)
    RETURN_IF_ERROR(vec("fc.bias", H, &h->bfc_));
  // EAGLE-3's attention reads [norm(embedding), norm(hidden)]; EAGLE-1/2's fc's output.
  const int64_t attn_in = v1 ? H : 2 * H;
  RETURN_IF_ERROR(matrix("layers.0.self_attn.q_proj.weight", q_dim, attn_in, shape_why, &h->wq_));
  RETURN_IF_ERROR(matrix("layers.0.self_attn.k_proj.weight", kv_dim, attn_in, shape_why, &h->wk_));
  RETURN_IF_ERROR(matrix("layers.0.self_attn.v_proj.weight", kv_dim, attn_in, shape_why, &h->wv_));
  RETURN_IF_ERROR(matrix("layers.0.self_attn.o_proj.weight", H, q_dim, shape_why, &h->wo_));
  RETURN_IF_ERROR(matrix("layers.0.mlp.gate_proj.weight", ffn, H, shape_why, &h->gate_));
  RETURN_IF_ERROR(matrix("layers.0.mlp.up_proj.weight", ffn, H, shape_why, &h->up_));
  RETURN_IF_ERROR(matrix("layers.0.mlp.down_proj.weight", H, ffn, shape_why, &h->down_));
  for (auto [name, n, out] : {std::tuple{"layers.0.self_attn.q_proj.bias", q_dim, &h->bq_},
                              std::tuple{"layers.0.self_attn.k_proj.bias", kv_dim, &h->bk_},
                              std::tuple{"layers.0.self_attn.v_proj.bias", kv_dim, &h->bv_}}) {
    if (f.tensors().count(FileName(f, name)) > 0) RETURN_IF_ERROR(vec(name, n, out));
  }
  RETURN_IF_ERROR(vec("layers.0.post_attention_layernorm.weight", H, &h->post_norm_));
  if (v1) {
    // No norms of its own before attention or after the layer (its first layer has no
    // input_layernorm; one in the file is unused, as in the reference), and the model's own
    // output projection.
    h->lm_ = base.weights().output;
    if (h->lm_.rows != vocab) {
      return InvalidArgumentError("eagle head: the model's output projection has " +
                                  std::to_string(h->lm_.rows) + " rows, not its vocabulary (" +
                                  std::to_string(vocab) + ")");
    }
  } else {
    RETURN_IF_ERROR(vec("layers.0.input_layernorm.weight", H, &h->input_norm_));
    RETURN_IF_ERROR(vec("layers.0.hidden_norm.weight", H, &h->hidden_norm_));
    RETURN_IF_ERROR(vec("norm.weight", H, &h->final_norm_));
    RETURN_IF_ERROR(matrix("lm_head.weight", draft_vocab, H,
                           "the draft vocabulary is " + std::to_string(draft_vocab) +
                               " tokens (draft_vocab_size) and the hidden size " +
                               std::to_string(H),
                           &h->lm_));
  }
  if (f.tensors().count(FileName(f, "embed_tokens.weight")) > 0) {
    RETURN_IF_ERROR(matrix("embed_tokens.weight", vocab, H,
                           "the model's vocabulary is " + std::to_string(vocab) + " tokens",
                           &h->embed_));
  } else if (H != bc.hidden_size) {
    return InvalidArgumentError(
        "eagle head: no embed_tokens.weight of its own, and its hidden "
        "size " +
        std::to_string(H) + " differs from the model's " + std::to_string(bc.hidden_size));
  }
  // Draft ids to target ids.
  h->d2t_.resize(static_cast<size_t>(draft_vocab));
  if (auto it = f.tensors().find(FileName(f, "d2t")); it != f.tensors().end()) {
    const SafetensorsTensor& t = it->second;
    const int64_t width = t.dtype == "I64" ? 8 : t.dtype == "I32" ? 4 : 0;
    if (width == 0 || t.shape != std::vector<int64_t>{draft_vocab} ||
        t.num_bytes != static_cast<uint64_t>(width * draft_vocab)) {
      return InvalidArgumentError("eagle head: d2t must be I64 or I32 of [" +
                                  std::to_string(draft_vocab) + "] (one offset per draft id)");
    }
    for (int64_t i = 0; i < draft_vocab; ++i) {
      int64_t off = 0;
      if (width == 8) {
        std::memcpy(&off, t.data + 8 * i, 8);
      } else {
        int32_t o32;
        std::memcpy(&o32, t.data + 4 * i, 4);
        off = o32;
      }
      if (off < -vocab || off > vocab || i + off < 0 || i + off >= vocab) {
        return InvalidArgumentError("eagle head: d2t maps draft id " + std::to_string(i) +
                                    " outside the vocabulary");
      }
      h->d2t_[i] = static_cast<int32_t>(i + off);
    }
  } else if (draft_vocab != vocab) {
    return NotFoundError("eagle head: tensor 'd2t' is missing (the draft vocabulary of " +
                         std::to_string(draft_vocab) + " tokens needs its map)");
  } else {
    for (int64_t i = 0; i < draft_vocab; ++i) h->d2t_[i] = static_cast<int32_t>(i);
  }
  h->owned_ = std::move(hw.owned());
  return h;
}

int64_t EagleHead::LayerBytes() const {
  return fc_.num_bytes() + wq_.num_bytes() + wk_.num_bytes() + wv_.num_bytes() + wo_.num_bytes() +
         gate_.num_bytes() + up_.num_bytes() + down_.num_bytes();
}

int64_t EagleHead::OutputBytes() const { return lm_.num_bytes(); }

void EagleHead::Attend(const EagleRow& row, const float* q, float* out,
                       std::vector<float>& scores) const {
  const int32_t kvd = kv_dim(), hd = head_dim_;
  const EagleCache& c = *row.cache;
  // Keys: the cache (up to the row itself for a committed row), then the tree's ancestors and
  // the row itself.
  const int32_t cached =
      std::min(row.tree == nullptr ? row.position - c.start + 1 : c.size(kvd), c.size(kvd));
  const int32_t extra = row.tree == nullptr ? 0 : row.num_ancestors + 1;
  const int32_t n = cached + extra;
  scores.resize(static_cast<size_t>(n));
  auto key = [&](int32_t i, bool value) -> const float* {
    if (i < cached) return (value ? c.v.data() : c.k.data()) + static_cast<int64_t>(i) * kvd;
    const int32_t j = i - cached;
    const int32_t node = j < row.num_ancestors ? row.ancestors[j] : row.node;
    return (value ? row.tree->v.data() : row.tree->k.data()) + static_cast<int64_t>(node) * kvd;
  };
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int32_t group = num_heads_ / num_kv_heads_;
  const kernels::KernelTable& k = kernels::ActiveKernels();
  for (int32_t head = 0; head < num_heads_; ++head) {
    const float* qh = q + static_cast<int64_t>(head) * hd;
    const int32_t kvh = head / group;
    float mx = -std::numeric_limits<float>::infinity();
    for (int32_t i = 0; i < n; ++i) {
      scores[i] = k.dot_f32(qh, key(i, false) + static_cast<int64_t>(kvh) * hd, hd) * scale;
      mx = std::max(mx, scores[i]);
    }
    double sum = 0;
    for (int32_t i = 0; i < n; ++i) sum += (scores[i] = std::exp(scores[i] - mx));
    float* oh = out + static_cast<int64_t>(head) * hd;
    std::fill(oh, oh + hd, 0.0f);
    const float inv = static_cast<float>(1.0 / sum);
    for (int32_t i = 0; i < n; ++i)
      k.axpy_f32(oh, scores[i] * inv, key(i, true) + static_cast<int64_t>(kvh) * hd, hd);
  }
}

// EAGLE-3's attention input: [norm(embedding of the token), norm(hidden)], where the hidden
// input is the target's states through fc (fuse) or the draft's own; x gets the hidden input
// (the residual).
const float* EagleHead::Eagle3Input(const std::vector<EagleRow>& rows, bool fuse, float* x,
                                    ThreadPool& pool) {
  const int64_t R = static_cast<int64_t>(rows.size()), H = hidden_, TH = target_hidden_;
  if (fuse) {
    float* in = Grow(t_, R * 3 * TH);
    for (int64_t r = 0; r < R; ++r)
      std::memcpy(in + r * 3 * TH, rows[r].hidden, 3 * TH * sizeof(float));
    kernels::MatMul(fc_, in, R, x, pool, scratch_);
  } else {
    for (int64_t r = 0; r < R; ++r) std::memcpy(x + r * H, rows[r].hidden, H * sizeof(float));
  }
  float* cat = Grow(cat_, R * 2 * H);
  for (int64_t r = 0; r < R; ++r) {
    float* e = cat + r * 2 * H;
    if (embed_.data != nullptr) {
      kernels::DequantizeRow(embed_, rows[r].token, e);
    } else {
      base_->EmbeddingRow(rows[r].token, e);
    }
    kernels::RmsNorm(e, input_norm_.data(), 1, H, eps_, e);
    kernels::RmsNorm(x + r * H, hidden_norm_.data(), 1, H, eps_, e + H);
    // Some heads add the normed hidden state to the residual stream instead of the raw one.
    if (norm_before_residual_) std::memcpy(x + r * H, e + H, H * sizeof(float));
  }
  return cat;
}

void EagleHead::Forward(const std::vector<EagleRow>& rows, bool fuse, int32_t top_k,
                        float* prenorm_out, std::vector<int32_t>* top_out, ThreadPool& pool,
                        std::vector<float>* top_logp) {
  const int64_t R = static_cast<int64_t>(rows.size());
  if (top_out != nullptr) top_out->clear();
  if (top_logp != nullptr) top_logp->clear();
  if (R == 0) return;
  const int64_t H = hidden_, TH = target_hidden_, qd = int64_t{num_heads_} * head_dim_,
                kvd = kv_dim(), F = ffn_;
  float* x = Grow(x_, R * H);
  const float* attn_in;  // what q, k and v read
  if (version_ == 1) {
    // x = fc([embedding of the token, feature]) (+ bias): the layer's input and residual.
    float* in = Grow(t_, R * 2 * H);
    for (int64_t r = 0; r < R; ++r) {
      if (embed_.data != nullptr) {
        kernels::DequantizeRow(embed_, rows[r].token, in + r * 2 * H);
      } else {
        base_->EmbeddingRow(rows[r].token, in + r * 2 * H);
      }
      std::memcpy(in + r * 2 * H + H, rows[r].hidden, H * sizeof(float));
    }
    kernels::MatMul(fc_, in, R, x, pool, scratch_);
    if (!bfc_.empty()) kernels::AddBias(x, bfc_.data(), R, H);
    attn_in = x;
  } else {
    attn_in = Eagle3Input(rows, fuse, x, pool);
  }
  float* q = Grow(q_, R * qd);
  float* k = Grow(k_, R * kvd);
  float* v = Grow(v_, R * kvd);
  kernels::MatMul(wq_, attn_in, R, q, pool, scratch_);
  kernels::MatMul(wk_, attn_in, R, k, pool, scratch_);
  kernels::MatMul(wv_, attn_in, R, v, pool, scratch_);
  if (!bq_.empty()) kernels::AddBias(q, bq_.data(), R, qd);
  if (!bk_.empty()) kernels::AddBias(k, bk_.data(), R, kvd);
  if (!bv_.empty()) kernels::AddBias(v, bv_.data(), R, kvd);
  std::vector<float> cos(static_cast<size_t>(head_dim_));
  for (int64_t r = 0; r < R; ++r) {
    const EagleRow& row = rows[r];
    kernels::RopeAngles(inv_freq_.data(), head_dim_, row.position, cos.data(),
                        cos.data() + head_dim_ / 2);
    kernels::ApplyRopeAngles(q + r * qd, num_heads_, head_dim_, head_dim_,
                             kernels::RopeStyle::kHalves, cos.data(), cos.data() + head_dim_ / 2);
    kernels::ApplyRopeAngles(k + r * kvd, num_kv_heads_, head_dim_, head_dim_,
                             kernels::RopeStyle::kHalves, cos.data(), cos.data() + head_dim_ / 2);
    // Every row's K/V is in place before any row attends.
    std::vector<float>*kd, *vd;
    int64_t slot;
    if (row.tree != nullptr) {
      kd = &row.tree->k, vd = &row.tree->v, slot = row.node;
    } else {
      EagleCache& c = *row.cache;
      if (row.position < c.start || row.position > c.end(static_cast<int32_t>(kvd))) {
        c.Reset(row.position);  // a gap: the cache starts again here
      }
      if (row.position - c.start >= 2 * kEagleCacheWindow) {
        // The oldest positions go (amortized: the cache keeps one to two windows).
        const int64_t drop = row.position - c.start - kEagleCacheWindow;
        c.k.erase(c.k.begin(), c.k.begin() + std::min<int64_t>(drop * kvd, c.k.size()));
        c.v.erase(c.v.begin(), c.v.begin() + std::min<int64_t>(drop * kvd, c.v.size()));
        c.start += static_cast<int32_t>(drop);
      }
      slot = row.position - c.start;
      c.k.resize(static_cast<size_t>(slot * kvd));  // cut what followed (a rollback)
      c.v.resize(static_cast<size_t>(slot * kvd));
      kd = &c.k, vd = &c.v;
    }
    if (static_cast<int64_t>(kd->size()) < (slot + 1) * kvd) {
      kd->resize(static_cast<size_t>((slot + 1) * kvd));
      vd->resize(static_cast<size_t>((slot + 1) * kvd));
    }
    std::memcpy(kd->data() + slot * kvd, k + r * kvd, kvd * sizeof(float));
    std::memcpy(vd->data() + slot * kvd, v + r * kvd, kvd * sizeof(float));
  }
  float* att = Grow(att_, R * qd);
  pool.ParallelFor(R, 1, [&](int64_t r0, int64_t r1) {
    std::vector<float> scores;
    for (int64_t r = r0; r < r1; ++r) Attend(rows[r], q + r * qd, att + r * qd, scores);
  });
  // x += o_proj(attention); x += MLP(norm(x)).
  float* o = Grow(t_, R * std::max(H, 3 * TH));
  kernels::MatMul(wo_, att, R, o, pool, scratch_);
  kernels::AddInPlace(x, o, R * H);
  float* post = Grow(cat_, R * 2 * H);
  kernels::RmsNorm(x, post_norm_.data(), R, H, eps_, post);
  float* g = Grow(gate_buf_, R * F);
  float* u = Grow(up_buf_, R * F);
  kernels::MatMul(gate_, post, R, g, pool, scratch_);
  kernels::MatMul(up_, post, R, u, pool, scratch_);
  kernels::SiluMul(g, u, R * F);
  kernels::MatMul(down_, g, R, o, pool, scratch_);
  kernels::AddInPlace(x, o, R * H);
  if (prenorm_out != nullptr) std::memcpy(prenorm_out, x, R * H * sizeof(float));
  if (top_out == nullptr) return;
  // The guesses: norm (EAGLE-3), the draft vocabulary's logits, its top_k mapped to target ids.
  int64_t n = 0;
  for (int64_t r = 0; r < R; ++r) {
    if (!rows[r].top) continue;
    if (version_ == 1) {
      std::memcpy(post + n * H, x + r * H, H * sizeof(float));
    } else {
      kernels::RmsNorm(x + r * H, final_norm_.data(), 1, H, eps_, post + n * H);
    }
    ++n;
  }
  if (n == 0) return;
  const int64_t V = draft_vocab_;
  float* logits = Grow(logits_, n * V);
  kernels::MatMul(lm_, post, n, logits, pool, scratch_);
  top_k = std::clamp<int32_t>(top_k, 1, static_cast<int32_t>(V));
  top_out->resize(static_cast<size_t>(n * top_k));
  if (top_logp != nullptr) top_logp->resize(static_cast<size_t>(n * top_k));
  pool.ParallelFor(n, 1, [&](int64_t r0, int64_t r1) {
    std::vector<std::pair<float, int32_t>> best;
    for (int64_t r = r0; r < r1; ++r) {
      // The top_k largest logits, ties to the lower id (as ArgMax).
      const float* l = logits + r * V;
      best.clear();
      for (int32_t i = 0; i < V; ++i) {
        if (static_cast<int32_t>(best.size()) == top_k && l[i] <= best.back().first) continue;
        auto at = std::upper_bound(best.begin(), best.end(), std::make_pair(l[i], i),
                                   [](const auto& a, const auto& b) { return a.first > b.first; });
        best.insert(at, {l[i], i});
        if (static_cast<int32_t>(best.size()) > top_k) best.pop_back();
      }
      for (int32_t i = 0; i < top_k; ++i)
        (*top_out)[r * top_k + i] = d2t_[best[std::min<size_t>(i, best.size() - 1)].second];
      if (top_logp != nullptr) {
        double sum = 0;  // log-softmax: the best logit is the largest
        for (int32_t i = 0; i < V; ++i) sum += std::exp(static_cast<double>(l[i]) - best[0].first);
        const double lse = best[0].first + std::log(sum);
        for (int32_t i = 0; i < top_k; ++i)
          (*top_logp)[r * top_k + i] =
              static_cast<float>(best[std::min<size_t>(i, best.size() - 1)].first - lse);
      }
    }
  });
}

std::vector<std::vector<int32_t>> DefaultEagleChoices() {
  return {{0}, {0, 0}, {0, 0, 0}, {0, 0, 0, 0}};
}

Status WriteEagleHead(const std::string& dir, const Model& base, bool guess_bigram,
                      ThreadPool& pool, const std::vector<int32_t>& aux_layers, int version) {
  if (version != 1 && version != 3)
    return InvalidArgumentError("WriteEagleHead: version 1 (EAGLE-1/2) or 3");
  const bool v1 = version == 1;
  const ModelConfig& c = base.config();
  const int64_t H = c.hidden_size, F = c.ffn_size, V = c.vocab_size,
                DV = std::min<int64_t>(32000, V);
  const int64_t heads = c.num_heads, head_dim = H / heads;
  const int64_t kv_heads = guess_bigram ? heads : c.num_kv_heads, q = heads * head_dim,
                kv = kv_heads * head_dim;
  if (DV != V) {
    return UnimplementedError("WriteEagleHead: a vocabulary of " + std::to_string(V) +
                              " tokens would need a d2t map (written only for up to 32000)");
  }
  if (guess_bigram && H % heads != 0)
    return UnimplementedError("WriteEagleHead: heads must divide the hidden size");
  std::error_code ec;
  fs::create_directories(dir, ec);
  CheapNormal draw(11);
  auto normal = [&](float sd) { return draw.Next() * 1.73f * sd; };  // N(0, ~sd)
  // The tensors' values: a deque, so a pointer to one stays good while more are added.
  std::deque<std::vector<float>> keep;
  std::vector<SafetensorsOut> out;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float sd, float fill) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = sd > 0 ? normal(sd) : fill;
    keep.push_back(std::move(v));
    out.push_back({name, std::move(shape), nullptr});
    return &keep.back();
  };
  // guess_bigram: every row's output is the normalized embedding of its token input (fc 0; q
  // and k constant, so a row attends to itself alone; v = norm(embedding) - norm(hidden) and
  // o_proj the identity cancel the residual; the MLP adds nothing), and the model's own final
  // norm and output projection turn it into the model's next token after that token alone.
  // EAGLE-1/2 (v1), guess_bigram: fc scales the token's embedding by the model's output norm
  // weights, nothing else adds to it, and the model's projection ranks its next tokens as the
  // model does after that token alone.
  const float sd = guess_bigram ? 0.0f : 0.02f;
  const std::string layer = v1 ? "layers.0." : "midlayer.";
  const int64_t attn_in = v1 ? H : 2 * H;
  std::vector<float>* fc = add("fc.weight", {H, (v1 ? 2 : 3) * H}, sd, 0);
  if (v1) {
    add("fc.bias", {H}, 0, 0);
    if (guess_bigram)
      for (int64_t i = 0; i < H; ++i) (*fc)[i * 2 * H + i] = base.weights().output_norm[i];
  }
  add(layer + "self_attn.q_proj.weight", {q, attn_in}, v1 ? 0.02f : sd, 0);
  add(layer + "self_attn.k_proj.weight", {kv, attn_in}, v1 ? 0.02f : sd, 0);
  std::vector<float>* v = add(layer + "self_attn.v_proj.weight", {kv, attn_in}, sd, 0);
  std::vector<float>* o = add(layer + "self_attn.o_proj.weight", {H, q}, sd, 0);
  if (guess_bigram && !v1) {
    add("midlayer.self_attn.q_proj.bias", {q}, 0, 12.0f);
    add("midlayer.self_attn.k_proj.bias", {kv}, 0, 12.0f);
    for (int64_t i = 0; i < H; ++i) {
      (*v)[i * 2 * H + i] = 1.0f;
      (*v)[i * 2 * H + H + i] = -1.0f;
      (*o)[i * q + i] = 1.0f;
    }
  }
  add(layer + "mlp.gate_proj.weight", {F, H}, 0.02f, 0);
  add(layer + "mlp.up_proj.weight", {F, H}, 0.02f, 0);
  add(layer + "mlp.down_proj.weight", {H, F}, sd, 0);
  if (!v1) {
    add(layer + "input_layernorm.weight", {H}, 0, 1);
    add(layer + "hidden_norm.weight", {H}, 0, 1);
  }
  add(layer + "post_attention_layernorm.weight", {H}, 0, 1);
  if (!v1) {
    std::vector<float>* norm = add("norm.weight", {H}, 0, 1);
    std::vector<float>* lm = add("lm_head.weight", {DV, H}, sd, 0);
    if (guess_bigram) {
      *norm = base.weights().output_norm;
      *lm = OutputProjectionFloats(base, pool);
    }
  }
  for (size_t i = 0; i < out.size(); ++i) out[i].values = keep[i].data();
  RETURN_IF_ERROR(WriteSafetensorsF16(dir + "/model.safetensors", out));
  json cfg = {{"architectures", {v1 ? "LlamaForCausalLM" : "LlamaForCausalLMEagle3"}},
              {"hidden_size", H},
              {"num_attention_heads", heads},
              {"num_key_value_heads", kv_heads},
              {"head_dim", head_dim},
              {"intermediate_size", F},
              {"num_hidden_layers", 1},
              {"rms_norm_eps", c.norm_eps},
              {"rope_theta", c.rope_base},
              {"vocab_size", V},
              {"draft_vocab_size", DV}};
  if (v1) cfg.erase("draft_vocab_size");
  if (!aux_layers.empty() && !v1)
    cfg["eagle_config"] = {{"eagle_aux_hidden_state_layer_ids", aux_layers}};
  std::ofstream(dir + "/config.json") << cfg.dump(2);
  return OkStatus();
}

}  // namespace inflight
