#include "model/random_model.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <thread>

#include "format/gguf.h"
#include "kernels/quantize.h"
#include "model/gguf_export.h"
#include "model/quant_mix.h"

namespace inflight {

StatusOr<Architecture> ArchitectureFromName(const std::string& name) {
  if (name == "llama") return Architecture::kLlama;
  if (name == "qwen2") return Architecture::kQwen2;
  if (name == "qwen3") return Architecture::kQwen3;
  if (name == "gpt2") return Architecture::kGpt2;
  if (name == "qwen3moe") return Architecture::kQwen3Moe;
  if (name == "gpt-oss") return Architecture::kGptOss;
  return InvalidArgumentError("unknown architecture '" + name +
                              "' (llama, qwen2, qwen3, gpt2, qwen3moe, gpt-oss)");
}

namespace {

// The released mixture-of-experts models' shapes (their config.json / GGUF metadata).
StatusOr<ModelConfig> RealMoeConfig(Architecture arch, const std::string& preset) {
  ModelConfig c;
  c.arch = arch;
  c.rope_style = kernels::RopeStyle::kHalves;
  if (preset == "qwen3-30b-a3b" && arch == Architecture::kQwen3Moe) {
    c.vocab_size = 151936, c.hidden_size = 2048, c.num_layers = 48, c.num_heads = 32,
    c.num_kv_heads = 4, c.head_dim = 128, c.ffn_size = 6144, c.context_length = 40960;
    c.rope_base = 1000000.0f, c.norm_eps = 1e-6f;
    c.num_experts = 128, c.experts_per_token = 8, c.expert_ffn_size = 768;
    c.expert_gating = ExpertGating::kSoftmax;
    c.normalize_expert_weights = true;
  } else if (preset == "gpt-oss-20b" && arch == Architecture::kGptOss) {
    c.vocab_size = 201088, c.hidden_size = 2880, c.num_layers = 24, c.num_heads = 64,
    c.num_kv_heads = 8, c.head_dim = 64, c.ffn_size = 2880, c.context_length = 131072;
    c.rope_base = 150000.0f, c.norm_eps = 1e-5f;
    c.rope_yarn_factor = 32.0f, c.rope_original_context = 4096;
    c.sliding_window = 128;
    c.layer_window.resize(c.num_layers);
    for (int l = 0; l < c.num_layers; ++l) c.layer_window[l] = l % 2 == 0;
    c.num_experts = 32, c.experts_per_token = 4, c.expert_ffn_size = 2880;
    c.expert_gating = ExpertGating::kSoftmaxSelected;
    c.ffn_activation = kernels::FfnActivation::kSwigluOai;
  } else {
    return InvalidArgumentError("preset '" + preset + "' needs arch " +
                                (preset == "gpt-oss-20b" ? "gpt-oss" : "qwen3moe"));
  }
  c.rope_dim = c.head_dim;
  return c;
}

}  // namespace

StatusOr<ModelConfig> PresetConfig(Architecture arch, const std::string& preset) {
  if (preset == "qwen3-30b-a3b" || preset == "gpt-oss-20b") return RealMoeConfig(arch, preset);
  ModelConfig c;
  c.arch = arch;
  if (preset == "tiny") {
    c.hidden_size = 64, c.num_layers = 2, c.num_heads = 4, c.num_kv_heads = 2, c.ffn_size = 192;
    c.context_length = 1024;
  } else if (preset == "small") {
    c.hidden_size = 512, c.num_layers = 8, c.num_heads = 8, c.num_kv_heads = 4, c.ffn_size = 1408;
    c.context_length = 2048;
  } else if (preset == "tinyllama-1.1b") {
    c.hidden_size = 2048, c.num_layers = 22, c.num_heads = 32, c.num_kv_heads = 4,
    c.ffn_size = 5632;
    c.context_length = 2048;
  } else {
    return InvalidArgumentError("unknown preset '" + preset +
                                "' (tiny, small, tinyllama-1.1b, qwen3-30b-a3b, gpt-oss-20b)");
  }
  c.head_dim = c.hidden_size / c.num_heads;
  c.rope_dim = c.head_dim;
  if (arch == Architecture::kGpt2) {
    c.num_kv_heads = c.num_heads;
    c.layer_norm = c.gelu_ffn = c.learned_positions = true;
    c.ffn_size = 4 * c.hidden_size;
    c.context_length = std::min(c.context_length, 1024);
  } else {
    c.rope_style = arch == Architecture::kLlama ? kernels::RopeStyle::kAdjacentPairs
                                                : kernels::RopeStyle::kHalves;
    c.rope_base = arch == Architecture::kLlama ? 10000.0f : 1000000.0f;
    c.norm_eps = arch == Architecture::kLlama ? 1e-5f : 1e-6f;
  }
  if (arch == Architecture::kQwen3Moe) {
    // Qwen3-30B-A3B's routing (128 experts, top 8) scaled down: 16 experts, top 4, each a
    // quarter of the dense FFN.
    c.num_experts = 16, c.experts_per_token = 4;
    c.expert_ffn_size = std::max(32, c.ffn_size / 4 / 32 * 32);
    c.normalize_expert_weights = true;
  }
  return c;
}

StatusOr<TokenizerSpec> LoadTokenizerSpecFile(const std::string& path) {
  if (path.size() >= 6 && path.compare(path.size() - 6, 6, ".model") == 0)
    return Tokenizer::SpecFromSentencePieceModel(path);
  auto tok = Tokenizer::FromHuggingFaceFile(path);
  if (!tok.ok()) return tok.status();
  return (*tok)->spec();
}

void PadVocabulary(TokenizerSpec* spec, int32_t vocab_size) {
  const size_t n = spec->tokens.size();
  if (n >= static_cast<size_t>(vocab_size)) return;
  if (spec->types.empty()) spec->types.assign(n, TokenType::kNormal);
  for (size_t id = n; id < static_cast<size_t>(vocab_size); ++id) {
    spec->tokens.push_back("[PAD" + std::to_string(id) + "]");
    spec->types.push_back(TokenType::kUnused);
    if (!spec->scores.empty()) spec->scores.push_back(-1e9f);
  }
}

namespace {

// Quantizes `rows` rows of `cols` floats into `out`, the rows split over all cores.
void QuantizeRows(DType dt, const float* f, int64_t rows, int64_t cols, uint8_t* out) {
  const int64_t row_bytes = DTypeRowBytes(dt, cols);
  const int64_t threads =
      rows * cols < (int64_t{1} << 20) ? 1 : std::max(1u, std::thread::hardware_concurrency());
  auto run = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      kernels::QuantizeRow(dt, f + r * cols, cols, out + r * row_bytes);
  };
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < threads; ++t)
    pool.emplace_back(run, rows * t / threads, rows * (t + 1) / threads);
  run(0, rows / threads);
  for (std::thread& th : pool) th.join();
}

}  // namespace

