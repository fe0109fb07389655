// LoRA in the in-flight executor against merged weights: a random Llama (Hugging Face folder,
// F32) with a random PEFT adapter on all seven projections runs with the adapter applied per
// sequence; the reference is the same model with W + (alpha / r) B A written into its weights.
// Logits agree within 1e-3 for the folder, for its GGUF conversion (interleaved RoPE: the
// adapter's q/k rows are permuted) and for TensorRT-LLM's tensor form of the adapter; eight
// requests with four adapters (and none) in one step equal each alone; prefix reuse never
// crosses adapters.
#include "model/lora.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "engine/executor.h"
#include "engine_test_util.h"
#include "model/gguf_export.h"
#include "safetensors_writer.h"
#include "test_util.h"

namespace inflight {
namespace {

namespace fs = std::filesystem;

using Tensor = testing::HfTensor;
using testing::WriteSafetensors;

constexpr int64_t H = 64, L = 2, NH = 4, NKV = 2, D = H / NH, F = 192, V = 32000;

// One adapter: per (layer, HF module) A [r, in] and B [out, r].
struct Adapter {
  int32_t r = 4;
  float alpha = 8;
  std::map<std::pair<int, std::string>, std::pair<Tensor, Tensor>> mats;
};

const std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>>& Modules() {
  // name -> (in, out)
  static const std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>> m = {
      {"self_attn.q_proj", {H, NH * D}},  {"self_attn.k_proj", {H, NKV * D}},
      {"self_attn.v_proj", {H, NKV * D}}, {"self_attn.o_proj", {NH * D, H}},
      {"mlp.gate_proj", {H, F}},          {"mlp.up_proj", {H, F}},
      {"mlp.down_proj", {F, H}}};
  return m;
}

Adapter RandomAdapter(uint32_t seed, int32_t r) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0, 0.15f);
  Adapter a;
  a.r = r;
  a.alpha = 2.0f * r;
  for (int l = 0; l < L; ++l) {
    for (const auto& [name, io] : Modules()) {
      Tensor A{"", {r, io.first}, std::vector<float>(r * io.first)},
          B{"", {io.second, r}, std::vector<float>(io.second * r)};
      for (float& v : A.values) v = normal(rng);
      for (float& v : B.values) v = normal(rng);
      a.mats[{l, name}] = {A, B};
    }
  }
  return a;
}

class LoraTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string tok =
        testing::SharedDir() + "/models/tokenizers/llama2-sentencepiece/tokenizer.model";
    REQUIRE_SHARED_FILE(tok);
    if (!dir_.empty()) return;
    dir_ = (fs::temp_directory_path() / ("inflight_lora_" + std::to_string(getpid()))).string();
    fs::create_directories(dir_);
    std::mt19937 rng(3);
    std::normal_distribution<float> normal(0, 1);
    auto add = [&](const std::string& name, std::vector<int64_t> shape, float stddev,
                   float mean = 0) {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      Tensor t{name, shape, std::vector<float>(n)};
      for (float& v : t.values) v = mean + stddev * normal(rng);
      base_.push_back(std::move(t));
    };
    add("model.embed_tokens.weight", {V, H}, 0.5f);
    for (int l = 0; l < L; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      add(p + "input_layernorm.weight", {H}, 0.1f, 1);
      add(p + "self_attn.q_proj.weight", {NH * D, H}, 0.25f);
      add(p + "self_attn.k_proj.weight", {NKV * D, H}, 0.25f);
      add(p + "self_attn.v_proj.weight", {NKV * D, H}, 0.25f);
      add(p + "self_attn.o_proj.weight", {H, NH * D}, 0.25f);
      add(p + "post_attention_layernorm.weight", {H}, 0.1f, 1);
      add(p + "mlp.gate_proj.weight", {F, H}, 0.25f);
      add(p + "mlp.up_proj.weight", {F, H}, 0.25f);
      add(p + "mlp.down_proj.weight", {H, F}, 0.14f);
    }
    add("model.norm.weight", {H}, 0.1f, 1);
    add("lm_head.weight", {V, H}, 0.5f);
    WriteFolder(dir_ + "/base", base_);
    for (int i = 0; i < 4; ++i) {
      adapters_.push_back(RandomAdapter(100 + i, 2 + 2 * i));
      WritePeft(dir_ + "/adapter" + std::to_string(i), adapters_.back());
    }
    auto m = Model::Load(dir_ + "/base");
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    base_model_ = std::move(m).value().release();
  }
  static void TearDownTestSuite() {
    delete base_model_;
    base_model_ = nullptr;
    if (!dir_.empty()) fs::remove_all(dir_);
    dir_.clear();
  }

  void WriteFolder(const std::string& d, const std::vector<Tensor>& ts) {
    fs::create_directories(d);
    const std::string tok =
        testing::SharedDir() + "/models/tokenizers/llama2-sentencepiece/tokenizer.model";
    fs::copy_file(tok, fs::path(d) / "tokenizer.model", fs::copy_options::overwrite_existing);
    const nlohmann::json config = {{"model_type", "llama"},
                                   {"hidden_size", H},
                                   {"num_hidden_layers", L},
                                   {"num_attention_heads", NH},
                                   {"num_key_value_heads", NKV},
                                   {"intermediate_size", F},
                                   {"vocab_size", V},
                                   {"rms_norm_eps", 1e-5},
                                   {"rope_theta", 10000.0},
                                   {"max_position_embeddings", 256},
                                   {"tie_word_embeddings", false}};
    std::ofstream(fs::path(d) / "config.json") << config.dump(2);
    WriteSafetensors((fs::path(d) / "model.safetensors").string(), ts);
  }

  static void WritePeft(const std::string& d, const Adapter& a) {
    fs::create_directories(d);
    const nlohmann::json cfg = {
        {"r", a.r},
        {"lora_alpha", a.alpha},
        {"peft_type", "LORA"},
        {"target_modules",
         {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}}};
    std::ofstream(fs::path(d) / "adapter_config.json") << cfg.dump(2);
    std::vector<Tensor> ts;
    for (const auto& [key, ab] : a.mats) {
      const std::string p =
          "base_model.model.model.layers." + std::to_string(key.first) + "." + key.second;
      ts.push_back({p + ".lora_A.weight", ab.first.shape, ab.first.values});
      ts.push_back({p + ".lora_B.weight", ab.second.shape, ab.second.values});
    }
    WriteSafetensors((fs::path(d) / "adapter_model.safetensors").string(), ts);
  }

  // The base weights with (alpha / r) B A added.
  std::vector<Tensor> Merged(const Adapter& a) const {
    std::vector<Tensor> ts = base_;
    const float scale = a.alpha / static_cast<float>(a.r);
    for (Tensor& t : ts) {
      for (const auto& [key, ab] : a.mats) {
        if (t.name != "model.layers." + std::to_string(key.first) + "." + key.second + ".weight")
          continue;
        const int64_t out = t.shape[0], in = t.shape[1];
        for (int64_t o = 0; o < out; ++o) {
          for (int64_t i = 0; i < in; ++i) {
            float acc = 0;
            for (int32_t r = 0; r < a.r; ++r)
              acc += ab.second.values[o * a.r + r] * ab.first.values[r * in + i];
            t.values[o * in + i] += scale * acc;
          }
        }
      }
    }
    return ts;
  }

  // Context logits of the prompt and max_tokens greedy tokens.
  static std::pair<std::vector<float>, std::vector<int32_t>> Run(
      const Model& m, const std::vector<int32_t>& prompt, std::shared_ptr<const LoraAdapter> lora,
      int32_t max_tokens = 6) {
    ExecutorConfig c;
    c.num_threads = 1;
    c.max_tokens_in_paged_kv_cache = 32 * 64;
    auto e = Executor::Create(m, c);
    EXPECT_TRUE(e.ok());
    Request r;
    r.prompt_ids = prompt;
    r.max_tokens = max_tokens;
    r.sampling.temperature = 0;
    r.exclude_input_in_output = true;
    r.return_context_logits = true;
    r.lora = std::move(lora);
    r.lora_task_id = 1;
    auto id = (*e)->Enqueue(r);
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    const auto rs = testing::CollectResults(**e, *id);
    return {rs.front().context_logits, rs.back().output_token_ids};
  }

  static float MaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    float d = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
    return d;
  }

  static std::string dir_;
  static std::vector<Tensor> base_;
  static std::vector<Adapter> adapters_;
  static Model* base_model_;
};

