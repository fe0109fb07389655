// The families' GGUF metadata and tensors: tiny files of each family load with the config their
// keys say (experts, shared expert, windows and per-layer patterns, YaRN, sinks), and files
// that get them wrong fail with an error naming what is wrong, through ReadGgufModelConfig (the
// fuzz target's entry point) and Model::Load alike. Runs under ASan/UBSan too.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <limits>
#include <string>

#include "format/gguf.h"
#include "model/model.h"
#include "tiny_gguf.h"

namespace inflight {
namespace {

using testing::MakeTinyModel;
using testing::TinyGguf;
using testing::TinySpec;

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("inflight_families_" + name + ".gguf"))
      .string();
}

TinySpec Small(const std::string& arch) {
  TinySpec s;
  s.arch = arch;
  s.hidden = 16, s.heads = 2, s.kv_heads = 1, s.head_dim = 8, s.ffn = 32, s.vocab = 40;
  s.experts = 4, s.experts_used = 2, s.expert_ffn = 8;
  return s;
}

TinySpec Qwen2Moe() {
  TinySpec s = Small("qwen2moe");
  s.shared_ffn = 8, s.qkv_bias = true;
  return s;
}
TinySpec Qwen3Moe() {
  TinySpec s = Small("qwen3moe");
  s.qk_norm = true;
  return s;
}
TinySpec Gemma3() {
  TinySpec s = Small("gemma3");
  s.experts = 0, s.qk_norm = true, s.sliding_window = 8;
  return s;
}
TinySpec GptOss() {
  TinySpec s = Small("gpt-oss");
  s.qkv_bias = s.out_bias = s.sinks = s.expert_biases = s.ffn_norm_as_post_attention = true;
  s.sliding_window = 8;
  return s;
}
TinyGguf Gemma3Model() {
  TinyGguf m = MakeTinyModel(Gemma3());
  for (int l = 0; l < 2; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    m.Random(p + "post_attention_norm.weight", {16}, 0.1f, 1.0f);
    m.Random(p + "post_ffw_norm.weight", {16}, 0.1f, 1.0f);
  }
  return m;
}

// The file's config through the fuzz target's entry point, and the whole load.
struct Loaded {
  StatusOr<ModelConfig> config;
  StatusOr<std::unique_ptr<Model>> model;
};

Loaded Load(const TinyGguf& m, const std::string& name) {
  const std::string path = TempPath(name);
  EXPECT_TRUE(m.Write(path).ok());
  auto file = GgufFile::Open(path);
  EXPECT_TRUE(file.ok()) << file.status().ToString();
  Loaded out{file.ok() ? ReadGgufModelConfig(**file) : StatusOr<ModelConfig>(file.status()),
             Model::Load(path)};
  std::filesystem::remove(path);
  return out;
}

// The load fails with a message containing `what` (and the path, for Model::Load); when
// `config_level`, ReadGgufModelConfig already refuses the file with the same message.
void ExpectRefused(const TinyGguf& m, const std::string& name, const std::string& what,
                   bool config_level) {
  const Loaded got = Load(m, name);
  ASSERT_FALSE(got.model.ok()) << name;
  EXPECT_NE(got.model.status().message().find(what), std::string::npos)
      << name << ": " << got.model.status().ToString();
  EXPECT_NE(got.model.status().message().find(TempPath(name)), std::string::npos)
      << got.model.status().ToString();
  if (config_level) {
    ASSERT_FALSE(got.config.ok()) << name;
    EXPECT_NE(got.config.status().message().find(what), std::string::npos)
        << name << ": " << got.config.status().ToString();
  } else {
    EXPECT_TRUE(got.config.ok()) << name << ": " << got.config.status().ToString();
  }
}

