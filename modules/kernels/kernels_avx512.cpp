// AVX-512 (F, BW, DQ, VL) kernels (compiled with those -m flags only in this file).
#include "kernels_simd.hpp"

namespace kvlab::kernels {
const kernel_table& avx512_kernels() noexcept {
  static constexpr kernel_table table = simd::kernels<xsimd::avx512bw>::table(isa::avx512);
  return table;
}
const kernel_table& avx512_vnni_kernels() noexcept {
  static constexpr kernel_table table = simd::kernels<xsimd::avx512bw>::table(isa::avx512_vnni);
  return table;
}
} // namespace kvlab::kernels
