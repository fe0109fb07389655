#include "format/gguf.h"

#include <cstring>
#include <fstream>
#include <sstream>

namespace inflight {
namespace {

constexpr uint64_t kMaxStringBytes = 1ull << 30;
constexpr int kMaxDims = 4;
constexpr int kMaxArrayDepth = 4;

// Bounds-checked little-endian cursor over the mapped header.
class Cursor {
 public:
  Cursor(const uint8_t* data, uint64_t size) : data_(data), size_(size) {}
  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  template <typename T>
  Status Read(T* out, const char* what) {
    if (remaining() < sizeof(T)) return Truncated(what);
    std::memcpy(out, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return OkStatus();
  }
  Status ReadString(std::string* out, const char* what) {
    uint64_t len = 0;
    RETURN_IF_ERROR(Read(&len, what));
    if (len > remaining() || len > kMaxStringBytes) {
      return DataLossError(std::string("string length ") + std::to_string(len) + " of " + what +
                           " runs past the end of the file (offset " + std::to_string(pos_) + ")");
    }
    out->assign(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return OkStatus();
  }
  Status Truncated(const char* what) const {
    return DataLossError(std::string("file is truncated while reading ") + what + " at offset " +
                         std::to_string(pos_));
  }

 private:
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

int ScalarBytes(GgufType t) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool:
      return 1;
    case GgufType::kU16:
    case GgufType::kI16:
      return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32:
      return 4;
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64:
      return 8;
    case GgufType::kString:
      return 8;  // at least the length prefix
    case GgufType::kArray:
      return 12;  // at least type + count
  }
  return 0;
}

bool ValidType(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::kF64); }

Status ReadScalar(Cursor& c, GgufType type, GgufValue* v, const std::string& key) {
  const char* what = "metadata value";
  switch (type) {
    case GgufType::kU8: {
      uint8_t x = 0;
      RETURN_IF_ERROR(c.Read(&x, what));
      v->i = x;
      break;
    }
    case GgufType::kI8: {
      int8_t x = 0;
      RETURN_IF_ERROR(c.Read(&x, what));
      v->i = x;
      break;
    }
    case GgufType::kU16: {
      uint16_t x = 0;
      RETURN_IF_ERROR(c.Read(&x, what));
      v->i = x;
      break;
    }
    case GgufType::kI16: {
      int16_t x = 0;
      RETURN_IF_ERROR(c.Read(&x, what));
      v->i = x;
      break;
    }
    case GgufType::kU32: {
      uint32_t x = 0;
      RETURN_IF_ERROR(c.Read(&x, what));
      v->i = x;
      break;
    }
    case GgufType::kI32: {
      int32_t x = 0;
      RETURN_IF_ERROR(c.Read(&x, what));
      v->i = x;
      break;
    }
    case GgufType::kU64: {
      uint64_t x = 0;
      RETURN_IF_ERROR(c.Read(&x, what));
      v->i = (int64_t)x;
      break;
    }
    case GgufType::kI64: {
      int64_t x = 0;
      RETURN_IF_ERROR(c.Read(&x, what));
      v->i = x;
      break;
    }
    case GgufType::kF32: {
      float x = 0;
      RETURN_IF_ERROR(c.Read(&x, what));
      v->f = x;
      break;
    }
    case GgufType::kF64: {
      double x = 0;
      RETURN_IF_ERROR(c.Read(&x, what));
      v->f = x;
      break;
    }
    case GgufType::kBool: {
      uint8_t x = 0;
      RETURN_IF_ERROR(c.Read(&x, what));
      if (x > 1) return DataLossError("metadata '" + key + "': bool value " + std::to_string(x));
      v->i = x;
      break;
    }
    case GgufType::kString:
      RETURN_IF_ERROR(c.ReadString(&v->s, what));
      break;
    case GgufType::kArray:
      return InternalError("array passed to ReadScalar");
  }
  return OkStatus();
}

Status ReadValue(Cursor& c, GgufType type, GgufValue* v, const std::string& key, int depth) {
  v->type = type;
  if (type != GgufType::kArray) return ReadScalar(c, type, v, key);
  if (depth >= kMaxArrayDepth)
    return DataLossError("metadata '" + key + "': arrays nested too deep");
  uint32_t elem = 0;
  uint64_t count = 0;
  RETURN_IF_ERROR(c.Read(&elem, "array element type"));
  if (!ValidType(elem)) {
    return DataLossError("metadata '" + key + "': unknown array element type " +
                         std::to_string(elem));
  }
  RETURN_IF_ERROR(c.Read(&count, "array length"));
  const GgufType et = static_cast<GgufType>(elem);
  // Every element takes at least ScalarBytes: refuse counts the file cannot hold before
  // allocating anything.
  if (count > c.remaining() / ScalarBytes(et)) {
    return DataLossError("metadata '" + key + "': array of " + std::to_string(count) +
                         " elements runs past the end of the file");
  }
  v->elem_type = et;
  v->array_size = count;
  GgufValue tmp;
  for (uint64_t k = 0; k < count; ++k) {
    if (et == GgufType::kArray) {
      v->arrays.emplace_back();
      RETURN_IF_ERROR(ReadValue(c, et, &v->arrays.back(), key, depth + 1));
    } else if (et == GgufType::kString) {
      v->strings.emplace_back();
      RETURN_IF_ERROR(c.ReadString(&v->strings.back(), "array string"));
    } else {
      RETURN_IF_ERROR(ReadScalar(c, et, &tmp, key));
      if (et == GgufType::kF32 || et == GgufType::kF64) {
        v->floats.push_back(tmp.f);
      } else {
        v->ints.push_back(tmp.i);
      }
    }
  }
  return OkStatus();
}

}  // namespace

const char* GgufTypeName(GgufType t) {
  static const char* kNames[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                 "bool", "string", "array", "u64", "i64", "f64"};
  const auto i = static_cast<uint32_t>(t);
  return i < 13 ? kNames[i] : "?";
}

bool GgufValue::IsInteger() const {
  switch (type) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kU16:
    case GgufType::kI16:
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kU64:
    case GgufType::kI64:
      return true;
    default:
      return false;
  }
}

