// Group statistics and encoders: absmax, min/max and root mean square for fitting parameters, uniform grids
// (int<b>, uint<b>) and sorted codebooks (nf4, lloyd<b>) into bit-packed codes, and the
// fused per-token record encoder. The scalar reference is reference.hpp here.
#pragma once
#include "../vector/basics.hpp"
#include "reference.hpp"

namespace kvlab::kernels::simd {

template <class Arch>
struct encoder_kernels : vector_basics<Arch> {
  using base = vector_basics<Arch>;
  using base::width, base::fmadd, base::reduce, base::reduce_four, base::max_op, base::min_op, base::abs_max,
      base::store_codes, base::store_code_quad, base::lane, base::to_half, base::from_half, base::minus_nearest,
      base::round_to_int, base::store_f16, base::load_f16, base::root_mean_square;
  using typename base::floats, typename base::small_table;
  using typename base::ints;

  // No NaN or infinity among the values: v - v is 0 for a finite v and NaN otherwise.
  static bool all_finite(const float* x, std::size_t n) noexcept {
    floats differences(0.0f);
    std::size_t i = 0;
    for (; i + width <= n; i += width) {
      const floats v = floats::load_unaligned(x + i);
      differences = differences + (v - v);
    }
    return xsimd::all(differences == floats(0.0f)) && scalar::all_finite(x + i, n - i);
  }

  static float absmax(const float* x, std::size_t n) noexcept {
    floats m(0.0f);
    std::size_t i = 0;
    for (; i + width <= n; i += width) m = xsimd::max(m, xsimd::abs(floats::load_unaligned(x + i)));
    return std::max(reduce(m, max_op), scalar::absmax(x + i, n - i));
  }

  static void min_max(const float* x, std::size_t n, float* lo, float* hi) noexcept {
    if (n < width) return scalar::min_max(x, n, lo, hi);
    floats a = floats::load_unaligned(x), b = a;
    std::size_t i = width;
    for (; i + width <= n; i += width) {
      const floats v = floats::load_unaligned(x + i);
      a = xsimd::min(a, v);
      b = xsimd::max(b, v);
    }
    *lo = reduce(a, min_op);
    *hi = reduce(b, max_op);
    if (i < n) {
      float tail_lo, tail_hi;
      scalar::min_max(x + i, n - i, &tail_lo, &tail_hi);
      *lo = std::min(*lo, tail_lo);
      *hi = std::max(*hi, tail_hi);
    }
    *lo += 0.0f; // +0 for any zero, as the scalar reference
    *hi += 0.0f;
  }

  // fp16 rounding of fitted parameters (to nearest even, like float_to_half_bits) in one

  static bool vector_packable(unsigned bits, std::size_t first) noexcept {
    return bits == 8 || (bits == 4 && first % 2 == 0) || (bits == 2 && first % 4 == 0);
  }

  static void encode_uniform(const float* x, std::size_t n, float scale, float zero, int offset, unsigned max_code,
                             unsigned bits, std::uint8_t* packed, std::size_t first) noexcept {
    std::size_t i = 0;
    if (scale != 0.0f && vector_packable(bits, first)) {
      const floats scales(scale), zeros(zero), offsets(static_cast<float>(offset)), top(static_cast<float>(max_code)),
          bottom(0.0f);
      for (; i + width <= n; i += width) {
        // Divide (not multiply by 1/scale) so codes equal the scalar reference bit for bit.
        const floats q = xsimd::nearbyint((floats::load_unaligned(x + i) - zeros) / scales) + offsets;
        store_codes(xsimd::to_int(xsimd::min(xsimd::max(q, bottom), top)), bits, packed, first + i);
      }
    }
    scalar::encode_uniform(x + i, n - i, scale, zero, offset, max_code, bits, packed, first + i);
  }

  static void encode_nearest(const float* x, std::size_t n, float scale, float zero, const float* thresholds,
                             unsigned count, unsigned bits, std::uint8_t* packed, std::size_t first) noexcept {
    std::size_t i = 0;
    if (vector_packable(bits, first)) {
      const floats scales(scale), zeros(zero), one(1.0f), nothing(0.0f);
      for (; i + width <= n; i += width) {
        const floats y = scale == 0.0f ? nothing : (floats::load_unaligned(x + i) - zeros) / scales;
        floats code(0.0f); // a small count, exact in float
        for (unsigned j = 0; j < count; ++j) code += xsimd::select(floats(thresholds[j]) < y, one, nothing);
        store_codes(xsimd::to_int(code), bits, packed, first + i);
      }
    }
    scalar::encode_nearest(x + i, n - i, scale, zero, thresholds, count, bits, packed, first + i);
  }