std::string LoraTest::dir_;
std::vector<Tensor> LoraTest::base_;
std::vector<Adapter> LoraTest::adapters_;
Model* LoraTest::base_model_ = nullptr;

TEST_F(LoraTest, AdapterLogitsEqualMergedWeightsForFolderGgufAndTensorForm) {
  const std::vector<int32_t> prompt = {1,   450,   4996, 17354, 1701,  29916,
                                       432, 17204, 975,  278,   17366, 11203};
  const std::string merged_dir = dir_ + "/merged0";
  WriteFolder(merged_dir, Merged(adapters_[0]));
  auto merged = Model::Load(merged_dir);
  ASSERT_TRUE(merged.ok()) << merged.status().ToString();
  const auto want = Run(**merged, prompt, nullptr);

  auto peft = LoraAdapter::FromPeftFolder(base_model_->config(), dir_ + "/adapter0");
  ASSERT_TRUE(peft.ok()) << peft.status().ToString();
  const auto got = Run(*base_model_, prompt, *peft);
  const float d = MaxDiff(want.first, got.first);
  EXPECT_LT(d, 1e-3) << "HF folder + PEFT adapter vs merged weights";
  EXPECT_EQ(want.second, got.second);
  // Without the adapter the logits really differ (the adapter is not negligible).
  const auto plain = Run(*base_model_, prompt, nullptr);
  EXPECT_GT(MaxDiff(want.first, plain.first), 0.05f);

  // The GGUF conversion (q/k rows permuted for interleaved RoPE) with the same adapter.
  const std::string gguf = dir_ + "/base.gguf";
  ASSERT_TRUE(ExportGguf(*base_model_, QuantMix::Uniform(DType::kF32), gguf).ok());
  auto converted = Model::Load(gguf);
  ASSERT_TRUE(converted.ok());
  ASSERT_EQ((*converted)->config().rope_style, kernels::RopeStyle::kAdjacentPairs);
  auto peft_gguf = LoraAdapter::FromPeftFolder((*converted)->config(), dir_ + "/adapter0");
  ASSERT_TRUE(peft_gguf.ok());
  const auto got_gguf = Run(**converted, prompt, *peft_gguf);
  EXPECT_LT(MaxDiff(want.first, got_gguf.first), 1e-3) << "GGUF + PEFT adapter vs merged weights";
  EXPECT_EQ(want.second, got_gguf.second);

  // TensorRT-LLM's form: rows of [A (r x in), B (out x r) with the scale in], padded; module
  // ids 1-7 (gate_proj is mlp_h_to_4h, up_proj mlp_gate).
  const std::map<std::string, int32_t> ids = {{"self_attn.q_proj", 1}, {"self_attn.k_proj", 2},
                                              {"self_attn.v_proj", 3}, {"self_attn.o_proj", 4},
                                              {"mlp.gate_proj", 5},    {"mlp.down_proj", 6},
                                              {"mlp.up_proj", 7}};
  const Adapter& a = adapters_[0];
  const float scale = a.alpha / a.r;
  int64_t cols = 0;
  for (const auto& [key, ab] : a.mats)
    cols = std::max<int64_t>(cols, ab.first.values.size() + ab.second.values.size());
  std::vector<float> weights;
  std::vector<int32_t> config;
  for (const auto& [key, ab] : a.mats) {
    std::vector<float> row = ab.first.values;
    for (float b : ab.second.values) row.push_back(b * scale);
    row.resize(cols, 0.0f);
    weights.insert(weights.end(), row.begin(), row.end());
    config.insert(config.end(), {ids.at(key.second), key.first, a.r});
  }
  auto tensors = LoraAdapter::FromTensors(base_model_->config(), weights,
                                          static_cast<int64_t>(config.size() / 3), cols, config);
  ASSERT_TRUE(tensors.ok()) << tensors.status().ToString();
  const auto got_tensors = Run(*base_model_, prompt, *tensors);
  EXPECT_LT(MaxDiff(want.first, got_tensors.first), 1e-3)
      << "TensorRT-LLM tensors vs merged weights";
}

