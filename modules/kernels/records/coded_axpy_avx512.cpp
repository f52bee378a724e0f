// Accumulations of runs of coded records in channel lanes on AVX-512, fp8 codes in pairs of
// 32 first.
#include "../dispatch/paths.hpp"
#include "../fp8/pairs_avx512.hpp"
#include "coded.hpp"

namespace kvlab::kernels::avx512 {
const axpy_records_kernel axpy_coded = &simd::coded_kernels<xsimd::avx512bw>::axpy_records;
} // namespace kvlab::kernels::avx512
