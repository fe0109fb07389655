// The bytes a tensor/pipeline-parallel follower decodes from its leader (parallel/wire.h):
// adapters, then a step's block copies and plan. Any input must decode or be refused with a
// status, within its own bytes.
#include <cstdint>
#include <string>

#include "parallel/wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace inflight;
  ModelConfig c;
  c.vocab_size = 259, c.hidden_size = 64, c.num_layers = 2, c.num_heads = 4, c.num_kv_heads = 2,
  c.head_dim = 16, c.ffn_size = 192;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  parallel::WireReader in(bytes);
  std::vector<uint64_t> drops;
  std::vector<std::pair<uint64_t, std::shared_ptr<const LoraAdapter>>> fresh;
  if (!parallel::DecodeAdapters(in, c, &drops, &fresh).ok()) return 0;
  std::vector<parallel::BlockCopy> copies;
  parallel::OwnedPlan plan;
  if (!parallel::DecodeStep(in, c.hidden_size, &copies, &plan).ok()) return 0;
  // What decoded must be self-consistent views of the owned arrays.
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    const SequenceChunk& v = plan.plan.chunks[i];
    if (v.num_tokens != static_cast<int32_t>(plan.chunks[i].tokens.size())) __builtin_trap();
    for (int32_t t = 0; t < v.num_tokens; ++t) (void)v.token_ids[t];
    for (int32_t b = 0; b < v.num_blocks; ++b) (void)v.block_table[b];
    for (int32_t b = 0; b < v.num_window_blocks; ++b) (void)v.window_block_table[b];
  }
  return 0;
}