Status WriteRandomGguf(const RandomModelParams& params, const TokenizerSpec& tokenizer_in,
                       const std::string& path) {
  ModelConfig c = params.config;
  TokenizerSpec tokenizer = tokenizer_in;
  if (c.vocab_size == 0) c.vocab_size = static_cast<int32_t>(tokenizer.tokens.size());
  PadVocabulary(&tokenizer, c.vocab_size);
  if (!c.layer_window.empty()) c.layer_window.resize(c.num_layers);
  RETURN_IF_ERROR(c.Validate());
  GgufWriter w;
  WriteModelMetadata(c, std::string("inflight random ") + ArchitectureName(c.arch), w);
  WriteTokenizerMetadata(tokenizer, w);

  QuantMix mix = QuantMix::Uniform(params.dtype);
  if (!params.mix.empty()) {
    ASSIGN_OR_RETURN(mix, QuantMix::FromName(params.mix));
  }
  if (const std::optional<uint32_t> file_type = mix.LlamaFileType())
    w.SetU32("general.file_type", *file_type);
  std::mt19937_64 rng(params.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto add = [&](const std::string& name, std::vector<int64_t> dims, float stddev, float mean,
                 bool matrix) -> Status {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    std::vector<float> f(n);
    for (float& x : f) x = mean + stddev * normal(rng);
    const DType dt =
        matrix ? mix.TypeFor(name, dims[0], c.num_layers, params.tied_embeddings) : DType::kF32;
    std::vector<uint8_t> bytes(DTypeRowBytes(dt, dims[0]) * (n / dims[0]));
    QuantizeRows(dt, f.data(), n / dims[0], dims[0], bytes.data());
    return w.AddTensor(name, dt, dims, std::move(bytes));
  };
  const int64_t H = c.hidden_size, Q = c.q_dim(), KV = c.kv_dim(), F = c.ffn_size;
  auto proj_std = [](int64_t fan_in) { return 2.0f / std::sqrt(static_cast<float>(fan_in)); };
  RETURN_IF_ERROR(add("token_embd.weight", {H, c.vocab_size}, params.embedding_std, 0, true));
  if (c.learned_positions)
    RETURN_IF_ERROR(add("position_embd.weight", {H, c.context_length}, 0.1f, 0, false));
  const bool gpt_oss = c.arch == Architecture::kGptOss;
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    RETURN_IF_ERROR(add(p + "attn_norm.weight", {H}, 0, 1, false));
    if (c.layer_norm) RETURN_IF_ERROR(add(p + "attn_norm.bias", {H}, 0.02f, 0, false));
    if (c.arch == Architecture::kGpt2) {
      RETURN_IF_ERROR(add(p + "attn_qkv.weight", {H, Q + 2 * KV}, proj_std(H), 0, true));
      RETURN_IF_ERROR(add(p + "attn_qkv.bias", {Q + 2 * KV}, 0.02f, 0, false));
    } else {
      RETURN_IF_ERROR(add(p + "attn_q.weight", {H, Q}, proj_std(H), 0, true));
      RETURN_IF_ERROR(add(p + "attn_k.weight", {H, KV}, proj_std(H), 0, true));
      RETURN_IF_ERROR(add(p + "attn_v.weight", {H, KV}, proj_std(H), 0, true));
      if (c.arch == Architecture::kQwen2 || gpt_oss) {
        RETURN_IF_ERROR(add(p + "attn_q.bias", {Q}, 0.02f, 0, false));
        RETURN_IF_ERROR(add(p + "attn_k.bias", {KV}, 0.02f, 0, false));
        RETURN_IF_ERROR(add(p + "attn_v.bias", {KV}, 0.02f, 0, false));
      }
      if (c.arch == Architecture::kQwen3 || c.arch == Architecture::kQwen3Moe) {
        RETURN_IF_ERROR(add(p + "attn_q_norm.weight", {c.head_dim}, 0.1f, 1, false));
        RETURN_IF_ERROR(add(p + "attn_k_norm.weight", {c.head_dim}, 0.1f, 1, false));
      }
    }
    RETURN_IF_ERROR(
        add(p + "attn_output.weight", {Q, H}, proj_std(Q) * params.block_output_scale, 0, true));
    if (c.layer_norm || gpt_oss) RETURN_IF_ERROR(add(p + "attn_output.bias", {H}, 0.02f, 0, false));
    // gpt-oss: a learned softmax logit per head; its pre-FFN norm is named post_attention_norm.
    if (gpt_oss) RETURN_IF_ERROR(add(p + "attn_sinks.weight", {c.num_heads}, 1.0f, 0, false));
    RETURN_IF_ERROR(
        add(p + (gpt_oss ? "post_attention_norm.weight" : "ffn_norm.weight"), {H}, 0, 1, false));
    if (c.layer_norm) RETURN_IF_ERROR(add(p + "ffn_norm.bias", {H}, 0.02f, 0, false));
    if (c.num_experts > 0) {
      // Router logits of a few units so routing depends on the token; experts as 3-D tensors.
      const int64_t E = c.num_experts, FE = c.expert_ffn_size;
      RETURN_IF_ERROR(add(p + "ffn_gate_inp.weight", {H, E}, 3 * proj_std(H), 0, false));
      if (gpt_oss) RETURN_IF_ERROR(add(p + "ffn_gate_inp.bias", {E}, 0.5f, 0, false));
      RETURN_IF_ERROR(add(p + "ffn_gate_exps.weight", {H, FE, E}, proj_std(H), 0, true));
      RETURN_IF_ERROR(add(p + "ffn_up_exps.weight", {H, FE, E}, proj_std(H), 0, true));
      RETURN_IF_ERROR(add(p + "ffn_down_exps.weight", {FE, H, E},
                          proj_std(FE) * params.block_output_scale, 0, true));
      if (gpt_oss) {
        RETURN_IF_ERROR(add(p + "ffn_gate_exps.bias", {FE, E}, 0.02f, 0, false));
        RETURN_IF_ERROR(add(p + "ffn_up_exps.bias", {FE, E}, 0.02f, 0, false));
        RETURN_IF_ERROR(add(p + "ffn_down_exps.bias", {H, E}, 0.02f, 0, false));
      }
      continue;
    }
    if (!c.gelu_ffn) RETURN_IF_ERROR(add(p + "ffn_gate.weight", {H, F}, proj_std(H), 0, true));
    RETURN_IF_ERROR(add(p + "ffn_up.weight", {H, F}, proj_std(H), 0, true));
    if (c.layer_norm) RETURN_IF_ERROR(add(p + "ffn_up.bias", {F}, 0.02f, 0, false));
    RETURN_IF_ERROR(
        add(p + "ffn_down.weight", {F, H}, proj_std(F) * params.block_output_scale, 0, true));
    if (c.layer_norm) RETURN_IF_ERROR(add(p + "ffn_down.bias", {H}, 0.02f, 0, false));
  }
  RETURN_IF_ERROR(add("output_norm.weight", {H}, 0, 1, false));
  if (c.layer_norm) RETURN_IF_ERROR(add("output_norm.bias", {H}, 0.02f, 0, false));
  if (!params.tied_embeddings)
    RETURN_IF_ERROR(add("output.weight", {H, c.vocab_size}, params.embedding_std, 0, true));
  return w.WriteFile(path);
}

}  // namespace inflight
