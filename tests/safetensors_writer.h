// Writes Hugging Face safetensors files for tests (model folders, PEFT adapters).
#pragma once

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/fp16.h"

namespace inflight::testing {

struct HfTensor {
  std::string name;
  std::vector<int64_t> shape;  // row-major
  std::vector<float> values;
  std::vector<int64_t> i64;  // when set: an I64 tensor of these values (values unused)
};

// dtype: "F32", "F16" or "BF16".
inline void WriteSafetensors(const std::string& path, const std::vector<HfTensor>& tensors,
                             const std::string& dtype = "F32") {
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const HfTensor& t : tensors) {
    const size_t begin = data.size();
    if (!t.i64.empty()) {
      data.append(reinterpret_cast<const char*>(t.i64.data()), t.i64.size() * 8);
      header[t.name] = {
          {"dtype", "I64"}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
      continue;
    }
    for (float f : t.values) {
      if (dtype == "F32") {
        data.append(reinterpret_cast<const char*>(&f), 4);
      } else {
        const uint16_t h = dtype == "BF16" ? Fp32ToBf16(f) : Fp32ToFp16(f);
        data.append(reinterpret_cast<const char*>(&h), 2);
      }
    }
    header[t.name] = {{"dtype", dtype}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
  }
  const std::string h = header.dump();
  const uint64_t n = h.size();
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << h << data;
}

}  // namespace inflight::testing
