// Interleaved layouts of the block formats of kernels/quant_blocks.h (Q4_1 ... MXFP4) for the
// VNNI matmul, built once at load time (kernels/interleave.h). A matrix is stored as groups of
// 16 rows; a group as one record per super-block (256 columns, or 32 for the 32-weight
// formats): a header with the 16 rows' scales unpacked to bytes, then per 32-column block a
// payload of bit planes. Unpacking a payload yields 8 vectors of 64 bytes, vector p holding
// for row r (bytes 4r..4r+3) the unsigned quants of columns 4p..4p+3: exactly the operand of
// a vpdpbusd against 4 broadcast activation bytes. The planes:
//   nibbles: 4 x 64 bytes; vector q's byte 4r+i holds column 4q+i in its low nibble and
//            column 16+4q+i in its high nibble (vectors p = q and p = q + 4);
//   crumbs:  2 x 64 bytes; vector c's byte k holds 2 bits of vector 4c+q's byte k at bits 2q;
//   bits:    8 x 64-bit masks; mask p has one bit per byte of vector p.
// The value of a weight is s * (u - offset) - o with u the unpacked quant (through the format's
// table shifted by +128, for IQ4 and MXFP4), s and o the scale and min of its sub-block (16 or
// 32 columns).
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace inflight::kernels {

enum class PackedHeader {
  kD,   // d f16[16]
  kDM,  // d f16[16], m f16[16]                         (s = d, o = -m)
  kK4,  // d f16[16], dmin f16[16], sc u8[8][16], m u8[8][16]   (s = d sc, o = dmin m)
  kK6,  // d f16[16], sc i8[16][16]                     (s = d sc per 16 columns)
  kK2,  // d f16[16], dmin f16[16], scm u8[16][16]      (s = d (scm & 15), o = dmin (scm >> 4))
  kXS,  // d f16[16], sc i8[8][16]                      (s = d sc)
  kE8,  // e u8[16]                                     (s = 2^(e - 128), E8M0ToFp32Half)
};

// The IQ4 and MXFP4 tables shifted to unsigned bytes (kIq4Values + 128, kMxfp4Values + 128),
// for the lookup.
inline constexpr uint8_t kIq4Unsigned[16] = {1,   24,  45,  63,  79,  93,  106, 118,
                                             129, 141, 153, 166, 181, 197, 217, 241};
inline constexpr uint8_t kMxfp4Unsigned[16] = {128, 129, 130, 131, 132, 134, 136, 140,
                                               128, 127, 126, 125, 124, 122, 120, 116};

struct PackedLayout {
  DType source;
  DType packed;
  int blocks_per_record;         // 32-column blocks per super-block: 8 or 1
  int header_bytes;              // per 16-row group and super-block
  int block_bytes;               // payload per 16-row group and 32-column block
  int nib_at, crumb_at, bit_at;  // payload offsets of the planes, -1 when absent
  int crumb_shift, bit_shift;    // bit position of the crumbs / the bit in the quant
  const uint8_t* lut;            // IQ4 / MXFP4: u = lut[quant] (the table + 128), else null
  int offset;                    // subtracted from u (the integer zero point)
  bool sub16;                    // scales per 16 columns (else per 32)
  bool has_min;
  PackedHeader header;
  constexpr int record_bytes() const { return header_bytes + blocks_per_record * block_bytes; }
};

inline constexpr PackedLayout kPackedLayouts[] = {
    // source        packed               blk hdr  pay  nib  crm  bit cs bs  lut   off  s16    min
    {DType::kQ4_1, DType::kQ4_1x16, 1, 64, 256, 0, -1, -1, 0, 0, nullptr, 0, false, true,
     PackedHeader::kDM},
    {DType::kQ5_0, DType::kQ5_0x16, 1, 32, 320, 64, -1, 0, 0, 4, nullptr, 16, false, false,
     PackedHeader::kD},
    {DType::kQ5_1, DType::kQ5_1x16, 1, 64, 320, 64, -1, 0, 0, 4, nullptr, 0, false, true,
     PackedHeader::kDM},
    {DType::kIQ4_NL, DType::kIQ4_NLx16, 1, 32, 256, 0, -1, -1, 0, 0, kIq4Unsigned, 128, false,
     false, PackedHeader::kD},
    {DType::kQ2_K, DType::kQ2_Kx16, 8, 320, 128, -1, 0, -1, 0, 0, nullptr, 0, true, true,
     PackedHeader::kK2},
    {DType::kQ3_K, DType::kQ3_Kx16, 8, 288, 192, -1, 0, 128, 0, 2, nullptr, 4, true, false,
     PackedHeader::kK6},
    {DType::kQ4_K, DType::kQ4_Kx16, 8, 320, 256, 0, -1, -1, 0, 0, nullptr, 0, false, true,
     PackedHeader::kK4},
    {DType::kQ5_K, DType::kQ5_Kx16, 8, 320, 320, 64, -1, 0, 0, 4, nullptr, 0, false, true,
     PackedHeader::kK4},
    {DType::kQ6_K, DType::kQ6_Kx16, 8, 288, 384, 0, 256, -1, 4, 0, nullptr, 32, true, false,
     PackedHeader::kK6},
    {DType::kIQ4_XS, DType::kIQ4_XSx16, 8, 160, 256, 0, -1, -1, 0, 0, kIq4Unsigned, 128, false,
     false, PackedHeader::kXS},
    // 16 exponent bytes + 256 nibble bytes: the source's 17 bytes per row and block.
    {DType::kMXFP4, DType::kMXFP4x16, 1, 16, 256, 0, -1, -1, 0, 0, kMxfp4Unsigned, 128, false,
     false, PackedHeader::kE8},
};

// The layout whose source or packed type is t; null when none.
inline const PackedLayout* FindPackedLayout(DType t) {
  for (const PackedLayout& l : kPackedLayouts) {
    if (l.source == t || l.packed == t) return &l;
  }
  return nullptr;
}

// Scalar access to a record, for the scalar twin, dequantization and tests.
// Unsigned quant u (after the lookup table) of row `lane`, column `col` (0..31) of block payload.
int PackedQuant(const PackedLayout& l, const uint8_t* payload, int lane, int col);
// Scale and min of row `lane`'s sub-block `sub` (16 columns when l.sub16, else 32) of block
// `block` (0..blocks_per_record-1) of a record's header.
void PackedScales(const PackedLayout& l, const uint8_t* header, int block, int sub, int lane,
                  float* s, float* o);

}  // namespace inflight::kernels