std::string GgufValue::DebugString(size_t max_elems) const {
  std::ostringstream os;
  if (type == GgufType::kString) return "\"" + s + "\"";
  if (type == GgufType::kBool) return i ? "true" : "false";
  if (IsInteger()) return std::to_string(i);
  if (IsFloat()) {
    os << f;
    return os.str();
  }
  os << "[" << GgufTypeName(elem_type) << " x " << array_size << "]";
  if (max_elems > 0 && array_size > 0) {
    os << " {";
    for (size_t k = 0; k < array_size && k < max_elems; ++k) {
      if (k) os << ", ";
      if (!strings.empty())
        os << '"' << strings[k] << '"';
      else if (!floats.empty())
        os << floats[k];
      else if (!ints.empty())
        os << ints[k];
      else
        os << "[...]";
    }
    if (array_size > max_elems) os << ", ...";
    os << "}";
  }
  return os.str();
}

int64_t GgufTensorInfo::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::Open(path));
  return Parse(std::move(file));
}

StatusOr<std::unique_ptr<GgufFile>> GgufFile::Parse(std::shared_ptr<MappedFile> file) {
  auto gguf = std::unique_ptr<GgufFile>(new GgufFile());
  gguf->file_ = file;
  Cursor c(file->data(), file->size());
  uint32_t magic = 0;
  RETURN_IF_ERROR(c.Read(&magic, "magic"));
  if (magic != 0x46554747) {  // "GGUF" little-endian
    return InvalidArgumentError("'" + file->path() + "' is not a GGUF file (bad magic)");
  }
  RETURN_IF_ERROR(c.Read(&gguf->version_, "version"));
  if (gguf->version_ != 2 && gguf->version_ != 3) {
    return UnimplementedError("GGUF version " + std::to_string(gguf->version_) +
                              " is not supported (only 2 and 3)");
  }
  uint64_t num_tensors = 0, num_kv = 0;
  RETURN_IF_ERROR(c.Read(&num_tensors, "tensor count"));
  RETURN_IF_ERROR(c.Read(&num_kv, "metadata count"));
  if (num_kv > c.remaining() / 12)
    return DataLossError("metadata count " + std::to_string(num_kv) + " is larger than the file");
  if (num_tensors > c.remaining() / 24)
    return DataLossError("tensor count " + std::to_string(num_tensors) +
                         " is larger than the file");

  for (uint64_t k = 0; k < num_kv; ++k) {
    std::string key;
    RETURN_IF_ERROR(c.ReadString(&key, "metadata key"));
    uint32_t type = 0;
    RETURN_IF_ERROR(c.Read(&type, "metadata type"));
    if (!ValidType(type)) {
      return DataLossError("metadata '" + key + "' has unknown type " + std::to_string(type));
    }
    GgufValue value;
    RETURN_IF_ERROR(ReadValue(c, static_cast<GgufType>(type), &value, key, 0));
    if (!gguf->metadata_.emplace(key, std::move(value)).second) {
      return DataLossError("metadata key '" + key + "' appears twice");
    }
  }
  if (const GgufValue* a = gguf->Find("general.alignment")) {
    // The GGUF spec asks for a multiple of 8; block scales are then read at aligned addresses.
    if (!a->IsInteger() || a->i < 8 || a->i > (1 << 20) || (a->i & (a->i - 1)) != 0) {
      return DataLossError("general.alignment must be a power of two of at least 8, got " +
                           a->DebugString());
    }
    gguf->alignment_ = static_cast<uint64_t>(a->i);
  }

  for (uint64_t t = 0; t < num_tensors; ++t) {
    GgufTensorInfo info;
    RETURN_IF_ERROR(c.ReadString(&info.name, "tensor name"));
    uint32_t n_dims = 0;
    RETURN_IF_ERROR(c.Read(&n_dims, "tensor rank"));
    if (n_dims == 0 || n_dims > kMaxDims) {
      return DataLossError("tensor '" + info.name + "' has rank " + std::to_string(n_dims));
    }
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t dim = 0;
      RETURN_IF_ERROR(c.Read(&dim, "tensor dimension"));
      if (dim == 0 || dim > (1ull << 40)) {
        return DataLossError("tensor '" + info.name + "' has bad dimension " + std::to_string(dim));
      }
      info.dims.push_back(static_cast<int64_t>(dim));
    }
    RETURN_IF_ERROR(c.Read(&info.ggml_type, "tensor type"));
    RETURN_IF_ERROR(c.Read(&info.offset, "tensor offset"));
    info.dtype = DTypeFromGgmlId(info.ggml_type);
    if (!gguf->tensor_index_.emplace(info.name, gguf->tensors_.size()).second) {
      return DataLossError("tensor '" + info.name + "' appears twice");
    }
    gguf->tensors_.push_back(std::move(info));
  }

  const uint64_t align = gguf->alignment_;
  const uint64_t data_start = (c.pos() + align - 1) / align * align;
  if (data_start > file->size() && num_tensors > 0) return c.Truncated("tensor data");
  const uint64_t data_size = file->size() > data_start ? file->size() - data_start : 0;
  for (auto& info : gguf->tensors_) {
    if (info.offset % align != 0) {
      return DataLossError("tensor '" + info.name + "' offset is not aligned to " +
                           std::to_string(align));
    }
    // Element count overflow guard: each dim <= 2^40 and at most 4 dims.
    __int128 elems = 1;
    for (int64_t d : info.dims) elems *= d;
    if (elems > ((__int128)1 << 48))
      return DataLossError("tensor '" + info.name + "' is too large");
    if (info.dtype) {
      const int64_t bs = DTypeBlockSize(*info.dtype);
      if (info.dims[0] % bs != 0) {
        return DataLossError("tensor '" + info.name + "' row length " +
                             std::to_string(info.dims[0]) + " is not a multiple of the " +
                             DTypeName(*info.dtype) + " block size");
      }
      info.num_bytes = static_cast<uint64_t>(elems / bs * DTypeBlockBytes(*info.dtype));
      if (info.offset > data_size || info.num_bytes > data_size - info.offset) {
        return DataLossError("tensor '" + info.name + "' data (offset " +
                             std::to_string(info.offset) + ", " + std::to_string(info.num_bytes) +
                             " bytes) runs past the end of the file: truncated?");
      }
      info.data = file->data() + data_start + info.offset;
    }
  }
  return gguf;
}

