// Writes small valid inputs for the fuzz targets' seed corpora: a GGUF with metadata of
// every kind, a SentencePiece-style vocabulary and two tensors; tiny whole models of the
// families with their own metadata (qwen3moe and qwen2moe experts, gemma3 windows and a
// per-layer window pattern, gpt-oss sinks, YaRN and biased experts, phi3 LongRoPE), each
// under libFuzzer's 8 KB input limit; a safetensors file.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "base/fp16.h"
#include "format/gguf.h"
#include "kernels/quantize.h"
#include "kvcache/kv_handoff.h"
#include "parallel/wire.h"

namespace {

// A disaggregated hand-off of 2 blocks of 4 tokens, 24 K/V bytes each, and a first token.
bool WriteHandoffSeed(const std::string& path) {
  inflight::KvHandoff h;
  h.layout_fingerprint = inflight::KvHandoffFingerprint("seed layout");
  h.tokens_per_block = 4;
  h.block_bytes = 24;
  h.cache_salt = 7;
  h.created_unix_ns = 1;
  h.tokens = {1, 2, 3, 4, 5, 6, 7, 8};
  h.first_tokens = {9};
  h.kv.assign(48, 0x5a);
  const std::vector<uint8_t> bytes = inflight::SerializeKvHandoff(h);
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(out);
}

// A parallel step message: a LoRA adapter, a block copy and two chunks (one with a p-tuning
// table), as parallel_wire_fuzz's model (hidden 64, 2 layers) would receive it.
bool WriteParallelSeed(const std::string& path) {
  using namespace inflight;
  ModelConfig c;
  c.vocab_size = 259, c.hidden_size = 64, c.num_layers = 2, c.num_heads = 4, c.num_kv_heads = 2,
  c.head_dim = 16, c.ffn_size = 192;
  std::vector<float> weights(4 * (64 + 64), 0.25f);
  auto adapter = LoraAdapter::FromTensors(c, weights, 1, static_cast<int64_t>(weights.size()),
                                          {kLoraAttnQ, 0, 4});
  if (!adapter.ok()) return false;
  parallel::WireWriter w;
  parallel::EncodeAdapters({7}, {adapter->get()}, &w);
  const std::vector<int32_t> tokens = {1, 20, 30, 259}, blocks = {0, 1};
  const std::vector<float> table(64, 0.5f);
  BatchPlan plan;
  SequenceChunk a{tokens.data(), 4, 0, blocks.data(), 2, 1};
  a.prompt_table = table.data(), a.prompt_table_rows = 1;
  plan.chunks.push_back(a);
  SequenceChunk b{tokens.data(), 1, 17, blocks.data(), 2, 1};
  const std::vector<int32_t> window_blocks = {-1, 3};  // a window group's table
  b.window_block_table = window_blocks.data(), b.num_window_blocks = 2;
  plan.chunks.push_back(b);
  parallel::EncodeStep({{0, 0, 1}, {1, 2, 3}}, plan, 16, c.vocab_size, c.hidden_size,
                       {(*adapter)->id(), 0}, &w);
  std::ofstream(path, std::ios::binary) << w.bytes();
  return true;
}

// A tiny model in GGUF: hidden 4, 2 heads of 2 (one KV head), 2 layers, vocabulary 8; matrices
// F16, vectors F32, small non-zero values.
class SeedModel {
 public:
  static constexpr int64_t kHidden = 4, kQ = 4, kKv = 2, kFfn = 8, kVocab = 8, kLayers = 2;
  static constexpr int64_t kExperts = 4, kExpertFfn = 4;

