// LoRA adapters, applied per sequence inside the forward pass: a targeted projection's output
// gains B (A x) for the tokens of sequences using the adapter, so requests with different
// adapters (and none) share one step and the base weights. Adapters come in TensorRT-LLM's
// tensor form (lora_weights / lora_config) or as a Hugging Face PEFT folder; both are in
// Hugging Face's row order, and the q/k rows are permuted to GGUF's interleaved RoPE order
// when the model uses it (as llama.cpp's LoRA converter does).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/model_config.h"

namespace inflight {

// TensorRT-LLM's LoRA module ids (LoraModule::ModuleType) for the projections this engine
// has. For gated FFNs (Llama) mlp_h_to_4h is gate_proj and mlp_gate is up_proj; for GELU
// FFNs (GPT-2) mlp_h_to_4h is the up projection.
enum LoraModuleId : int32_t {
  kLoraAttnQkv = 0,
  kLoraAttnQ = 1,
  kLoraAttnK = 2,
  kLoraAttnV = 3,
  kLoraAttnDense = 4,
  kLoraMlpHTo4h = 5,
  kLoraMlp4hToH = 6,
  kLoraMlpGate = 7,
  kLoraNumModules = 8,
};

struct LoraMatrix {
  int32_t rank = 0, in = 0, out = 0;
  std::vector<float> a;  // [rank, in]
  std::vector<float> b;  // [out, rank], the adapter's scale applied
};

class LoraAdapter {
 public:
  // TensorRT-LLM's tensors: `weights` [rows, cols] and `config` [rows, 3] of (module id,
  // layer, adapter size); a row holds A [size, in] then B [out, size], zero padded. The
  // scale (alpha / r) is already in B, as TensorRT-LLM's converter writes it.
  static StatusOr<std::shared_ptr<const LoraAdapter>> FromTensors(
      const ModelConfig& c, const std::vector<float>& weights, int64_t rows, int64_t cols,
      const std::vector<int32_t>& config);
  // A Hugging Face PEFT folder: adapter_config.json (r, lora_alpha, use_rslora) and
  // adapter_model.safetensors (F32/F16/BF16 lora_A / lora_B of q/k/v/o/gate/up/down_proj).
  static StatusOr<std::shared_ptr<const LoraAdapter>> FromPeftFolder(const ModelConfig& c,
                                                                     const std::string& dir);

  // The matrix of (layer, module), or null.
  const LoraMatrix* Get(int32_t layer, int32_t module) const {
    const auto& m = layers_[layer][module];
    return m.rank > 0 ? &m : nullptr;
  }
  int32_t num_layers() const { return static_cast<int32_t>(layers_.size()); }
  size_t bytes() const { return bytes_; }

  // Unique in this process (tensor-parallel ranks cache the adapters they were sent by it).
  uint64_t id() const { return id_; }
  // Every (layer, module) matrix as this model uses it (rank 0: none), to send to another rank.
  const std::vector<std::array<LoraMatrix, kLoraNumModules>>& matrices() const { return layers_; }
  // The adapter matrices() returned, rebuilt (no row permutation: they are already in this
  // model's order). INVALID_ARGUMENT for a shape the model does not have.
  static StatusOr<std::shared_ptr<const LoraAdapter>> FromMatrices(
      const ModelConfig& c, std::vector<std::array<LoraMatrix, kLoraNumModules>> layers);

 private:
  LoraAdapter();
  // Checks and stores one module; permutes q/k rows for interleaved RoPE.
  Status Add(const ModelConfig& c, int32_t layer, int32_t module, LoraMatrix m);

  std::vector<std::array<LoraMatrix, kLoraNumModules>> layers_;
  size_t bytes_ = 0;
  uint64_t id_;
};

// The (in, out) sizes of a module's projection in a model; false for a module it lacks.
bool LoraModuleShape(const ModelConfig& c, int32_t module, int32_t* in, int32_t* out);

}  // namespace inflight
