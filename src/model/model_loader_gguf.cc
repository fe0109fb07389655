// GGUF -> Model: hyper-parameters from "<arch>.*" metadata, tensors by llama.cpp names.
#include <cstring>

#include "base/fp16.h"
#include "format/gguf.h"
#include "kernels/kernels.h"
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

}  // namespace

StatusOr<std::unique_ptr<Model>> LoadGgufModel(const std::string& path,
                                               const ModelLoadOptions& options) {
  ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::Open(path));
  auto parsed = GgufFile::Parse(file);
  if (!parsed.ok()) return Status(parsed.status().code(), path + ": " + parsed.status().message());
  std::unique_ptr<GgufFile> gguf = std::move(parsed).value();
  auto model = std::make_unique<Model>();
  model->path_ = path;
  model->files_.push_back(file);
  auto fail = [&](const Status& s) { return Status(s.code(), path + ": " + s.message()); };

  ASSIGN_OR_RETURN(std::optional<std::string> arch_name, gguf->GetString("general.architecture"));
  if (!arch_name) return fail(InvalidArgumentError("general.architecture is missing"));
  ModelConfig& c = model->config_;
  const std::string& a = *arch_name;
  if (a == "llama" || a == "mistral")
    c.arch = Architecture::kLlama;
  else if (a == "qwen2")
    c.arch = Architecture::kQwen2;
  else if (a == "qwen3")
    c.arch = Architecture::kQwen3;
  else if (a == "gpt2")
    c.arch = Architecture::kGpt2;
  else
    return fail(UnimplementedError("architecture '" + a +
                                   "' is not supported (llama, mistral, qwen2, qwen3, gpt2)"));

  auto get_int = [&](const std::string& key, bool required, int32_t* out) -> Status {
    auto v = gguf->GetInt(a + "." + key);
    if (!v.ok()) return v.status();
    if (!v->has_value()) {
      if (required) return InvalidArgumentError("metadata " + a + "." + key + " is missing");
      return OkStatus();
    }
    if (**v < 0 || **v > (int64_t{1} << 30))
      return InvalidArgumentError("metadata " + a + "." + key + " is out of range");
    *out = static_cast<int32_t>(**v);
    return OkStatus();
  };
  auto get_float = [&](const std::string& key, float* out) -> Status {
    auto v = gguf->GetFloat(a + "." + key);
    if (!v.ok()) return v.status();
    if (v->has_value()) *out = static_cast<float>(**v);
    return OkStatus();
  };
  Status st;
  if (!(st = get_int("embedding_length", true, &c.hidden_size)).ok()) return fail(st);
  if (!(st = get_int("block_count", true, &c.num_layers)).ok()) return fail(st);
  if (!(st = get_int("feed_forward_length", true, &c.ffn_size)).ok()) return fail(st);
  if (!(st = get_int("attention.head_count", true, &c.num_heads)).ok()) return fail(st);
  c.num_kv_heads = c.num_heads;
  if (!(st = get_int("attention.head_count_kv", false, &c.num_kv_heads)).ok()) return fail(st);
  if (!(st = get_int("context_length", false, &c.context_length)).ok()) return fail(st);
  if (c.num_heads <= 0) return fail(InvalidArgumentError("attention.head_count must be positive"));
  c.head_dim = c.hidden_size / c.num_heads;
  if (!(st = get_int("attention.key_length", false, &c.head_dim)).ok()) return fail(st);
  c.rope_dim = c.head_dim;
  if (!(st = get_int("rope.dimension_count", false, &c.rope_dim)).ok()) return fail(st);
  if (!(st = get_float("rope.freq_base", &c.rope_base)).ok()) return fail(st);
  if (c.arch == Architecture::kGpt2) {
    c.layer_norm = true;
    c.gelu_ffn = true;
    c.learned_positions = true;
    if (!(st = get_float("attention.layer_norm_epsilon", &c.norm_eps)).ok()) return fail(st);
  } else {
    if (!(st = get_float("attention.layer_norm_rms_epsilon", &c.norm_eps)).ok()) return fail(st);
    c.rope_style = c.arch == Architecture::kLlama ? kernels::RopeStyle::kAdjacentPairs
                                                  : kernels::RopeStyle::kHalves;
  }
  {
    auto type = gguf->GetString(a + ".rope.scaling.type");
    if (type.ok() && type->has_value() && **type == "linear") {
      float factor = 1.0f;
      if (!(st = get_float("rope.scaling.factor", &factor)).ok()) return fail(st);
      if (factor > 0) c.rope_linear_scale = factor;
    }
  }

  GgufWeightReader reader(*gguf);
  // Llama 3 style frequency factors are stored as a tensor.
  if (reader.Has("rope_freqs.weight")) {
    auto f = LoadVector(reader, "rope_freqs.weight", c.rope_dim / 2);
    if (!f.ok()) return fail(f.status());
    c.rope_freq_factors = std::move(f).value();
  }
  const GgufTensorInfo* embd = gguf->FindTensor("token_embd.weight");
  if (!embd || embd->dims.size() != 2)
    return fail(InvalidArgumentError("tensor 'token_embd.weight' is missing or not 2-D"));
  c.vocab_size = static_cast<int32_t>(embd->dims[1]);
  Status valid = c.Validate();
  if (!valid.ok()) return fail(valid);

  if (Status o = ApplyLoadOptions(options, &model->config_); !o.ok()) return fail(o);
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
