#include "model/gguf_export.h"

#include <cstring>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/quantize.h"

namespace inflight {

void WriteModelMetadata(const ModelConfig& c, const std::string& name, GgufWriter& w) {
  const std::string a = ArchitectureName(c.arch);
  w.SetString("general.architecture", a);
  w.SetString("general.name", name);
  w.SetU32(a + ".context_length", c.context_length);
  w.SetU32(a + ".embedding_length", c.hidden_size);
  w.SetU32(a + ".block_count", c.num_layers);
  w.SetU32(a + ".feed_forward_length", c.ffn_size);
  w.SetU32(a + ".attention.head_count", c.num_heads);
  w.SetU32(a + ".attention.head_count_kv", c.num_kv_heads);
  if (c.head_dim != c.hidden_size / c.num_heads) {
    // llama.cpp defaults value_length to n_embd / n_head too, not to key_length.
    w.SetU32(a + ".attention.key_length", c.head_dim);
    w.SetU32(a + ".attention.value_length", c.head_dim);
  }
  // The window's pattern is the family's default (model/families.h ReadWindowPattern).
  if (c.sliding_window > 0) w.SetU32(a + ".attention.sliding_window", c.sliding_window);
  if (c.layer_norm) {
    w.SetF32(a + ".attention.layer_norm_epsilon", c.norm_eps);
  } else {
    w.SetF32(a + ".attention.layer_norm_rms_epsilon", c.norm_eps);
    w.SetF32(a + ".rope.freq_base", c.rope_base);
    w.SetU32(a + ".rope.dimension_count", c.rope_dim);
    if (c.rope_linear_scale != 1.0f) {
      w.SetString(a + ".rope.scaling.type", "linear");
      w.SetF32(a + ".rope.scaling.factor", c.rope_linear_scale);
    }
    if (c.rope_yarn_factor > 0) {
      w.SetString(a + ".rope.scaling.type", "yarn");
      w.SetF32(a + ".rope.scaling.factor", c.rope_yarn_factor);
      w.SetU32(a + ".rope.scaling.original_context_length", c.rope_original_context);
      w.SetF32(a + ".rope.scaling.yarn_beta_fast", c.rope_yarn_beta_fast);
      w.SetF32(a + ".rope.scaling.yarn_beta_slow", c.rope_yarn_beta_slow);
    }
  }
  if (c.num_experts > 0) {
    w.SetU32(a + ".expert_count", c.num_experts);
    w.SetU32(a + ".expert_used_count", c.experts_per_token);
    w.SetU32(a + ".expert_feed_forward_length", c.expert_ffn_size);
  }
}

void WriteTokenizerMetadata(const TokenizerSpec& t, GgufWriter& w) {
  const bool spm = t.model == TokenizerModel::kSentencePiece;
  w.SetString("tokenizer.ggml.model", spm && !t.scores.empty() ? "llama" : "gpt2");
  w.SetStringArray("tokenizer.ggml.tokens", t.tokens);
  if (!t.scores.empty()) w.SetF32Array("tokenizer.ggml.scores", t.scores);
  std::vector<int32_t> types;
  for (int32_t id = 0; id < static_cast<int32_t>(t.tokens.size()); ++id) {
    TokenType type = t.types.empty() ? TokenType::kNormal : t.types[id];
    for (const AddedToken& a : t.added) {
      if (a.id == id) type = a.special ? TokenType::kControl : TokenType::kUserDefined;
    }
    types.push_back(static_cast<int32_t>(type));
  }
  w.SetI32Array("tokenizer.ggml.token_type", types);
  if (!t.merges.empty()) w.SetStringArray("tokenizer.ggml.merges", t.merges);
  if (!spm || t.scores.empty()) {
    // The pre-tokenizer by its regex (the four this engine knows by name), else by the old guess
    // from pieces of it.
    std::string pre = GgufPreTokenizerName(t);
    if (pre.empty()) {
      pre = "gpt-2";
      if (!t.pre_regexes.empty() && t.pre_regexes[0].find("\\p{N}{1,3}") != std::string::npos)
        pre = "llama-bpe";
      else if (!t.pre_regexes.empty() && t.pre_regexes[0].find("(?i:'s") != std::string::npos)
        pre = "qwen2";
    }
    w.SetString("tokenizer.ggml.pre", pre);
  }
  if (t.bos_id >= 0) w.SetU32("tokenizer.ggml.bos_token_id", t.bos_id);
  if (t.eos_id >= 0) w.SetU32("tokenizer.ggml.eos_token_id", t.eos_id);
  if (t.unk_id >= 0) w.SetU32("tokenizer.ggml.unknown_token_id", t.unk_id);
  if (t.pad_id >= 0) w.SetU32("tokenizer.ggml.padding_token_id", t.pad_id);
  w.SetBool("tokenizer.ggml.add_bos_token", t.add_bos);
  w.SetBool("tokenizer.ggml.add_eos_token", t.add_eos);
  if (spm) w.SetBool("tokenizer.ggml.add_space_prefix", t.add_space_prefix);
  if (!t.chat_template.empty()) w.SetString("tokenizer.chat_template", t.chat_template);
}

namespace {

// Rotate-half order (pairs i, i + d/2) -> interleaved order (pairs 2i, 2i + 1), per head.
std::vector<float> InterleaveRopeRows(const std::vector<float>& m, int64_t num_heads,
                                      int64_t head_dim, int64_t cols) {
  std::vector<float> out(m.size());
  for (int64_t h = 0; h < num_heads; ++h)
    for (int64_t i = 0; i < head_dim / 2; ++i)
      for (int64_t half = 0; half < 2; ++half) {
        const float* src = m.data() + (h * head_dim + i + half * head_dim / 2) * cols;
        std::copy(src, src + cols, out.data() + (h * head_dim + 2 * i + half) * cols);
      }
  return out;
}

std::vector<float> ToF32(const TensorView& t) {
  std::vector<float> out(t.rows * t.cols);
  for (int64_t r = 0; r < t.rows; ++r) kernels::DequantizeRow(t, r, out.data() + r * t.cols);
  return out;
}

Status AddMatrix(GgufWriter& w, const std::string& name, const std::vector<float>& m, int64_t rows,
                 int64_t cols, DType dtype) {
  const int64_t row_bytes = DTypeRowBytes(dtype, cols);
  std::vector<uint8_t> bytes(row_bytes * rows);
  for (int64_t r = 0; r < rows; ++r)
    kernels::QuantizeRow(dtype, m.data() + r * cols, cols, bytes.data() + r * row_bytes);
  return w.AddTensor(name, dtype, {cols, rows}, std::move(bytes));
}

Status AddVector(GgufWriter& w, const std::string& name, const std::vector<float>& v) {
  if (v.empty()) return OkStatus();
  std::vector<uint8_t> bytes(v.size() * sizeof(float));
  std::memcpy(bytes.data(), v.data(), bytes.size());
  return w.AddTensor(name, DType::kF32, {static_cast<int64_t>(v.size())}, std::move(bytes));
}

}  // namespace

Status ExportGguf(const Model& model, const QuantMix& mix, const std::string& path,
                  const std::string& chat_template) {
  if (model.tokenizer() == nullptr)
    return FailedPreconditionError("the model has no tokenizer to write");
  ModelConfig c = model.config();
  // GGUF's llama expects interleaved RoPE pairs; Qwen and GPT-2 keep their own conventions.
  const bool interleave =
      c.arch == Architecture::kLlama && c.rope_style == kernels::RopeStyle::kHalves;
  if (interleave && c.rope_dim != c.head_dim)
    return UnimplementedError("partial RoPE in a rotate-half llama checkpoint");
  if (interleave) c.rope_style = kernels::RopeStyle::kAdjacentPairs;

  GgufWriter w;
  WriteModelMetadata(c, "inflight conversion of " + model.path(), w);
  if (const std::optional<uint32_t> file_type = mix.LlamaFileType())
    w.SetU32("general.file_type", *file_type);
  TokenizerSpec tokenizer = model.tokenizer()->spec();
  if (!chat_template.empty()) tokenizer.chat_template = chat_template;
  WriteTokenizerMetadata(tokenizer, w);

  const ModelWeights& mw = model.weights();
  auto matrix = [&](const std::string& name, const TensorView& t, int64_t heads = 0) -> Status {
    if (t.empty()) return OkStatus();
    std::vector<float> m = ToF32(t);
    if (heads > 0 && interleave) m = InterleaveRopeRows(m, heads, c.head_dim, t.cols);
    return AddMatrix(w, name, m, t.rows, t.cols,
                     mix.TypeFor(name, t.cols, c.num_layers, c.tied_embeddings));
  };
  auto bias = [&](const std::string& name, const std::vector<float>& b,
                  int64_t heads = 0) -> Status {
    if (heads > 0 && interleave && !b.empty())
      return AddVector(w, name, InterleaveRopeRows(b, heads, c.head_dim, 1));
    return AddVector(w, name, b);
  };
  RETURN_IF_ERROR(matrix("token_embd.weight", mw.token_embedding));
  if (!mw.position_embedding.empty())
    RETURN_IF_ERROR(AddMatrix(w, "position_embd.weight", ToF32(mw.position_embedding),
                              mw.position_embedding.rows, mw.position_embedding.cols, DType::kF32));
  if (!c.rope_freq_factors.empty())
    RETURN_IF_ERROR(AddVector(w, "rope_freqs.weight", c.rope_freq_factors));
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& lw = mw.layers[l];
    const std::string p = "blk." + std::to_string(l) + ".";
    RETURN_IF_ERROR(bias(p + "attn_norm.weight", lw.attn_norm));
    RETURN_IF_ERROR(bias(p + "attn_norm.bias", lw.attn_norm_bias));
    RETURN_IF_ERROR(matrix(p + "attn_qkv.weight", lw.wqkv));
    RETURN_IF_ERROR(bias(p + "attn_qkv.bias", lw.bqkv));
    RETURN_IF_ERROR(matrix(p + "attn_q.weight", lw.wq, c.num_heads));
    RETURN_IF_ERROR(matrix(p + "attn_k.weight", lw.wk, c.num_kv_heads));
    RETURN_IF_ERROR(matrix(p + "attn_v.weight", lw.wv));
    RETURN_IF_ERROR(bias(p + "attn_q.bias", lw.bq, c.num_heads));
    RETURN_IF_ERROR(bias(p + "attn_k.bias", lw.bk, c.num_kv_heads));
    RETURN_IF_ERROR(bias(p + "attn_v.bias", lw.bv));
    RETURN_IF_ERROR(bias(p + "attn_q_norm.weight", lw.q_norm));
    RETURN_IF_ERROR(bias(p + "attn_k_norm.weight", lw.k_norm));
    RETURN_IF_ERROR(matrix(p + "attn_output.weight", lw.wo));
    RETURN_IF_ERROR(bias(p + "attn_output.bias", lw.bo));
    RETURN_IF_ERROR(bias(p + "ffn_norm.weight", lw.ffn_norm));
    RETURN_IF_ERROR(bias(p + "ffn_norm.bias", lw.ffn_norm_bias));
    RETURN_IF_ERROR(matrix(p + "ffn_gate.weight", lw.w_gate));
    RETURN_IF_ERROR(matrix(p + "ffn_up.weight", lw.w_up));
    RETURN_IF_ERROR(bias(p + "ffn_up.bias", lw.b_up));
    RETURN_IF_ERROR(matrix(p + "ffn_down.weight", lw.w_down));
    RETURN_IF_ERROR(bias(p + "ffn_down.bias", lw.b_down));
  }
  RETURN_IF_ERROR(bias("output_norm.weight", mw.output_norm));
  RETURN_IF_ERROR(bias("output_norm.bias", mw.output_norm_bias));
  if (!c.tied_embeddings && mw.output.data != mw.token_embedding.data)
    RETURN_IF_ERROR(matrix("output.weight", mw.output));
  return w.WriteFile(path);
}

}  // namespace inflight
