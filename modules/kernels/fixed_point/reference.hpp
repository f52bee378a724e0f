// The scalar reference of values in fixed point (axpy_records_fixed): the oracle the vector kernels are tested against,
// and the tail and odd-width fallback they call for what their vector loops do not cover.
#pragma once
#include "../records/reference.hpp"

namespace kvlab::kernels::scalar {
// Internal linkage (see kernels_scalar.hpp).
namespace {

// One token's weight times one group scale on a fixed-point grid (axpy_records_fixed).
inline std::uint32_t fixed_weight(float weight, float grid, float scale) noexcept {
  const float x = weight * grid * scale;
  if (!(x < 4294967296.0f)) return 0xFFFFFFFFu; // what vcvtps2udq gives out of range
  return static_cast<std::uint32_t>(std::nearbyint(x));
}
// One token's weight times one group zero, signed, on a fixed-point grid.
inline std::int32_t fixed_zero(float weight, float grid, float zero) noexcept {
  const float x = weight * grid * zero;
  if (!(std::fabs(x) < 2147483648.0f)) return INT32_MIN; // what vcvtps2dq gives out of range
  return static_cast<std::int32_t>(std::nearbyint(x));
}

inline void axpy_records_fixed(const record_format& f, const float* weights, std::size_t stride, std::size_t heads,
                               const float* grid, const std::uint8_t* records, std::size_t count, std::int64_t* sums,
                               std::uint64_t* weight_sums, std::int64_t* zero_sums) noexcept {
  const std::size_t groups = f.groups(), per_group = f.params_per_group;
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t t = 0; t < count; ++t) {
      const std::uint8_t* record = records + t * f.record_bytes;
      const float w = weights[h * stride + t];
      for (std::size_t g = 0; g < groups; ++g) {
        const float* grids = grid + (h * groups + g) * per_group;
        const std::uint32_t fixed = fixed_weight(w, grids[0], record_param(f, record, g, 0));
        weight_sums[h * groups + g] += fixed;
        if (per_group == 2) zero_sums[h * groups + g] += fixed_zero(w, grids[1], record_param(f, record, g, 1));
        for (std::size_t i = g * f.group_channels; i < (g + 1) * f.group_channels; ++i)
          sums[h * f.head_dim + i] += std::int64_t{fixed} * code_at(record, i, f.bits);
      }
    }
}

} // namespace
} // namespace kvlab::kernels::scalar
