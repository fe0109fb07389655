#include "tensor/dtype.h"

#include <cctype>

namespace inflight {
namespace {

struct DTypeInfo {
  DType type;
  const char* name;
  int64_t block_size;   // elements
  int64_t block_bytes;  // bytes
  bool in_files;
};

// Block sizes from the GGUF spec (ggml-common.h); x16 layouts from kernels/packed_layout.h
// (one super-block's record for 16 rows, divided by 16).
constexpr DTypeInfo kInfo[] = {
    {DType::kF32, "f32", 1, 4, true},
    {DType::kF16, "f16", 1, 2, true},
    {DType::kBF16, "bf16", 1, 2, true},
    {DType::kQ8_0, "q8_0", 32, 34, true},
    {DType::kQ4_0, "q4_0", 32, 18, true},
    {DType::kQ4_1, "q4_1", 32, 20, true},
    {DType::kQ5_0, "q5_0", 32, 22, true},
    {DType::kQ5_1, "q5_1", 32, 24, true},
    {DType::kQ2_K, "q2_k", 256, 84, true},
    {DType::kQ3_K, "q3_k", 256, 110, true},
    {DType::kQ4_K, "q4_k", 256, 144, true},
    {DType::kQ5_K, "q5_k", 256, 176, true},
    {DType::kQ6_K, "q6_k", 256, 210, true},
    {DType::kIQ4_NL, "iq4_nl", 32, 18, true},
    {DType::kIQ4_XS, "iq4_xs", 256, 136, true},
    {DType::kMXFP4, "mxfp4", 32, 17, true},
    {DType::kI8, "i8", 1, 1, true},
    {DType::kI32, "i32", 1, 4, true},
    {DType::kQ8_0x16, "q8_0x16", 32, 34, false},
    {DType::kQ4_0x16, "q4_0x16", 32, 18, false},
    {DType::kQ4_1x16, "q4_1x16", 32, 20, false},
    {DType::kQ5_0x16, "q5_0x16", 32, 22, false},
    {DType::kQ5_1x16, "q5_1x16", 32, 24, false},
    {DType::kQ2_Kx16, "q2_kx16", 256, 84, false},
    {DType::kQ3_Kx16, "q3_kx16", 256, 114, false},
    {DType::kQ4_Kx16, "q4_kx16", 256, 148, false},
    {DType::kQ5_Kx16, "q5_kx16", 256, 180, false},
    {DType::kQ6_Kx16, "q6_kx16", 256, 210, false},
    {DType::kIQ4_NLx16, "iq4_nlx16", 32, 18, false},
    {DType::kIQ4_XSx16, "iq4_xsx16", 256, 138, false},
    {DType::kMXFP4x16, "mxfp4x16", 32, 17, false},
    {DType::kF16x16, "f16x16", 1, 2, false},
    {DType::kBF16x16, "bf16x16", 1, 2, false},
    {DType::kI16x16, "i16x16", 64, 132, false},
};

const DTypeInfo* Find(DType t) {
  for (const DTypeInfo& i : kInfo) {
    if (i.type == t) return &i;
  }
  return nullptr;
}

}  // namespace

int64_t DTypeBlockSize(DType t) {
  const DTypeInfo* i = Find(t);
  return i ? i->block_size : 1;
}

int64_t DTypeBlockBytes(DType t) {
  const DTypeInfo* i = Find(t);
  return i ? i->block_bytes : 0;
}

const char* DTypeName(DType t) {
  const DTypeInfo* i = Find(t);
  return i ? i->name : "?";
}

bool IsQuantizedFileType(DType t) {
  const DTypeInfo* i = Find(t);
  return i && i->in_files && i->block_size > 1;
}

std::optional<DType> DTypeFromGgmlId(uint32_t id) {
  for (const DTypeInfo& i : kInfo) {
    if (i.in_files && static_cast<uint32_t>(i.type) == id) return i.type;
  }
  return std::nullopt;
}

std::string GgmlTypeName(uint32_t id) {
  static const char* kNames[] = {
      "f32",   "f16",        "q4_0",       "q4_1",       "q4_2",     "q4_3",     "q5_0",
      "q5_1",  "q8_0",       "q8_1",       "q2_K",       "q3_K",     "q4_K",     "q5_K",
      "q6_K",  "q8_K",       "iq2_xxs",    "iq2_xs",     "iq3_xxs",  "iq1_s",    "iq4_nl",
      "iq3_s", "iq2_s",      "iq4_xs",     "i8",         "i16",      "i32",      "i64",
      "f64",   "iq1_m",      "bf16",       "q4_0_4_4",   "q4_0_4_8", "q4_0_8_8", "tq1_0",
      "tq2_0", "iq4_nl_4_4", "iq4_nl_4_8", "iq4_nl_8_8", "mxfp4",    "nvfp4",    "q1_0",
      "q2_0"};
  if (id < sizeof(kNames) / sizeof(kNames[0])) return kNames[id];
  return "type#" + std::to_string(id);
}

std::optional<DType> DTypeFromName(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const DTypeInfo& i : kInfo) {
    if (i.in_files && i.type != DType::kI8 && i.type != DType::kI32 && lower == i.name)
      return i.type;
  }
  return std::nullopt;
}

const char* WeightDTypeNames() {
  return "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl, "
         "iq4_xs, mxfp4";
}

}  // namespace inflight
