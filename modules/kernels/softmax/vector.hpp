// Softmax over a row of scores in place, returning its log-sum-exp. The scalar reference
// is reference.hpp here.
#pragma once
#include "../vector/basics.hpp"
#include "reference.hpp"

namespace kvlab::kernels::simd {

template <class Arch>
struct softmax_kernels : vector_basics<Arch> {
  using base = vector_basics<Arch>;
  using base::width, base::reduce, base::max_op, base::exp_shifted, base::halves_in_double;
  using typename base::floats;

  // The exponentials (isa_ops::exp_shifted, within 2 ulp of std::exp) summed in double, as the scalar reference sums
  // them, four at a time: two vectors are added in float, then the two halves of that, and the result converted once.
  // Each term rounds twice, so for these positive values the sum stays within 2^-23 of their exact sum; a conversion
  // per vector, and one for each half, cost more (AMD Zen 5 runs one vcvtps2pd and one vextractf32x8 per cycle:
  // kvlab_bench_kernels kivi2/softmax 590-596 ns for 2048 scores with two conversions per vector, 490-493 with this).
  // The elements the vectors do not cover are padded with -inf (exp = 0) so every element takes the same path.
  static float softmax(float* scores, std::size_t n) noexcept {
    const std::size_t full = n / width * width;
    alignas(64) float tail[width];
    std::fill_n(tail, width, -INFINITY);
    std::copy(scores + full, scores + n, tail);
    // four running maxima: one chain of vmaxps waited on its latency (the largest is the
    // same in any order)
    floats tops[4] = {floats::load_aligned(tail), floats(-INFINITY), floats(-INFINITY), floats(-INFINITY)};
    std::size_t i = 0;
    for (; i + 4 * width <= full; i += 4 * width)
      for (std::size_t k = 0; k < 4; ++k) tops[k] = xsimd::max(tops[k], floats::load_unaligned(scores + i + k * width));
    for (; i < full; i += width) tops[0] = xsimd::max(tops[0], floats::load_unaligned(scores + i));
    const float max = reduce(xsimd::max(xsimd::max(tops[0], tops[1]), xsimd::max(tops[2], tops[3])), max_op);
    const floats shift(max);
    using doubles = xsimd::batch<double, Arch>;
    // e^(x - max) for the vector at `at`, stored there
    const auto exps = [&](float* at) {
      const floats e = exp_shifted(floats::load_unaligned(at) - shift);
      e.store_unaligned(at);
      return e;
    };
    doubles sums(0.0);
    std::size_t pairs_end = 0; // the vectors before it went in two at a time
    for (; pairs_end + 2 * width <= full; pairs_end += 2 * width) {
      const floats first = exps(scores + pairs_end);
      sums += halves_in_double(first + exps(scores + pairs_end + width));
    }
    if (pairs_end < full) sums += halves_in_double(exps(scores + pairs_end));
    if (full < n) {
      sums += halves_in_double(exps(tail));
      std::copy(tail, tail + (n - full), scores + full);
    }
    alignas(64) double lanes[doubles::size];
    sums.store_aligned(lanes);
    double sum = 0.0;
    for (const double lane : lanes) sum += lane;
    const float inverse = static_cast<float>(1.0 / sum);
    for (std::size_t i = 0; i < full; i += width)
      (floats::load_unaligned(scores + i) * floats(inverse)).store_unaligned(scores + i);
    for (std::size_t i = full; i < n; ++i) scores[i] *= inverse;
    return max + static_cast<float>(std::log(sum));
  }
};

} // namespace kvlab::kernels::simd
