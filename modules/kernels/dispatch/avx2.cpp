// The AVX2 (with FMA and F16C) table. Runs of records take the first fast path below that
// serves their format, else the scalar reference. Compiled with those -m flags only here
// and in the family translation units the paths lead to.
#include "../vector/avx2.hpp"
#include "../records/coded.hpp"
#include "paths.hpp"
#include "table.hpp"

namespace kvlab::kernels {
namespace avx2 {
namespace {
using arch = xsimd::fma3<xsimd::avx2>;

bool rows_of_floats(const record_format& f, std::size_t) noexcept { return simd::row_kernels<arch>::serves(f); }
bool codes_in_channel_lanes(const record_format& f, std::size_t) noexcept {
  return simd::coded_kernels<arch>::serves(f);
}

constexpr record_path<dot_records_kernel> dot_paths[] = {
    {"f32, f16 and bf16 rows", rows_of_floats, &dot_rows},
    {"2-, 4- and 8-bit codes in channel lanes", codes_in_channel_lanes, &dot_coded}};
constexpr record_path<axpy_records_kernel> axpy_paths[] = {
    {"f32, f16 and bf16 rows", rows_of_floats, &axpy_rows},
    {"2-, 4- and 8-bit codes in channel lanes", codes_in_channel_lanes, &axpy_coded}};

constexpr dot_records_kernel dot_records = &dot_records_over<dot_paths, &scalar::dot_records>;
constexpr axpy_records_kernel axpy_records = &axpy_records_over<axpy_paths, &scalar::axpy_records>;

void dot_channel_blocks(const record_format& f, const channel_block* blocks, std::size_t count, unsigned per_channel,
                        bool params_f32, const float* queries, std::size_t heads, float* scores,
                        std::size_t stride) noexcept {
  simd::channel_param_kernels<arch>::dot_channel_blocks(f, blocks, count, per_channel, params_f32, queries, heads,
                                                        scores, stride, dot_records);
}
} // namespace
} // namespace avx2

const kernel_table& avx2_kernels() noexcept {
  static constexpr kernel_table table = [] {
    kernel_table table = simd::table_of_families<avx2::arch>(isa::avx2);
    table.dot_records = avx2::dot_records;
    table.axpy_records = avx2::axpy_records;
    table.dot_channel_blocks = &avx2::dot_channel_blocks;
    return table;
  }();
  return table;
}

} // namespace kvlab::kernels
