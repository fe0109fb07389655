// Gemma 2 and 3: embeddings scaled by sqrt(hidden), RMSNorm before and after each block
// (post_attention_norm, post_ffw_norm), GELU-gated FFN, NeoX RoPE, sliding-window layers
// (Gemma 2 every other layer, Gemma 3 five of six, with their own unscaled RoPE base), Gemma 2's
// attention and final logit soft-caps, Gemma 3's q/k norms.
#include <algorithm>
#include <cmath>

#include "model/families.h"
#include "model/family_list.h"

namespace inflight {
namespace {

class Gemma : public ModelFamily {
 public:
  Gemma(Architecture arch, int32_t window_period, int32_t big_model_layers)
      : arch_(arch), window_period_(window_period), big_model_layers_(big_model_layers) {}
  Architecture arch() const override { return arch_; }

  Status ReadGgufConfig(const GgufConfigReader& meta, ModelConfig* c) const override {
    c->rope_style = kernels::RopeStyle::kHalves;
    c->ffn_activation = kernels::FfnActivation::kGeluTanh;
    c->embedding_scale = std::sqrt(static_cast<float>(c->hidden_size));
    // The 27B models scale queries by hidden / heads rather than the head size (llama.cpp
    // tells them by their layer count; GGUF has no key for it).
    if (c->num_layers == big_model_layers_) {
      c->attention_scale = 1.0f / std::sqrt(static_cast<float>(c->hidden_size / c->num_heads));
    }
    if (arch_ == Architecture::kGemma2) {
      if (!meta.Has("attention.sliding_window"))
        c->sliding_window = std::min(4096, c->context_length);
      c->attn_logit_softcap = 50.0f;
      c->final_logit_softcap = 30.0f;
      RETURN_IF_ERROR(meta.Float("attn_logit_softcapping", &c->attn_logit_softcap));
    } else {
      c->rope_window_base = 10000.0f;  // llama.cpp's default for the local layers
      RETURN_IF_ERROR(meta.Float("rope.freq_base_swa", &c->rope_window_base));
    }
    RETURN_IF_ERROR(meta.Float("final_logit_softcapping", &c->final_logit_softcap));
    return ReadWindowPattern(meta, window_period_, c);
  }

  Status LoadLayer(const WeightSource& src, const ModelConfig& c, int layer,
                   LayerWeights* l) const override {
    RETURN_IF_ERROR(LoadStandardLayer(src, c, layer, l));
    const std::string p = "blk." + std::to_string(layer) + ".";
    ASSIGN_OR_RETURN(l->attn_post_norm,
                     LoadVector(src, p + "post_attention_norm.weight", c.hidden_size));
    ASSIGN_OR_RETURN(l->ffn_post_norm, LoadVector(src, p + "post_ffw_norm.weight", c.hidden_size));
    return OkStatus();
  }

  Status RunLayer(LayerPass& pass) const override {
    const LayerWeights& w = pass.weights();
    pass.NormInput(w.attn_norm);
    RETURN_IF_ERROR(pass.Attention());
    RETURN_IF_ERROR(pass.AddToResidual(&w.attn_post_norm));
    pass.NormInput(w.ffn_norm);
    RETURN_IF_ERROR(pass.FeedForward());
    return pass.AddToResidual(&w.ffn_post_norm);
  }

 private:
  Architecture arch_;
  int32_t window_period_, big_model_layers_;
};

}  // namespace

const ModelFamily& Gemma2Family() {
  static const Gemma family(Architecture::kGemma2, 2, 46);
  return family;
}
const ModelFamily& Gemma3Family() {
  static const Gemma family(Architecture::kGemma3, 6, 62);
  return family;
}

}  // namespace inflight