TEST_F(LoraTest, EightRequestsWithFourAdaptersInOneStepEqualEachAlone) {
  std::vector<std::shared_ptr<const LoraAdapter>> loras;
  for (int i = 0; i < 4; ++i) {
    auto a =
        LoraAdapter::FromPeftFolder(base_model_->config(), dir_ + "/adapter" + std::to_string(i));
    ASSERT_TRUE(a.ok());
    loras.push_back(*a);
  }
  ExecutorConfig c;
  c.num_threads = 1;
  c.enable_kv_cache_reuse = true;
  c.tokens_per_block = 4;
  c.max_tokens_in_paged_kv_cache = 4 * 512;
  auto e = Executor::Create(*base_model_, c);
  ASSERT_TRUE(e.ok());
  // The same prompt for everyone: prefix reuse must not hand one adapter's KV to another.
  const std::vector<int32_t> prompt = {1,     450, 4996, 17354, 1701,  29916, 432,
                                       17204, 975, 278,  17366, 11203, 29889};
  std::vector<RequestId> ids;
  std::vector<int> which;
  for (int i = 0; i < 10; ++i) {
    Request r;
    r.prompt_ids = prompt;
    r.max_tokens = 8;
    r.sampling.temperature = 0;
    r.exclude_input_in_output = true;
    r.return_context_logits = i % 3 == 0;
    const int k = i < 8 ? i % 4 : -1;  // two requests per adapter, two without
    if (k >= 0) {
      r.lora = loras[k];
      r.lora_task_id = 10 + k;
    }
    auto id = (*e)->Enqueue(r);
    ASSERT_TRUE(id.ok());
    ids.push_back(*id);
    which.push_back(k);
  }
  int64_t shared_steps = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto rs = testing::CollectResults(**e, ids[i]);
    const auto alone = Run(*base_model_, prompt, which[i] >= 0 ? loras[which[i]] : nullptr, 8);
    EXPECT_EQ(rs.back().output_token_ids, alone.second)
        << "request " << i << " adapter " << which[i];
    if (!rs.front().context_logits.empty()) {
      EXPECT_LT(MaxDiff(rs.front().context_logits, alone.first), 1e-5) << "request " << i;
    }
  }
  // One after another, the cache now warm with every adapter's prompt blocks: each request
  // reuses its own adapter's blocks and never another's.
  for (int k = -1; k < 4; ++k) {
    Request r;
    r.prompt_ids = prompt;
    r.max_tokens = 8;
    r.sampling.temperature = 0;
    r.exclude_input_in_output = true;
    if (k >= 0) {
      r.lora = loras[k];
      r.lora_task_id = 10 + k;
    }
    auto id = (*e)->Enqueue(r);
    ASSERT_TRUE(id.ok());
    const auto rs = testing::CollectResults(**e, *id);
    EXPECT_EQ(rs.back().output_token_ids,
              Run(*base_model_, prompt, k >= 0 ? loras[k] : nullptr, 8).second)
        << "adapter " << k;
    EXPECT_GT(rs.back().stats.num_reused_blocks, 0) << "adapter " << k << " reuses its own blocks";
  }
  for (const IterationStats& s : (*e)->GetLatestIterationStats()) {
    shared_steps =
        std::max<int64_t>(shared_steps, s.num_scheduled_context + s.num_scheduled_generation);
  }
  EXPECT_GE(shared_steps, 8) << "the requests did not share steps";
  // The adapters really change the output.
  std::set<std::vector<int32_t>> distinct;
  for (int k = -1; k < 4; ++k)
    distinct.insert(Run(*base_model_, prompt, k >= 0 ? loras[k] : nullptr).second);
  EXPECT_GE(distinct.size(), 3u);
  testing::ExpectNoKvLeaks(**e);
}

