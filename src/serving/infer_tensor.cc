#include "serving/infer_tensor.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "base/fp16.h"

namespace inflight::serving {
namespace {

struct TypeInfo {
  DataType type;
  const char* name;
  int64_t size;
};
constexpr TypeInfo kTypes[] = {
    {inference::TYPE_BOOL, "BOOL", 1},     {inference::TYPE_UINT8, "UINT8", 1},
    {inference::TYPE_UINT16, "UINT16", 2}, {inference::TYPE_UINT32, "UINT32", 4},
    {inference::TYPE_UINT64, "UINT64", 8}, {inference::TYPE_INT8, "INT8", 1},
    {inference::TYPE_INT16, "INT16", 2},   {inference::TYPE_INT32, "INT32", 4},
    {inference::TYPE_INT64, "INT64", 8},   {inference::TYPE_FP16, "FP16", 2},
    {inference::TYPE_FP32, "FP32", 4},     {inference::TYPE_FP64, "FP64", 8},
    {inference::TYPE_STRING, "BYTES", 0},  {inference::TYPE_BF16, "BF16", 2},
};

template <typename T>
T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <typename T>
void Store(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}

double Element(DataType t, const char* p) {
  switch (t) {
    case inference::TYPE_BOOL:
      return *p ? 1 : 0;
    case inference::TYPE_UINT8:
      return Load<uint8_t>(p);
    case inference::TYPE_UINT16:
      return Load<uint16_t>(p);
    case inference::TYPE_UINT32:
      return Load<uint32_t>(p);
    case inference::TYPE_UINT64:
      return static_cast<double>(Load<uint64_t>(p));
    case inference::TYPE_INT8:
      return Load<int8_t>(p);
    case inference::TYPE_INT16:
      return Load<int16_t>(p);
    case inference::TYPE_INT32:
      return Load<int32_t>(p);
    case inference::TYPE_INT64:
      return static_cast<double>(Load<int64_t>(p));
    case inference::TYPE_FP16:
      return Fp16ToFp32(Load<uint16_t>(p));
    case inference::TYPE_FP32:
      return Load<float>(p);
    case inference::TYPE_FP64:
      return Load<double>(p);
    case inference::TYPE_BF16:
      return Bf16ToFp32(Load<uint16_t>(p));
    default:
      return 0;
  }
}

template <typename T>
T ClampTo(double v) {
  if (std::isnan(v)) return 0;
  if (v <= static_cast<double>(std::numeric_limits<T>::lowest()))
    return std::numeric_limits<T>::lowest();
  if (v >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
  return static_cast<T>(v);
}

}  // namespace

const char* DataTypeProtocolName(DataType t) {
  for (const auto& i : kTypes) {
    if (i.type == t) return i.name;
  }
  return "";
}

DataType DataTypeFromProtocolName(std::string_view name) {
  for (const auto& i : kTypes) {
    if (name == i.name) return i.type;
  }
  return inference::TYPE_INVALID;
}

int64_t DataTypeSize(DataType t) {
  for (const auto& i : kTypes) {
    if (i.type == t) return i.size;
  }
  return 0;
}

int64_t InferTensor::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) {
    // A client names the shape: its product must not wrap around to a small count.
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return -1;
  }
  return n;
}

Status InferTensor::CheckSize() const {
  for (int64_t d : shape) {
    if (d < 0) return InvalidArgumentError("input '" + name + "' has a negative dimension");
  }
  const int64_t n = num_elements();
  if (n < 0)
    return InvalidArgumentError("input '" + name + "': the element count of its shape overflows");
  if (dtype == inference::TYPE_STRING) {
    int64_t count = 0;
    size_t pos = 0;
    while (pos < data.size()) {
      if (data.size() - pos < 4)
        return InvalidArgumentError("input '" + name + "': truncated BYTES element");
      const uint32_t len = Load<uint32_t>(data.data() + pos);
      pos += 4;
      if (data.size() - pos < len)
        return InvalidArgumentError("input '" + name + "': truncated BYTES element");
      pos += len;
      ++count;
    }
    if (count != n) {
      return InvalidArgumentError("unexpected number of string elements " + std::to_string(count) +
                                  " for inference input '" + name + "', expecting " +
                                  std::to_string(n));
    }
    return OkStatus();
  }
  const int64_t size = DataTypeSize(dtype);
  if (size == 0) return InvalidArgumentError("input '" + name + "' has an invalid datatype");
  int64_t bytes = 0;
  if (__builtin_mul_overflow(n, size, &bytes)) {
    return InvalidArgumentError("input '" + name + "': the byte size of its shape overflows");
  }
  if (static_cast<int64_t>(data.size()) != bytes) {
    return InvalidArgumentError("unexpected total byte size " + std::to_string(data.size()) +
                                " for inference input '" + name + "', expecting " +
                                std::to_string(bytes));
  }
  return OkStatus();
}

