// The disaggregated hand-off a generation server parses from a client's context_phase_params
// (kvcache/kv_handoff.h): any bytes must parse or be refused with a status, within their own
// size; what parses serializes back to the same bytes.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "kvcache/kv_handoff.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace inflight;
  auto parsed = ParseKvHandoff(data, size);
  if (!parsed.ok()) return 0;
  if (static_cast<int64_t>(parsed->kv.size()) != parsed->num_blocks() * parsed->block_bytes)
    std::abort();
  const std::vector<uint8_t> again = SerializeKvHandoff(*parsed);
  if (again.size() != size || !std::equal(again.begin(), again.end(), data)) std::abort();
  return 0;
}
