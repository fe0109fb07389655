// Writes small valid inputs for the fuzz targets' seed corpora: a GGUF with metadata of
// every kind, a SentencePiece-style vocabulary and two tensors; a safetensors file.
#include <cstdio>
#include <fstream>
#include <string>

#include "format/gguf.h"
#include "kernels/quantize.h"
#include "parallel/wire.h"

namespace {

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
  plan.chunks.push_back(SequenceChunk{tokens.data(), 1, 17, blocks.data(), 2, 1});
  parallel::EncodeStep({{0, 1}}, plan, 16, c.vocab_size, c.hidden_size, {(*adapter)->id(), 0}, &w);
  std::ofstream(path, std::ios::binary) << w.bytes();
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  if (!WriteParallelSeed(dir + "/parallel-step-seed.bin")) return 1;
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