StatusOr<std::vector<double>> InferTensor::AsDouble() const {
  if (dtype == inference::TYPE_STRING) {
    return InvalidArgumentError("input '" + name + "' is BYTES, a number was expected");
  }
  Status s = CheckSize();
  if (!s.ok()) return s;
  const int64_t size = DataTypeSize(dtype);
  std::vector<double> out(num_elements());
  for (size_t i = 0; i < out.size(); ++i) out[i] = Element(dtype, data.data() + i * size);
  return out;
}

StatusOr<std::vector<int64_t>> InferTensor::AsInt64() const {
  if (dtype == inference::TYPE_INT64 || dtype == inference::TYPE_UINT64) {
    Status s = CheckSize();
    if (!s.ok()) return s;
    std::vector<int64_t> out(num_elements());
    if (!out.empty()) std::memcpy(out.data(), data.data(), out.size() * 8);
    return out;
  }
  auto d = AsDouble();
  if (!d.ok()) return d.status();
  std::vector<int64_t> out(d->size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = ClampTo<int64_t>((*d)[i]);
  return out;
}

StatusOr<std::vector<std::string>> InferTensor::AsStrings() const {
  if (dtype != inference::TYPE_STRING) {
    return InvalidArgumentError("input '" + name + "' is " + DataTypeProtocolName(dtype) +
                                ", BYTES was expected");
  }
  Status s = CheckSize();
  if (!s.ok()) return s;
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < data.size()) {
    const uint32_t len = Load<uint32_t>(data.data() + pos);
    out.emplace_back(data.data() + pos + 4, len);
    pos += 4 + len;
  }
  return out;
}

void AppendBytesElement(std::string* out, std::string_view element) {
  Store<uint32_t>(out, static_cast<uint32_t>(element.size()));
  out->append(element);
}

InferTensor InferTensor::Int32(std::string name, std::vector<int64_t> shape,
                               const std::vector<int32_t>& v) {
  InferTensor t{std::move(name), inference::TYPE_INT32, std::move(shape), {}};
  t.data.assign(reinterpret_cast<const char*>(v.data()), v.size() * 4);
  return t;
}

InferTensor InferTensor::Float32(std::string name, std::vector<int64_t> shape,
                                 const std::vector<float>& v) {
  InferTensor t{std::move(name), inference::TYPE_FP32, std::move(shape), {}};
  t.data.assign(reinterpret_cast<const char*>(v.data()), v.size() * 4);
  return t;
}

InferTensor InferTensor::Strings(std::string name, std::vector<int64_t> shape,
                                 const std::vector<std::string>& v) {
  InferTensor t{std::move(name), inference::TYPE_STRING, std::move(shape), {}};
  for (const auto& s : v) AppendBytesElement(&t.data, s);
  return t;
}

InferTensor InferTensor::FromDoubles(std::string name, DataType dtype, std::vector<int64_t> shape,
                                     const std::vector<double>& v) {
  InferTensor t{std::move(name), dtype, std::move(shape), {}};
  for (double x : v) {
    switch (dtype) {
      case inference::TYPE_BOOL:
        Store<uint8_t>(&t.data, x != 0);
        break;
      case inference::TYPE_UINT8:
        Store(&t.data, ClampTo<uint8_t>(x));
        break;
      case inference::TYPE_UINT16:
        Store(&t.data, ClampTo<uint16_t>(x));
        break;
      case inference::TYPE_UINT32:
        Store(&t.data, ClampTo<uint32_t>(x));
        break;
      case inference::TYPE_UINT64:
        Store(&t.data, ClampTo<uint64_t>(x));
        break;
      case inference::TYPE_INT8:
        Store(&t.data, ClampTo<int8_t>(x));
        break;
      case inference::TYPE_INT16:
        Store(&t.data, ClampTo<int16_t>(x));
        break;
      case inference::TYPE_INT32:
        Store(&t.data, ClampTo<int32_t>(x));
        break;
      case inference::TYPE_INT64:
        Store(&t.data, ClampTo<int64_t>(x));
        break;
      case inference::TYPE_FP16:
        Store(&t.data, Fp32ToFp16(static_cast<float>(x)));
        break;
      case inference::TYPE_FP32:
        Store(&t.data, static_cast<float>(x));
        break;
      case inference::TYPE_FP64:
        Store(&t.data, x);
        break;
      case inference::TYPE_BF16:
        Store(&t.data, Fp32ToBf16(static_cast<float>(x)));
        break;
      default:
        break;
    }
  }
  return t;
}

}  // namespace inflight::serving
