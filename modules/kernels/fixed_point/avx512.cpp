// Values of 2- and 4-bit codes in fixed point (AVX-512 VNNI and VBMI).
#include "avx512.hpp"
#include "../dispatch/paths.hpp"

namespace kvlab::kernels::avx512 {
const decltype(kernel_table::axpy_records_fixed) axpy_records_fixed = &simd::fixed_point_kernels::axpy_records_fixed;
} // namespace kvlab::kernels::avx512
