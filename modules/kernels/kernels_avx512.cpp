// AVX-512 (F, BW, DQ, VL) kernels (compiled with those -m flags only in this file).
#include "kernels_simd.hpp"

namespace kvlab::kernels {
const kernel_table& avx512_kernels() noexcept {
  static constexpr kernel_table table = simd::kernels<xsimd::avx512bw>::table(isa::avx512);
  return table;
}
// The fixed-point values use byte permutes (VBMI), which VNNI CPUs before Ice Lake lack:
// there the values take the float loop.
const kernel_table& avx512_vnni_kernels() noexcept {
  using kernels = simd::kernels<xsimd::avx512bw>;
  static constexpr kernel_table with_vbmi = kernels::table(isa::avx512_vnni);
  static constexpr kernel_table without_vbmi = [] {
    kernel_table table = with_vbmi;
    table.axpy_records_fixed = nullptr;
    return table;
  }();
  static const bool vbmi = __builtin_cpu_supports("avx512vbmi");
  return vbmi ? with_vbmi : without_vbmi;
}
} // namespace kvlab::kernels
