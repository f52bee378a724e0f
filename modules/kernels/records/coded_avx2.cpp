// Runs of coded records in channel lanes on AVX2.
#include "../dispatch/paths.hpp"
#include "../vector/avx2.hpp"
#include "coded.hpp"

namespace kvlab::kernels::avx2 {
using coded = simd::coded_kernels<xsimd::fma3<xsimd::avx2>>;
const dot_records_kernel dot_coded = &coded::dot_records;
const axpy_records_kernel axpy_coded = &coded::axpy_records;
} // namespace kvlab::kernels::avx2
