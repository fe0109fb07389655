// Hugging Face safetensors reader: u64 header length, a JSON header naming each tensor's
// dtype, shape and byte range, then the data. Mapped, zero copy, every range checked.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "base/status.h"
#include "tensor/dtype.h"

namespace inflight {

struct SafetensorsTensor {
  std::string dtype;           // "F32", "F16", "BF16", ...
  std::vector<int64_t> shape;  // row-major, outermost first
  const uint8_t* data = nullptr;
  uint64_t num_bytes = 0;
};

class SafetensorsFile {
 public:
  static StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  static StatusOr<std::unique_ptr<SafetensorsFile>> Parse(std::shared_ptr<MappedFile> file);
  const std::map<std::string, SafetensorsTensor>& tensors() const { return tensors_; }
  std::shared_ptr<MappedFile> file() const { return file_; }

 private:
  std::shared_ptr<MappedFile> file_;
  std::map<std::string, SafetensorsTensor> tensors_;
};

// One tensor to write: row-major floats of `shape`.
struct SafetensorsOut {
  std::string name;
  std::vector<int64_t> shape;
  const float* values = nullptr;
};
// Writes the tensors as F16 (what model writers and benchmarks need; the reader takes any).
Status WriteSafetensorsF16(const std::string& path, const std::vector<SafetensorsOut>& tensors);

// "F32" -> kF32 etc.; nullopt for types the engine does not load.
std::optional<DType> DTypeFromSafetensors(const std::string& name);

}  // namespace inflight
