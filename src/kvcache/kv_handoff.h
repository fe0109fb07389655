// The hand-off of disaggregated serving (TensorRT-LLM's context_phase_params): what a
// context-only instance gives a generation-only instance of the same model so that it starts
// decoding without recomputing the prompt. It holds the K/V of the prompt's whole blocks
// (KvStorage::ExportBlock of each, every layer), the token ids they hold, the first token the
// context phase drew, and what binds it to its model and cache (the KV layout's fingerprint,
// tokens per block, the cache salt, the LoRA task).
//
// It holds every prompt position but the last (the last block partly filled): the generation
// instance computes the prompt's last token itself, one row like a decode step's, and draws the
// first token from its logits with its own sampler exactly as an aggregated run draws it
// (beams, n > 1, seeds, guides unchanged).
//
// On the wire: a fixed header with its own checksum, the token ids, the first tokens, then the
// K/V bytes, the body under a second checksum. Nothing in it is trusted: Parse checks the
// magic, the version, every size (checked arithmetic, against the bytes received) and both
// checksums before the executor sees it; the executor then checks the layout, the tokens
// against the request's prompt, the salt and the LoRA task.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace inflight {

struct KvHandoff {
  uint64_t layout_fingerprint = 0;  // KvHandoffFingerprint of the KV layout that wrote it
  int32_t tokens_per_block = 0;
  int64_t block_bytes = 0;  // K/V bytes of one block over every layer
  uint64_t cache_salt = 0;
  uint64_t lora_task_id = 0;
  int64_t created_unix_ns = 0;        // when the context instance exported it (wall clock)
  std::vector<int32_t> tokens;        // the prompt ids whose K/V it holds
  std::vector<int32_t> first_tokens;  // drawn by the context phase
  std::vector<uint8_t> kv;            // num_blocks() * block_bytes (the last block partly used)

  // The blocks holding `tokens` (the last one may be partly filled).
  int64_t num_blocks() const {
    return tokens_per_block > 0
               ? (static_cast<int64_t>(tokens.size()) + tokens_per_block - 1) / tokens_per_block
               : 0;
  }
};

// The fingerprint of a KV layout description (ModelRunner::KvLayoutFingerprint plus the
// model's identity).
uint64_t KvHandoffFingerprint(const std::string& layout);

std::vector<uint8_t> SerializeKvHandoff(const KvHandoff& h);
// The same bytes written to `out`, which holds KvHandoffSerializedSize(h) of them.
size_t KvHandoffSerializedSize(const KvHandoff& h);
void SerializeKvHandoffTo(const KvHandoff& h, uint8_t* out);
// INVALID_ARGUMENT saying what is wrong: not a hand-off, another version, sizes that do not
// add up to `size`, a checksum that fails ("corrupt").
StatusOr<KvHandoff> ParseKvHandoff(const uint8_t* data, size_t size);

}  // namespace inflight
