// The family registry, the GGUF metadata reader and the loading blocks families share.
#include "model/families.h"

#include "format/gguf.h"
#include "model/family_list.h"

namespace inflight {

Status GgufConfigReader::Int(const std::string& key, bool required, int32_t* out) const {
  auto v = file_.GetInt(arch_ + "." + key);
  if (!v.ok()) return v.status();
  if (!v->has_value()) {
    if (required) return InvalidArgumentError("metadata " + arch_ + "." + key + " is missing");
    return OkStatus();
  }
  if (**v < 0 || **v > (int64_t{1} << 30))
    return InvalidArgumentError("metadata " + arch_ + "." + key + " is out of range");
  *out = static_cast<int32_t>(**v);
  return OkStatus();
}

Status GgufConfigReader::Float(const std::string& key, float* out) const {
  auto v = file_.GetFloat(arch_ + "." + key);
  if (!v.ok()) return v.status();
  if (v->has_value()) *out = static_cast<float>(**v);
  return OkStatus();
}

StatusOr<std::optional<std::string>> GgufConfigReader::String(const std::string& key) const {
  return file_.GetString(arch_ + "." + key);
}

bool GgufConfigReader::Has(const std::string& key) const {
  return file_.Find(arch_ + "." + key) != nullptr;
}

StatusOr<std::vector<int64_t>> GgufConfigReader::IntArray(const std::string& key) const {
  const GgufValue* v = file_.Find(arch_ + "." + key);
  if (v == nullptr || v->type != GgufType::kArray) return std::vector<int64_t>{};
  if (v->ints.size() != v->array_size)
    return InvalidArgumentError("metadata " + arch_ + "." + key + " is not an integer array");
  return v->ints;
}

Status ModelFamily::LoadLayer(const WeightSource& src, const ModelConfig& c, int layer,
                              LayerWeights* l) const {
  return LoadStandardLayer(src, c, layer, l);
}

Status ModelFamily::RunLayer(LayerPass& pass) const {
  const LayerWeights& w = pass.weights();
  pass.NormInput(w.attn_norm, w.attn_norm_bias);
  RETURN_IF_ERROR(pass.Attention());
  RETURN_IF_ERROR(pass.AddToResidual());
  pass.NormInput(w.ffn_norm, w.ffn_norm_bias);
  RETURN_IF_ERROR(pass.FeedForward());
  return pass.AddToResidual();
}

namespace {

struct Registered {
  const char* gguf_name;
  const ModelFamily* family;
};

const std::vector<Registered>& Registry() {
  static const std::vector<Registered> registry = {
      {"llama", &LlamaFamily()},       {"mistral", &LlamaFamily()},
      {"qwen2", &Qwen2Family()},       {"qwen3", &Qwen3Family()},
      {"gpt2", &Gpt2Family()},         {"qwen2moe", &Qwen2MoeFamily()},
      {"qwen3moe", &Qwen3MoeFamily()}, {"gemma2", &Gemma2Family()},
      {"gemma3", &Gemma3Family()},     {"phi3", &Phi3Family()},
      {"gpt-oss", &GptOssFamily()},
  };
  return registry;
}

std::string ShapeString(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

// Expert matrices of one kind ("gate", "up", "down") as one 2-D [rows, cols] view per expert:
// slices of the 3-D [experts, rows, cols] tensor ffn_<kind>_exps (ggml dims {cols, rows,
// experts}), or, when a file has none, one 2-D tensor per expert ffn_<kind>.<e> (llama.cpp's
// first Mixtral files; the Hugging Face loader's names for its per-expert tensors).
Status LoadExpertMatrices(const WeightSource& src, const std::string& p, const std::string& kind,
                          int64_t experts, int64_t rows, int64_t cols,
                          std::vector<TensorView>* out) {
  const std::string name = p + "ffn_" + kind + "_exps.weight";
  auto expert_name = [&](int64_t e) {
    return p + "ffn_" + kind + "." + std::to_string(e) + ".weight";
  };
  out->clear();
  if (!src.Has(name) && src.Has(expert_name(0))) {
    for (int64_t e = 0; e < experts; ++e) {
      ASSIGN_OR_RETURN(TensorView v, LoadMatrix(src, expert_name(e), rows, cols));
      out->push_back(v);
    }
    if (src.Has(expert_name(experts))) {
      return InvalidArgumentError("tensor '" + expert_name(experts) + "' is beyond the " +
                                  std::to_string(experts) + " experts the metadata declares");
    }
    return OkStatus();
  }
  ASSIGN_OR_RETURN(RawTensor t, src.Get(name));
  if (t.dims.size() != 3 || t.dims[0] != cols || t.dims[1] != rows || t.dims[2] != experts) {
    return InvalidArgumentError("tensor '" + name + "' has shape " + ShapeString(t.dims) +
                                " (ggml order), expected [" + std::to_string(cols) + ", " +
                                std::to_string(rows) + ", " + std::to_string(experts) + "] for " +
                                std::to_string(experts) + " experts");
  }
  if (t.dtype == DType::kI8 || t.dtype == DType::kI32)
    return UnimplementedError("tensor '" + name + "' has integer type " + DTypeName(t.dtype));
  if (cols % DTypeBlockSize(t.dtype) != 0) {
    return InvalidArgumentError("tensor '" + name + "' row length " + std::to_string(cols) +
                                " is not a multiple of the " + DTypeName(t.dtype) + " block size");
  }
  RETURN_IF_ERROR(CheckBlockScales(name, t, experts * rows * cols));
  const int64_t expert_bytes = rows * DTypeRowBytes(t.dtype, cols);
  for (int64_t e = 0; e < experts; ++e) {
    out->push_back(
        TensorView{static_cast<const uint8_t*>(t.data) + e * expert_bytes, t.dtype, rows, cols});
  }
  return OkStatus();
}

}  // namespace

const ModelFamily* FamilyForGguf(const std::string& gguf_arch) {
  for (const Registered& r : Registry()) {
    if (gguf_arch == r.gguf_name) return r.family;
  }
  return nullptr;
}

const ModelFamily& FamilyFor(Architecture arch) {
  for (const Registered& r : Registry()) {
    if (r.family->arch() == arch) return *r.family;
  }
  return LlamaFamily();
}

std::string SupportedGgufArchitectures() {
  std::string names;
  for (const Registered& r : Registry())
    names += (names.empty() ? "" : ", ") + std::string(r.gguf_name);
  return names;
}

Status LoadOptionalVector(const WeightSource& src, const std::string& name, int64_t n,
                          std::vector<float>* out) {
  if (!src.Has(name)) return OkStatus();
  ASSIGN_OR_RETURN(*out, LoadVector(src, name, n));
  return OkStatus();
}

Status LoadAttention(const WeightSource& src, const ModelConfig& c, const std::string& p,
                     LayerWeights* l) {
  const int64_t H = c.hidden_size, Q = c.q_dim(), KV = c.kv_dim();
  if (src.Has(p + "attn_qkv.weight")) {
    ASSIGN_OR_RETURN(l->wqkv, LoadMatrix(src, p + "attn_qkv.weight", Q + 2 * KV, H));
    RETURN_IF_ERROR(LoadOptionalVector(src, p + "attn_qkv.bias", Q + 2 * KV, &l->bqkv));
  } else {
    ASSIGN_OR_RETURN(l->wq, LoadMatrix(src, p + "attn_q.weight", Q, H));
    ASSIGN_OR_RETURN(l->wk, LoadMatrix(src, p + "attn_k.weight", KV, H));
    ASSIGN_OR_RETURN(l->wv, LoadMatrix(src, p + "attn_v.weight", KV, H));
    RETURN_IF_ERROR(LoadOptionalVector(src, p + "attn_q.bias", Q, &l->bq));
    RETURN_IF_ERROR(LoadOptionalVector(src, p + "attn_k.bias", KV, &l->bk));
    RETURN_IF_ERROR(LoadOptionalVector(src, p + "attn_v.bias", KV, &l->bv));
  }
  ASSIGN_OR_RETURN(l->wo, LoadMatrix(src, p + "attn_output.weight", H, Q));
  RETURN_IF_ERROR(LoadOptionalVector(src, p + "attn_output.bias", H, &l->bo));
  RETURN_IF_ERROR(LoadOptionalVector(src, p + "attn_q_norm.weight", c.head_dim, &l->q_norm));
  RETURN_IF_ERROR(LoadOptionalVector(src, p + "attn_k_norm.weight", c.head_dim, &l->k_norm));
  if (l->q_norm.empty() != l->k_norm.empty())
    return InvalidArgumentError("layer " + p + " has a q norm or a k norm but not both");
  RETURN_IF_ERROR(LoadOptionalVector(src, p + "attn_sinks.weight", c.num_heads, &l->attn_sinks));
  return OkStatus();
}

Status LoadExperts(const WeightSource& src, const ModelConfig& c, const std::string& p,
                   LayerWeights* l) {
  const int64_t H = c.hidden_size, E = c.num_experts, F = c.expert_ffn_size;
  if (E == 0) {
    return InvalidArgumentError("tensor '" + p +
                                "ffn_gate_inp.weight' routes to experts but the metadata "
                                "declares no expert_count");
  }
  ASSIGN_OR_RETURN(l->router, LoadMatrix(src, p + "ffn_gate_inp.weight", E, H));
  RETURN_IF_ERROR(LoadOptionalVector(src, p + "ffn_gate_inp.bias", E, &l->router_bias));
  RETURN_IF_ERROR(LoadExpertMatrices(src, p, "gate", E, F, H, &l->expert_gate));
  RETURN_IF_ERROR(LoadExpertMatrices(src, p, "up", E, F, H, &l->expert_up));
  RETURN_IF_ERROR(LoadExpertMatrices(src, p, "down", E, H, F, &l->expert_down));
  RETURN_IF_ERROR(LoadOptionalVector(src, p + "ffn_gate_exps.bias", E * F, &l->expert_gate_bias));
  RETURN_IF_ERROR(LoadOptionalVector(src, p + "ffn_up_exps.bias", E * F, &l->expert_up_bias));
  RETURN_IF_ERROR(LoadOptionalVector(src, p + "ffn_down_exps.bias", E * H, &l->expert_down_bias));
  if (src.Has(p + "ffn_gate_inp_shexp.weight") || src.Has(p + "ffn_up_shexp.weight")) {
    const int64_t S = c.shared_expert_ffn_size > 0 ? c.shared_expert_ffn_size : c.ffn_size;
    ASSIGN_OR_RETURN(l->shared_gate, LoadMatrix(src, p + "ffn_gate_shexp.weight", S, H));
    ASSIGN_OR_RETURN(l->shared_up, LoadMatrix(src, p + "ffn_up_shexp.weight", S, H));
    ASSIGN_OR_RETURN(l->shared_down, LoadMatrix(src, p + "ffn_down_shexp.weight", H, S));
    RETURN_IF_ERROR(
        LoadOptionalVector(src, p + "ffn_gate_inp_shexp.weight", H, &l->shared_expert_gate));
  }
  return OkStatus();
}

Status LoadFeedForward(const WeightSource& src, const ModelConfig& c, const std::string& p,
                       LayerWeights* l) {
  if (src.Has(p + "ffn_gate_inp.weight")) return LoadExperts(src, c, p, l);
  if (c.num_experts > 0 &&
      (src.Has(p + "ffn_gate_exps.weight") || src.Has(p + "ffn_gate.0.weight"))) {
    return InvalidArgumentError("layer " + p + " has expert tensors but no router (" + p +
                                "ffn_gate_inp.weight)");
  }
  const int64_t H = c.hidden_size, F = c.ffn_size;
  if (!c.gelu_ffn) {
    ASSIGN_OR_RETURN(l->w_gate, LoadMatrix(src, p + "ffn_gate.weight", F, H));
  }
  ASSIGN_OR_RETURN(l->w_up, LoadMatrix(src, p + "ffn_up.weight", F, H));
  ASSIGN_OR_RETURN(l->w_down, LoadMatrix(src, p + "ffn_down.weight", H, F));
  RETURN_IF_ERROR(LoadOptionalVector(src, p + "ffn_up.bias", F, &l->b_up));
  RETURN_IF_ERROR(LoadOptionalVector(src, p + "ffn_down.bias", H, &l->b_down));
  return OkStatus();
}

Status LoadStandardLayer(const WeightSource& src, const ModelConfig& c, int layer,
                         LayerWeights* l) {
  const int64_t H = c.hidden_size;
  const std::string p = "blk." + std::to_string(layer) + ".";
  ASSIGN_OR_RETURN(l->attn_norm, LoadVector(src, p + "attn_norm.weight", H));
  ASSIGN_OR_RETURN(l->ffn_norm, LoadVector(src, p + "ffn_norm.weight", H));
  RETURN_IF_ERROR(LoadOptionalVector(src, p + "attn_norm.bias", H, &l->attn_norm_bias));
  RETURN_IF_ERROR(LoadOptionalVector(src, p + "ffn_norm.bias", H, &l->ffn_norm_bias));
  RETURN_IF_ERROR(LoadAttention(src, c, p, l));
  return LoadFeedForward(src, c, p, l);
}

Status ReadWindowPattern(const GgufConfigReader& meta, int32_t default_period, ModelConfig* c) {
  c->layer_window.assign(static_cast<size_t>(c->num_layers), 0);
  if (c->sliding_window <= 0) {
    c->layer_window.clear();
    return OkStatus();
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> pattern, meta.IntArray("attention.sliding_window_pattern"));
  if (!pattern.empty()) {
    if (static_cast<int32_t>(pattern.size()) != c->num_layers) {
      return InvalidArgumentError("metadata " + meta.arch() +
                                  ".attention.sliding_window_pattern has " +
                                  std::to_string(pattern.size()) + " entries for " +
                                  std::to_string(c->num_layers) + " layers");
    }
    for (int32_t i = 0; i < c->num_layers; ++i) c->layer_window[i] = pattern[i] != 0;
    return OkStatus();
  }
  int32_t period = default_period;
  RETURN_IF_ERROR(meta.Int("attention.sliding_window_pattern", false, &period));
  for (int32_t i = 0; i < c->num_layers; ++i)
    c->layer_window[i] = period == 0 || i % period < period - 1;
  return OkStatus();
}

}  // namespace inflight
