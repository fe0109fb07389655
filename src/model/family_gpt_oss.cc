// gpt-oss: attention with q/k/v/o biases and a learned sink logit per head, every other layer a
// sliding window, YaRN RoPE, and experts with biases and the clamped SwiGLU, routed by a top-k
// of the (biased) router logits with a softmax over the k chosen. Its pre-FFN norm is stored
// as post_attention_norm.
#include "model/families.h"
#include "model/family_list.h"

namespace inflight {
namespace {

class GptOss : public ModelFamily {
 public:
  Architecture arch() const override { return Architecture::kGptOss; }

  Status ReadGgufConfig(const GgufConfigReader& meta, ModelConfig* c) const override {
    c->rope_style = kernels::RopeStyle::kHalves;
    c->expert_gating = ExpertGating::kSoftmaxSelected;
    c->normalize_expert_weights = false;
    c->ffn_activation = kernels::FfnActivation::kSwigluOai;
    return ReadWindowPattern(meta, 2, c);
  }

  Status LoadLayer(const WeightSource& src, const ModelConfig& c, int layer,
                   LayerWeights* l) const override {
    const std::string p = "blk." + std::to_string(layer) + ".";
    ASSIGN_OR_RETURN(l->attn_norm, LoadVector(src, p + "attn_norm.weight", c.hidden_size));
    ASSIGN_OR_RETURN(l->ffn_norm, LoadVector(src, p + "post_attention_norm.weight", c.hidden_size));
    RETURN_IF_ERROR(LoadAttention(src, c, p, l));
    if (l->attn_sinks.empty())
      return InvalidArgumentError("tensor '" + p + "attn_sinks.weight' is missing");
    return LoadFeedForward(src, c, p, l);
  }
};

}  // namespace

const ModelFamily& GptOssFamily() {
  static const GptOss family;
  return family;
}

}  // namespace inflight
