// GGUF v2/v3 reader (mmap, zero-copy tensor views, bounds-checked parsing) and writer.
// Layout: magic "GGUF", u32 version, u64 tensor count, u64 metadata count, metadata
// key/values, tensor infos, padding to `general.alignment`, tensor data.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "base/status.h"
#include "tensor/dtype.h"
#include "tensor/tensor_view.h"

namespace inflight {

enum class GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
const char* GgufTypeName(GgufType t);

// One metadata value. Scalars use the field of their kind; arrays keep their elements in
// the vector of the element kind (integers and bools in `ints`, floats in `floats`).
struct GgufValue {
  GgufType type = GgufType::kU32;
  GgufType elem_type = GgufType::kU32;  // arrays only
  int64_t i = 0;                        // every integer type and bool (u64 above 2^63 wraps)
  double f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;
  std::vector<GgufValue> arrays;  // arrays of arrays
  uint64_t array_size = 0;

  bool IsInteger() const;
  bool IsFloat() const { return type == GgufType::kF32 || type == GgufType::kF64; }
  std::string DebugString(size_t max_elems = 8) const;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // ggml order: dims[0] is the contiguous one
  uint32_t ggml_type = 0;
  uint64_t offset = 0;  // relative to the data section
  const uint8_t* data = nullptr;
  uint64_t num_bytes = 0;
  std::optional<DType> dtype;  // nullopt when the engine does not support the type

  int64_t num_elements() const;
};

class GgufFile {
 public:
  // Parses and validates the whole header; every offset and size is checked against the
  // file. Returns DATA_LOSS / INVALID_ARGUMENT naming the bad field.
  static StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  static StatusOr<std::unique_ptr<GgufFile>> Parse(std::shared_ptr<MappedFile> file);

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const std::string& path() const { return file_->path(); }
  uint64_t file_size() const { return file_->size(); }

  const GgufValue* Find(const std::string& key) const;
  const GgufTensorInfo* FindTensor(const std::string& name) const;

  // Typed getters: nullopt when absent; INVALID_ARGUMENT when present with the wrong type.
  StatusOr<std::optional<int64_t>> GetInt(const std::string& key) const;
  StatusOr<std::optional<double>> GetFloat(const std::string& key) const;
  StatusOr<std::optional<bool>> GetBool(const std::string& key) const;
  StatusOr<std::optional<std::string>> GetString(const std::string& key) const;

 private:
  std::shared_ptr<MappedFile> file_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

// Builds a GGUF v3 file in memory and writes it. Not thread-safe.
class GgufWriter {
 public:
  void SetString(const std::string& key, const std::string& v);
  void SetU32(const std::string& key, uint32_t v);
  void SetI32(const std::string& key, int32_t v);
  void SetF32(const std::string& key, float v);
  void SetBool(const std::string& key, bool v);
  void SetStringArray(const std::string& key, const std::vector<std::string>& v);
  void SetF32Array(const std::string& key, const std::vector<float>& v);
  void SetI32Array(const std::string& key, const std::vector<int32_t>& v);
  // dims in ggml order (dims[0] contiguous); bytes must match the type and shape.
  Status AddTensor(const std::string& name, DType dtype, const std::vector<int64_t>& dims,
                   std::vector<uint8_t> bytes);
  Status WriteFile(const std::string& path) const;

 private:
  struct Entry {
    std::string key;
    std::vector<uint8_t> encoded;  // type + value
  };
  struct Tensor {
    std::string name;
    DType dtype;
    std::vector<int64_t> dims;
    std::vector<uint8_t> bytes;
  };
  void Set(const std::string& key, std::vector<uint8_t> encoded);
  std::vector<Entry> entries_;
  std::vector<Tensor> tensors_;
};

}  // namespace inflight