TEST(ModelFamilies, TinyFilesLoadWithTheirFamilysConfig) {
  {
    const Loaded q2 = Load(MakeTinyModel(Qwen2Moe()), "qwen2moe");
    ASSERT_TRUE(q2.model.ok()) << q2.model.status().ToString();
    ASSERT_TRUE(q2.config.ok());
    const ModelConfig& c = *q2.config;
    EXPECT_EQ(c.arch, Architecture::kQwen2Moe);
    EXPECT_EQ(c.num_experts, 4);
    EXPECT_EQ(c.experts_per_token, 2);
    EXPECT_EQ(c.expert_ffn_size, 8);
    EXPECT_EQ(c.shared_expert_ffn_size, 8);
    EXPECT_FALSE(c.normalize_expert_weights);
    EXPECT_EQ(c.vocab_size, 40);
    const LayerWeights& l = (*q2.model)->weights().layers[1];
    EXPECT_EQ(l.expert_gate.size(), 4u);
    EXPECT_EQ(l.shared_up.rows, 8);
    EXPECT_EQ(l.shared_expert_gate.size(), 16u);
  }
  {
    const Loaded q3 = Load(MakeTinyModel(Qwen3Moe()), "qwen3moe");
    ASSERT_TRUE(q3.model.ok()) << q3.model.status().ToString();
    EXPECT_TRUE(q3.config->normalize_expert_weights);
    EXPECT_EQ(q3.config->expert_gating, ExpertGating::kSoftmax);
  }
  {
    TinyGguf g = Gemma3Model();
    const Loaded period = Load(g, "gemma3_period");
    ASSERT_TRUE(period.model.ok()) << period.model.status().ToString();
    EXPECT_EQ(period.config->sliding_window, 8);
    EXPECT_EQ(period.config->layer_window, (std::vector<uint8_t>{1, 1}));  // 5 of 6
    EXPECT_FLOAT_EQ(period.config->rope_window_base, 10000.0f);
    g.I32Array("attention.sliding_window_pattern", {0, 1});
    const Loaded pattern = Load(g, "gemma3_pattern");
    ASSERT_TRUE(pattern.model.ok()) << pattern.model.status().ToString();
    EXPECT_EQ(pattern.config->layer_window, (std::vector<uint8_t>{0, 1}));
  }
  {
    TinyGguf o = MakeTinyModel(GptOss());
    o.String("gpt-oss.rope.scaling.type", "yarn");
    o.F32("rope.scaling.factor", 4.0f);
    o.U32("rope.scaling.original_context_length", 64);
    const Loaded g = Load(o, "gpt_oss");
    ASSERT_TRUE(g.model.ok()) << g.model.status().ToString();
    const ModelConfig& c = *g.config;
    EXPECT_EQ(c.expert_gating, ExpertGating::kSoftmaxSelected);
    EXPECT_EQ(c.layer_window, (std::vector<uint8_t>{1, 0}));
    EXPECT_FLOAT_EQ(c.rope_yarn_factor, 4.0f);
    EXPECT_EQ(c.rope_original_context, 64);
    EXPECT_EQ((*g.model)->weights().layers[0].attn_sinks.size(), 2u);
  }
}

TEST(ModelFamilies, ExpertCountDisagreeingWithTheTensorsIsRefused) {
  TinyGguf m = MakeTinyModel(Qwen3Moe());
  m.U32("expert_count", 5);
  ExpectRefused(m, "expert_count_5",
                "tensor 'blk.0.ffn_gate_inp.weight' has shape [16, 4] (ggml order), expected "
                "[16, 5]",
                false);
  // The router agrees but the 3-D experts hold another count.
  m = MakeTinyModel(Qwen3Moe());
  for (const char* t : {"ffn_gate_exps", "ffn_up_exps"})
    m.Random(std::string("blk.1.") + t + ".weight", {16, 8, 3}, 0.1f);
  m.Random("blk.1.ffn_down_exps.weight", {8, 16, 3}, 0.1f);
  ExpectRefused(m, "experts_3d",
                "tensor 'blk.1.ffn_gate_exps.weight' has shape [16, 8, 3] (ggml order), expected "
                "[16, 8, 4] for 4 experts",
                false);
}

TEST(ModelFamilies, ExpertsWithoutRouterAndRouterWithoutExpertCount) {
  TinyGguf m = MakeTinyModel(Qwen3Moe());
  m.tensors.erase("blk.0.ffn_gate_inp.weight");
  ExpectRefused(m, "no_router",
                "layer blk.0. has expert tensors but no router (blk.0.ffn_gate_inp.weight)", false);
  m = MakeTinyModel(Qwen3Moe());
  m.Erase("expert_count");
  ExpectRefused(m, "no_expert_count",
                "tensor 'blk.0.ffn_gate_inp.weight' routes to experts but the metadata declares "
                "no expert_count",
                false);
}

