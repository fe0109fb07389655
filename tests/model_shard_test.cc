// Tensor/pipeline-parallel shards of a model, run in one process (each TP rank on a thread of
// its own, joined by an in-process all-gather): their logits must equal the whole model's bit
// for bit, since every matrix is split by output rows only (model/shard.h). The MPI transport
// is tested by parallel_test; this isolates the arithmetic of the split.
#include <gtest/gtest.h>

#include <barrier>
#include <cstring>
#include <filesystem>
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
void ExpectShardsMatch(const std::string& path, int32_t tp, int32_t pp) {
  SCOPED_TRACE("tp " + std::to_string(tp) + " pp " + std::to_string(pp));
  auto whole = Open(path);
  ASSERT_TRUE(whole);
  const ModelConfig& c = whole->model->config();
  std::vector<std::vector<std::unique_ptr<Runner>>> shards(pp);
  for (int32_t s = 0; s < pp; ++s) {
    for (int32_t r = 0; r < tp; ++r) {
      shards[s].push_back(Open(path, ModelShard{r, tp, s, pp}));
      ASSERT_TRUE(shards[s].back());
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
                       DType dtype, const std::string& mix = "") {
  auto config = PresetConfig(arch, preset);
  EXPECT_TRUE(config.ok());
  RandomModelParams params;
  params.config = *config;
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
