// The disaggregated hand-off a generation server parses from a client's context_phase_params
// (kvcache/kv_handoff.h): any bytes must parse or be refused with a status, within their own
// size; what parses serializes back to the same bytes. A shared-memory descriptor
// (kvcache/kv_handoff_shm.h) is taken from a folder of the fuzzer's own holding one real
// segment: refused, or read only when it names that segment exactly.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "kvcache/kv_handoff.h"
#include "kvcache/kv_handoff_shm.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace inflight;
  if (IsKvHandoffShmDescriptor(data, size)) {
    static const auto dir = [] {
      auto d =
          std::filesystem::temp_directory_path() / ("kv_handoff_fuzz_" + std::to_string(getpid()));
      std::filesystem::create_directories(d);
      // The folder goes at exit (each fuzzing process has its own; every segment is taken).
      std::atexit([] {
        std::error_code ec;
        std::filesystem::remove_all(std::filesystem::temp_directory_path() /
                                        ("kv_handoff_fuzz_" + std::to_string(getpid())),
                                    ec);
      });
      return d.string();
    }();
    static auto shm = KvHandoffShm::Open(dir, 60000, 1 << 20);
    if (!shm.ok()) std::abort();
    const std::vector<uint8_t> payload(64, 0x42);
    auto written = (*shm)->Write(payload.data(), payload.size());
    if (!written.ok() || !written->has_value()) std::abort();
    const std::string& real = **written;
    auto taken = (*shm)->Take(data, size);
    const bool names_it = size == real.size() && std::equal(real.begin(), real.end(), data);
    auto same = [&](const KvHandoffShm::Segment& s) {
      return s.size() == payload.size() && std::equal(payload.begin(), payload.end(), s.data());
    };
    if (taken.ok() && (!names_it || !same(*taken))) std::abort();
    if (!names_it) {  // the real one is still there, and read once
      auto t = (*shm)->Take(reinterpret_cast<const uint8_t*>(real.data()), real.size());
      if (!t.ok() || !same(*t)) std::abort();
    }
    return 0;
  }
  auto parsed = ParseKvHandoff(data, size);
  if (!parsed.ok()) return 0;
  if (static_cast<int64_t>(parsed->kv.size()) != parsed->num_blocks() * parsed->block_bytes)
    std::abort();
  const std::vector<uint8_t> again = SerializeKvHandoff(*parsed);
  if (again.size() != size || !std::equal(again.begin(), again.end(), data)) std::abort();
  return 0;
}
