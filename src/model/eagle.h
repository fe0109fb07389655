// EAGLE draft heads. EAGLE-3 (Li et al., "EAGLE-3: Scaling up Inference Acceleration of Large
// Language Models via Training-Time Test"): one decoder layer beside the model that drafts from
// the model's own hidden states. The files users have for them are Hugging Face folders
// (config.json with architectures LlamaForCausalLMEagle3, or vLLM speculators' Eagle3Speculator
// with its transformer_layer_config; model.safetensors), as SafeAILab's EAGLE, vLLM, SGLang and
// TensorRT-LLM read them:
//   fc.weight [H, 3 * target H]       fuses the target's residual stream at the input of three
//                                     of its layers (eagle_aux_hidden_state_layer_ids, at the
//                                     top or in eagle_config, as vLLM counts them: id j is the
//                                     input of layer j, 0 the embeddings; default 2, L/2, L-3);
//   {midlayer|layers.0}.input_layernorm / hidden_norm / post_attention_layernorm [H];
//   ....self_attn.{q,k,v}_proj [*, 2 * H] over [norm(embedding), norm(hidden)], o_proj;
//   ....mlp.{gate,up,down}_proj (SwiGLU); norm.weight [H];
//   lm_head.weight [draft vocab, H] and d2t [draft vocab] (target id = draft id + d2t[id]);
//   embed_tokens.weight [vocab, H] optional (absent: the model's embeddings).
// EAGLE-1/2 heads (Li et al., "EAGLE: Speculative Sampling Requires Rethinking Feature
// Uncertainty"; EAGLE-2 drafts from the same heads) are Hugging Face Llama configs of one layer:
//   fc.weight [H, 2 * H] (+ fc.bias) over [embedding, feature], where the feature is the model's
//                                     last hidden state after its final norm (layer id L);
//   layers.0.self_attn.{q,k,v}_proj [*, H] (+ biases), o_proj; no input norm (the layer reads
//   fc's output as it is); post_attention_layernorm; mlp (SwiGLU);
//   no norm or lm_head of their own: the model's output projection reads the layer's output.
// Row at position p: its token input is the token at p + 1 and its hidden input is the target's
// state at p (a committed row: fused for EAGLE-3) or the output of the draft row it continues
// (a tree row); its output's top-k guess the token at p + 2. A committed row's K/V join the
// sequence's draft cache; a tree row's K/V live in the tree for the rows below it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "kernels/kernels.h"
#include "tensor/tensor_view.h"

namespace inflight {

class Model;
class SafetensorsFile;

// The positions a head's cache keeps (between one and two windows of the latest): its memory
// and attention stay bounded on long sequences; the model's states it reads carry the rest.
inline constexpr int32_t kEagleCacheWindow = 1024;

// A sequence's draft K/V: positions [start, start + size()) in order, RoPE applied.
struct EagleCache {
  int32_t start = 0;
  std::vector<float> k, v;  // [positions, kv_dim]
  int32_t size(int32_t kv_dim) const { return static_cast<int32_t>(k.size() / kv_dim); }
  int32_t end(int32_t kv_dim) const { return start + size(kv_dim); }
  void Reset(int32_t at) {
    start = at;
    k.clear();
    v.clear();
  }
};

// A draft tree's K/V, by node.
struct EagleTree {
  std::vector<float> k, v;  // [nodes, kv_dim]
};

struct EagleRow {
  EagleCache* cache = nullptr;
  int32_t position = 0;
  int32_t token = 0;              // the token at position + 1 (a target id)
  const float* hidden = nullptr;  // fused: [3 * target hidden]; else [hidden]
  // A tree row: its K/V go to node `node` of `tree`; it attends to every position of the
  // cache, to the nodes `ancestors` (top first) and to itself. Null: a committed row, whose
  // K/V go to the cache at `position` (cache->end() or before it: the cache is cut there) and
  // which attends to the cache up to itself.
  EagleTree* tree = nullptr;
  int32_t node = -1;
  const int32_t* ancestors = nullptr;
  int32_t num_ancestors = 0;
  bool top = false;  // wants its top-k guesses
};

class EagleHead {
 public:
  // `path`: a folder (config.json and model.safetensors, or the one .safetensors file in it)
  // or the .safetensors file itself. The head must match `base` (hidden size, vocabulary,
  // layer count): INVALID_ARGUMENT naming what differs, NOT_FOUND for a missing tensor,
  // UNIMPLEMENTED for heads of more than one layer and pickled checkpoints. weights: the matrices'
  // type in memory (kF32/kF16/kBF16 as stored, kQ8_0/kQ4_0 quantized at load).
  static StatusOr<std::unique_ptr<EagleHead>> Load(const std::string& path, const Model& base,
                                                   DType weights = DType::kQ8_0);
  ~EagleHead();

