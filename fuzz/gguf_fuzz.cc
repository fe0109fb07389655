// libFuzzer target: arbitrary bytes as a GGUF file, then as a model. Every input must end in
// a Status (never a crash, an out-of-bounds read or a leak under ASan/UBSan).
#include <cstdint>
#include <cstddef>

#include "format/gguf.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = inflight::MappedFile::FromBytes("fuzz.gguf", data, size);
  auto gguf = inflight::GgufFile::Parse(file);
  if (!gguf.ok()) return 0;
  // Typed getters and the tokenizer loader walk the metadata the parser accepted.
  (void)(*gguf)->GetString("general.architecture");
  (void)(*gguf)->GetInt("llama.block_count");
  auto tok = inflight::Tokenizer::FromGguf(**gguf);
  if (tok.ok()) {
    const auto ids = (*tok)->Encode("Hello, world! \xE4\xBD\xA0\xE5\xA5\xBD 123");
    (void)(*tok)->Decode(ids);
  }
  for (const auto& t : (*gguf)->tensors()) {
    // Every accepted tensor's bytes lie inside the file: touch the first and last.
    if (t.num_bytes > 0) {
      volatile uint8_t a = t.data[0], b = t.data[t.num_bytes - 1];
      (void)a;
      (void)b;
    }
  }
  return 0;
}