  explicit SeedModel(const std::string& arch) : arch_(arch) {
    w_.SetString("general.architecture", arch);
    U32("embedding_length", kHidden);
    U32("block_count", kLayers);
    U32("feed_forward_length", kFfn);
    U32("attention.head_count", 2);
    U32("attention.head_count_kv", 1);
    U32("context_length", 128);
    w_.SetF32(arch + ".attention.layer_norm_rms_epsilon", 1e-6f);
    Add("token_embd.weight", {kHidden, kVocab});
    Add("output_norm.weight", {kHidden});
  }
  void U32(const std::string& key, uint32_t v) { w_.SetU32(arch_ + "." + key, v); }
  void F32(const std::string& key, float v) { w_.SetF32(arch_ + "." + key, v); }
  inflight::GgufWriter& writer() { return w_; }
  // dims in ggml order; 1-D tensors are F32, the others F16.
  void Add(const std::string& name, std::vector<int64_t> dims) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    const bool vec = dims.size() == 1;
    std::vector<uint8_t> bytes(n * (vec ? 4 : 2));
    for (int64_t i = 0; i < n; ++i) {
      const float v = vec ? 1.0f + 0.125f * static_cast<float>(i % 3)
                          : 0.25f * static_cast<float>((i * 7) % 11 - 5);
      if (vec) {
        std::memcpy(bytes.data() + 4 * i, &v, 4);
      } else {
        const uint16_t h = inflight::Fp32ToFp16(v);
        std::memcpy(bytes.data() + 2 * i, &h, 2);
      }
    }
    ok_ = ok_ && w_.AddTensor(name, vec ? inflight::DType::kF32 : inflight::DType::kF16, dims,
                              std::move(bytes))
                     .ok();
  }
  // Each layer's attention (with biases, q/k norms, sinks when asked) and norms; the FFN is the
  // caller's.
  void Attention(const std::string& p, bool biases, bool qk_norm, bool sinks) {
    Add(p + "attn_norm.weight", {kHidden});
    Add(p + "attn_q.weight", {kHidden, kQ});
    Add(p + "attn_k.weight", {kHidden, kKv});
    Add(p + "attn_v.weight", {kHidden, kKv});
    Add(p + "attn_output.weight", {kQ, kHidden});
    if (biases) {
      Add(p + "attn_q.bias", {kQ});
      Add(p + "attn_k.bias", {kKv});
      Add(p + "attn_v.bias", {kKv});
      Add(p + "attn_output.bias", {kHidden});
    }
    if (qk_norm) {
      Add(p + "attn_q_norm.weight", {2});
      Add(p + "attn_k_norm.weight", {2});
    }
    if (sinks) Add(p + "attn_sinks.weight", {2});
  }
  void Experts(const std::string& p, bool biases) {
    Add(p + "ffn_gate_inp.weight", {kHidden, kExperts});
    Add(p + "ffn_gate_exps.weight", {kHidden, kExpertFfn, kExperts});
    Add(p + "ffn_up_exps.weight", {kHidden, kExpertFfn, kExperts});
    Add(p + "ffn_down_exps.weight", {kExpertFfn, kHidden, kExperts});
    if (biases) {
      Add(p + "ffn_gate_inp.bias", {kExperts});
      Add(p + "ffn_gate_exps.bias", {kExpertFfn, kExperts});
      Add(p + "ffn_up_exps.bias", {kExpertFfn, kExperts});
      Add(p + "ffn_down_exps.bias", {kHidden, kExperts});
    }
  }
  void DenseFfn(const std::string& p) {
    Add(p + "ffn_gate.weight", {kHidden, kFfn});
    Add(p + "ffn_up.weight", {kHidden, kFfn});
    Add(p + "ffn_down.weight", {kFfn, kHidden});
  }
  bool Write(const std::string& path) { return ok_ && w_.WriteFile(path).ok(); }

 private:
  std::string arch_;
  inflight::GgufWriter w_;
  bool ok_ = true;
};

std::string Blk(int64_t l) { return "blk." + std::to_string(l) + "."; }

void SetExpertCounts(SeedModel& m) {
  m.U32("expert_count", SeedModel::kExperts);
  m.U32("expert_used_count", 2);
  m.U32("expert_feed_forward_length", SeedModel::kExpertFfn);
}

