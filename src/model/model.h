// A loaded model: config, weights (views into the mapped file, or owned converted copies),
// tokenizer, and the forward pass over a ragged batch.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/mapped_file.h"
#include "base/status.h"
#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "model/lora.h"
#include "model/model_config.h"
#include "model/shard.h"
#include "tensor/tensor_view.h"
#include "tokenizer/tokenizer.h"

namespace inflight {

class ThreadPool;
class GgufFile;
class ModelFamily;
class Model;

struct LayerWeights {
  std::vector<float> attn_norm, attn_norm_bias;  // [hidden]
  TensorView wq, wk, wv, wo;                     // [q_dim|kv_dim|hidden, in]
  TensorView wqkv;                               // GPT-2 fused [q_dim + 2 kv_dim, hidden]
  std::vector<float> bq, bk, bv, bo, bqkv;       // biases (empty when absent)
  std::vector<float> q_norm, k_norm;             // Qwen3: [head_dim]
  std::vector<float> ffn_norm, ffn_norm_bias;    // [hidden]
  TensorView w_gate, w_up, w_down;               // [ffn, hidden], [ffn, hidden], [hidden, ffn]
  std::vector<float> b_up, b_down;
  // Gemma: norms of each block's output before it joins the residual (empty when absent).
  std::vector<float> attn_post_norm, ffn_post_norm;
  std::vector<float> attn_sinks;  // gpt-oss: one softmax logit per query head (this rank's)

  // Mixture of experts (empty router: a dense FFN). Expert e's matrices are views of its slice
  // of the file's 3-D tensors: gate/up [expert_ffn, hidden], down [hidden, expert_ffn].
  TensorView router;               // [experts, hidden]
  std::vector<float> router_bias;  // [experts] (gpt-oss)
  std::vector<TensorView> expert_gate, expert_up, expert_down;
  std::vector<float> expert_gate_bias, expert_up_bias;  // [experts, expert_ffn] (gpt-oss)
  std::vector<float> expert_down_bias;                  // [experts, hidden]
  // Qwen2-MoE's shared expert, added to every token with weight sigmoid(shared_gate . h).
  TensorView shared_gate, shared_up, shared_down;
  std::vector<float> shared_expert_gate;  // [hidden]
  bool has_experts() const { return !router.empty(); }
};

// A shard (model/shard.h) holds only its own rows: the layers of its pipeline stage, and in
// each matrix the rows of its tensor-parallel rank (shapes below are then the local ones).
struct ModelWeights {
  TensorView token_embedding;     // [vocab, hidden]
  TensorView position_embedding;  // GPT-2 [context, hidden]
  std::vector<LayerWeights> layers;
  std::vector<float> output_norm, output_norm_bias;
  TensorView output;  // [vocab, hidden] (== token_embedding when tied)
};

// The new tokens of one sequence in a step.
struct SequenceChunk {
  const int32_t* token_ids = nullptr;
  int32_t num_tokens = 0;
  int32_t start_pos = 0;                 // position of token_ids[0] (tokens already in the cache)
  const int32_t* block_table = nullptr;  // KV blocks of this sequence, covering every position
  int32_t num_blocks = 0;
  // Logits for the last num_logits tokens of the chunk (num_tokens: every token; more than one
  // also when draft tokens are verified).
  int32_t num_logits = 1;
  const LoraAdapter* lora = nullptr;  // this sequence's adapter (built for this model), or none
  // P-tuning: token ids vocab_size + i embed as row i of this [rows, hidden] table.
  const float* prompt_table = nullptr;
  int32_t prompt_table_rows = 0;
  // Its blocks in the cache's window group (KvCacheView::window), when the cache has one: an
  // entry is a block only where a window can still see it (-1 behind the window).
  const int32_t* window_block_table = nullptr;
  int32_t num_window_blocks = 0;
  // Tree verification (drafts as a tree, one pass): token i's K/V go to slot start_pos + i,
  // its position is start_pos + tree_depth[i] and it attends to the positions before
  // start_pos and to the chunk's tokens tree[i] marks (kernels/attention.h AttentionSeq::tree:
  // its ancestors and itself, ancestors first). At most 64 tokens; not with sliding-window
  // layers. null: a causal chunk. With tree_scratch (kernels::TreeScratchBlocks of them, blocks
  // of no sequence: each layer overwrites them) every token's logits are bit for bit its
  // branch's run alone; without, within rounding (kernels/attention.h).
  const uint64_t* tree = nullptr;
  const int32_t* tree_depth = nullptr;
  const int32_t* tree_scratch = nullptr;
  int32_t num_tree_scratch = 0;

