#include "format/safetensors.h"

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/fp16.h"

namespace inflight {

std::optional<DType> DTypeFromSafetensors(const std::string& name) {
  if (name == "F32") return DType::kF32;
  if (name == "F16") return DType::kF16;
  if (name == "BF16") return DType::kBF16;
  return std::nullopt;
}

StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::Open(path));
  return Parse(std::move(file));
}

StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Parse(
    std::shared_ptr<MappedFile> file) {
  const std::string path = file->path();
  auto fail = [&](const std::string& m) { return DataLossError(path + ": " + m); };
  if (file->size() < 8) return fail("too small for a safetensors header");
  uint64_t header_len = 0;
  std::memcpy(&header_len, file->data(), 8);
  if (header_len > file->size() - 8 || header_len > (100u << 20))
    return fail("header length runs past the end of the file");
  const auto header =
      nlohmann::json::parse(file->data() + 8, file->data() + 8 + header_len, nullptr, false);
  if (header.is_discarded() || !header.is_object()) return fail("header is not a JSON object");
  auto st = std::unique_ptr<SafetensorsFile>(new SafetensorsFile());
  st->file_ = file;
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = file->size() - data_start;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const auto& v = it.value();
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
        !v.contains("data_offsets") || !v["dtype"].is_string() || !v["shape"].is_array() ||
        !v["data_offsets"].is_array() || v["data_offsets"].size() != 2) {
      return fail("tensor '" + it.key() + "' has a malformed entry");
    }
    SafetensorsTensor t;
    t.dtype = v["dtype"].get<std::string>();
    uint64_t elems = 1;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (1ull << 40))
        return fail("tensor '" + it.key() + "' has a bad shape");
      t.shape.push_back(d.get<int64_t>());
      // Checked before the product: [2^24, 2^40] must not wrap to a small count.
      if (d.get<uint64_t>() != 0 && elems > (1ull << 48) / d.get<uint64_t>())
        return fail("tensor '" + it.key() + "' is too large");
      elems *= d.get<uint64_t>();
    }
    const auto& off = v["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      return fail("tensor '" + it.key() + "' has bad offsets");
    const uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
    if (b > e || e > data_size)
      return fail("tensor '" + it.key() + "' data runs past the end of the file: truncated?");
    t.data = file->data() + data_start + b;
    t.num_bytes = e - b;
    if (auto dt = DTypeFromSafetensors(t.dtype);
        dt && elems * DTypeBlockBytes(*dt) != t.num_bytes) {
      return fail("tensor '" + it.key() + "' byte size does not match its shape");
    }
    st->tensors_.emplace(it.key(), std::move(t));
  }
  return st;
}

Status WriteSafetensorsF16(const std::string& path, const std::vector<SafetensorsOut>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const SafetensorsOut& t : tensors) {
    uint64_t elems = 1;
    for (int64_t d : t.shape) elems *= static_cast<uint64_t>(d);
    header[t.name] = {
        {"dtype", "F16"}, {"shape", t.shape}, {"data_offsets", {offset, offset + 2 * elems}}};
    offset += 2 * elems;
  }
  std::string h = header.dump();
  h.resize((h.size() + 7) / 8 * 8,
           ' ');  // the data starts 8-byte aligned (as the format's writers do)
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return InternalError("cannot write " + path);
  const uint64_t n = h.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << h;
  std::vector<uint16_t> row;
  for (const SafetensorsOut& t : tensors) {
    uint64_t elems = 1;
    for (int64_t d : t.shape) elems *= static_cast<uint64_t>(d);
    row.resize(elems);
    for (uint64_t i = 0; i < elems; ++i) row[i] = Fp32ToFp16(t.values[i]);
    out.write(reinterpret_cast<const char*>(row.data()), static_cast<std::streamsize>(2 * elems));
  }
  out.close();
  return out ? OkStatus() : InternalError("cannot write " + path);
}

}  // namespace inflight