const GgufValue* GgufFile::Find(const std::string& key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

const GgufTensorInfo* GgufFile::FindTensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

StatusOr<std::optional<int64_t>> GgufFile::GetInt(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (!v) return std::optional<int64_t>();
  if (!v->IsInteger())
    return InvalidArgumentError("metadata '" + key + "' should be an integer, got " +
                                GgufTypeName(v->type));
  return std::optional<int64_t>(v->i);
}

StatusOr<std::optional<double>> GgufFile::GetFloat(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (!v) return std::optional<double>();
  if (v->IsFloat()) return std::optional<double>(v->f);
  if (v->IsInteger()) return std::optional<double>(static_cast<double>(v->i));
  return InvalidArgumentError("metadata '" + key + "' should be a number, got " +
                              GgufTypeName(v->type));
}

StatusOr<std::optional<bool>> GgufFile::GetBool(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (!v) return std::optional<bool>();
  if (v->type == GgufType::kBool || v->IsInteger()) return std::optional<bool>(v->i != 0);
  return InvalidArgumentError("metadata '" + key + "' should be a bool, got " +
                              GgufTypeName(v->type));
}

StatusOr<std::optional<std::string>> GgufFile::GetString(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (!v) return std::optional<std::string>();
  if (v->type != GgufType::kString)
    return InvalidArgumentError("metadata '" + key + "' should be a string, got " +
                                GgufTypeName(v->type));
  return std::optional<std::string>(v->s);
}

// ---- writer ----

namespace {
template <typename T>
void Put(std::vector<uint8_t>& out, T v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}
void PutString(std::vector<uint8_t>& out, const std::string& s) {
  Put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}
}  // namespace

void GgufWriter::Set(const std::string& key, std::vector<uint8_t> encoded) {
  for (auto& e : entries_) {
    if (e.key == key) {
      e.encoded = std::move(encoded);
      return;
    }
  }
  entries_.push_back({key, std::move(encoded)});
}

void GgufWriter::SetString(const std::string& key, const std::string& v) {
  std::vector<uint8_t> e;
  Put<uint32_t>(e, (uint32_t)GgufType::kString);
  PutString(e, v);
  Set(key, std::move(e));
}
void GgufWriter::SetU32(const std::string& key, uint32_t v) {
  std::vector<uint8_t> e;
  Put<uint32_t>(e, (uint32_t)GgufType::kU32);
  Put(e, v);
  Set(key, std::move(e));
}
void GgufWriter::SetI32(const std::string& key, int32_t v) {
  std::vector<uint8_t> e;
  Put<uint32_t>(e, (uint32_t)GgufType::kI32);
  Put(e, v);
  Set(key, std::move(e));
}
void GgufWriter::SetF32(const std::string& key, float v) {
  std::vector<uint8_t> e;
  Put<uint32_t>(e, (uint32_t)GgufType::kF32);
  Put(e, v);
  Set(key, std::move(e));
}
void GgufWriter::SetBool(const std::string& key, bool v) {
  std::vector<uint8_t> e;
  Put<uint32_t>(e, (uint32_t)GgufType::kBool);
  Put<uint8_t>(e, v ? 1 : 0);
  Set(key, std::move(e));
}
void GgufWriter::SetStringArray(const std::string& key, const std::vector<std::string>& v) {
  std::vector<uint8_t> e;
  Put<uint32_t>(e, (uint32_t)GgufType::kArray);
  Put<uint32_t>(e, (uint32_t)GgufType::kString);
  Put<uint64_t>(e, v.size());
  for (const auto& s : v) PutString(e, s);
  Set(key, std::move(e));
}
void GgufWriter::SetF32Array(const std::string& key, const std::vector<float>& v) {
  std::vector<uint8_t> e;
  Put<uint32_t>(e, (uint32_t)GgufType::kArray);
  Put<uint32_t>(e, (uint32_t)GgufType::kF32);
  Put<uint64_t>(e, v.size());
  for (float x : v) Put(e, x);
  Set(key, std::move(e));
}
void GgufWriter::SetI32Array(const std::string& key, const std::vector<int32_t>& v) {
  std::vector<uint8_t> e;
  Put<uint32_t>(e, (uint32_t)GgufType::kArray);
  Put<uint32_t>(e, (uint32_t)GgufType::kI32);
  Put<uint64_t>(e, v.size());
  for (int32_t x : v) Put(e, x);
  Set(key, std::move(e));
}

Status GgufWriter::AddTensor(const std::string& name, DType dtype, const std::vector<int64_t>& dims,
                             std::vector<uint8_t> bytes) {
  if (dims.empty() || dims.size() > kMaxDims)
    return InvalidArgumentError("tensor '" + name + "': bad rank");
  if (dims[0] % DTypeBlockSize(dtype) != 0)
    return InvalidArgumentError("tensor '" + name + "': row not a multiple of the block size");
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  const int64_t expect = n / DTypeBlockSize(dtype) * DTypeBlockBytes(dtype);
  if (static_cast<int64_t>(bytes.size()) != expect) {
    return InvalidArgumentError("tensor '" + name + "': " + std::to_string(bytes.size()) +
                                " bytes given, shape needs " + std::to_string(expect));
  }
  tensors_.push_back({name, dtype, dims, std::move(bytes)});
  return OkStatus();
}

Status GgufWriter::WriteFile(const std::string& path) const {
  constexpr uint64_t kAlign = 32;
  std::vector<uint8_t> header;
  Put<uint32_t>(header, 0x46554747);
  Put<uint32_t>(header, 3);
  Put<uint64_t>(header, tensors_.size());
  Put<uint64_t>(header, entries_.size());
  for (const auto& e : entries_) {
    PutString(header, e.key);
    header.insert(header.end(), e.encoded.begin(), e.encoded.end());
  }
  uint64_t offset = 0;
  std::vector<uint64_t> offsets;
  for (const auto& t : tensors_) {
    PutString(header, t.name);
    Put<uint32_t>(header, t.dims.size());
    for (int64_t d : t.dims) Put<uint64_t>(header, d);
    Put<uint32_t>(header, static_cast<uint32_t>(t.dtype));
    Put<uint64_t>(header, offset);
    offsets.push_back(offset);
    offset += (t.bytes.size() + kAlign - 1) / kAlign * kAlign;
  }
  header.resize((header.size() + kAlign - 1) / kAlign * kAlign, 0);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return InvalidArgumentError("cannot write '" + path + "'");
  out.write(reinterpret_cast<const char*>(header.data()), header.size());
  static const char kZeros[kAlign] = {};
  for (const auto& t : tensors_) {
    out.write(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size());
    const uint64_t pad = (kAlign - t.bytes.size() % kAlign) % kAlign;
    out.write(kZeros, pad);
  }
  if (!out) return InternalError("write to '" + path + "' failed");
  return OkStatus();
}

}  // namespace inflight
