// Tensor/pipeline-parallel shards of a model, run in one process (each TP rank on a thread of
// its own, joined by an in-process all-gather): their logits must equal the whole model's bit
// for bit, since every matrix is split by output rows only (model/shard.h). The MPI transport
// is tested by parallel_test; this isolates the arithmetic of the split.
#include <gtest/gtest.h>

#include <barrier>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <thread>

#include "base/thread_pool.h"
#include "engine/model_runner.h"
#include "kvcache/kv_storage.h"
#include "model/model.h"
#include "model/random_model.h"
#include "test_util.h"

namespace inflight {
namespace {

// An all-gather over threads: every rank posts its buffer, waits for all, copies them all.
class ThreadGroupState {
 public:
  explicit ThreadGroupState(int32_t size) : size_(size), sends_(size), barrier_(size) {}
  Status AllGather(int32_t rank, const float* send, int64_t n, float* recv, bool only_first) {
    sends_[rank] = send;
    barrier_.arrive_and_wait();
    if (!only_first || rank == 0) {
      for (int32_t r = 0; r < size_; ++r) std::memcpy(recv + r * n, sends_[r], n * sizeof(float));
    }
    barrier_.arrive_and_wait();
    return OkStatus();
  }
  int32_t size() const { return size_; }

 private:
  int32_t size_;
  std::vector<const float*> sends_;
  std::barrier<> barrier_;
};

class ThreadGroup : public TensorParallelGroup {
 public:
  ThreadGroup(ThreadGroupState* state, int32_t rank) : state_(state), rank_(rank) {}
  int32_t size() const override { return state_->size(); }
  int32_t rank() const override { return rank_; }
  Status AllGather(const float* send, int64_t n, float* recv) override {
    return state_->AllGather(rank_, send, n, recv, false);
  }
  Status Gather(const float* send, int64_t n, float* recv) override {
    return state_->AllGather(rank_, send, n, recv, true);
  }

