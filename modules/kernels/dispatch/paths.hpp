// The pieces of a dispatch table: fast paths for runs of records, each serving the formats
// (and GQA group sizes) its test passes, and the family kernels they lead to. A family's
// kernels for an ISA are defined in its own translation unit (<family>/<isa>.cpp), so
// that no translation unit instantiates every family and a 2-core build runs them in
// parallel.
#pragma once
#include "../kernels.hpp"

#include <string_view>

namespace kvlab::kernels {

using dot_records_kernel = decltype(kernel_table::dot_records);
using axpy_records_kernel = decltype(kernel_table::axpy_records);

// Internal linkage: each ISA's dispatch translation unit keeps its own copies, compiled
// with its own -m flags.
namespace {
// One fast path: what it covers, whether it serves a format and GQA group size, and its
// kernel.
template <class Kernel>
struct record_path {
  std::string_view covers;
  bool (*serves)(const record_format& f, std::size_t heads) noexcept;
  const Kernel* kernel;
};
// The kernel of the first of `paths` that serves f and `heads`, or `otherwise`. The fast
// paths read codes per element with fp16 or f32 parameters; scale bytes (mxfp4, nvfp4) and
// records a quantizer decodes whole (group_codes) take `otherwise`.
template <class Kernel, std::size_t N>
Kernel first_serving(const record_path<Kernel> (&paths)[N], const record_format& f, std::size_t heads,
                     Kernel otherwise) noexcept {
  if (!f.params_f16_or_f32() || f.kind == element_kind::group_codes) return otherwise;
  for (const record_path<Kernel>& path : paths)
    if (path.serves(f, heads)) return *path.kernel;
  return otherwise;
}
// dot_records and axpy_records over a table of paths, `Otherwise` where none serves.
template <const auto& Paths, dot_records_kernel Otherwise>
void dot_records_over(const record_format& f, const float* queries, std::size_t heads, const std::uint8_t* records,
                      std::size_t count, float* scores, std::size_t stride) noexcept {
  first_serving(Paths, f, heads, Otherwise)(f, queries, heads, records, count, scores, stride);
}
template <const auto& Paths, axpy_records_kernel Otherwise>
void axpy_records_over(const record_format& f, const float* weights, std::size_t stride, std::size_t heads,
                       const std::uint8_t* records, std::size_t count, float* acc) noexcept {
  first_serving(Paths, f, heads, Otherwise)(f, weights, stride, heads, records, count, acc);
}
} // namespace

namespace avx2 {
extern const dot_records_kernel dot_rows, dot_coded;
extern const axpy_records_kernel axpy_rows, axpy_coded;
} // namespace avx2

namespace avx512 {
extern const dot_records_kernel dot_rows, dot_coded, dot_token_lanes, dot_integer;
extern const axpy_records_kernel axpy_rows, axpy_coded;
extern const decltype(kernel_table::dot_channel_blocks) dot_channel_blocks_in_token_lanes;
extern const decltype(kernel_table::axpy_records_fixed) axpy_records_fixed;
} // namespace avx512

} // namespace kvlab::kernels