  int32_t PositionOf(int32_t i) const { return start_pos + (tree != nullptr ? tree_depth[i] : i); }
};

// One forward pass: a ragged batch, no padding.
struct BatchPlan {
  std::vector<SequenceChunk> chunks;
  int64_t num_tokens() const;
  int64_t num_logit_rows() const;
};

// What the model sees of the KV cache: one pool view per layer.
struct KvCacheView {
  std::vector<kernels::KvLayerView> layers;
  int32_t num_blocks = 0;
  // KV cache groups (kvcache/kv_storage.h): layer_group[local layer] is 1 for a sliding-window
  // layer whose K/V live in the window group (num_window_blocks blocks, the chunks' window
  // block tables); empty: every layer reads block_table.
  std::vector<uint8_t> layer_group;
  int32_t num_window_blocks = 0;
  int32_t window = 0;  // the window group's sliding window (tokens)
};

// Activation buffers for up to max_tokens tokens per step; grown on demand, never per step
// once warmed up. The attention scratch is a few KB per thread whatever the context (online
// softmax over KV blocks). Engine-thread only.
class ForwardScratch {
 public:
  // `heads` / `kv_heads`: the query and K/V heads this shard attends with (a TP rank's own: its
  // ratio can differ from the model's when K/V heads are replicated, and sizes the tiles).
  void Reserve(const ModelConfig& c, int32_t heads, int32_t kv_heads, int64_t num_tokens,
               int32_t tokens_per_block, int num_threads);
  float* x = nullptr;          // [T, hidden] residual stream
  float* h = nullptr;          // [T, max(hidden, q_dim)] normed input / attention output
  float* q = nullptr;          // [T, q_dim + 2 * kv_dim] (q | k | v, fused for GPT-2)
  float* k = nullptr;          // [T, kv_dim]
  float* v = nullptr;          // [T, kv_dim]
  float* attn = nullptr;       // [T, q_dim]
  float* gate = nullptr;       // [T, ffn]
  float* up = nullptr;         // [T, ffn]
  float* out = nullptr;        // [T, hidden]
  float* attention = nullptr;  // kernels::AttentionScratchFloats
  // [tables, T, rope_dim]: cos then sin of each token's RoPE angles, per RoPE table.
  float* rope_angles = nullptr;
  kernels::MatMulScratch matmul;
  // Mixture of experts (model_moe.cc): routing, then each expert's rows gathered together.
  std::vector<float> moe_logits;      // [T, experts]
  std::vector<int32_t> moe_choice;    // [T, k]: the experts of each token, best first
  std::vector<float> moe_weight;      // [T, k]
  std::vector<int32_t> moe_pair_row;  // [T * k]: row of (token, slot) in moe_out
  std::vector<int32_t> moe_src_row;   // [T * k]: the token of each expert input row
  std::vector<float> moe_gate, moe_up, moe_act, moe_out;
  std::vector<float> moe_exchange;                      // expert parallelism's padded all-gathers
  std::vector<int32_t> moe_count, moe_first, moe_next;  // [experts + 1]: rows per expert
  std::vector<kernels::MatMulSegment> moe_segments;
  // [layers] by global layer id: how many distinct experts the tokens of the last forward pass
  // chose in each MoE layer (the experts it read; untouched for dense layers). For benchmarks'
  // bytes-read accounting.
  std::vector<int32_t> moe_experts_used;
  std::vector<const LoraAdapter*> row_lora;  // [T]: each token's adapter (LoRA)
  bool any_lora = false;
  // Tensor parallel: the gathered activations and the raw all-gather results.
  std::vector<float> tp_wide;      // [T, max(q_dim, ffn)]: all heads' attention / all FFN columns
  std::vector<float> tp_full;      // [T, hidden]: all rows of a projection
  std::vector<float> tp_exchange;  // [tp, T, max local columns]
  std::vector<float> tp_logits;    // [rows, local vocab]
  std::vector<int32_t> tp_owner;   // [T]: the rank whose vocabulary rows hold each token