TEST_F(LoraTest, BadAdaptersAreRefusedWithTheReason) {
  const ModelConfig& c = base_model_->config();
  std::vector<float> w(2 * (H + H * 2), 0.1f);
  auto bad_module = LoraAdapter::FromTensors(c, std::vector<float>(4 * (H + NH * D), 0.1f), 1,
                                             4 * (H + NH * D), {9, 0, 4});
  ASSERT_FALSE(bad_module.ok());
  EXPECT_NE(bad_module.status().message().find("module id 9"), std::string::npos)
      << bad_module.status().message();
  auto bad_layer = LoraAdapter::FromTensors(c, std::vector<float>(4 * (H + NH * D), 0.1f), 1,
                                            4 * (H + NH * D), {1, 7, 4});
  ASSERT_FALSE(bad_layer.ok());
  EXPECT_NE(bad_layer.status().message().find("layer 7"), std::string::npos)
      << bad_layer.status().message();
  auto short_row = LoraAdapter::FromTensors(c, std::vector<float>(10, 0.1f), 1, 10, {1, 0, 4});
  ASSERT_FALSE(short_row.ok());
  EXPECT_NE(short_row.status().message().find("needs"), std::string::npos)
      << short_row.status().message();
  // Sizes an attacker would send: an adapter size near INT32_MAX, a negative layer.
  auto huge = LoraAdapter::FromTensors(c, std::vector<float>(4 * (H + NH * D), 0.1f), 1,
                                       4 * (H + NH * D), {1, 0, 2147483647});
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("adapter size 2147483647"), std::string::npos)
      << huge.status().message();
  auto negative = LoraAdapter::FromTensors(c, std::vector<float>(4 * (H + NH * D), 0.1f), 1,
                                           4 * (H + NH * D), {1, -1, 4});
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("layer -1"), std::string::npos)
      << negative.status().message();
  auto config_rows = LoraAdapter::FromTensors(c, std::vector<float>(4 * (H + NH * D), 0.1f), 1,
                                              4 * (H + NH * D), {1, 0});
  ASSERT_FALSE(config_rows.ok());
  auto missing = LoraAdapter::FromPeftFolder(c, dir_ + "/nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  // An adapter for another model (the 1-layer model of the same folder) is refused by the executor.
  auto small = Model::Load(dir_ + "/base", {.num_layers = 1});
  ASSERT_TRUE(small.ok());
  auto a = LoraAdapter::FromPeftFolder(c, dir_ + "/adapter1");
  ASSERT_TRUE(a.ok());
  ExecutorConfig ec;
  ec.num_threads = 1;
  ec.max_tokens_in_paged_kv_cache = 32 * 16;
  auto e = Executor::Create(**small, ec);
  ASSERT_TRUE(e.ok());
  Request r;
  r.prompt_ids = {1, 2, 3};
  r.max_tokens = 2;
  r.lora = *a;
  auto id = (*e)->Enqueue(r);
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.status().message().find("built for 2 layers"), std::string::npos)
      << id.status().message();
}

}  // namespace
}  // namespace inflight