  // 3 (EAGLE-3) or 1 (an EAGLE-1/2 head).
  int32_t version() const { return version_; }
  // The target layers whose input (the residual stream) the head reads, in fc's column order
  // (EAGLE-1/2: the model's layer count, its final normed state).
  const std::vector<int32_t>& aux_layers() const { return aux_layers_; }
  int32_t hidden_size() const { return hidden_; }
  int32_t target_hidden_size() const { return target_hidden_; }
  int32_t kv_dim() const { return num_kv_heads_ * head_dim_; }
  int32_t draft_vocab_size() const { return draft_vocab_; }
  int32_t vocab_size() const { return vocab_; }
  // Bytes of weights a pass reads: the layer (with fc when fusing), and the vocabulary
  // projection when a row wants guesses.
  int64_t LayerBytes() const;
  int64_t OutputBytes() const;

  // Not thread-safe (it keeps its scratch): one executor runs a head.
  // Runs `rows` (fuse: their hidden inputs are the target's, [aux_layers().size() * target
  // hidden]; else the draft's own, [hidden]). Writes each row's layer output (EAGLE-3: before
  // its final norm) to prenorm_out [rows, hidden] (may be null) and, for rows with
  // `top`, its top_k guesses (target ids, best first) to top_out, in row order. Each row's
  // results depend on its own inputs, cache and tree only (never on the other rows).
  // top_logp (may be null): the guesses' log-probabilities under the head, beside top_out.
  void Forward(const std::vector<EagleRow>& rows, bool fuse, int32_t top_k, float* prenorm_out,
               std::vector<int32_t>* top_out, ThreadPool& pool,
               std::vector<float>* top_logp = nullptr);

 private:
  EagleHead() = default;
  void Attend(const EagleRow& row, const float* q, float* out, std::vector<float>& scores) const;
  const float* Eagle3Input(const std::vector<EagleRow>& rows, bool fuse, float* x,
                           ThreadPool& pool);

  const Model* base_ = nullptr;
  std::unique_ptr<SafetensorsFile> file_;
  std::vector<AlignedBuffer> owned_;
  int32_t hidden_ = 0, target_hidden_ = 0, num_heads_ = 0, num_kv_heads_ = 0, head_dim_ = 0;
  int32_t ffn_ = 0, vocab_ = 0, draft_vocab_ = 0;
  float eps_ = 1e-5f;
  int32_t version_ = 3;
  bool norm_before_residual_ = false;  // the residual is the normed hidden state (speculators)
  std::vector<int32_t> aux_layers_;
  std::vector<float> inv_freq_;
  TensorView fc_, wq_, wk_, wv_, wo_, gate_, up_, down_, lm_, embed_;
  std::vector<float> bq_, bk_, bv_, bfc_;  // optional biases (empty: none)
  std::vector<float> input_norm_, hidden_norm_, post_norm_, final_norm_;
  std::vector<int32_t> d2t_;  // draft id -> target id
  kernels::MatMulScratch scratch_;
  std::vector<float> x_, cat_, q_, k_, v_, att_, t_, gate_buf_, up_buf_, logits_;
};

// The deepest path eagle_choices may hold (the head runs once per level but the last).
inline constexpr int32_t kMaxEagleChoicesDepth = 16;
// The default eagle_choices: a chain of 4 guesses (each the head's best after the one before).
// On a CPU every verified row costs, and a branch more (its K/V copied per layer: the exact
// tree path), while each level costs a head pass: spec_bench measured a chain of 4 at 2.1x, of
// 6 at 1.5x, and Medusa's 14-node tree at 0.9x with guesses that always hold (bench/README.md).
std::vector<std::vector<int32_t>> DefaultEagleChoices();

// Writes an EAGLE-3 (version 3) or EAGLE-1/2 (version 1) head for `base` to dir (config.json,
// model.safetensors) of the real shapes (draft vocabulary: the model's, up to 32000 tokens), for
// benchmarks and tests as random models are: random weights, or (guess_bigram) weights that guess
// the model's next token after each token alone, the model's own output projection included (on a
// model whose next token depends on the current one only, its guesses hold at every depth).
// aux_layers empty: the default layers (version 1 reads the model's last state: aux_layers is
// ignored).
Status WriteEagleHead(const std::string& dir, const Model& base, bool guess_bigram,
                      ThreadPool& pool, const std::vector<int32_t>& aux_layers = {},
                      int version = 3);

}  // namespace inflight