 private:
  AlignedBuffer buffer_;     // the per-token activations
  AlignedBuffer attention_;  // per-thread attention scratch
  int64_t capacity_tokens_ = 0;
  int32_t capacity_block_ = 0;
  int capacity_threads_ = 0;
};

struct ModelLoadOptions {
  // The first num_layers blocks only (0: all): a smaller model that shares the full one's
  // embeddings and output head, e.g. a draft model for speculative decoding made of the
  // target's own first layers.
  int32_t num_layers = 0;
  // Tensor/pipeline parallel: load only this shard's rows and layers (the file's other
  // pages are never read).
  ModelShard shard;
  // F16 / BF16 matrices keep their rows and the FP32 FMA kernel (the F32 result of the file's
  // values) instead of the int16 VNNI blocks (kernels/kernels_internal.h), which run prompts
  // about twice as fast and hold each weight and activation within 2^-13.5 of its 64-column
  // block's largest magnitude.
  bool exact_f16 = false;
};

// What one shard's forward pass reads and writes besides the KV cache.
struct ShardIo {
  TensorParallelGroup* tp = nullptr;  // required when the shard's tp_size > 1
  const float* hidden_in = nullptr;   // [T, hidden] from the previous stage; null: embed the tokens
  float* hidden_out = nullptr;        // not the last stage: [T, hidden] after this stage's layers
  float* logits = nullptr;            // last stage: [logit rows, vocab] (TP: on TP rank 0 only)
  // The residual stream at the input of each of these layers, for every row (an EAGLE head
  // drafts from them): aux_out [T, aux_layers.size() * hidden], layer by layer in list order.
  // Id num_layers is the final hidden state after the model's output norm.
  const std::vector<int32_t>* aux_layers = nullptr;
  float* aux_out = nullptr;
};

// One layer of one forward pass: the shared blocks a family's file composes into its layer
// (model/families.h). The blocks read and write the step's scratch: NormInput fills the block
// input from the residual stream, Attention / FeedForward compute a block's output, and
// AddToResidual adds it (normalized first where the family has post-norms).
class LayerPass {
 public:
  int layer() const { return layer_; }
  const LayerWeights& weights() const { return *weights_; }
  const ModelConfig& config() const;
  // block input = norm(residual): RMSNorm, or LayerNorm when the config says so (bias optional).
  void NormInput(const std::vector<float>& weight, const std::vector<float>& bias = {});
  // block output = self-attention of the block input (the layer's window, RoPE, sinks).
  Status Attention();
  // block output = the dense MLP, or the mixture of experts when the layer has experts.
  Status FeedForward();
  // residual += post_norm(block output) (no norm when post_norm is null or empty).
  Status AddToResidual(const std::vector<float>* post_norm = nullptr);

 private:
  friend class Model;
  LayerPass() = default;
  const Model* model_ = nullptr;
  int layer_ = 0;
  const LayerWeights* weights_ = nullptr;
  const BatchPlan* plan_ = nullptr;
  const KvCacheView* kv_ = nullptr;
  ForwardScratch* scratch_ = nullptr;
  ThreadPool* pool_ = nullptr;
  int64_t num_tokens_ = 0;
  TensorParallelGroup* tp_ = nullptr;
};

class Model {
 public:
  // Loads a .gguf file, a llama2.c .bin, or a Hugging Face folder (config.json +
  // *.safetensors). Every failure names the file and what is wrong.
  static StatusOr<std::unique_ptr<Model>> Load(const std::string& path,
                                               const ModelLoadOptions& options = {});

  const ModelConfig& config() const { return config_; }
  // The input embedding of a token id (dequantized): [hidden].
  void EmbeddingRow(int32_t id, float* out) const;
  const ModelWeights& weights() const { return weights_; }
  // Null when the file carries no tokenizer (llama2.c).
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }
  const std::string& path() const { return path_; }
  std::string Describe() const;
  // Bytes of weights one decode step reads (all matrices but the embedding table).
  int64_t DecodeWeightBytes() const;

  // Runs the plan and writes logits [plan.num_logit_rows(), vocab] (rows in chunk order;
  // per chunk all its tokens or the last). K/V of the new tokens are written to the cache.
  // INVALID_ARGUMENT for an out-of-range token id or position, or a short block table.
  Status Forward(const BatchPlan& plan, const KvCacheView& kv, ForwardScratch& scratch,
                 ThreadPool& pool, float* logits) const;
  // The same for a shard: this stage's layers (kv holds only those) on this rank's rows.
  Status ForwardShard(const BatchPlan& plan, const KvCacheView& kv, ForwardScratch& scratch,
                      ThreadPool& pool, const ShardIo& io) const;
  const ShardLayout& shard() const { return shard_; }
  bool sharded() const { return shard_.tp_size() > 1 || shard_.num_layers() != config_.num_layers; }

  // Internal: used by the loaders.
  Model() = default;
  ModelConfig config_;
  ModelWeights weights_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<std::shared_ptr<MappedFile>> files_;  // keep mapped weights alive
  std::vector<AlignedBuffer> owned_;                // converted weights
  std::string path_;
  // RoPE tables: [0] every layer's, [1] the window layers' own base when it differs.
  struct RopeTable {
    std::vector<float> inv_freq;  // [rope_dim / 2]
    float attn_factor = 1.0f;     // cos and sin scale
  };
  std::vector<RopeTable> rope_tables_;
  int RopeTableOf(int layer) const;
  const ModelFamily* family_ = nullptr;
  ShardLayout shard_;