TEST(ModelFamilies, ExpertsUsedPerTokenOutOfRange) {
  for (uint32_t used : {0u, 5u}) {
    TinyGguf m = MakeTinyModel(Qwen2Moe());
    m.U32("expert_used_count", used);
    ExpectRefused(m, "used_" + std::to_string(used),
                  "experts used per token " + std::to_string(used) +
                      " must be between 1 and the expert count 4",
                  true);
  }
  // A file without expert_used_count (0) is refused the same way.
  TinyGguf m = MakeTinyModel(Qwen2Moe());
  m.Erase("expert_used_count");
  ExpectRefused(m, "used_missing", "experts used per token 0", true);
}

TEST(ModelFamilies, SlidingWindowLargerThanTheContext) {
  TinyGguf m = Gemma3Model();
  m.U32("attention.sliding_window", 512);
  ExpectRefused(m, "window_512", "sliding window 512 is larger than the context length 256", true);
}

// RoPE numbers that would turn every angle into NaN or inf.
TEST(ModelFamilies, BadRopeNumbersAreRefused) {
  for (float base : {0.0f, -1.0f, std::numeric_limits<float>::quiet_NaN()}) {
    TinyGguf m = Gemma3Model();
    m.F32("rope.freq_base", base);
    ExpectRefused(m, "rope_base", "rope frequency base", true);
  }
  TinyGguf m = MakeTinyModel(GptOss());
  m.String("gpt-oss.rope.scaling.type", "yarn");
  m.F32("rope.scaling.factor", 4.0f);
  m.U32("rope.scaling.original_context_length", 64);
  m.F32("rope.scaling.yarn_beta_fast", std::numeric_limits<float>::infinity());
  ExpectRefused(m, "yarn_beta", "the YaRN betas must be finite", true);
}

// A corrupt block count is refused before anything is sized by it (a window pattern of 2^30
// layers took a GiB and a second).
TEST(ModelFamilies, HugeBlockCountIsRefusedFirst) {
  TinyGguf m = Gemma3Model();
  m.U32("block_count", 1u << 30);
  ExpectRefused(m, "block_count", "metadata gemma3.block_count 1073741824 is more than 1024 layers",
                true);
}

TEST(ModelFamilies, SlidingWindowPatternOfTheWrongLength) {
  TinyGguf m = Gemma3Model();
  m.I32Array("attention.sliding_window_pattern", {1, 1, 0});
  ExpectRefused(m, "pattern_3",
                "metadata gemma3.attention.sliding_window_pattern has 3 entries for 2 layers",
                true);
}

TEST(ModelFamilies, UnknownArchitectureNamesTheSupportedOnes) {
  TinyGguf m = MakeTinyModel(Qwen3Moe());
  m.String("general.architecture", "mamba");
  ExpectRefused(m, "mamba",
                "architecture 'mamba' is not supported (llama, mistral, qwen2, qwen3, gpt2, "
                "qwen2moe, qwen3moe, gemma2, gemma3, phi3, gpt-oss)",
                true);
  m.meta.erase("general.architecture");
  ExpectRefused(m, "no_arch", "general.architecture is missing", true);
}

// Found by gguf_fuzz: an integer (I8) bias reached DequantizeRow's CHECK.
TEST(ModelFamilies, IntegerVectorIsRefused) {
  const std::string path = TempPath("i8_bias");
  TinyGguf m = MakeTinyModel(Qwen2Moe());
  m.tensors.erase("blk.0.attn_q.bias");
  // The model with an I8 attn_q.bias of 16 elements.
  GgufWriter w;
  for (const auto& [key, set] : m.meta) set(w);
  for (const auto& [name, t] : m.tensors) {
    std::vector<uint8_t> bytes(t.values.size() * sizeof(float));
    std::memcpy(bytes.data(), t.values.data(), bytes.size());
    ASSERT_TRUE(w.AddTensor(name, DType::kF32, t.dims, std::move(bytes)).ok());
  }
  ASSERT_TRUE(w.AddTensor("blk.0.attn_q.bias", DType::kI8, {16}, std::vector<uint8_t>(16, 1)).ok());
  ASSERT_TRUE(w.WriteFile(path).ok());
  auto model = Model::Load(path);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("tensor 'blk.0.attn_q.bias' has integer type"),
            std::string::npos)
      << model.status().ToString();
  std::filesystem::remove(path);
}

TEST(ModelFamilies, GptOssWithoutSinks) {
  TinyGguf m = MakeTinyModel(GptOss());
  m.tensors.erase("blk.1.attn_sinks.weight");
  ExpectRefused(m, "no_sinks", "tensor 'blk.1.attn_sinks.weight' is missing", false);
}

}  // namespace
}  // namespace inflight