  // encode_nearest through the thresholds' bucket index where they have one: per vector a
  // multiply-add, a clamp, three register lookups and two compares instead of a compare with
  // every threshold (nf4's 15). The codes are the linear count's (nearest_thresholds says why).
  static void encode_nearest_indexed(const float* x, std::size_t n, float scale, float zero,
                                     const nearest_thresholds& t, unsigned bits, std::uint8_t* packed,
                                     std::size_t first) noexcept {
    if (!t.bucketed || scale == 0.0f || !vector_packable(bits, first))
      return encode_nearest(x, n, scale, zero, t.values, t.count, bits, packed, first);
    const small_table below(t.below, 4), firsts(t.first, 4), seconds(t.second, 4);
    const floats scales(scale), zeros(zero), per_bucket(t.per_bucket), origin(t.origin), last(15.0f), nothing(0.0f),
        one(1.0f);
    std::size_t i = 0;
    for (; i + width <= n; i += width) {
      const floats y = (floats::load_unaligned(x + i) - zeros) / scales;
      const ints bucket = xsimd::to_int(xsimd::min(xsimd::max(fmadd(y, per_bucket, origin), nothing), last));
      const floats code = below(bucket) + xsimd::select(firsts(bucket) < y, one, nothing) +
                          xsimd::select(seconds(bucket) < y, one, nothing);
      store_codes(xsimd::to_int(code), bits, packed, first + i);
    }
    scalar::encode_nearest(x + i, n - i, scale, zero, t.values, t.count, bits, packed, first + i);
  }

  // fp8_code on every lane: the same float division, comparisons and integer rounding of
  // the float's bits, both the subnormal and the normal code computed and one selected.
  static void encode_fp8(const float* x, std::size_t n, float scale, const fp8_rounding& r,
                         std::uint8_t* codes) noexcept {
    if (scale == 0.0f) return static_cast<void>(std::memset(codes, 0, n));
    const floats scales(scale), top(r.max_finite), smallest_normal(r.smallest_normal),
        per_unit(r.subnormal_codes_per_unit), nothing(0.0f);
    const int dropped = 23 - static_cast<int>(r.mantissa_bits);
    const ints below_half((1 << (dropped - 1)) - 1), one(1), zero(0), sign(0x80),
        rebias(static_cast<std::int32_t>(static_cast<std::uint32_t>(127 - r.bias) << r.mantissa_bits));
    const auto as_ints = [](floats v) { return xsimd::bitwise_cast<ints>(v); };
    const auto pick = [&](auto mask, ints yes, ints no) {
      return as_ints(xsimd::select(mask, xsimd::bitwise_cast<floats>(yes), xsimd::bitwise_cast<floats>(no)));
    };
    std::size_t i = 0;
    for (; i + width <= n; i += width) {
      const floats y = floats::load_unaligned(x + i) / scales, a = xsimd::abs(y);
      const floats magnitude = xsimd::select(a < top, a, top); // NaN lanes are zeroed below
      const ints bits = as_ints(magnitude);
      const ints normal = ((bits + below_half + ((bits >> dropped) & one)) >> dropped) - rebias;
      const ints subnormal = xsimd::to_int(xsimd::nearbyint(magnitude * per_unit));
      ints code = pick(magnitude < smallest_normal, subnormal, normal);
      code = pick(a > nothing, code, zero); // zero or NaN
      const ints negative = (as_ints(y) >> 31) & sign;
      store_codes(xsimd::select(code != zero, code | negative, zero), 8, codes, i);
    }
    scalar::encode_fp8(x + i, n - i, scale, r, codes + i);
  }

  // --- Fused per-token record encoder -------------------------------------------------

  // fp8 records: the reference's steps over this ISA's absmax, fp8 codes and fp16 rounding.
  static std::size_t encode_fp8_records(const record_format& f, const fp8_rounding& r, const float* x,
                                        std::size_t count, std::uint8_t* records) noexcept {
    return scalar::encode_fp8_records<&all_finite, &absmax, &encode_fp8, &to_half, &from_half>(f, r, x, count, records);
  }

