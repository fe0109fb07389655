// Medusa heads (Cai et al., "Medusa: Simple LLM Inference Acceleration Framework with Multiple
// Decoding Heads"; the files FasterDecoding/Medusa and TensorRT-LLM's converter read:
// medusa_lm_head.safetensors beside a config.json with medusa_num_heads / medusa_num_layers).
// Head k reads the base model's final (normed) hidden state of a token and guesses the token
// k + 2 positions after it: num_layers residual blocks h + SiLU(W h + b), then the head's own
// vocabulary projection. Tensors: "{k}.{j}.linear.weight" [hidden, hidden] and
// "{k}.{j}.linear.bias" [hidden] for j < num_layers, "{k}.{num_layers}.weight" [vocab, hidden].
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "kernels/kernels.h"
#include "model/model_config.h"
#include "tensor/tensor_view.h"

namespace inflight {

class SafetensorsFile;

class MedusaHeads {
 public:
  // `path`: a folder holding medusa_lm_head.safetensors (and optionally config.json), or the
  // .safetensors file itself. The heads must match `base` (its hidden size and vocabulary):
  // INVALID_ARGUMENT naming what differs, NOT_FOUND for a missing tensor.
  // weights: the matrices' type in memory: kF16/kBF16/kF32 keep the file's, kQ8_0 or kQ4_0
  // quantize at load (a head's vocabulary projection is as large as the model's output matrix
  // and is read every step: on a CPU its bytes are its cost).
  static StatusOr<std::unique_ptr<MedusaHeads>> Load(const std::string& path,
                                                     const ModelConfig& base,
                                                     DType weights = DType::kQ8_0);
  ~MedusaHeads();

  int32_t num_heads() const { return static_cast<int32_t>(heads_.size()); }
  int32_t num_layers() const { return num_layers_; }
  // Every head's top_k tokens (best first) for each of `rows` hidden rows ([rows, hidden]):
  // out[(r * num_heads + k) * top_k + i].
  void TopK(const float* hidden, int64_t rows, int32_t top_k, std::vector<int32_t>* out,
            ThreadPool& pool);
  // Bytes of weights one call reads (what the heads add to a step).
  int64_t WeightBytes() const;

 private:
  struct Head {
    std::vector<TensorView> w;          // [hidden, hidden] per block
    std::vector<std::vector<float>> b;  // [hidden] per block
    TensorView lm;                      // [vocab, hidden]
  };
  MedusaHeads() = default;
  std::vector<Head> heads_;
  int32_t num_layers_ = 0, hidden_ = 0, vocab_ = 0;
  std::unique_ptr<SafetensorsFile> file_;
  std::vector<AlignedBuffer> owned_;  // interleaved copies of the matrices
  kernels::MatMulScratch scratch_;
  std::vector<float> h_, t_, logits_;
};

class Model;
// Writes heads for `base` to dir (medusa_lm_head.safetensors, config.json): num_heads heads
// of one residual block. copy_output: zero blocks and the model's own output projection in
// every head (each guesses the model's next token: right where its text repeats a token);
// else random weights. For benchmarks and tests, as random models are.
Status WriteMedusaHeads(const std::string& dir, const Model& base, int num_heads, bool copy_output,
                        ThreadPool& pool);

// TensorRT-LLM's medusa_choices: paths of top-k indices, one per head ("[[0], [0, 0], [1]]":
// head 0's best, then head 1's best after it, head 0's second best). Parsed, checked (each
// path within the heads, every prefix present, at most max_nodes paths) and put in an order
// where a path comes after its prefix.
// field: the parameter the errors name (eagle_choices takes the same format).
StatusOr<std::vector<std::vector<int32_t>>> ParseMedusaChoices(
    const std::string& text, int32_t num_heads, int32_t max_nodes,
    const std::string& field = "medusa_choices");
// The same checks on paths given as numbers (an ExecutorConfig's), each index below
// top_k_limit; returns them in that order.
StatusOr<std::vector<std::vector<int32_t>>> CheckMedusaChoices(
    std::vector<std::vector<int32_t>> paths, int32_t num_heads, int32_t top_k_limit,
    int32_t max_nodes, const std::string& field = "medusa_choices");
// The default: a tree of up to 14 nodes, widest where guesses hold most often, cut to the
// paths num_heads heads can make.
std::vector<std::vector<int32_t>> DefaultMedusaChoices(int32_t num_heads);

}  // namespace inflight
