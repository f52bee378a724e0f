// Dots of runs of coded records in channel lanes on AVX-512, fp8 codes in pairs of 32 first
// (the dots and the accumulations are separate translation units: each is one of the
// longest to compile).
#include "../dispatch/paths.hpp"
#include "../fp8/pairs_avx512.hpp"
#include "coded.hpp"

namespace kvlab::kernels::avx512 {
const dot_records_kernel dot_coded = &simd::coded_kernels<xsimd::avx512bw>::dot_records;
} // namespace kvlab::kernels::avx512
