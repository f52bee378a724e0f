// Runs of f32, f16 and bf16 rows on AVX2.
#include "../vector/avx2.hpp"
#include "../dispatch/paths.hpp"
#include "vector.hpp"

namespace kvlab::kernels::avx2 {
using rows = simd::row_kernels<xsimd::fma3<xsimd::avx2>>;
const dot_records_kernel dot_rows = &rows::dot_records;
const axpy_records_kernel axpy_rows = &rows::axpy_records;
} // namespace kvlab::kernels::avx2
