// Hugging Face model folders: config.json, model.safetensors or sharded
// model-0000N-of-0000M.safetensors with model.safetensors.index.json, tokenizer.json.
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "format/safetensors.h"
#include "model/model.h"
#include "model/weight_utils.h"

namespace inflight {
namespace {

using nlohmann::json;

StatusOr<json> ReadJson(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFoundError("cannot open '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, false);
  if (j.is_discarded()) return InvalidArgumentError("'" + path + "' is not valid JSON");
  return j;
}

// Maps HF names onto llama.cpp names; GPT-2 Conv1D weights are transposed into owned copies.
class HfWeightSource : public WeightSource {
 public:
  HfWeightSource(Model* model, bool gpt2) : model_(model), gpt2_(gpt2) {}
  std::map<std::string, const SafetensorsTensor*> by_hf_name;
  std::vector<std::unique_ptr<SafetensorsFile>> files;

  bool Has(const std::string& name) const override { return Resolve(name) != nullptr; }

  StatusOr<RawTensor> Get(const std::string& name) const override {
    const SafetensorsTensor* t = Resolve(name);
    if (!t) return NotFoundError("tensor '" + HfName(name) + "' (for " + name + ") is missing");
    auto dt = DTypeFromSafetensors(t->dtype);
    if (!dt)
      return UnimplementedError("tensor '" + HfName(name) + "' has dtype " + t->dtype +
                                " (F32, F16, BF16 supported)");
    RawTensor r{t->data, *dt, {}};
    for (auto it = t->shape.rbegin(); it != t->shape.rend(); ++it) r.dims.push_back(*it);
    if (gpt2_ && t->shape.size() == 2 && IsConv1D(name)) return Transpose(r);
    return r;
  }

 private:
  static bool IsConv1D(const std::string& n) {
    return n.find("attn_qkv.weight") != std::string::npos ||
           n.find("attn_output.weight") != std::string::npos ||
           n.find("ffn_up.weight") != std::string::npos ||
           n.find("ffn_down.weight") != std::string::npos;
  }
  StatusOr<RawTensor> Transpose(RawTensor r) const {
    const int64_t rows = r.dims[1], cols = r.dims[0];  // stored [in, out] row-major
    const int64_t es = DTypeBlockBytes(r.dtype);
    AlignedBuffer buf(rows * cols * es);
    const auto* src = static_cast<const uint8_t*>(r.data);
    auto* dst = buf.as<uint8_t>();
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        std::memcpy(dst + (j * rows + i) * es, src + (i * cols + j) * es, es);
    r.data = buf.data();
    r.dims = {rows, cols};
    model_->owned_.push_back(std::move(buf));
    return r;
  }
  std::string HfName(const std::string& n) const {
    static const std::pair<const char*, const char*> kLlama[] = {
        {"attn_norm.weight", "input_layernorm.weight"},
        {"ffn_norm.weight", "post_attention_layernorm.weight"},
        {"attn_q.weight", "self_attn.q_proj.weight"},
        {"attn_k.weight", "self_attn.k_proj.weight"},
        {"attn_v.weight", "self_attn.v_proj.weight"},
        {"attn_output.weight", "self_attn.o_proj.weight"},
        {"attn_q.bias", "self_attn.q_proj.bias"},
        {"attn_k.bias", "self_attn.k_proj.bias"},
        {"attn_v.bias", "self_attn.v_proj.bias"},
        {"attn_q_norm.weight", "self_attn.q_norm.weight"},
        {"attn_k_norm.weight", "self_attn.k_norm.weight"},
        {"ffn_gate.weight", "mlp.gate_proj.weight"},
        {"ffn_up.weight", "mlp.up_proj.weight"},
        {"ffn_down.weight", "mlp.down_proj.weight"}};
    static const std::pair<const char*, const char*> kGpt2[] = {
        {"attn_norm.weight", "ln_1.weight"},          {"attn_norm.bias", "ln_1.bias"},
        {"ffn_norm.weight", "ln_2.weight"},           {"ffn_norm.bias", "ln_2.bias"},
        {"attn_qkv.weight", "attn.c_attn.weight"},    {"attn_qkv.bias", "attn.c_attn.bias"},
        {"attn_output.weight", "attn.c_proj.weight"}, {"attn_output.bias", "attn.c_proj.bias"},
        {"ffn_up.weight", "mlp.c_fc.weight"},         {"ffn_up.bias", "mlp.c_fc.bias"},
        {"ffn_down.weight", "mlp.c_proj.weight"},     {"ffn_down.bias", "mlp.c_proj.bias"}};
    if (n.rfind("blk.", 0) == 0) {
      const size_t dot = n.find('.', 4);
      const std::string layer = n.substr(4, dot - 4), rest = n.substr(dot + 1);
      if (gpt2_) {
        for (auto& [g, h] : kGpt2)
          if (rest == g) return "h." + layer + "." + h;
      } else {
        for (auto& [g, h] : kLlama)
          if (rest == g) return "model.layers." + layer + "." + h;
      }
      return n;
    }
    if (gpt2_) {
      if (n == "token_embd.weight") return "wte.weight";
      if (n == "position_embd.weight") return "wpe.weight";
      if (n == "output_norm.weight") return "ln_f.weight";
      if (n == "output_norm.bias") return "ln_f.bias";
      if (n == "output.weight") return "lm_head.weight";
      return n;
    }
    if (n == "token_embd.weight") return "model.embed_tokens.weight";
    if (n == "output_norm.weight") return "model.norm.weight";
    if (n == "output.weight") return "lm_head.weight";
    return n;
  }
  const SafetensorsTensor* Resolve(const std::string& name) const {
    const std::string hf = HfName(name);
    for (const std::string& candidate : {hf, "transformer." + hf}) {
      auto it = by_hf_name.find(candidate);
      if (it != by_hf_name.end()) return it->second;
    }
    return nullptr;
  }
  Model* model_;
  bool gpt2_;
};

template <typename T>
T JsonGet(const json& j, const char* key, T fallback) {
  if (j.contains(key) && !j[key].is_null()) {
    try {
      return j[key].get<T>();
    } catch (const json::exception&) {
    }
  }
  return fallback;
}

Status ConfigFromJson(const json& j, ModelConfig* c) {
  const std::string type = JsonGet<std::string>(j, "model_type", "");
  if (type == "llama" || type == "mistral")
    c->arch = Architecture::kLlama;
  else if (type == "qwen2")
    c->arch = Architecture::kQwen2;
  else if (type == "qwen3")
    c->arch = Architecture::kQwen3;
  else if (type == "gpt2")
    c->arch = Architecture::kGpt2;
  else
    return UnimplementedError("config.json model_type '" + type +
                              "' is not supported (llama, mistral, qwen2, qwen3, gpt2)");
  c->vocab_size = JsonGet<int32_t>(j, "vocab_size", 0);
  if (c->arch == Architecture::kGpt2) {
    c->hidden_size = JsonGet<int32_t>(j, "n_embd", 0);
    c->num_layers = JsonGet<int32_t>(j, "n_layer", 0);
    c->num_heads = c->num_kv_heads = JsonGet<int32_t>(j, "n_head", 0);
    c->ffn_size = JsonGet<int32_t>(j, "n_inner", 4 * c->hidden_size);
    c->context_length = JsonGet<int32_t>(j, "n_positions", 1024);
    c->norm_eps = JsonGet<float>(j, "layer_norm_epsilon", 1e-5f);
    c->layer_norm = c->gelu_ffn = c->learned_positions = true;
    c->head_dim = c->num_heads > 0 ? c->hidden_size / c->num_heads : 0;
    c->tied_embeddings = true;
    return c->Validate();
  }
  c->hidden_size = JsonGet<int32_t>(j, "hidden_size", 0);
  c->num_layers = JsonGet<int32_t>(j, "num_hidden_layers", 0);
  c->num_heads = JsonGet<int32_t>(j, "num_attention_heads", 0);
  c->num_kv_heads = JsonGet<int32_t>(j, "num_key_value_heads", c->num_heads);
  c->ffn_size = JsonGet<int32_t>(j, "intermediate_size", 0);
  c->context_length = JsonGet<int32_t>(j, "max_position_embeddings", 2048);
  c->norm_eps = JsonGet<float>(j, "rms_norm_eps", 1e-5f);
  c->rope_base = JsonGet<float>(j, "rope_theta", 10000.0f);
  c->head_dim =
      JsonGet<int32_t>(j, "head_dim", c->num_heads > 0 ? c->hidden_size / c->num_heads : 0);
  c->rope_dim = c->head_dim;
  c->rope_style = kernels::RopeStyle::kHalves;  // HF checkpoints are not permuted
  c->tied_embeddings = JsonGet<bool>(j, "tie_word_embeddings", false);
  if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) {
    const json& rs = j["rope_scaling"];
    const std::string rt =
        JsonGet<std::string>(rs, "rope_type", JsonGet<std::string>(rs, "type", ""));
    const float factor = JsonGet<float>(rs, "factor", 1.0f);
    if (rt == "linear") {
      c->rope_linear_scale = factor;
    } else if (rt == "llama3") {
      c->rope_freq_factors = Llama3RopeFactors(
          c->rope_base, c->rope_dim, factor, JsonGet<float>(rs, "low_freq_factor", 1.0f),
          JsonGet<float>(rs, "high_freq_factor", 4.0f),
          JsonGet<int32_t>(rs, "original_max_position_embeddings", 8192));
    } else if (!rt.empty() && rt != "default") {
      return UnimplementedError("rope_scaling type '" + rt + "' is not supported (linear, llama3)");
    }
  }
  return c->Validate();
}

}  // namespace

StatusOr<std::unique_ptr<Model>> LoadHuggingFaceModel(const std::string& dir,
                                                      const ModelLoadOptions& options) {
  auto fail = [&](const Status& s) { return Status(s.code(), dir + ": " + s.message()); };
  auto cfg = ReadJson(dir + "/config.json");
  if (!cfg.ok()) return fail(cfg.status());
  auto model = std::make_unique<Model>();
  model->path_ = dir;
  Status st = ConfigFromJson(*cfg, &model->config_);
  if (!st.ok()) return fail(st);
  const bool gpt2 = model->config_.arch == Architecture::kGpt2;
  HfWeightSource src(model.get(), gpt2);
  std::set<std::string> shard_names;
  if (auto index = ReadJson(dir + "/model.safetensors.index.json"); index.ok()) {
    if (!index->contains("weight_map") || !(*index)["weight_map"].is_object())
      return fail(InvalidArgumentError("model.safetensors.index.json has no weight_map"));
    for (auto it = (*index)["weight_map"].begin(); it != (*index)["weight_map"].end(); ++it) {
      if (!it.value().is_string())
        return fail(InvalidArgumentError("weight_map entry is not a file name"));
      const std::string f = it.value().get<std::string>();
      if (f.find('/') != std::string::npos)
        return fail(InvalidArgumentError("weight_map names a file outside the folder: " + f));
      shard_names.insert(f);
    }
  } else {
    shard_names.insert("model.safetensors");
  }
  for (const std::string& shard : shard_names) {
    auto f = SafetensorsFile::Open(dir + "/" + shard);
    if (!f.ok()) return fail(f.status());
    for (const auto& [name, t] : (*f)->tensors()) src.by_hf_name[name] = &t;
    model->files_.push_back((*f)->file());
    src.files.push_back(std::move(f).value());
  }
  // Vocabulary size from the embedding if config.json lacks it.
  if (auto e = src.Get("token_embd.weight"); e.ok() && e->dims.size() == 2)
    model->config_.vocab_size = static_cast<int32_t>(e->dims[1]);
  st = ApplyLoadOptions(options, &model->config_);
  if (!st.ok()) return fail(st);
  st = LoadStandardWeights(src, model.get());
  if (!st.ok()) return fail(st);
  // tokenizer.json, else a SentencePiece tokenizer.model (older Llama/Mistral checkpoints).
  if (auto tok = Tokenizer::FromHuggingFaceFile(dir + "/tokenizer.json"); tok.ok()) {
    model->tokenizer_ = std::move(tok).value();
  } else if (tok.status().code() != StatusCode::kNotFound) {
    return fail(tok.status());
  } else if (std::ifstream(dir + "/tokenizer.model").good()) {
    auto spec = Tokenizer::SpecFromSentencePieceModel(dir + "/tokenizer.model");
    if (!spec.ok()) return fail(spec.status());
    auto sp = Tokenizer::Create(std::move(spec).value());
    if (!sp.ok()) return fail(sp.status());
    model->tokenizer_ = std::move(sp).value();
  }
  if (Status f = FinishModel(model.get(), options); !f.ok()) return fail(f);
  return model;
}

}  // namespace inflight
