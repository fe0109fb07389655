// libFuzzer target: arbitrary bytes as a safetensors file.
#include <cstddef>
#include <cstdint>

#include "format/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = inflight::MappedFile::FromBytes("fuzz.safetensors", data, size);
  auto st = inflight::SafetensorsFile::Parse(file);
  if (!st.ok()) return 0;
  for (const auto& [name, t] : (*st)->tensors()) {
    if (t.num_bytes > 0) {
      volatile uint8_t a = t.data[0], b = t.data[t.num_bytes - 1];
      (void)a;
      (void)b;
    }
  }
  return 0;
}
