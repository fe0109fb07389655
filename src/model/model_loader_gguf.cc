// GGUF -> Model: hyper-parameters from "<arch>.*" metadata, tensors by llama.cpp names.
#include <cstring>

#include "base/fp16.h"
#include "format/gguf.h"
#include "kernels/kernels.h"
#include "model/families.h"
#include "model/model.h"
#include "model/weight_utils.h"

namespace inflight {
namespace {

class GgufWeightReader : public WeightSource {
 public:
  explicit GgufWeightReader(const GgufFile& f) : f_(f) {}
  bool Has(const std::string& name) const override { return f_.FindTensor(name) != nullptr; }
  StatusOr<RawTensor> Get(const std::string& name) const override {
    const GgufTensorInfo* t = f_.FindTensor(name);
    if (!t) return NotFoundError("tensor '" + name + "' is missing");
    if (!t->dtype) {
      return UnimplementedError("tensor '" + name + "' has type " + GgmlTypeName(t->ggml_type) +
                                ", which is not supported (supported: " + WeightDTypeNames() + ")");
    }
    RawTensor r;
    r.data = t->data;
    r.dtype = *t->dtype;
    r.dims = t->dims;  // ggml order
    return r;
  }

 private:
  const GgufFile& f_;
};

constexpr int32_t kMaxLayers = 1024;  // as ModelConfig::Validate

// The hyper-parameters every family stores under the same keys.
Status ReadCommonConfig(const GgufConfigReader& meta, ModelConfig* c) {
  RETURN_IF_ERROR(meta.Int("embedding_length", true, &c->hidden_size));
  RETURN_IF_ERROR(meta.Int("block_count", true, &c->num_layers));
  // Per-layer tables (window patterns) are sized by it before ModelConfig::Validate runs.
  if (c->num_layers > kMaxLayers) {
    return InvalidArgumentError("metadata " + meta.arch() + ".block_count " +
                                std::to_string(c->num_layers) + " is more than " +
                                std::to_string(kMaxLayers) + " layers");
  }
  RETURN_IF_ERROR(meta.Int("feed_forward_length", true, &c->ffn_size));
  RETURN_IF_ERROR(meta.Int("attention.head_count", true, &c->num_heads));
  c->num_kv_heads = c->num_heads;
  RETURN_IF_ERROR(meta.Int("attention.head_count_kv", false, &c->num_kv_heads));
  RETURN_IF_ERROR(meta.Int("context_length", false, &c->context_length));
  if (c->num_heads <= 0) return InvalidArgumentError("attention.head_count must be positive");
  c->head_dim = c->hidden_size / c->num_heads;
  RETURN_IF_ERROR(meta.Int("attention.key_length", false, &c->head_dim));
  int32_t value_length = c->head_dim;
  RETURN_IF_ERROR(meta.Int("attention.value_length", false, &value_length));
  if (value_length != c->head_dim) {
    return UnimplementedError("attention.value_length " + std::to_string(value_length) +
                              " differs from attention.key_length " + std::to_string(c->head_dim) +
                              " (not supported)");
  }
  c->rope_dim = c->head_dim;
  RETURN_IF_ERROR(meta.Int("rope.dimension_count", false, &c->rope_dim));
  RETURN_IF_ERROR(meta.Float("rope.freq_base", &c->rope_base));
  RETURN_IF_ERROR(meta.Float("attention.layer_norm_rms_epsilon", &c->norm_eps));
  RETURN_IF_ERROR(meta.Float("rope.scaling.attn_factor", &c->rope_attn_factor));
  RETURN_IF_ERROR(
      meta.Int("rope.scaling.original_context_length", false, &c->rope_original_context));
  ASSIGN_OR_RETURN(std::optional<std::string> scaling, meta.String("rope.scaling.type"));
  float factor = 0.0f;
  RETURN_IF_ERROR(meta.Float("rope.scaling.factor", &factor));
  if (scaling && *scaling == "linear" && factor > 0) c->rope_linear_scale = factor;
  if (scaling && *scaling == "yarn" && factor > 1) {
    c->rope_yarn_factor = factor;
    if (c->rope_original_context == 0) c->rope_original_context = c->context_length;
    RETURN_IF_ERROR(meta.Float("rope.scaling.yarn_beta_fast", &c->rope_yarn_beta_fast));
    RETURN_IF_ERROR(meta.Float("rope.scaling.yarn_beta_slow", &c->rope_yarn_beta_slow));
  }
  RETURN_IF_ERROR(meta.Int("expert_count", false, &c->num_experts));
  RETURN_IF_ERROR(meta.Int("expert_used_count", false, &c->experts_per_token));
  c->expert_ffn_size = c->ffn_size;
  RETURN_IF_ERROR(meta.Int("expert_feed_forward_length", false, &c->expert_ffn_size));
  RETURN_IF_ERROR(meta.Int("attention.sliding_window", false, &c->sliding_window));
  return OkStatus();
}

// The family named by general.architecture and the config of its keys and config tensors;
// errors name the key or tensor.
Status ReadFamilyAndConfig(const GgufFile& gguf, const ModelFamily** family, ModelConfig* c) {
  ASSIGN_OR_RETURN(std::optional<std::string> arch_name, gguf.GetString("general.architecture"));
  if (!arch_name) return InvalidArgumentError("general.architecture is missing");
  const std::string& a = *arch_name;
  *family = FamilyForGguf(a);
  if (*family == nullptr) {
    return UnimplementedError("architecture '" + a + "' is not supported (" +
                              SupportedGgufArchitectures() + ")");
  }
  c->arch = (*family)->arch();
  const GgufConfigReader meta(gguf, a);
  RETURN_IF_ERROR(ReadCommonConfig(meta, c));
  RETURN_IF_ERROR((*family)->ReadGgufConfig(meta, c));

  GgufWeightReader reader(gguf);
  // Llama 3 style frequency factors are stored as a tensor.
  if (reader.Has("rope_freqs.weight")) {
    ASSIGN_OR_RETURN(c->rope_freq_factors,
                     LoadVector(reader, "rope_freqs.weight", c->rope_dim / 2));
  }
  RETURN_IF_ERROR((*family)->ReadConfigTensors(reader, c));
  const GgufTensorInfo* embd = gguf.FindTensor("token_embd.weight");
  if (!embd || embd->dims.size() != 2)
    return InvalidArgumentError("tensor 'token_embd.weight' is missing or not 2-D");
  if (embd->dims[1] <= 0 || embd->dims[1] > (int64_t{1} << 30))
    return InvalidArgumentError("tensor 'token_embd.weight' has a bad vocabulary size");
  c->vocab_size = static_cast<int32_t>(embd->dims[1]);
  return c->Validate();
}

}  // namespace

StatusOr<ModelConfig> ReadGgufModelConfig(const GgufFile& gguf) {
  const ModelFamily* family = nullptr;
  ModelConfig c;
  RETURN_IF_ERROR(ReadFamilyAndConfig(gguf, &family, &c));
  return c;
}

StatusOr<std::unique_ptr<Model>> LoadGgufModel(const std::string& path,
                                               const ModelLoadOptions& options) {
  ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::Open(path));
  return LoadGgufModel(std::move(file), options);
}

