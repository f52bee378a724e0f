// Scalar reference kernels: the oracle every SIMD kernel is tested against.
#include "kernels_scalar.hpp"
#include "kernels.hpp"

namespace kvlab::kernels {

const kernel_table &scalar_kernels() noexcept {
  static constexpr kernel_table table{isa::scalar,      scalar::dot_codes, scalar::axpy_codes,
                                      scalar::dot_f32,  scalar::axpy_f32,  scalar::dot_f16,
                                      scalar::axpy_f16, scalar::dot_bf16,  scalar::axpy_bf16};
  return table;
}

} // namespace kvlab::kernels
