// Repacks quantized matrices into 16-row interleaved groups for the VNNI matmul, once at load
// time. Q8_0 / Q4_0, per group and per 32-column block: the 16 rows' F16 scales (32 bytes),
// then
// Q8_0: 8 quads x 16 rows x 4 bytes, each weight stored as w + 128 (unsigned for VNNI);
// Q4_0: 4 quads x 16 rows x 4 bytes, each byte holding element 4q+i in its low nibble and
//       element 16+4q+i in its high nibble (exactly the source byte qs[4q+i]).
// The other block formats (Q4_1 ... IQ4_XS, MXFP4) use the records of kernels/packed_layout.h.
// F16 / BF16 (64-column multiples) become 16-row groups of int16 blocks (DType::kI16x16, see
// kernels_internal.h), so one 64-byte load gives the 16 rows' weights of two columns for a
// vpdpwssd against a broadcast pair of int16 activations.
// One 64-byte load then feeds 16 rows x 4 columns to a dpbusd against 4 broadcast activation
// bytes, so the per-block scale work is shared by 16 rows instead of 1.
#pragma once

#include <cstdint>

#include "tensor/tensor_view.h"

namespace inflight::kernels {

// Whether `w` is a matrix the interleaved kernels take (F16, BF16, every quantized file type).
bool CanInterleave(const TensorView& w);
// Bytes the interleaved copy needs.
int64_t InterleavedBytes(const TensorView& w);
// Writes the interleaved copy of `w` to dst (InterleavedBytes(w) bytes) and returns its view.
TensorView Interleave(const TensorView& w, uint8_t* dst);

}  // namespace inflight::kernels
