#include "engine/generate.h"

#include <chrono>
#include <numeric>

#include "base/thread_pool.h"
#include "kvcache/kv_storage.h"

namespace inflight {
namespace {

constexpr int32_t kTokensPerBlock = 32;

struct PrivateCache {
  PrivateCache(const ModelConfig& c, int32_t max_tokens, DType dtype)
      : storage(KvStorageConfig{c.num_layers, (max_tokens + kTokensPerBlock - 1) / kTokensPerBlock,
                                kTokensPerBlock, c.kv_dim(), dtype, c.head_dim}) {
    view.layers = storage.LayerViews();
    view.num_blocks = storage.config().num_blocks;
    block_table.resize(view.num_blocks);
    std::iota(block_table.begin(), block_table.end(), 0);
  }
  KvStorage storage;
  KvCacheView view;
  std::vector<int32_t> block_table;
};

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

StatusOr<GenerateResult> Generate(const Model& model, const std::vector<int32_t>& prompt_ids,
                                  const GenerateParams& params, ThreadPool& pool,
                                  const std::function<void(const SampledToken&)>& on_token) {
  const ModelConfig& c = model.config();
  if (prompt_ids.empty()) return InvalidArgumentError("the prompt is empty");
  RETURN_IF_ERROR(params.sampling.Validate());
  if (params.max_new_tokens < 0) return InvalidArgumentError("max_new_tokens must be >= 0");
  const int64_t total = static_cast<int64_t>(prompt_ids.size()) + params.max_new_tokens;
  if (total > c.context_length) {
    return InvalidArgumentError("prompt (" + std::to_string(prompt_ids.size()) +
                                " tokens) + max_new_tokens (" +
                                std::to_string(params.max_new_tokens) +
                                ") exceeds the context length " + std::to_string(c.context_length));
  }
  PrivateCache cache(c, static_cast<int32_t>(total), params.kv_dtype);
  ForwardScratch scratch;
  Sampler sampler(params.sampling);
  sampler.AddPromptTokens(prompt_ids.data(), prompt_ids.size());
  std::vector<float> logits(c.vocab_size);
  GenerateResult result;
  if (params.max_new_tokens == 0) return result;

  auto t0 = std::chrono::steady_clock::now();
  const int32_t chunk = std::max(1, params.prefill_chunk_tokens);
  for (size_t start = 0; start < prompt_ids.size(); start += chunk) {
    BatchPlan plan;
    SequenceChunk ch;
    ch.token_ids = prompt_ids.data() + start;
    ch.num_tokens = static_cast<int32_t>(std::min<size_t>(chunk, prompt_ids.size() - start));
    ch.start_pos = static_cast<int32_t>(start);
    ch.block_table = cache.block_table.data();
    ch.num_blocks = static_cast<int32_t>(cache.block_table.size());
    plan.chunks.push_back(ch);
    RETURN_IF_ERROR(model.Forward(plan, cache.view, scratch, pool, logits.data()));
  }
  result.prompt_seconds = SecondsSince(t0);
  t0 = std::chrono::steady_clock::now();
  int32_t pos = static_cast<int32_t>(prompt_ids.size());
  const Tokenizer* tok = model.tokenizer();
  for (int32_t i = 0; i < params.max_new_tokens; ++i) {
    if (i > 0) {
      BatchPlan plan;
      SequenceChunk ch;
      ch.token_ids = &result.generated_ids.back();
      ch.num_tokens = 1;
      ch.start_pos = pos++;
      ch.block_table = cache.block_table.data();
      ch.num_blocks = static_cast<int32_t>(cache.block_table.size());
      plan.chunks.push_back(ch);
      RETURN_IF_ERROR(model.Forward(plan, cache.view, scratch, pool, logits.data()));
      result.decode_steps++;
    }
    SampledToken t = sampler.Sample(logits.data(), c.vocab_size);
    result.generated_ids.push_back(t.id);
    if (on_token) on_token(t);
    const bool eos = tok ? tok->IsEndOfGeneration(t.id) : false;
    result.tokens.push_back(std::move(t));
    if (params.stop_at_eos && eos) break;
  }
  result.decode_seconds = SecondsSince(t0);
  return result;
}

StatusOr<std::vector<float>> AllLogits(const Model& model, const std::vector<int32_t>& ids,
                                       DType kv_dtype, ThreadPool& pool) {
  const ModelConfig& c = model.config();
  if (ids.empty()) return InvalidArgumentError("no tokens");
  if (static_cast<int64_t>(ids.size()) > c.context_length)
    return InvalidArgumentError("longer than the context");
  PrivateCache cache(c, static_cast<int32_t>(ids.size()), kv_dtype);
  ForwardScratch scratch;
  BatchPlan plan;
  SequenceChunk ch;
  ch.token_ids = ids.data();
  ch.num_tokens = static_cast<int32_t>(ids.size());
  ch.start_pos = 0;
  ch.block_table = cache.block_table.data();
  ch.num_blocks = static_cast<int32_t>(cache.block_table.size());
  ch.num_logits = ch.num_tokens;
  plan.chunks.push_back(ch);
  std::vector<float> logits(ids.size() * static_cast<size_t>(c.vocab_size));
  RETURN_IF_ERROR(model.Forward(plan, cache.view, scratch, pool, logits.data()));
  return logits;
}

}  // namespace inflight
