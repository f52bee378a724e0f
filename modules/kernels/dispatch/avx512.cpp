// The AVX-512 (F, BW, DQ, VL) and AVX-512 VNNI tables. Runs of records take the first fast
// path below that serves their format (and GQA group size), else the scalar reference.
// Compiled with those -m flags only here and in the family translation units the paths
// lead to.
#include "../vector/avx512.hpp"
#include "../records/coded.hpp"
#include "../token_lanes/vnni_avx512.hpp"
#include "paths.hpp"
#include "table.hpp"

namespace kvlab::kernels {
namespace avx512 {
namespace {
using arch = xsimd::avx512bw;

bool rows_of_floats(const record_format& f, std::size_t) noexcept { return simd::row_kernels<arch>::serves(f); }
bool codes_in_token_lanes(const record_format& f, std::size_t heads) noexcept {
  return simd::token_lane_kernels::serves(f, heads);
}
bool codes_in_channel_lanes(const record_format& f, std::size_t) noexcept {
  return simd::coded_kernels<arch>::serves(f);
}
bool codes_by_integer_dots(const record_format& f, std::size_t) noexcept {
  return simd::integer_dot_kernels::integer_dots_pay(f);
}

constexpr record_path<dot_records_kernel> dot_paths[] = {
    {"f32, f16 and bf16 rows", rows_of_floats, &dot_rows},
    {"affine 2- and 4-bit codes (8-bit: more than one head) in token lanes; bare 2-bit rows for one head by pair "
     "tables",
     codes_in_token_lanes, &dot_token_lanes},
    {"2-, 4- and 8-bit codes in channel lanes; fp8 codes in pairs of 32", codes_in_channel_lanes, &dot_coded}};
constexpr record_path<axpy_records_kernel> axpy_paths[] = {
    {"f32, f16 and bf16 rows", rows_of_floats, &axpy_rows},
    {"2-, 4- and 8-bit codes in channel lanes; fp8 codes in pairs of 32", codes_in_channel_lanes, &axpy_coded}};
// The VNNI table tries this first, then dot_paths.
constexpr record_path<dot_records_kernel> vnni_dot_paths[] = {
    {"affine 4- and 8-bit codes with per-token parameters by integer dot products", codes_by_integer_dots,
     &dot_integer}};

constexpr dot_records_kernel dot_records = &dot_records_over<dot_paths, &scalar::dot_records>;
constexpr dot_records_kernel dot_records_vnni = &dot_records_over<vnni_dot_paths, dot_records>;
constexpr axpy_records_kernel axpy_records = &axpy_records_over<axpy_paths, &scalar::axpy_records>;

// Bare 2- and 4-bit rows in token lanes, the rest block by block through dot_records.
void dot_channel_blocks(const record_format& f, const channel_block* blocks, std::size_t count, unsigned per_channel,
                        bool params_f32, const float* queries, std::size_t heads, float* scores,
                        std::size_t stride) noexcept {
  if (simd::token_lane_kernels::serves_channel_blocks(f))
    return dot_channel_blocks_in_token_lanes(f, blocks, count, per_channel, params_f32, queries, heads, scores, stride);
  simd::channel_param_kernels<arch>::dot_channel_blocks(f, blocks, count, per_channel, params_f32, queries, heads,
                                                        scores, stride, dot_records);
}

constexpr kernel_table table_for(isa instruction_set) noexcept {
  kernel_table table = simd::table_of_families<arch>(instruction_set);
  table.dot_records = instruction_set == isa::avx512_vnni ? dot_records_vnni : dot_records;
  table.axpy_records = axpy_records;
  table.dot_channel_blocks = &dot_channel_blocks;
  return table;
}
} // namespace
} // namespace avx512

const kernel_table& avx512_kernels() noexcept {
  static constexpr kernel_table table = avx512::table_for(isa::avx512);
  return table;
}
// The fixed-point values use byte permutes (VBMI), which VNNI CPUs before Ice Lake lack:
// there the values take the float loop.
const kernel_table& avx512_vnni_kernels() noexcept {
  static const kernel_table with_vbmi = [] {
    kernel_table table = avx512::table_for(isa::avx512_vnni);
    table.axpy_records_fixed = avx512::axpy_records_fixed;
    return table;
  }();
  static constexpr kernel_table without_vbmi = avx512::table_for(isa::avx512_vnni);
  static const bool vbmi = __builtin_cpu_supports("avx512vbmi");
  return vbmi ? with_vbmi : without_vbmi;
}

} // namespace kvlab::kernels
