// GPT-2: learned positions, LayerNorm with biases, fused QKV, ungated GELU FFN.
#include "model/families.h"
#include "model/family_list.h"

namespace inflight {
namespace {

class Gpt2 : public ModelFamily {
 public:
  Architecture arch() const override { return Architecture::kGpt2; }
  Status ReadGgufConfig(const GgufConfigReader& meta, ModelConfig* c) const override {
    c->layer_norm = true;
    c->gelu_ffn = true;
    c->learned_positions = true;
    return meta.Float("attention.layer_norm_epsilon", &c->norm_eps);
  }
};

}  // namespace

const ModelFamily& Gpt2Family() {
  static const Gpt2 family;
  return family;
}

}  // namespace inflight
