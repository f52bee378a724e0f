// The scalar reference of the softmax: the oracle the vector kernels are tested against, and
// the tail and odd-width fallback they call for what their vector loops do not cover.
#pragma once
#include "../kernels.hpp"

#include <algorithm>
#include <cmath>

namespace kvlab::kernels::scalar {
// Internal linkage (see kernels_scalar.hpp).
namespace {

inline float softmax(float* scores, std::size_t n) noexcept {
  const float max = *std::max_element(scores, scores + n);
  double sum = 0.0; // in double: contexts of 100k tokens would lose digits in a float sum
  for (std::size_t i = 0; i < n; ++i) sum += (scores[i] = std::exp(scores[i] - max));
  const float inverse = static_cast<float>(1.0 / sum);
  for (std::size_t i = 0; i < n; ++i) scores[i] *= inverse;
  return max + static_cast<float>(std::log(sum));
}

} // namespace
} // namespace kvlab::kernels::scalar
