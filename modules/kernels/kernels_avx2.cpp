// AVX2 + FMA + F16C kernels (compiled with those -m flags only in this file).
#include "kernels_simd.hpp"

namespace kvlab::kernels {
const kernel_table& avx2_kernels() noexcept {
  static constexpr kernel_table table = simd::kernels<xsimd::fma3<xsimd::avx2>>::table(isa::avx2);
  return table;
}
} // namespace kvlab::kernels
