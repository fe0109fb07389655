// Llama 2/3, Mistral and Mixtral (arch "llama" with expert_count: 3-D ffn_*_exps tensors,
// softmax routing renormalized over the chosen experts). RoPE on adjacent pairs (the GGUF
// converter permutes q/k rows for it).
#include "model/families.h"
#include "model/family_list.h"

namespace inflight {
namespace {

class Llama : public ModelFamily {
 public:
  Architecture arch() const override { return Architecture::kLlama; }
  Status ReadGgufConfig(const GgufConfigReader&, ModelConfig* c) const override {
    c->rope_style = kernels::RopeStyle::kAdjacentPairs;
    c->expert_gating = ExpertGating::kSoftmax;
    c->normalize_expert_weights = true;
    return OkStatus();
  }
};

}  // namespace

const ModelFamily& LlamaFamily() {
  static const Llama family;
  return family;
}

}  // namespace inflight
