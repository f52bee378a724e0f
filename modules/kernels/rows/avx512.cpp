// Runs of f32, f16 and bf16 rows on AVX-512.
#include "../vector/avx512.hpp"
#include "../dispatch/paths.hpp"
#include "vector.hpp"

namespace kvlab::kernels::avx512 {
using rows = simd::row_kernels<xsimd::avx512bw>;
const dot_records_kernel dot_rows = &rows::dot_records;
const axpy_records_kernel axpy_rows = &rows::axpy_records;
} // namespace kvlab::kernels::avx512