 private:
  ThreadGroupState* state_;
  int32_t rank_;
};

// A model (or shard) with its own KV pool.
struct Runner {
  std::unique_ptr<Model> model;
  std::unique_ptr<KvStorage> storage;
  KvCacheView view;
  ForwardScratch scratch;
  ThreadPool pool{1};
};

std::unique_ptr<Runner> Open(const std::string& path, ModelShard shard = {}) {
  auto r = std::make_unique<Runner>();
  ModelLoadOptions options;
  options.shard = shard;
  auto m = Model::Load(path, options);
  EXPECT_TRUE(m.ok()) << m.status().message();
  if (!m.ok()) return nullptr;
  r->model = std::move(m).value();
  ExecutorConfig config;
  config.tokens_per_block = 16;
  r->storage =
      std::make_unique<KvStorage>(KvStorageConfigFor(*r->model, KvCacheSizes{64, 0}, config));
  r->view.layers = r->storage->LayerViews();
  r->view.num_blocks = 64;
  return r;
}

// Three sequences: prompts of 5, 17 and 40 tokens (the middle one wants every row's logits),
// then `decode_steps` one-token steps for all three.
struct Workload {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<int32_t>> blocks;
};

Workload MakeWorkload(int32_t vocab, uint64_t seed) {
  Workload w;
  std::mt19937 rng(seed);
  int32_t next_block = 0;
  for (int32_t len : {5, 17, 40}) {
    std::vector<int32_t> t(len + 4);
    for (int32_t& id : t) id = static_cast<int32_t>(rng() % vocab);
    w.tokens.push_back(t);
    std::vector<int32_t> b;
    for (int32_t i = 0; i < (len + 4 + 15) / 16; ++i) b.push_back(next_block++);
    w.blocks.push_back(b);
  }
  return w;
}

// The plan of step `step`: step 0 runs the prompts, step k > 0 decodes token len + k - 1.
BatchPlan PlanOf(const Workload& w, int step) {
  BatchPlan plan;
  for (size_t i = 0; i < w.tokens.size(); ++i) {
    const int32_t len = static_cast<int32_t>(w.tokens[i].size()) - 4;
    SequenceChunk c;
    c.start_pos = step == 0 ? 0 : len + step - 1;
    c.num_tokens = step == 0 ? len : 1;
    c.token_ids = w.tokens[i].data() + c.start_pos;
    c.block_table = w.blocks[i].data();
    c.num_blocks = static_cast<int32_t>(w.blocks[i].size());
    c.num_logits = (step == 0 && i == 1) ? c.num_tokens : 1;
    plan.chunks.push_back(c);
  }
  return plan;
}

// Runs every step on the whole model and on a tp x pp grid of shards; the logits of each step
// must be the same bits.
void ExpectShardsMatch(const std::string& path, int32_t tp, int32_t pp, int32_t ep = 1) {
  SCOPED_TRACE("tp " + std::to_string(tp) + " pp " + std::to_string(pp) + " ep " +
               std::to_string(ep));
  auto whole = Open(path);
  ASSERT_TRUE(whole);
  const ModelConfig& c = whole->model->config();
  std::vector<std::vector<std::unique_ptr<Runner>>> shards(pp);
  for (int32_t s = 0; s < pp; ++s) {
    for (int32_t r = 0; r < tp; ++r) {
      shards[s].push_back(Open(path, ModelShard{r, tp, s, pp, ep}));
      ASSERT_TRUE(shards[s].back());
    }
  }
  // Each EP rank holds its group's experts and no other's (their pages are never read).
  for (int32_t s = 0; s < pp && c.num_experts > 0; ++s) {
    for (int32_t r = 0; r < tp; ++r) {
      const Model& m = *shards[s][r]->model;
      const ShardLayout& sh = m.shard();
      EXPECT_EQ(sh.expert_end - sh.expert_begin, c.num_experts / ep) << "rank " << r;
      for (const LayerWeights& l : m.weights().layers) {
        for (int32_t e = 0; e < c.num_experts; ++e) {
          const bool held = e >= sh.expert_begin && e < sh.expert_end;
          EXPECT_EQ(!l.expert_down[e].empty(), held) << "rank " << r << " expert " << e;
          EXPECT_EQ(!l.expert_gate.empty() && !l.expert_gate[e].empty(),
                    held && !l.expert_gate.empty());
        }
      }
    }
  }
  const Workload w = MakeWorkload(c.vocab_size, 5);
  for (int step = 0; step < 4; ++step) {
    const BatchPlan plan = PlanOf(w, step);
    const int64_t rows = plan.num_logit_rows(), T = plan.num_tokens();
    std::vector<float> expected(rows * c.vocab_size), actual(rows * c.vocab_size, -1.0f);
    ASSERT_TRUE(
        whole->model->Forward(plan, whole->view, whole->scratch, whole->pool, expected.data())
            .ok());
    std::vector<std::vector<float>> hidden(tp, std::vector<float>(T * c.hidden_size));
    for (int32_t s = 0; s < pp; ++s) {
      ThreadGroupState state(tp);
      std::vector<std::vector<float>> out(tp, std::vector<float>(T * c.hidden_size));
      std::vector<Status> statuses(tp);
      std::vector<std::thread> threads;
      for (int32_t r = 0; r < tp; ++r) {
        threads.emplace_back([&, r] {
          ThreadGroup group(&state, r);
          ShardIo io;
          io.tp = &group;
          io.hidden_in = s > 0 ? hidden[r].data() : nullptr;
          io.hidden_out = s < pp - 1 ? out[r].data() : nullptr;
          io.logits = s == pp - 1 ? actual.data() : nullptr;
          Runner& shard = *shards[s][r];
          statuses[r] = shard.model->ForwardShard(plan, shard.view, shard.scratch, shard.pool, io);
        });
      }
      for (auto& t : threads) t.join();
      for (const Status& st : statuses) ASSERT_TRUE(st.ok()) << st.message();
      hidden = std::move(out);
    }
    ASSERT_EQ(std::memcmp(expected.data(), actual.data(), expected.size() * sizeof(float)), 0)
        << "step " << step;
  }
}

std::string WriteModel(const std::string& stem, Architecture arch, const std::string& preset,
                       DType dtype, const std::string& mix = "",
                       const std::function<void(ModelConfig*)>& change = nullptr) {
  auto config = PresetConfig(arch, preset);
  EXPECT_TRUE(config.ok());
  RandomModelParams params;
  params.config = *config;
  if (change) change(&params.config);
  params.dtype = dtype;
  params.mix = mix;
  params.seed = 3;
  params.tied_embeddings = false;
  const std::string path =
      (std::filesystem::temp_directory_path() / (stem + "_" + std::to_string(getpid()) + ".gguf"))
          .string();
  EXPECT_TRUE(WriteRandomGguf(params, testing::ByteFallbackVocab(), path).ok());
  return path;
}

TEST(ModelShardTest, SplitRowsCoversEveryRowOnce) {
  for (int64_t n : {1, 7, 16, 64, 259, 1408, 32000, 32001}) {
    for (int32_t parts = 1; parts <= 8; ++parts) {
      if (parts > n) continue;
      int64_t next = 0;
      for (int32_t p = 0; p < parts; ++p) {
        const RowRange r = SplitRows(n, parts, p);
        EXPECT_EQ(r.begin, next) << n << " / " << parts;
        EXPECT_GT(r.size(), 0) << n << " / " << parts << " part " << p;
        next = r.end;
      }
      EXPECT_EQ(next, n);
    }
  }
}

TEST(ModelShardTest, LlamaQ8ShardsEqualTheWholeModel) {
  const std::string path = WriteModel("shard_llama_q8", Architecture::kLlama, "tiny", DType::kQ8_0);
  ExpectShardsMatch(path, 2, 1);
  ExpectShardsMatch(path, 1, 2);
  ExpectShardsMatch(path, 2, 2);
  std::filesystem::remove(path);
}

TEST(ModelShardTest, KQuantMixShardsEqualTheWholeModel) {
  // 512-wide: K-quant blocks of 256 along rows that the split cuts at 16-row boundaries.
  const std::string path =
      WriteModel("shard_llama_q4km", Architecture::kLlama, "small", DType::kF16, "q4_k_m");
  ExpectShardsMatch(path, 2, 1);
  ExpectShardsMatch(path, 4, 1);
  ExpectShardsMatch(path, 2, 4);
  std::filesystem::remove(path);
}

TEST(ModelShardTest, Gpt2AndQwen3ShardsEqualTheWholeModel) {
  // GPT-2: fused QKV with biases, LayerNorm, GELU, learned positions. Qwen3: q/k norms.
  const std::string gpt2 = WriteModel("shard_gpt2", Architecture::kGpt2, "tiny", DType::kF16);
  ExpectShardsMatch(gpt2, 2, 1);
  ExpectShardsMatch(gpt2, 2, 2);
  const std::string qwen3 = WriteModel("shard_qwen3", Architecture::kQwen3, "tiny", DType::kF32);
  ExpectShardsMatch(qwen3, 2, 2);
  std::filesystem::remove(gpt2);
  std::filesystem::remove(qwen3);
}

TEST(ModelShardTest, StoriesShardsEqualTheWholeModel) {
  const std::string path = testing::SharedDir() + "/models/llama2c/stories260K.bin";
  REQUIRE_SHARED_FILE(path);
  ExpectShardsMatch(path, 2, 1);
  ExpectShardsMatch(path, 4, 1);
  ExpectShardsMatch(path, 2, 2);
}

// Expert parallelism: each EP group holds its experts whole (or split by columns over its
// MoE-TP ranks), every pair's output is computed by one rank and gathered, and each token's k
// outputs are summed in the single process's order: bit-identical, like TP.
TEST(ModelShardTest, ExpertParallelShardsEqualTheWholeModel) {
  // Qwen3-MoE shape (16 experts, top 4, normalized weights), 8 query / 4 K/V heads.
  const std::string qwen3moe =
      WriteModel("shard_qwen3moe", Architecture::kQwen3Moe, "small", DType::kQ8_0, "",
                 [](auto* c) { c->num_layers = 2; });  // 2 of 8: the sanitizer runs stay short
  ExpectShardsMatch(qwen3moe, 2, 1, 2);                // EP 2: 8 experts per rank
  ExpectShardsMatch(qwen3moe, 4, 1, 2);                // TP 4 = EP 2 x MoE-TP 2
  ExpectShardsMatch(qwen3moe, 4, 1, 4);                // EP 4
  ExpectShardsMatch(qwen3moe, 2, 2, 2);                // EP 2 in each of 2 pipeline stages
  std::filesystem::remove(qwen3moe);
  // gpt-oss (llama.cpp's MXFP4 file: expert biases, softmax over the chosen, attention sinks).
  const std::string gpt_oss = testing::SharedDir() + "/golden/arch/gpt-oss-mxfp4_moe.gguf";
  REQUIRE_SHARED_FILE(gpt_oss);
  ExpectShardsMatch(gpt_oss, 2, 1, 2);
}

// More ranks than K/V heads: each K/V head is held by every rank whose query heads read it.
// llama.cpp's Mixtral-shaped file has one K/V head (MQA), the tiny Llama 2.
TEST(ModelShardTest, KvHeadsReplicatedOverMoreRanksEqualTheWholeModel) {
  const std::string mixtral = testing::SharedDir() + "/golden/arch/llama-moe-f16.gguf";
  REQUIRE_SHARED_FILE(mixtral);
  ExpectShardsMatch(mixtral, 2, 1);
  ExpectShardsMatch(mixtral, 4, 1, 2);
  const std::string llama = WriteModel("shard_kv_rep", Architecture::kLlama, "tiny", DType::kQ8_0);
  ExpectShardsMatch(llama, 4, 1);
  std::filesystem::remove(llama);
  // 12 query / 2 K/V heads (Qwen2.5-1.5B's ratio) over 6 ranks: each rank's 2 query heads share
  // one K/V head, a ratio of 2 against the model's 6 (the attention tiles are sized by the
  // rank's own ratio).
  const std::string odd =
      WriteModel("shard_kv_rep6", Architecture::kQwen2, "tiny", DType::kQ8_0, "", [](auto* c) {
        c->hidden_size = 192, c->num_heads = 12, c->num_kv_heads = 2, c->head_dim = 16;
        c->rope_dim = 16;
      });
  ExpectShardsMatch(odd, 6, 1);
  std::filesystem::remove(odd);
}

TEST(ModelShardTest, ImpossibleExpertParallelShardsAreRefusedByName) {
  const std::string dense =
      WriteModel("shard_ep_dense", Architecture::kLlama, "tiny", DType::kQ8_0);
  const std::string moe = WriteModel("shard_ep_moe", Architecture::kQwen3Moe, "tiny", DType::kQ8_0);
  const std::string few =
      WriteModel("shard_ep_few", Architecture::kQwen3Moe, "tiny", DType::kQ8_0, "",
                 [](auto* c) { c->num_experts = 2, c->experts_per_token = 1; });
  struct {
    const std::string& path;
    ModelShard shard;
    const char* names;
  } cases[] = {{dense, ModelShard{0, 2, 0, 1, 2}, "has no experts"},
               {few, ModelShard{0, 4, 0, 1, 4}, "exceeds the model's 2 experts"},
               {moe, ModelShard{0, 2, 0, 1, 4}, "must divide tensor_parallel_size"},
               {moe, ModelShard{0, 2, 0, 1, 0}, "must divide tensor_parallel_size"}};
  for (const auto& c : cases) {
    ModelLoadOptions options;
    options.shard = c.shard;
    auto m = Model::Load(c.path, options);
    ASSERT_FALSE(m.ok()) << c.names;
    EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(m.status().message().find(c.names), std::string::npos) << m.status().message();
  }
  std::filesystem::remove(dense);
  std::filesystem::remove(moe);
  std::filesystem::remove(few);
}

TEST(ModelShardTest, ImpossibleShardsAreRefusedByName) {
  const std::string path = WriteModel("shard_bad", Architecture::kLlama, "tiny", DType::kQ8_0);
  for (ModelShard bad : {ModelShard{0, 3, 0, 1}, ModelShard{2, 2, 0, 1}, ModelShard{0, 1, 0, 3},
                         ModelShard{0, 1, 1, 1}, ModelShard{0, 0, 0, 1}}) {
    ModelLoadOptions options;
    options.shard = bad;
    auto m = Model::Load(path, options);
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument) << m.status().message();
  }
  // A shard cannot run as a whole model.
  ModelLoadOptions options;
  options.shard = ModelShard{0, 2, 0, 1};
  auto shard = Model::Load(path, options);
  ASSERT_TRUE(shard.ok());
  ASSERT_TRUE((*shard)->sharded());
  ExecutorConfig config;
  KvStorage storage(KvStorageConfigFor(**shard, KvCacheSizes{4, 0}, config));
  KvCacheView view{storage.LayerViews(), 4};
  ForwardScratch scratch;
  ThreadPool pool(1);
  const int32_t token = 5, block = 0;
  BatchPlan plan;
  plan.chunks.push_back(SequenceChunk{&token, 1, 0, &block, 1, 1});
  std::vector<float> logits((*shard)->config().vocab_size);
  EXPECT_EQ((*shard)->Forward(plan, view, scratch, pool, logits.data()).code(),
            StatusCode::kFailedPrecondition);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace inflight