 private:
  friend class LayerPass;
  Status ValidatePlan(const BatchPlan& plan, const KvCacheView& kv) const;
  Status CheckTreeScratch(const BatchPlan& plan, const KvCacheView& kv) const;
  // `layer` is the global id; weights_.layers and kv.layers hold this stage's only.
  Status Attention(int layer, const BatchPlan& plan, const KvCacheView& kv, ForwardScratch& s,
                   ThreadPool& pool, int64_t num_tokens, TensorParallelGroup* tp) const;
  Status FeedForward(int layer, ForwardScratch& s, ThreadPool& pool, int64_t num_tokens,
                     TensorParallelGroup* tp) const;
  // s.out = the layer's mixture of experts over s.h (model_moe.cc).
  Status MixtureOfExperts(int layer, ForwardScratch& s, ThreadPool& pool, int64_t num_tokens,
                          TensorParallelGroup* tp) const;
  Status Embed(const BatchPlan& plan, ForwardScratch& s, int64_t num_tokens,
               TensorParallelGroup* tp) const;
  // x += post_norm(out): a block's output projection (this rank's rows of it, gathered under
  // TP), normalized first when post_norm is given.
  Status AddOutputToResidual(ForwardScratch& s, ThreadPool& pool, int64_t num_tokens,
                             TensorParallelGroup* tp,
                             const std::vector<float>* post_norm = nullptr) const;
  Status Logits(const BatchPlan& plan, ForwardScratch& s, ThreadPool& pool, TensorParallelGroup* tp,
                float* logits) const;
  // Under TP: out[T, sum(sizes)] = every rank's local[T, sizes[rank]] side by side (only_first:
  // on TP rank 0 only).
  Status GatherColumns(TensorParallelGroup* tp, const float* local, int64_t num_tokens,
                       const std::vector<int64_t>& sizes, float* out, ForwardScratch& s,
                       bool only_first = false) const;
  // Expert parallelism (model_moe.cc): every rank's block of its EP group's pairs, gathered.
  Status GatherExpertBlocks(TensorParallelGroup* tp, const float* mine,
                            const std::vector<int32_t>& first, const std::vector<int64_t>& columns,
                            bool every_group, float* all, ForwardScratch& s) const;
  // LoRA: y[t] += B[b_row0 : b_row0 + b_rows] (A x[t]) for each token t whose adapter has
  // `module` at `layer`.
  void ApplyLora(int layer, int32_t module, const float* x, int64_t x_stride, float* y,
                 int64_t y_stride, int32_t b_row0, int32_t b_rows, const ForwardScratch& s,
                 ThreadPool& pool, int64_t num_tokens) const;
  // Rows are independent: a prompt's rows are split over the pool.
  void Norm(const std::vector<float>& w, const std::vector<float>& b, const float* x, float* out,
            int64_t num_tokens, ThreadPool& pool) const;
};

// Loaders (model_loader_*.cc).
StatusOr<std::unique_ptr<Model>> LoadGgufModel(const std::string& path,
                                               const ModelLoadOptions& options = {});
// The same from a file already mapped (or bytes in memory); errors start with file->path().
StatusOr<std::unique_ptr<Model>> LoadGgufModel(std::shared_ptr<MappedFile> file,
                                               const ModelLoadOptions& options = {});
// A GGUF file's hyper-parameters as LoadGgufModel reads them (general.architecture's family,
// the common and the family's own "<arch>.*" keys, config tensors such as rope factors, the
// vocabulary of token_embd), checked by ModelConfig::Validate; no layer weights are read.
// INVALID_ARGUMENT / UNIMPLEMENTED naming the key or tensor on failure.
StatusOr<ModelConfig> ReadGgufModelConfig(const GgufFile& gguf);
StatusOr<std::unique_ptr<Model>> LoadLlama2cModel(const std::string& path,
                                                  const ModelLoadOptions& options = {});
StatusOr<std::unique_ptr<Model>> LoadHuggingFaceModel(const std::string& dir,
                                                      const ModelLoadOptions& options = {});
// Applies options.num_layers to a config read from a file (before its weights are loaded).
Status ApplyLoadOptions(const ModelLoadOptions& options, ModelConfig* config);
// Cuts the weights to options.shard (model/shard.h), interleaves them and fills
// rope_inv_freq_; call after the config is final. INVALID_ARGUMENT when the shard does not fit
// the model (heads not divisible by tp_size, a bad layer range).
Status FinishModel(Model* model, const ModelLoadOptions& options = {});

}  // namespace inflight