  // Sorted-codebook records: the reference's steps over this ISA's absmax and nearest-level
  // codes.
  // Codebooks in groups of whole vectors fit four groups at once, as the uniform encoder
  // does (nf4: scale = absmax / 1; lloyd<b>: the root mean square).
  static std::size_t encode_nearest_records(const record_format& f, codebook_scale fit,
                                            const nearest_thresholds& thresholds, const float* x, std::size_t count,
                                            std::uint8_t* records) noexcept {
    if ((f.bits != 8 && f.bits != 4 && f.bits != 2) || f.group_channels % width != 0)
      return scalar::encode_nearest_records<&all_finite, &absmax, &root_mean_square, &encode_nearest_indexed, &to_half,
                                            &from_half>(f, fit, thresholds, x, count, records);
    return fit == codebook_scale::absmax ? encode_codebook_records<false>(f, thresholds, x, count, records)
                                         : encode_codebook_records<true>(f, thresholds, x, count, records);
  }
  template <bool RootMeanSquare>
  static std::size_t encode_codebook_records(const record_format& f, const nearest_thresholds& thresholds,
                                             const float* x, std::size_t count, std::uint8_t* records) noexcept {
    const std::size_t n = f.group_channels;
    return scalar::encode_each_record(f, x, count, records, [&](const float* row, std::uint8_t* record) {
      for (std::size_t group = 0; group * n < f.head_dim; group += 4) {
        four_fits fits;
        if (!fit_four_groups<uniform_fit::absmax, RootMeanSquare>(f, 1.0f, row, record, group, fits)) return false;
        for (std::size_t k = 0; k < fits.count; ++k)
          encode_nearest_indexed(row + (group + k) * n, n, fits.scales[k], 0.0f, thresholds, f.bits, record,
                                 (group + k) * n);
      }
      return true;
    });
  }

  // Records of 8-, 4- or 2-bit codes whose groups are whole vectors: the parameters of four
  // groups at once (one lane each: one division, one fp16 round trip), and codes by
  // multiplying with the reciprocal of the scale instead of dividing by it; the fit and the
  // bits are chosen once per call, not per record. Other records take the generic fused
  // encoder.
  static std::size_t encode_uniform_records(const record_format& f, uniform_fit fit, unsigned max_code, const float* x,
                                            std::size_t count, std::uint8_t* records) noexcept {
    if ((f.bits != 8 && f.bits != 4 && f.bits != 2) || f.group_channels % width != 0)
      return scalar::encode_uniform_records<&all_finite, &absmax, &min_max, &encode_uniform, &to_half, &from_half>(
          f, fit, max_code, x, count, records);
    return with_fit_and_bits(fit, f.bits, [&]<uniform_fit Fit, unsigned Bits>() {
      return scalar::encode_each_record(f, x, count, records, [&](const float* row, std::uint8_t* record) {
        for (std::size_t group = 0; group * f.group_channels < f.head_dim; group += 4)
          if (!encode_four_groups<Fit, Bits>(f, max_code, row, record, group)) return false;
        return true;
      });
    });
  }

  // body.template operator()<Fit, Bits>() for the run-time fit and bits (8, 4 or 2).
  template <class Body>
  static auto with_fit_and_bits(uniform_fit fit, unsigned bits, Body&& body) noexcept {
    const auto with_bits = [&]<uniform_fit Fit>() {
      if (bits == 8) return body.template operator()<Fit, 8>();
      return bits == 4 ? body.template operator()<Fit, 4>() : body.template operator()<Fit, 2>();
    };
    return fit == uniform_fit::absmax ? with_bits.template operator()<uniform_fit::absmax>()
                                      : with_bits.template operator()<uniform_fit::min_max>();
  }

