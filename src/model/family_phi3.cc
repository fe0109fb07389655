// Phi-3 / Phi-4-mini: fused attn_qkv, fused ffn_up holding [gate; up], NeoX RoPE and LongRoPE
// (per-dimension divisors for short and long contexts, and an attention factor on cos/sin).
#include "model/families.h"
#include "model/family_list.h"

namespace inflight {
namespace {

class Phi3 : public ModelFamily {
 public:
  Architecture arch() const override { return Architecture::kPhi3; }

  Status ReadGgufConfig(const GgufConfigReader&, ModelConfig* c) const override {
    c->rope_style = kernels::RopeStyle::kHalves;
    // llama.cpp disables Phi's sliding window (its converters do not say which layers).
    c->sliding_window = 0;
    return OkStatus();
  }

  // LongRoPE: the long factors when the context served exceeds the original one (as llama.cpp
  // picks them by its context size; the model's full context is what the engine serves).
  Status ReadConfigTensors(const WeightSource& src, ModelConfig* c) const override {
    const bool long_context =
        c->rope_original_context > 0 && c->context_length > c->rope_original_context;
    const std::string name =
        long_context ? "rope_factors_long.weight" : "rope_factors_short.weight";
    if (!src.Has(name)) return OkStatus();
    ASSIGN_OR_RETURN(c->rope_freq_factors, LoadVector(src, name, c->rope_dim / 2));
    return OkStatus();
  }

  Status LoadLayer(const WeightSource& src, const ModelConfig& c, int layer,
                   LayerWeights* l) const override {
    const std::string p = "blk." + std::to_string(layer) + ".";
    if (!src.Has(p + "ffn_up.weight") || src.Has(p + "ffn_gate.weight"))
      return LoadStandardLayer(src, c, layer, l);
    const int64_t H = c.hidden_size, F = c.ffn_size;
    ASSIGN_OR_RETURN(l->attn_norm, LoadVector(src, p + "attn_norm.weight", H));
    ASSIGN_OR_RETURN(l->ffn_norm, LoadVector(src, p + "ffn_norm.weight", H));
    RETURN_IF_ERROR(LoadAttention(src, c, p, l));
    // ffn_up is [gate; up]: two row ranges of one matrix.
    ASSIGN_OR_RETURN(TensorView gate_up, LoadMatrix(src, p + "ffn_up.weight", 2 * F, H));
    l->w_gate = TensorView{gate_up.row(0), gate_up.dtype, F, H};
    l->w_up = TensorView{gate_up.row(F), gate_up.dtype, F, H};
    ASSIGN_OR_RETURN(l->w_down, LoadMatrix(src, p + "ffn_down.weight", H, F));
    return OkStatus();
  }
};

}  // namespace

const ModelFamily& Phi3Family() {
  static const Phi3 family;
  return family;
}

}  // namespace inflight
