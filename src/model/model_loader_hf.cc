// Hugging Face model folders: config.json, model.safetensors or sharded
// model-0000N-of-0000M.safetensors with model.safetensors.index.json, tokenizer.json.
// Llama/Mistral/Mixtral, Qwen2/3 and their MoE variants, GPT-2.
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
// Experts are one 2-D tensor per expert in HF: they take llama.cpp's per-expert names
// (blk.N.ffn_gate.E.weight), which LoadExperts reads when a file has no 3-D ffn_gate_exps.
class HfWeightSource : public WeightSource {
 public:
  HfWeightSource(Model* model, bool gpt2, bool mixtral)
      : model_(model), gpt2_(gpt2), mixtral_(mixtral) {}
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
        if (std::string e = HfExpertName(rest); !e.empty())
          return "model.layers." + layer + "." + e;
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
  // "ffn_gate_inp.weight", "ffn_up.3.weight", ... of a layer's experts under their HF names
  // (Mixtral: block_sparse_moe with w1/w3/w2; Qwen-MoE: mlp with the *_proj names and the
  // shared expert); empty when `rest` is not an expert tensor.
  std::string HfExpertName(const std::string& rest) const {
    if (rest == "ffn_gate_inp.weight")
      return mixtral_ ? "block_sparse_moe.gate.weight" : "mlp.gate.weight";
    if (rest == "ffn_gate_inp_shexp.weight") return "mlp.shared_expert_gate.weight";
    for (const char* kind : {"gate", "up", "down"}) {
      const std::string k = kind;
      if (rest == "ffn_" + k + "_shexp.weight") return "mlp.shared_expert." + k + "_proj.weight";
      const std::string head = "ffn_" + k + ".", tail = ".weight";
      if (rest.size() <= head.size() + tail.size() || rest.compare(0, head.size(), head) != 0 ||
          rest.compare(rest.size() - tail.size(), tail.size(), tail) != 0)
        continue;
      const std::string expert = rest.substr(head.size(), rest.size() - head.size() - tail.size());
      if (expert.find_first_not_of("0123456789") != std::string::npos) continue;
      if (!mixtral_) return "mlp.experts." + expert + "." + k + "_proj.weight";
      const char* w = k == "gate" ? "w1" : k == "up" ? "w3" : "w2";
      return "block_sparse_moe.experts." + expert + "." + w + ".weight";
    }
    return "";
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
  bool gpt2_, mixtral_;
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

// Mixtral (num_local_experts; its intermediate_size is each expert's; top-k weights
// renormalized) and Qwen2/3-MoE (num_experts, moe_intermediate_size, norm_topk_prob, Qwen2's
// shared expert): softmax routing over all experts. Which layers have experts follows from
// their tensors (Qwen's mlp_only_layers / decoder_sparse_step keep a dense mlp).
Status ExpertsFromJson(const json& j, const std::string& type, ModelConfig* c) {
  c->expert_gating = ExpertGating::kSoftmax;
  if (type == "mixtral") {
    c->num_experts = JsonGet<int32_t>(j, "num_local_experts", 0);
    c->experts_per_token = JsonGet<int32_t>(j, "num_experts_per_tok", 0);
    c->expert_ffn_size = c->ffn_size;
    c->normalize_expert_weights = true;
    if (c->num_experts <= 0)
      return InvalidArgumentError("config.json: num_local_experts is missing");
  } else if (type == "qwen2_moe" || type == "qwen3_moe") {
    c->num_experts = JsonGet<int32_t>(j, "num_experts", 0);
    c->experts_per_token = JsonGet<int32_t>(j, "num_experts_per_tok", 0);
    c->expert_ffn_size = JsonGet<int32_t>(j, "moe_intermediate_size", 0);
    c->normalize_expert_weights = JsonGet<bool>(j, "norm_topk_prob", false);
    c->shared_expert_ffn_size = JsonGet<int32_t>(j, "shared_expert_intermediate_size", 0);
    if (c->num_experts <= 0) return InvalidArgumentError("config.json: num_experts is missing");
  }
  return OkStatus();
}

Status ConfigFromJson(const json& j, ModelConfig* c) {
  const std::string type = JsonGet<std::string>(j, "model_type", "");
  if (type == "llama" || type == "mistral" || type == "mixtral")
    c->arch = Architecture::kLlama;
  else if (type == "qwen2")
    c->arch = Architecture::kQwen2;
  else if (type == "qwen3")
    c->arch = Architecture::kQwen3;
  else if (type == "qwen2_moe")
    c->arch = Architecture::kQwen2Moe;
  else if (type == "qwen3_moe")
    c->arch = Architecture::kQwen3Moe;
  else if (type == "gpt2")
    c->arch = Architecture::kGpt2;
  else
    return UnimplementedError(
        "config.json model_type '" + type +
        "' is not supported (llama, mistral, mixtral, qwen2, qwen3, qwen2_moe, qwen3_moe, gpt2)");
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
  RETURN_IF_ERROR(ExpertsFromJson(j, type, c));
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
  HfWeightSource src(model.get(), gpt2, JsonGet<std::string>(*cfg, "model_type", "") == "mixtral");
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