// The families' own metadata and tensors, one small whole model each.
bool WriteFamilySeeds(const std::string& dir) {
  SeedModel qwen3moe("qwen3moe");
  SetExpertCounts(qwen3moe);
  qwen3moe.U32("attention.key_length", 2);
  qwen3moe.U32("attention.value_length", 2);
  qwen3moe.F32("rope.freq_base", 1e6f);
  SeedModel qwen2moe("qwen2moe");
  SetExpertCounts(qwen2moe);
  qwen2moe.U32("expert_shared_feed_forward_length", 4);
  SeedModel gemma3("gemma3");
  gemma3.U32("attention.sliding_window", 16);
  gemma3.F32("rope.freq_base_swa", 10000.0f);
  gemma3.writer().SetI32Array("gemma3.attention.sliding_window_pattern", {1, 0});
  SeedModel gpt_oss("gpt-oss");
  SetExpertCounts(gpt_oss);
  gpt_oss.U32("attention.sliding_window", 8);
  gpt_oss.writer().SetString("gpt-oss.rope.scaling.type", "yarn");
  gpt_oss.F32("rope.scaling.factor", 4.0f);
  gpt_oss.U32("rope.scaling.original_context_length", 32);
  SeedModel phi3("phi3");
  phi3.U32("rope.scaling.original_context_length", 64);
  phi3.F32("rope.scaling.attn_factor", 1.19f);
  phi3.Add("rope_factors_long.weight", {1});
  phi3.Add("rope_factors_short.weight", {1});
  for (int64_t l = 0; l < SeedModel::kLayers; ++l) {
    const std::string p = Blk(l);
    qwen3moe.Attention(p, false, true, false);
    qwen3moe.Add(p + "ffn_norm.weight", {SeedModel::kHidden});
    qwen3moe.Experts(p, false);
    qwen2moe.Attention(p, true, false, false);
    qwen2moe.Add(p + "ffn_norm.weight", {SeedModel::kHidden});
    qwen2moe.Experts(p, false);
    qwen2moe.Add(p + "ffn_gate_inp_shexp.weight", {SeedModel::kHidden});
    qwen2moe.Add(p + "ffn_gate_shexp.weight", {SeedModel::kHidden, 4});
    qwen2moe.Add(p + "ffn_up_shexp.weight", {SeedModel::kHidden, 4});
    qwen2moe.Add(p + "ffn_down_shexp.weight", {4, SeedModel::kHidden});
    gemma3.Attention(p, false, true, false);
    gemma3.Add(p + "ffn_norm.weight", {SeedModel::kHidden});
    gemma3.DenseFfn(p);
    gemma3.Add(p + "post_attention_norm.weight", {SeedModel::kHidden});
    gemma3.Add(p + "post_ffw_norm.weight", {SeedModel::kHidden});
    gpt_oss.Attention(p, true, false, true);
    gpt_oss.Add(p + "post_attention_norm.weight", {SeedModel::kHidden});
    gpt_oss.Experts(p, true);
    phi3.Attention(p, false, false, false);
    phi3.Add(p + "ffn_norm.weight", {SeedModel::kHidden});
    phi3.Add(p + "ffn_up.weight", {SeedModel::kHidden, 2 * SeedModel::kFfn});
    phi3.Add(p + "ffn_down.weight", {SeedModel::kFfn, SeedModel::kHidden});
  }
  return qwen3moe.Write(dir + "/gguf-seed-qwen3moe.gguf") &&
         qwen2moe.Write(dir + "/gguf-seed-qwen2moe.gguf") &&
         gemma3.Write(dir + "/gguf-seed-gemma3.gguf") &&
         gpt_oss.Write(dir + "/gguf-seed-gpt-oss.gguf") && phi3.Write(dir + "/gguf-seed-phi3.gguf");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  if (!WriteParallelSeed(dir + "/parallel-step-seed.bin")) return 1;
  if (!WriteHandoffSeed(dir + "/kv-handoff-seed.bin")) return 1;
  {
    // A shared-memory segment descriptor (kvcache/kv_handoff_shm.h): magic, size, 32 hex.
    std::string d = "IFKVSHM1";
    const uint64_t n = 64;
    d.append(reinterpret_cast<const char*>(&n), sizeof n);
    d.append("0123456789abcdef0123456789abcdef");
    std::ofstream(dir + "/kv-handoff-shm-seed.bin", std::ios::binary) << d;
  }
  if (!WriteFamilySeeds(dir)) return 1;
  inflight::GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetU32("llama.block_count", 1);
  w.SetU32("llama.embedding_length", 32);
  w.SetF32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.SetBool("tokenizer.ggml.add_bos_token", true);
  w.SetString("tokenizer.ggml.model", "llama");
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>", "<0x41>", "\u2581he", "llo"};
  w.SetStringArray("tokenizer.ggml.tokens", tokens);
  w.SetF32Array("tokenizer.ggml.scores", {0, 0, 0, 0, -1, -2});
  w.SetI32Array("tokenizer.ggml.token_type", {2, 3, 3, 6, 1, 1});
  std::vector<uint8_t> f32(32 * 6 * 4, 0), q8(34 * 2, 1);
  if (!w.AddTensor("token_embd.weight", inflight::DType::kF32, {32, 6}, f32).ok()) return 1;
  if (!w.AddTensor("blk.0.attn_q.weight", inflight::DType::kQ8_0, {32, 2}, q8).ok()) return 1;
  // One small matrix of every block format, quantized from a ramp.
  std::vector<float> ramp(512);
  for (size_t i = 0; i < ramp.size(); ++i) ramp[i] = static_cast<float>(i % 37) - 18.0f;
  for (inflight::DType t : {inflight::DType::kQ4_1, inflight::DType::kQ5_0, inflight::DType::kQ5_1,
                            inflight::DType::kIQ4_NL, inflight::DType::kQ2_K,
                            inflight::DType::kQ3_K, inflight::DType::kQ4_K, inflight::DType::kQ5_K,
                            inflight::DType::kQ6_K, inflight::DType::kIQ4_XS}) {
    const int64_t cols = 256, rows = 2, row_bytes = inflight::DTypeRowBytes(t, cols);
    std::vector<uint8_t> bytes(row_bytes * rows);
    for (int64_t r = 0; r < rows; ++r)
      inflight::kernels::QuantizeRow(t, ramp.data() + r * cols, cols, bytes.data() + r * row_bytes);
    if (!w.AddTensor(std::string("blk.0.") + inflight::DTypeName(t) + ".weight", t, {cols, rows},
                     bytes)
             .ok())
      return 1;
  }
  if (!w.WriteFile(dir + "/gguf-seed.gguf").ok()) return 1;
  const std::string header =
      R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"__metadata__":{"k":"v"}})";
  std::ofstream st(dir + "/seed.safetensors", std::ios::binary);
  const uint64_t n = header.size();
  st.write(reinterpret_cast<const char*>(&n), 8);
  st << header << std::string(16, '\0');
  std::ofstream(dir + "/text-seed.txt")
      << "Hello world, the quick brown fox. \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x98\x80 it's "
         "1234!\n\t  x";
  return 0;
}