StatusOr<std::unique_ptr<Model>> LoadGgufModel(std::shared_ptr<MappedFile> file,
                                               const ModelLoadOptions& options) {
  const std::string path = file->path();
  auto fail = [&](const Status& s) { return Status(s.code(), path + ": " + s.message()); };
  auto parsed = GgufFile::Parse(file);
  if (!parsed.ok()) return fail(parsed.status());
  std::unique_ptr<GgufFile> gguf = std::move(parsed).value();
  auto model = std::make_unique<Model>();
  model->path_ = path;
  model->files_.push_back(file);
  ModelConfig& c = model->config_;
  if (Status st = ReadFamilyAndConfig(*gguf, &model->family_, &c); !st.ok()) return fail(st);

  if (Status o = ApplyLoadOptions(options, &model->config_); !o.ok()) return fail(o);
  GgufWeightReader reader(*gguf);
  Status w = LoadStandardWeights(reader, model.get());
  if (!w.ok()) return fail(w);

  if (gguf->Find("tokenizer.ggml.model")) {
    auto tok = Tokenizer::FromGguf(*gguf);
    if (!tok.ok()) return fail(tok.status());
    model->tokenizer_ = std::move(tok).value();
    if (model->tokenizer_->vocab_size() > c.vocab_size) {
      return fail(
          InvalidArgumentError("tokenizer has " + std::to_string(model->tokenizer_->vocab_size()) +
                               " tokens but the embedding only " + std::to_string(c.vocab_size)));
    }
  }
  if (Status f = FinishModel(model.get(), options); !f.ok()) return fail(f);
  return model;
}

}  // namespace inflight
