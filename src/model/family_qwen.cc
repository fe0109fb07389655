// Qwen 2 and 3, dense and mixture-of-experts: NeoX RoPE; Qwen 3 normalizes q and k per head;
// Qwen3-MoE renormalizes the chosen experts' softmax weights, Qwen2-MoE does not and adds a
// sigmoid-gated shared expert.
#include "model/families.h"
#include "model/family_list.h"

namespace inflight {
namespace {

class Qwen : public ModelFamily {
 public:
  Qwen(Architecture arch, bool qk_norm, bool normalize_experts)
      : arch_(arch), qk_norm_(qk_norm), normalize_experts_(normalize_experts) {}
  Architecture arch() const override { return arch_; }
  Status ReadGgufConfig(const GgufConfigReader& meta, ModelConfig* c) const override {
    c->rope_style = kernels::RopeStyle::kHalves;
    c->expert_gating = ExpertGating::kSoftmax;
    c->normalize_expert_weights = normalize_experts_;
    return meta.Int("expert_shared_feed_forward_length", false, &c->shared_expert_ffn_size);
  }
  Status LoadLayer(const WeightSource& src, const ModelConfig& c, int layer,
                   LayerWeights* l) const override {
    RETURN_IF_ERROR(LoadStandardLayer(src, c, layer, l));
    if (qk_norm_ && l->q_norm.empty()) {
      return InvalidArgumentError("tensor 'blk." + std::to_string(layer) +
                                  ".attn_q_norm.weight' is missing");
    }
    return OkStatus();
  }

 private:
  Architecture arch_;
  bool qk_norm_, normalize_experts_;
};

}  // namespace

const ModelFamily& Qwen2Family() {
  static const Qwen family(Architecture::kQwen2, false, false);
  return family;
}
const ModelFamily& Qwen3Family() {
  static const Qwen family(Architecture::kQwen3, true, true);
  return family;
}
const ModelFamily& Qwen2MoeFamily() {
  static const Qwen family(Architecture::kQwen2Moe, false, false);
  return family;
}
const ModelFamily& Qwen3MoeFamily() {
  static const Qwen family(Architecture::kQwen3Moe, true, true);
  return family;
}

}  // namespace inflight
