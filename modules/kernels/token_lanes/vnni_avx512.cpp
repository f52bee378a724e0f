// Keys in token lanes by integer dot products (AVX-512 VNNI); a pass of heads with a query
// that is not finite takes the AVX-512 table's dot_records.
#include "vnni_avx512.hpp"
#include "../dispatch/paths.hpp"

namespace kvlab::kernels::avx512 {
const dot_records_kernel dot_integer = [](const record_format& f, const float* queries, std::size_t heads,
                                          const std::uint8_t* records, std::size_t count, float* scores,
                                          std::size_t stride) noexcept {
  simd::integer_dot_kernels::dot_records(f, queries, heads, records, count, scores, stride,
                                         avx512_kernels().dot_records);
};
} // namespace kvlab::kernels::avx512
