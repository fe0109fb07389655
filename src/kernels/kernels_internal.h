// Per-level tables, visible only inside the kernels library.
#pragma once

#include "kernels/kernels.h"

namespace inflight::kernels {
const KernelTable& ScalarKernelTable();
const KernelTable& Avx512KernelTable();  // defined only when built with AVX-512 support
}  // namespace inflight::kernels
