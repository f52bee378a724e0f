// Bit-packed codes against one query or accumulator: level lookups (codebooks such as nf4,
// lloyd<b>), raw codes (affine grids int<b>, uint<b>, whose offset, scale and zero the
// caller folds in once per group) and decoding. The scalar reference is reference.hpp here.
#pragma once
#include "../vector/basics.hpp"
#include "reference.hpp"

namespace kvlab::kernels::simd {

template <class Arch>
struct code_kernels : vector_basics<Arch> {
  using base = vector_basics<Arch>;
  using base::width, base::fmadd, base::load_u8_codes, base::load_u4_codes;
  using typename base::floats, typename base::ints, typename base::small_table;

  // Runs `step(codes)` over `width`-element chunks the vector loaders handle (8-bit codes,
  // byte-aligned 4-bit codes) and returns how many elements it covered.
  template <class Step>
  static std::size_t for_each_chunk(const std::uint8_t* packed, std::size_t first, std::size_t n, unsigned bits,
                                    Step&& step) noexcept {
    std::size_t i = 0;
    if (bits == 8) {
      for (; i + width <= n; i += width) step(i, load_u8_codes(packed + first + i));
    } else if (bits == 4 && first % 2 == 0) {
      for (; i + width <= n; i += width) step(i, load_u4_codes(packed + (first + i) / 2));
    }
    return i;
  }

  // Level lookup: register permutes for up to 4 bits, a gather for 8.
  template <class Use>
  static std::size_t with_levels(const std::uint8_t* packed, std::size_t first, std::size_t n, unsigned bits,
                                 const float* levels, Use&& use) noexcept {
    if (bits <= 4) {
      const small_table table(levels, bits);
      return for_each_chunk(packed, first, n, bits, [&](std::size_t i, ints codes) { use(i, table(codes)); });
    }
    return for_each_chunk(packed, first, n, bits,
                          [&](std::size_t i, ints codes) { use(i, floats::gather(levels, codes)); });
  }

  static float dot_codes(const float* query, const std::uint8_t* packed, std::size_t first, std::size_t n,
                         unsigned bits, const float* levels) noexcept {
    floats sum(0.0f);
    const std::size_t done = with_levels(packed, first, n, bits, levels, [&](std::size_t i, floats values) {
      sum = fmadd(floats::load_unaligned(query + i), values, sum);
    });
    return xsimd::hadd(sum) + scalar::dot_codes(query + done, packed, first + done, n - done, bits, levels);
  }

  static void axpy_codes(float alpha, const std::uint8_t* packed, std::size_t first, std::size_t n, unsigned bits,
                         const float* levels, float* acc) noexcept {
    const floats weight(alpha);
    const std::size_t done = with_levels(packed, first, n, bits, levels, [&](std::size_t i, floats values) {
      fmadd(weight, values, floats::load_unaligned(acc + i)).store_unaligned(acc + i);
    });
    scalar::axpy_codes(alpha, packed, first + done, n - done, bits, levels, acc + done);
  }

  static float dot_raw_codes(const float* query, const std::uint8_t* packed, std::size_t first, std::size_t n,
                             unsigned bits) noexcept {
    floats sum(0.0f);
    const std::size_t done = for_each_chunk(packed, first, n, bits, [&](std::size_t i, ints codes) {
      sum = fmadd(floats::load_unaligned(query + i), xsimd::to_float(codes), sum);
    });
    return xsimd::hadd(sum) + scalar::dot_raw_codes(query + done, packed, first + done, n - done, bits);
  }

  static void axpy_raw_codes(float alpha, const std::uint8_t* packed, std::size_t first, std::size_t n, unsigned bits,
                             float* acc) noexcept {
    const floats weight(alpha);
    const std::size_t done = for_each_chunk(packed, first, n, bits, [&](std::size_t i, ints codes) {
      fmadd(weight, xsimd::to_float(codes), floats::load_unaligned(acc + i)).store_unaligned(acc + i);
    });
    scalar::axpy_raw_codes(alpha, packed, first + done, n - done, bits, acc + done);
  }

  static void decode_codes(const std::uint8_t* packed, std::size_t first, std::size_t n, unsigned bits,
                           const float* levels, float scale, float zero, float* out) noexcept {
    const floats scales(scale), zeros(zero);
    // Multiply then add (not fma), to round exactly as the scalar reference does.
    const std::size_t done = with_levels(packed, first, n, bits, levels, [&](std::size_t i, floats values) {
      (scales * values + zeros).store_unaligned(out + i);
    });
    scalar::decode_codes(packed, first + done, n - done, bits, levels, scale, zero, out + done);
  }
};

} // namespace kvlab::kernels::simd
