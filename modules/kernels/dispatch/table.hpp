// The slots of a kernel table that every vector ISA fills from the same family templates
// (codes, encoders, rows, channel parameters, softmax); each ISA's dispatch file adds the
// slots for runs of records, whose fast paths differ by ISA.
#pragma once
#include "../channel_params/vector.hpp"
#include "../codes/vector.hpp"
#include "../encoders/vector.hpp"
#include "../rows/vector.hpp"
#include "../softmax/vector.hpp"

namespace kvlab::kernels::simd {

// Whether Arch's record kernels decode 8-bit codes with these levels by bit moves.
template <class Arch>
bool decodes_fp8_levels(const float* levels) noexcept {
  return isa_ops<Arch>::fp8_levels(levels) != fp8_layout::none;
}

template <class Arch>
constexpr kernel_table table_of_families(isa instruction_set) noexcept {
  using codes = code_kernels<Arch>;
  using encoders = encoder_kernels<Arch>;
  using rows = row_kernels<Arch>;
  return {.instruction_set = instruction_set,
          .dot_codes = &codes::dot_codes,
          .axpy_codes = &codes::axpy_codes,
          .dot_raw_codes = &codes::dot_raw_codes,
          .axpy_raw_codes = &codes::axpy_raw_codes,
          .absmax = &encoders::absmax,
          .min_max = &encoders::min_max,
          .decode_codes = &codes::decode_codes,
          .encode_uniform = &encoders::encode_uniform,
          .encode_nearest = &encoders::encode_nearest,
          .encode_fp8 = &encoders::encode_fp8,
          .encode_uniform_records = &encoders::encode_uniform_records,
          .encode_nearest_records = &encoders::encode_nearest_records,
          .encode_fp8_records = &encoders::encode_fp8_records,
          .encode_uniform_channels = &encoders::encode_uniform_channels,
          .dot_records = nullptr,
          .axpy_records = nullptr,
          .axpy_records_fixed = nullptr,
          .fold_channel_params = &channel_param_kernels<Arch>::fold_channel_params,
          .dot_channel_blocks = nullptr,
          .dot_f32 = &rows::template dot_row<&rows::load_f32, 4, &scalar::load_f32>,
          .axpy_f32 = &rows::template axpy_row<&rows::load_f32, 4, &scalar::load_f32>,
          .dot_f16 = &rows::template dot_row<&rows::load_f16, 2, &scalar::load_f16>,
          .axpy_f16 = &rows::template axpy_row<&rows::load_f16, 2, &scalar::load_f16>,
          .dot_bf16 = &rows::template dot_row<&rows::load_bf16, 2, &scalar::load_bf16>,
          .axpy_bf16 = &rows::template axpy_row<&rows::load_bf16, 2, &scalar::load_bf16>,
          .floats_to_f16 = &rows::floats_to_f16,
          .walsh_hadamard = &rows::walsh_hadamard,
          .f16_to_floats = &rows::f16_to_floats,
          .encode_raw = &rows::encode_raw,
          .softmax = &softmax_kernels<Arch>::softmax,
          .decodes_fp8_levels = &decodes_fp8_levels<Arch>};
}

} // namespace kvlab::kernels::simd
