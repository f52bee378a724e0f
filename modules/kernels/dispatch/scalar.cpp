// Scalar reference kernels: the oracle every SIMD kernel is tested against.
#include "../kernels.hpp"
#include "../kernels_scalar.hpp"

namespace kvlab::kernels {

const kernel_table& scalar_kernels() noexcept {
  static constexpr kernel_table table{
      .instruction_set = isa::scalar,
      .dot_codes = scalar::dot_codes,
      .axpy_codes = scalar::axpy_codes,
      .dot_raw_codes = scalar::dot_raw_codes,
      .axpy_raw_codes = scalar::axpy_raw_codes,
      .absmax = scalar::absmax,
      .min_max = scalar::min_max,
      .decode_codes = scalar::decode_codes,
      .encode_uniform = scalar::encode_uniform,
      .encode_nearest = scalar::encode_nearest,
      .encode_fp8 = scalar::encode_fp8,
      .encode_uniform_records =
          scalar::encode_uniform_records<scalar::all_finite, scalar::absmax, scalar::min_max, scalar::encode_uniform>,
      .encode_nearest_records = scalar::encode_nearest_records<scalar::all_finite, scalar::absmax, root_mean_square,
                                                               scalar::encode_nearest_indexed>,
      .encode_fp8_records = scalar::encode_fp8_records<scalar::all_finite, scalar::absmax, scalar::encode_fp8>,
      .encode_uniform_channels = scalar::encode_uniform_channels<scalar::all_finite>,
      .dot_records = scalar::dot_records,
      .axpy_records = scalar::axpy_records,
      .axpy_records_fixed = scalar::axpy_records_fixed,
      .fold_channel_params = scalar::fold_channel_params,
      .dot_channel_blocks = scalar::dot_channel_blocks,
      .dot_f32 = scalar::dot_f32,
      .axpy_f32 = scalar::axpy_f32,
      .dot_f16 = scalar::dot_f16,
      .axpy_f16 = scalar::axpy_f16,
      .dot_bf16 = scalar::dot_bf16,
      .axpy_bf16 = scalar::axpy_bf16,
      .floats_to_f16 = scalar::floats_to_f16,
      .walsh_hadamard = scalar::walsh_hadamard,
      .f16_to_floats = scalar::f16_to_floats,
      .encode_raw = scalar::encode_raw,
      .softmax = scalar::softmax,
      .decodes_fp8_levels = [](const float*) { return false; }};
  return table;
}

} // namespace kvlab::kernels
