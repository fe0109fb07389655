// Tensors as they cross the serving layer: a name, a KServe datatype, a shape and the raw
// little-endian bytes (BYTES elements as 4-byte length + bytes, as on the wire). Plain values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "model_config.pb.h"

namespace inflight::serving {

using inference::DataType;

// "INT32" for TYPE_INT32, "BYTES" for TYPE_STRING; "" for TYPE_INVALID.
const char* DataTypeProtocolName(DataType t);
// Inverse of DataTypeProtocolName; TYPE_INVALID for an unknown name.
DataType DataTypeFromProtocolName(std::string_view name);
// Bytes per element; 0 for BYTES (variable) and TYPE_INVALID.
int64_t DataTypeSize(DataType t);

struct InferTensor {
  std::string name;
  DataType dtype = inference::TYPE_INVALID;
  std::vector<int64_t> shape;
  std::string data;  // row-major, little-endian; BYTES: [u32 length][bytes] per element

  // Product of the shape; -1 when a dimension is negative or the product overflows int64.
  int64_t num_elements() const;
  // INVALID_ARGUMENT when data does not hold exactly num_elements() elements.
  Status CheckSize() const;

  // Values converted to the wanted type (numbers of any numeric dtype, bools as 0/1).
  // INVALID_ARGUMENT for BYTES tensors or a size mismatch.
  StatusOr<std::vector<int64_t>> AsInt64() const;
  StatusOr<std::vector<double>> AsDouble() const;
  // The elements of a BYTES tensor.
  StatusOr<std::vector<std::string>> AsStrings() const;

  static InferTensor Int32(std::string name, std::vector<int64_t> shape,
                           const std::vector<int32_t>& v);
  static InferTensor Float32(std::string name, std::vector<int64_t> shape,
                             const std::vector<float>& v);
  static InferTensor Strings(std::string name, std::vector<int64_t> shape,
                             const std::vector<std::string>& v);
  // A tensor of `dtype` from numbers (rounded/truncated for integer types, clamped to range).
  static InferTensor FromDoubles(std::string name, DataType dtype, std::vector<int64_t> shape,
                                 const std::vector<double>& v);
};

// Appends one BYTES element in the length-prefixed encoding.
void AppendBytesElement(std::string* out, std::string_view element);

}  // namespace inflight::serving
