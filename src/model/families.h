// Model families: one file each (family_*.cc) says how a family's GGUF metadata and tensors map
// onto ModelConfig / LayerWeights and how its layer composes the shared blocks (LayerPass in
// model/model.h: norms, attention with its variants, dense MLP or mixture of experts). Adding a
// family means a new file and its entry in families.cc, not new branches in the forward pass.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/model.h"
#include "model/weight_utils.h"

namespace inflight {

class GgufFile;

// "<arch>.<key>" metadata of one GGUF file.
class GgufConfigReader {
 public:
  GgufConfigReader(const GgufFile& file, std::string arch) : file_(file), arch_(std::move(arch)) {}
  const std::string& arch() const { return arch_; }
  // An integer in [0, 2^30]; a missing key leaves *out unchanged unless required.
  Status Int(const std::string& key, bool required, int32_t* out) const;
  Status Float(const std::string& key, float* out) const;
  StatusOr<std::optional<std::string>> String(const std::string& key) const;
  bool Has(const std::string& key) const;
  // A per-layer array of integers or booleans (e.g. sliding_window_pattern), empty when the
  // key is missing or a scalar.
  StatusOr<std::vector<int64_t>> IntArray(const std::string& key) const;

 private:
  const GgufFile& file_;
  std::string arch_;
};

class ModelFamily {
 public:
  virtual ~ModelFamily() = default;
  virtual Architecture arch() const = 0;
  // The family's own hyper-parameters, after the common ones (sizes, heads, RoPE base and
  // scaling, norm epsilon, experts) are read into *c.
  virtual Status ReadGgufConfig(const GgufConfigReader& meta, ModelConfig* c) const = 0;
  // Model-wide tensors that set hyper-parameters (Phi-3's LongRoPE factors), read after
  // ReadGgufConfig.
  virtual Status ReadConfigTensors(const WeightSource&, ModelConfig*) const { return OkStatus(); }
  // One layer's tensors by llama.cpp names (default: LoadStandardLayer).
  virtual Status LoadLayer(const WeightSource& src, const ModelConfig& c, int layer,
                           LayerWeights* l) const;
  // One transformer block (default: pre-norm attention, then pre-norm FFN, each added to the
  // residual stream).
  virtual Status RunLayer(LayerPass& pass) const;
};

// The family of a GGUF general.architecture (null: not supported).
const ModelFamily* FamilyForGguf(const std::string& gguf_arch);
const ModelFamily& FamilyFor(Architecture arch);
// "llama, mistral, ..." for error messages.
std::string SupportedGgufArchitectures();

// The shared loading blocks families compose, by llama.cpp's tensor names; `prefix` is
// "blk.N.".
// attn_norm and ffn_norm (with biases when present), LoadAttention and LoadFeedForward.
Status LoadStandardLayer(const WeightSource& src, const ModelConfig& c, int layer, LayerWeights* l);
// q/k/v or fused qkv, their biases, the output projection, q/k norms when present.
Status LoadAttention(const WeightSource& src, const ModelConfig& c, const std::string& prefix,
                     LayerWeights* l);
// The experts when the layer has a router (ffn_gate_inp), else the dense gate/up/down.
Status LoadFeedForward(const WeightSource& src, const ModelConfig& c, const std::string& prefix,
                       LayerWeights* l);
// An optional F32 vector of n elements (absent: *out stays empty).
Status LoadOptionalVector(const WeightSource& src, const std::string& name, int64_t n,
                          std::vector<float>* out);
// Experts of one layer: router, 3-D gate/up/down tensors sliced per expert, or one 2-D tensor
// per expert (ffn_gate.<e>.weight ...), with biases when present, and the shared expert.
Status LoadExperts(const WeightSource& src, const ModelConfig& c, const std::string& prefix,
                   LayerWeights* l);
// Every other layer a window layer: window layers are those with layer % period < period - 1
// (llama.cpp's set_swa_pattern), or the file's per-layer sliding_window_pattern array.
Status ReadWindowPattern(const GgufConfigReader& meta, int32_t default_period, ModelConfig* c);

}  // namespace inflight