  // The parameters of the (up to) four groups of a record from group `group` on, one lane
  // each, rounded as stored and written into the record: scale = absmax / divisor (Fit
  // absmax) or (max - min) / divisor with zero = min (Fit min_max), or the root mean square
  // with zero 0 (RootMeanSquare, lloyd<b>). False when a value is not finite or a parameter
  // overflows: the caller's generic path reports it.
  struct four_fits {
    std::size_t count; // the groups there are (4, or fewer at the record's end)
    __m128 scale, zero;
    alignas(16) float scales[4], zeros[4];
  };
  template <uniform_fit Fit, bool RootMeanSquare = false>
  __attribute__((always_inline)) static bool fit_four_groups(const record_format& f, float divisor, const float* x,
                                                             std::uint8_t* record, std::size_t group,
                                                             four_fits& out) noexcept {
    const std::size_t n = f.group_channels, first = group * n;
    std::size_t count = 1; // without an integer division
    while (count < 4 && first + count * n < f.head_dim) ++count;
    out.count = count;
    floats highs[4], lows[4]; // lane-wise statistics of each group (0 past the last)
    // Sums of the values: not finite once a value is NaN or infinite (one add per vector,
    // where v - v summed takes two). Finite values whose sum overflows are refused too, and
    // the caller's generic path encodes them (with fp16 parameters it reports the overflowed
    // scale; f32 parameters hold it).
    floats sums(0.0f);
    for (std::size_t k = 0; k < 4; ++k) {
      floats a(0.0f), b(0.0f);
      if (k < count) {
        const float* values = x + first + k * n;
        a = floats::load_unaligned(values);
        b = Fit == uniform_fit::absmax ? xsimd::abs(a) : a;
        sums = sums + a;
        for (std::size_t i = width; i < n; i += width) {
          const floats v = floats::load_unaligned(values + i);
          sums = sums + v;
          if constexpr (RootMeanSquare) {
            continue;
          } else if constexpr (Fit == uniform_fit::absmax) {
            b = abs_max(b, v);
          } else {
            a = xsimd::min(a, v);
            b = xsimd::max(b, v);
          }
        }
      }
      highs[k] = b;
      lows[k] = a;
    }
    // min and max may pass over a NaN: such a token is the caller's to report.
    if (!xsimd::all((sums - sums) == floats(0.0f))) return false;
    // The scalar reference's arithmetic, lane by lane (+0 for zeros, as it has them).
    __m128 scale, zero = _mm_setzero_ps();
    const __m128 hi = RootMeanSquare ? zero : _mm_add_ps(reduce_four(highs, max_op), _mm_setzero_ps());
    if constexpr (RootMeanSquare) {
      alignas(16) float root_mean_squares[4] = {};
      for (std::size_t k = 0; k < count; ++k) root_mean_squares[k] = root_mean_square(x + first + k * n, n);
      scale = _mm_load_ps(root_mean_squares);
    } else if constexpr (Fit == uniform_fit::absmax) {
      scale = _mm_div_ps(hi, _mm_set1_ps(divisor));
    } else {
      zero = _mm_add_ps(reduce_four(lows, min_op), _mm_setzero_ps());
      scale = _mm_div_ps(_mm_sub_ps(hi, zero), _mm_set1_ps(divisor));
    }
    float* scales = out.scales;
    float* zeros = out.zeros;
    std::uint8_t* params = record + f.code_bytes() + group * f.params_per_group * (f.params_f32 ? 4 : 2);
    if (f.params_f32) {
      _mm_store_ps(scales, scale);
      _mm_store_ps(zeros, zero);
      for (std::size_t k = 0; k < count; ++k)
        if (!std::isfinite(scales[k]) || !std::isfinite(zeros[k])) return false;
      write_params(params, count, f.params_per_group, scales, zeros);
    } else {
      const auto to_half = [](__m128 v) { return _mm_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); };
      const __m128i scale_halves = to_half(scale);
      const __m128i zero_halves = Fit == uniform_fit::min_max ? to_half(zero) : _mm_setzero_si128();
      // An fp16 infinity or NaN: the parameter overflowed.
      const __m128i exponent = _mm_set1_epi16(0x7c00);
      const auto overflowed = [&](__m128i h) { return _mm_cmpeq_epi16(_mm_and_si128(h, exponent), exponent); };
      if (_mm_movemask_epi8(_mm_or_si128(overflowed(scale_halves), overflowed(zero_halves))) != 0) return false;
      scale = _mm_cvtph_ps(scale_halves);
      if constexpr (Fit == uniform_fit::min_max) zero = _mm_cvtph_ps(zero_halves);
      if (count == 4 && f.params_per_group == 1) {
        _mm_storel_epi64(reinterpret_cast<__m128i*>(params), scale_halves);
      } else if (count == 4 && f.params_per_group == 2) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(params), _mm_unpacklo_epi16(scale_halves, zero_halves));
      } else {
        alignas(16) std::uint16_t halves[2][8];
        _mm_store_si128(reinterpret_cast<__m128i*>(halves[0]), scale_halves);
        _mm_store_si128(reinterpret_cast<__m128i*>(halves[1]), zero_halves);
        write_params(params, count, f.params_per_group, halves[0], halves[1]);
      }
      _mm_store_ps(scales, scale);
      _mm_store_ps(zeros, zero);
    }
    out.scale = scale;
    out.zero = zero;
    return true;
  }

  // The (up to) four groups of a record from group `group` on: their fit, then their codes.
  template <uniform_fit Fit, unsigned Bits>
  static bool encode_four_groups(const record_format& f, unsigned max_code, const float* x, std::uint8_t* record,
                                 std::size_t group) noexcept {
    four_fits fits;
    if (!fit_four_groups<Fit>(f, Fit == uniform_fit::absmax ? f.offset : static_cast<float>(max_code), x, record, group,
                              fits))
      return false;
    const std::size_t n = f.group_channels, first = group * n, count = fits.count;
    const __m128 scale = fits.scale, zero = fits.zero;
    // Codes through the reciprocal where it is a normal float (always for fp16 scales);
    // scale 0 gets reciprocal 0, so every code is the offset as the reference has it.
    const __m128 normal =
        _mm_and_ps(_mm_cmpge_ps(scale, _mm_set1_ps(0x1p-125f)), _mm_cmple_ps(scale, _mm_set1_ps(0x1p125f)));
    if (_mm_movemask_ps(_mm_or_ps(normal, _mm_cmpeq_ps(scale, _mm_setzero_ps()))) == 0xf) {
      const __m128 reciprocal = _mm_and_ps(normal, _mm_div_ps(_mm_set1_ps(1.0f), scale));
      if (encode_by_reciprocal<Fit, Bits>(f, max_code, x, record, first, count, zero, reciprocal)) return true;
    }
    for (std::size_t k = 0; k < count; ++k)
      encode_uniform(x + first + k * n, n, fits.scales[k], fits.zeros[k], static_cast<int>(f.offset), max_code, Bits,
                     record, first + k * n);
    return true;
  }

  // Per-channel blocks of 8-, 4- or 2-bit codes whose rows are whole vectors: a vector of
  // channels at a time, their statistics down the block's rows, their parameters in one
  // division and one fp16 round trip, then their codes row by row. Codes divide by the scale
  // (exact), as the reference does. Other blocks take the reference's steps.
  static bool encode_uniform_channels(const record_format& f, uniform_fit fit, unsigned max_code, std::size_t tokens,
                                      const float* x, std::uint8_t* block) noexcept {
    if ((f.bits != 8 && f.bits != 4 && f.bits != 2) || f.head_dim % width != 0 || tokens == 0)
      return scalar::encode_uniform_channels<&all_finite, &to_half, &from_half>(f, fit, max_code, tokens, x, block);
    return with_fit_and_bits(fit, f.bits, [&]<uniform_fit Fit, unsigned Bits>() {
      return encode_channel_vectors<Fit, Bits>(f, max_code, tokens, x, block);
    });
  }

  template <uniform_fit Fit, unsigned Bits>
  static bool encode_channel_vectors(const record_format& f, unsigned max_code, std::size_t tokens, const float* x,
                                     std::uint8_t* block) noexcept {
    const std::size_t n = f.head_dim, row_bytes = f.code_bytes();
    std::uint8_t* params = block + tokens * row_bytes;
    const floats offset(f.offset), top(static_cast<float>(max_code)), bottom(0.0f), nothing(0.0f),
        divisor(Fit == uniform_fit::absmax ? f.offset : static_cast<float>(max_code));
    for (std::size_t c = 0; c < n; c += width) {
      floats lo = floats::load_unaligned(x + c), hi = Fit == uniform_fit::absmax ? xsimd::abs(lo) : lo;
      floats differences = lo - lo; // NaN once a value is NaN or infinite, else 0
      for (std::size_t j = 1; j < tokens; ++j) {
        const floats v = floats::load_unaligned(x + j * n + c);
        differences = differences + (v - v);
        if constexpr (Fit == uniform_fit::absmax) {
          hi = abs_max(hi, v);
        } else {
          lo = xsimd::min(lo, v);
          hi = xsimd::max(hi, v);
        }
      }
      // min and max may pass over a NaN: such a block is the caller's to report.
      if (!xsimd::all(differences == nothing)) return false;
      // The reference's arithmetic, lane by lane (+0 for zeros, as it has them).
      floats zero = Fit == uniform_fit::absmax ? nothing : lo + nothing;
      floats scale = (hi + nothing - zero) / divisor;
      alignas(64) float scales[width], zeros[width];
      if (f.params_f32) {
        if (!xsimd::all(scale - scale == nothing) || !xsimd::all(zero - zero == nothing)) return false;
        scale.store_aligned(scales);
        zero.store_aligned(zeros);
        write_params(params + c * f.params_per_group * 4, width, f.params_per_group, scales, zeros);
      } else {
        alignas(64) std::uint16_t scale_halves[width], zero_halves[width];
        store_f16(scale, scale_halves);
        store_f16(zero, zero_halves);
        for (std::size_t k = 0; k < width; ++k) // an fp16 infinity or NaN: the parameter overflowed
          if ((scale_halves[k] & 0x7c00u) == 0x7c00u || (zero_halves[k] & 0x7c00u) == 0x7c00u) return false;
        scale = load_f16(reinterpret_cast<const std::uint8_t*>(scale_halves));
        zero = load_f16(reinterpret_cast<const std::uint8_t*>(zero_halves));
        write_params(params + c * f.params_per_group * 2, width, f.params_per_group, scale_halves, zero_halves);
      }
      // Scale 0 (a constant column) gives every code the offset, as the reference has it.
      const auto constant = scale == nothing;
      for (std::size_t j = 0; j < tokens; ++j) {
        floats d = floats::load_unaligned(x + j * n + c);
        if constexpr (Fit == uniform_fit::min_max) d = d - zero;
        const floats q = xsimd::select(constant, offset, xsimd::nearbyint(d / scale) + offset);
        store_codes(xsimd::to_int(xsimd::min(xsimd::max(q, bottom), top)), Bits, block + j * row_bytes, c);
      }
    }
    return true;
  }

  // Scale (and zero, when per_group is 2) of `count` groups.
  template <class T>
  static void write_params(std::uint8_t* at, std::size_t count, unsigned per_group, const T* scales,
                           const T* zeros) noexcept {
    for (std::size_t k = 0; k < count; ++k, at += per_group * sizeof(T)) {
      if (per_group > 0) std::memcpy(at, &scales[k], sizeof(T));
      if (per_group > 1) std::memcpy(at + sizeof(T), &zeros[k], sizeof(T));
    }
  }

  // Codes as rint(fma(x - zero, 1/scale, offset)), clamped; false if some may differ from
  // the reference's (rare: near ties), which the caller then encodes by dividing. With
  // r = 1/scale rounded, q differs from the reference's rounded quotient t plus offset by
  // at most 2^-24 * 2|t| + ulp(q)/2. Codes in [0, max_code] (b <= 8) have |t| <= 256 and
  // |q| <= 256, so that is below 2^-23 * 256 + 2^-16 < 2^-14, and q rounds as the reference
  // does when it lies at least 2^-14 from a half-integer. Codes past either end clamp to the
  // same end either way, in floats or as rounded integers (rint is monotone): the fit keeps
  // |q| below 2^28 (a zero rounded to fp16 is off by at most 16, the smallest fp16 scale is
  // 2^-24), far inside int32.
  template <uniform_fit Fit, unsigned Bits>
  static bool encode_by_reciprocal(const record_format& f, unsigned max_code, const float* x, std::uint8_t* record,
                                   std::size_t first, std::size_t count, __m128 zeros, __m128 reciprocals) noexcept {
    const std::size_t n = f.group_channels, end = first + count * n;
    const floats offset(f.offset), top(static_cast<float>(max_code)), bottom(0.0f);
    floats worst(0.0f);              // the largest |q - rint(q)|
    std::size_t group = 0, left = n; // the group of the next vector, and its values not yet taken
    const auto quotients = [&](std::size_t i) {
      floats d = floats::load_unaligned(x + i);
      if constexpr (Fit == uniform_fit::min_max) d = d - lane(zeros, group);
      const floats q = fmadd(d, lane(reciprocals, group), offset);
      worst = abs_max(worst, minus_nearest(q));
      left -= width;
      if (left == 0) ++group, left = n;
      return q;
    };
    std::size_t i = first;
    for (; i + 4 * width <= end; i += 4 * width) {
      ints codes[4];
      for (std::size_t j = 0; j < 4; ++j) codes[j] = round_to_int(quotients(i + j * width));
      store_code_quad(codes, max_code, Bits, record, i);
    }
    for (; i < end; i += width)
      store_codes(round_to_int(xsimd::min(xsimd::max(quotients(i), bottom), top)), Bits, record, i);
    return xsimd::all(worst <= floats(0.5f - 0x1p-14f));
  }
};

} // namespace kvlab::kernels::simd
