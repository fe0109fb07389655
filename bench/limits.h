// The machine's limits, measured in the benchmark that quotes them (these shared machines
// drift by 2x over minutes, so a ratio is only meaningful against a limit of the same run).
#pragma once

namespace inflight {
class ThreadPool;

// Read bandwidth in bytes/s: the best of `passes` sums of a 1 GiB array with AVX-512 loads,
// one range per pool thread (the array is allocated once per process).
double MeasureReadBandwidth(ThreadPool& pool, int passes = 5);
// The median of `passes` such sums: what a workload of about a second sees on a machine
// whose bandwidth other tenants share.
double MedianReadBandwidth(ThreadPool& pool, int passes = 3);
// Peak operations/s over the pool's threads from independent instruction chains:
// int8 VNNI (vpdpbusd, 2 x 64 ops), FP32 FMA (2 x 16 flops), BF16 dot (vdpbf16ps, 2 x 32
// flops; 0 when the CPU lacks AVX512-BF16).
double MeasureInt8Peak(ThreadPool& pool);
double MeasureFp32Peak(ThreadPool& pool);
double MeasureBf16Peak(ThreadPool& pool);
// int16 VNNI (vpdpwssd, 2 x 32 ops): the dot the F16 / BF16 weights run on (kI16x16).
double MeasureInt16Peak(ThreadPool& pool);

}  // namespace inflight
