// libFuzzer target: arbitrary bytes as a GGUF file, then its metadata through the model's config
// readers (the common keys and each family's own: experts, sliding windows and their per-layer
// patterns, YaRN / LongRoPE, soft-caps, then ModelConfig::Validate), a file they accept loaded
// whole (every layer's tensors by name and shape, 3-D experts sliced per expert), and its
// tensors as weights. Every input must end in a Status (never a crash, an out-of-bounds read or a
// leak under ASan/UBSan); a quantized tensor with finite scales must dequantize to the same values
// through its native blocks and through the kernels' interleaved layout.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "format/gguf.h"
#include "kernels/interleave.h"
#include "kernels/kernels.h"
#include "kernels/quant_blocks.h"
#include "model/model.h"
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
  if (inflight::ReadGgufModelConfig(**gguf).ok()) (void)inflight::LoadGgufModel(file);
  for (const auto& t : (*gguf)->tensors()) {
    // Every accepted tensor's bytes lie inside the file: touch the first and last.
    if (t.num_bytes > 0) {
      volatile uint8_t a = t.data[0], b = t.data[t.num_bytes - 1];
      (void)a;
      (void)b;
    }
    if (!t.dtype || !inflight::IsQuantizedFileType(*t.dtype) || t.num_bytes == 0 ||
        t.num_bytes > (1u << 20))
      continue;
    // The loader's check: a block with a NaN or infinite scale is refused.
    const int64_t cols = t.dims[0], rows = t.num_elements() / cols;
    const int64_t blocks = t.num_elements() / inflight::DTypeBlockSize(*t.dtype);
    if (inflight::kernels::FirstNonFiniteBlock(*t.dtype, t.data, blocks) >= 0) continue;
    const inflight::TensorView native{t.data, *t.dtype, rows, cols};
    std::vector<float> a(cols), b(cols);
    inflight::kernels::DequantizeRow(native, rows - 1, a.data());
    if (!inflight::kernels::CanInterleave(native)) continue;
    std::vector<uint8_t> packed(inflight::kernels::InterleavedBytes(native));
    const inflight::TensorView view = inflight::kernels::Interleave(native, packed.data());
    inflight::kernels::DequantizeRow(view, rows - 1, b.data());
    if (std::memcmp(a.data(), b.data(), cols * sizeof(float)) != 0) std::abort();
  }
  return 0;
}
