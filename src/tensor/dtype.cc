#include "tensor/dtype.h"

namespace inflight {

int64_t DTypeBlockSize(DType t) {
  switch (t) {
    case DType::kQ4_0:
    case DType::kQ8_0:
    case DType::kQ4_0x16:
    case DType::kQ8_0x16: return kQBlock;
    default: return 1;
  }
}

int64_t DTypeBlockBytes(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kQ8_0: return sizeof(BlockQ8_0);
    case DType::kQ4_0: return sizeof(BlockQ4_0);
    case DType::kQ8_0x16: return sizeof(BlockQ8_0);
    case DType::kQ4_0x16: return sizeof(BlockQ4_0);
    case DType::kI8: return 1;
    case DType::kI32: return 4;
  }
  return 0;
}

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kQ8_0: return "q8_0";
    case DType::kQ4_0: return "q4_0";
    case DType::kQ8_0x16: return "q8_0x16";
    case DType::kQ4_0x16: return "q4_0x16";
    case DType::kI8: return "i8";
    case DType::kI32: return "i32";
  }
  return "?";
}

std::optional<DType> DTypeFromGgmlId(uint32_t id) {
  switch (id) {
    case 0: return DType::kF32;
    case 1: return DType::kF16;
    case 2: return DType::kQ4_0;
    case 8: return DType::kQ8_0;
    case 30: return DType::kBF16;
    case 24: return DType::kI8;
    case 26: return DType::kI32;
    default: return std::nullopt;
  }
}

std::string GgmlTypeName(uint32_t id) {
  static const char* kNames[] = {"f32",  "f16",  "q4_0", "q4_1", "q4_2", "q4_3", "q5_0",
                                 "q5_1", "q8_0", "q8_1", "q2_K", "q3_K", "q4_K", "q5_K",
                                 "q6_K", "q8_K", "iq2_xxs", "iq2_xs", "iq3_xxs", "iq1_s",
                                 "iq4_nl", "iq3_s", "iq2_s", "iq4_xs", "i8", "i16", "i32",
                                 "i64", "f64", "iq1_m", "bf16"};
  if (id < sizeof(kNames) / sizeof(kNames[0])) return kNames[id];
  return "type#" + std::to_string(id);
}

std::optional<DType> DTypeFromName(std::string_view name) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
    if (name == DTypeName(t)) return t;
  }
  return std::nullopt;
}

}  // namespace inflight
