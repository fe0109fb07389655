#include "parallel/wire.h"

#include <algorithm>

namespace inflight::parallel {
namespace {

// Bounds a follower accepts (far above what a step holds).
constexpr int64_t kMaxChunks = 1 << 20;
constexpr int64_t kMaxTokens = 1 << 24;

}  // namespace

void EncodeAdapters(const std::vector<uint64_t>& drops,
                    const std::vector<const LoraAdapter*>& fresh, WireWriter* out) {
  out->PutArray(drops.data(), static_cast<int64_t>(drops.size()));
  out->Put<int64_t>(static_cast<int64_t>(fresh.size()));
  for (const LoraAdapter* a : fresh) {
    out->Put<uint64_t>(a->id());
    out->Put<int32_t>(a->num_layers());
    for (const auto& layer : a->matrices()) {
      for (const LoraMatrix& m : layer) {
        out->Put(m.rank), out->Put(m.in), out->Put(m.out);
        out->PutArray(m.a.data(), static_cast<int64_t>(m.a.size()));
        out->PutArray(m.b.data(), static_cast<int64_t>(m.b.size()));
      }
    }
  }
}

Status DecodeAdapters(WireReader& in, const ModelConfig& config, std::vector<uint64_t>* drops,
                      std::vector<std::pair<uint64_t, std::shared_ptr<const LoraAdapter>>>* fresh) {
  RETURN_IF_ERROR(in.GetArray(drops, kMaxChunks));
  int64_t count = 0;
  RETURN_IF_ERROR(in.Get(&count));
  if (count < 0 || count > kMaxChunks)
    return DataLossError("a parallel step message holds a bad adapter count");
  fresh->clear();
  for (int64_t i = 0; i < count; ++i) {
    uint64_t id = 0;
    int32_t num_layers = 0;
    RETURN_IF_ERROR(in.Get(&id));
    RETURN_IF_ERROR(in.Get(&num_layers));
    if (num_layers != config.num_layers) return DataLossError("a LoRA adapter for another model");
    std::vector<std::array<LoraMatrix, kLoraNumModules>> layers(static_cast<size_t>(num_layers));
    for (auto& layer : layers) {
      for (LoraMatrix& m : layer) {
        RETURN_IF_ERROR(in.Get(&m.rank));
        RETURN_IF_ERROR(in.Get(&m.in));
        RETURN_IF_ERROR(in.Get(&m.out));
        RETURN_IF_ERROR(in.GetArray(&m.a, int64_t{1} << 32));
        RETURN_IF_ERROR(in.GetArray(&m.b, int64_t{1} << 32));
      }
    }
    ASSIGN_OR_RETURN(auto adapter, LoraAdapter::FromMatrices(config, std::move(layers)));
    fresh->emplace_back(id, std::move(adapter));
  }
  return OkStatus();
}

void EncodeStep(const std::vector<BlockCopy>& copies, const BatchPlan& plan,
                int32_t tokens_per_block, int32_t vocab_size, int32_t hidden_size,
                const std::vector<uint64_t>& lora_ids, WireWriter* out) {
  std::vector<int32_t> flat;
  for (const BlockCopy& c : copies) flat.insert(flat.end(), {c.group, c.src, c.dst});
  out->PutArray(flat.data(), static_cast<int64_t>(flat.size()));
  out->Put<int64_t>(static_cast<int64_t>(plan.chunks.size()));
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    const SequenceChunk& c = plan.chunks[i];
    out->Put<int32_t>(c.start_pos);
    out->Put<int32_t>(c.num_logits);
    out->Put<uint64_t>(lora_ids.empty() ? 0 : lora_ids[i]);
    out->PutArray(c.token_ids, c.num_tokens);
    const int64_t reached =
        (static_cast<int64_t>(c.start_pos) + c.num_tokens + tokens_per_block - 1) /
        tokens_per_block;
    out->PutArray(c.block_table, std::min<int64_t>(reached, c.num_blocks));
    out->PutArray(c.window_block_table, std::min<int64_t>(reached, c.num_window_blocks));
    const bool uses_table =
        c.prompt_table != nullptr && std::any_of(c.token_ids, c.token_ids + c.num_tokens,
                                                 [&](int32_t id) { return id >= vocab_size; });
    out->PutArray(uses_table ? c.prompt_table : nullptr,
                  uses_table ? int64_t{c.prompt_table_rows} * hidden_size : 0);
  }
}

Status DecodeStep(WireReader& in, int32_t hidden_size, std::vector<BlockCopy>* copies,
                  OwnedPlan* plan) {
  std::vector<int32_t> flat;
  RETURN_IF_ERROR(in.GetArray(&flat, kMaxTokens));
  if (flat.size() % 3 != 0)
    return DataLossError("a parallel step message holds part of a block copy");
  copies->clear();
  for (size_t i = 0; i < flat.size(); i += 3)
    copies->push_back({flat[i], flat[i + 1], flat[i + 2]});
  int64_t num_chunks = 0;
  RETURN_IF_ERROR(in.Get(&num_chunks));
  if (num_chunks < 0 || num_chunks > kMaxChunks)
    return DataLossError("a parallel step message holds a bad chunk count");
  plan->chunks.resize(static_cast<size_t>(num_chunks));
  plan->plan.chunks.resize(static_cast<size_t>(num_chunks));
  for (int64_t i = 0; i < num_chunks; ++i) {
    OwnedPlan::Chunk& c = plan->chunks[i];
    RETURN_IF_ERROR(in.Get(&c.start_pos));
    RETURN_IF_ERROR(in.Get(&c.num_logits));
    RETURN_IF_ERROR(in.Get(&c.lora_id));
    RETURN_IF_ERROR(in.GetArray(&c.tokens, kMaxTokens));
    RETURN_IF_ERROR(in.GetArray(&c.blocks, kMaxTokens));
    RETURN_IF_ERROR(in.GetArray(&c.window_blocks, kMaxTokens));
    RETURN_IF_ERROR(in.GetArray(&c.prompt_table, int64_t{1} << 32));
    if (hidden_size <= 0 || c.prompt_table.size() % static_cast<size_t>(hidden_size) != 0) {
      return DataLossError("a parallel step message holds a ragged prompt table");
    }
    c.prompt_table_rows =
        static_cast<int32_t>(c.prompt_table.size() / static_cast<size_t>(hidden_size));
    SequenceChunk& v = plan->plan.chunks[i];
    v = SequenceChunk{};
    v.token_ids = c.tokens.data();
    v.num_tokens = static_cast<int32_t>(c.tokens.size());
    v.start_pos = c.start_pos;
    v.block_table = c.blocks.data();
    v.num_blocks = static_cast<int32_t>(c.blocks.size());
    v.window_block_table = c.window_blocks.empty() ? nullptr : c.window_blocks.data();
    v.num_window_blocks = static_cast<int32_t>(c.window_blocks.size());
    v.num_logits = c.num_logits;
    v.prompt_table = c.prompt_table.empty() ? nullptr : c.prompt_table.data();
    v.prompt_table_rows = c.prompt_table_rows;
  }
  if (!in.done()) return DataLossError("a parallel step message has trailing bytes");
  return OkStatus();
}

}  // namespace inflight::parallel
