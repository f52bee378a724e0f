// Rows of raw floats (f32, IEEE f16, bf16): one row's dot and axpy, runs of rows for the
// heads of a GQA group, and fp16 conversions of float rows. The scalar reference is
// reference.hpp here (runs of rows: records/reference.hpp).
#pragma once
#include "../records/reference.hpp"
#include "../records/runs.hpp"
#include "reference.hpp"

namespace kvlab::kernels::simd {

template <class Arch>
struct row_kernels : record_runs<Arch> {
  using base = record_runs<Arch>;
  using base::width, base::fmadd, base::load_f32, base::load_f16, base::load_bf16, base::first_lane, base::store_f16;
  using typename base::floats;
  template <std::size_t H>
  using head_sums = typename base::template head_sums<H>;

  template <floats (*load)(const std::uint8_t*), std::size_t element_bytes,
            float (*scalar_load)(const std::uint8_t*, std::size_t)>
  static float dot_row(const float* query, const std::uint8_t* row, std::size_t n) noexcept {
    floats sum(0.0f);
    std::size_t i = 0;
    for (; i + width <= n; i += width)
      sum = fmadd(floats::load_unaligned(query + i), load(row + i * element_bytes), sum);
    float tail = 0.0f;
    for (; i < n; ++i) tail += query[i] * scalar_load(row, i);
    return xsimd::hadd(sum) + tail;
  }

  template <floats (*load)(const std::uint8_t*), std::size_t element_bytes,
            float (*scalar_load)(const std::uint8_t*, std::size_t)>
  static void axpy_row(float alpha, const std::uint8_t* row, std::size_t n, float* acc) noexcept {
    const floats weight(alpha);
    std::size_t i = 0;
    for (; i + width <= n; i += width) {
      const floats updated = fmadd(weight, load(row + i * element_bytes), floats::load_unaligned(acc + i));
      updated.store_unaligned(acc + i);
    }
    for (; i < n; ++i) acc[i] += alpha * scalar_load(row, i);
  }

  // Raw float rows: vectors of `width` elements, then a scalar tail.
  template <floats (*load)(const std::uint8_t*), std::size_t element_bytes,
            float (*scalar_load)(const std::uint8_t*, std::size_t), std::size_t H, std::size_t N = 0>
  static void dot_rows(const record_format& f, const float* queries, const std::uint8_t* records, std::size_t count,
                       float* scores, std::size_t stride) noexcept {
    if constexpr (N == 0)
      if (f.head_dim == 128)
        return dot_rows<load, element_bytes, scalar_load, H, 128>(f, queries, records, count, scores, stride);
    const std::size_t n = N ? N : f.head_dim, vector_end = n - n % width;
    const std::size_t record_bytes = f.record_bytes;
    if constexpr (H > 4 || (width < 16 && H >= 2)) {
      // The sums of T neighbouring tokens from t (T = 1 or 2), one multiply-add chain per
      // head and token, each query vector loaded once for the T tokens: 8 heads' two tokens
      // are 16 chains in registers, and the queries (more than the registers hold) are read
      // once per pair (f16 at GQA 8, 32k context: a median 39.1 against 41.4 ns per token
      // with two chains per head and one token at a time, docs/performance.md). On AVX2 the
      // same from 2 heads: 4 heads' queries are 64 vectors against AVX2's 16 registers.
      const auto tokens_from = [=]<std::size_t T>(std::size_t t) __attribute__((always_inline)) {
        std::array<head_sums<H>, T> sums;
        for (auto& token : sums) std::fill_n(token.lanes, H, floats(0.0f));
        for (std::size_t i = 0; i < vector_end; i += width) {
          floats row[T];
          for (std::size_t k = 0; k < T; ++k) row[k] = load(records + (t + k) * record_bytes + i * element_bytes);
          for (std::size_t h = 0; h < H; ++h) {
            const floats query = floats::load_unaligned(queries + h * n + i);
            for (std::size_t k = 0; k < T; ++k) sums[k].lanes[h] = fmadd(query, row[k], sums[k].lanes[h]);
          }
        }
        for (std::size_t k = 0; k < T && vector_end < n; ++k) // the elements past the last vector, in lane 0
          for (std::size_t h = 0; h < H; ++h) {
            float tail = 0.0f;
            for (std::size_t i = vector_end; i < n; ++i)
              tail += queries[h * n + i] * scalar_load(records + (t + k) * record_bytes, i);
            sums[k].lanes[h] = sums[k].lanes[h] + first_lane(tail);
          }
        return sums;
      };
      return base::template reduce_tokens<H>(
          records, record_bytes, count, scores, stride,
          [=](std::size_t t) __attribute__((always_inline)) { return tokens_from.template operator()<1>(t)[0]; },
          [=](std::size_t t) __attribute__((always_inline)) { return tokens_from.template operator()<2>(t); });
    }
    base::template reduce_tokens<H>(
        records, record_bytes, count, scores, stride, [=](std::size_t t) __attribute__((always_inline)) {
          const std::uint8_t* row = records + t * record_bytes;
          // Even and odd vectors in separate sums: twice the independent multiply-add chains.
          floats even[H], odd[H];
          std::fill_n(even, H, floats(0.0f));
          std::fill_n(odd, H, floats(0.0f));
          std::size_t i = 0;
          for (; i + 2 * width <= vector_end; i += 2 * width) {
            const floats first = load(row + i * element_bytes);
            const floats second = load(row + (i + width) * element_bytes);
            for (std::size_t h = 0; h < H; ++h) {
              even[h] = fmadd(floats::load_unaligned(queries + h * n + i), first, even[h]);
              odd[h] = fmadd(floats::load_unaligned(queries + h * n + i + width), second, odd[h]);
            }
          }
          if (i < vector_end)
            for (std::size_t h = 0; h < H; ++h)
              even[h] = fmadd(floats::load_unaligned(queries + h * n + i), load(row + i * element_bytes), even[h]);
          head_sums<H> sums;
          for (std::size_t h = 0; h < H; ++h) {
            sums.lanes[h] = even[h] + odd[h];
            if (vector_end < n) { // the elements past the last vector, in lane 0
              float tail = 0.0f;
              for (std::size_t i = vector_end; i < n; ++i) tail += queries[h * n + i] * scalar_load(row, i);
              sums.lanes[h] = sums.lanes[h] + first_lane(tail);
            }
          }
          return sums;
        });
  }

  // acc[h * head_dim + i] += sum over t of weights[h * stride + t] * row_t[i], one vector
  // of every head's accumulator in registers across the whole run.
  template <floats (*load)(const std::uint8_t*), std::size_t element_bytes,
            float (*scalar_load)(const std::uint8_t*, std::size_t), std::size_t H>
  static void axpy_rows(const record_format& f, const float* weights, std::size_t stride, const std::uint8_t* records,
                        std::size_t count, float* acc) noexcept {
    constexpr std::size_t chunk = 16;
    const std::size_t n = f.head_dim, vector_end = n - n % width;
    for (std::size_t first = 0; first < count; first += chunk) {
      const std::size_t tokens = std::min(chunk, count - first);
      const std::uint8_t* rows = records + first * f.record_bytes;
      const prefetch_span ahead = lines_ahead(rows, tokens * f.record_bytes);
      // V vectors per pass give every pass at least 8 independent multiply-add chains (fewer
      // would wait on the multiply-add latency), and at least 2, so a weight's broadcast
      // serves two multiply-adds: 8 heads' 16 sums fit AVX-512's registers (f16 at GQA 8,
      // 32k context: a median 44.9 against 47.3 ns per token with one vector per pass). A
      // last odd vector takes a pass of its own.
      constexpr std::size_t per_pass = std::max<std::size_t>(2, 8 / H);
      const chunk_passes passes(vector_end / width, per_pass);
      const auto pass = [&]<std::size_t V>(std::size_t i, std::size_t pass_index) __attribute__((always_inline)) {
        floats sums[H][V];
        for (std::size_t h = 0; h < H; ++h)
          for (std::size_t v = 0; v < V; ++v) sums[h][v] = floats::load_unaligned(acc + h * n + i + v * width);
        for (std::size_t t = 0; t < tokens; ++t) {
          passes.prefetch(ahead, pass_index, t, tokens);
          const std::uint8_t* row = rows + t * f.record_bytes + i * element_bytes;
          floats values[V];
          for (std::size_t v = 0; v < V; ++v) values[v] = load(row + v * width * element_bytes);
          for (std::size_t h = 0; h < H; ++h) {
            const floats weight(weights[h * stride + first + t]);
            for (std::size_t v = 0; v < V; ++v) sums[h][v] = fmadd(weight, values[v], sums[h][v]);
          }
        }
        for (std::size_t h = 0; h < H; ++h)
          for (std::size_t v = 0; v < V; ++v) sums[h][v].store_unaligned(acc + h * n + i + v * width);
      };
      std::size_t i = 0, pass_index = 0;
      for (; i + per_pass * width <= vector_end; i += per_pass * width)
        pass.template operator()<per_pass>(i, pass_index++);
      for (; i < vector_end; i += width) pass.template operator()<1>(i, pass_index++);
    }
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t t = 0; t < count; ++t)
        for (std::size_t i = vector_end; i < n; ++i)
          acc[h * n + i] += weights[h * stride + t] * scalar_load(records + t * f.record_bytes, i);
  }

  static bool serves(const record_format& f) noexcept {
    return f.kind == element_kind::f32 || f.kind == element_kind::f16 || f.kind == element_kind::bf16;
  }
  // Calls use.template operator()<load, element_bytes, scalar_load>() for f's kind.
  template <class Use>
  static void with_row_kind(const record_format& f, Use&& use) noexcept {
    switch (f.kind) {
    case element_kind::f32: return use.template operator()<&load_f32, 4, &scalar::load_f32>();
    case element_kind::f16: return use.template operator()<&load_f16, 2, &scalar::load_f16>();
    case element_kind::bf16: return use.template operator()<&load_bf16, 2, &scalar::load_bf16>();
    case element_kind::affine_codes:
    case element_kind::table_codes:
    case element_kind::group_codes: break;
    }
  }
  // Heads per pass over the records: a GQA group of 8 reads its rows once with AVX-512 (32
  // registers hold 8 heads' sums); AVX2's 16 registers hold 4 heads'.
  static constexpr std::size_t heads_per_row_pass = width >= 16 ? 8 : 4;
  // dot_records and axpy_records for the formats this family serves.
  static void dot_records(const record_format& f, const float* queries, std::size_t heads, const std::uint8_t* records,
                          std::size_t count, float* scores, std::size_t stride) noexcept {
    const std::size_t n = f.head_dim;
    with_row_kind(f, [&]<floats (*load)(const std::uint8_t*), std::size_t bytes,
                         float (*scalar_load)(const std::uint8_t*, std::size_t)>() {
      for_each_head_pass<heads_per_row_pass>(heads, [&]<std::size_t H>(std::size_t h) {
        dot_rows<load, bytes, scalar_load, H>(f, queries + h * n, records, count, scores + h * stride, stride);
      });
    });
  }
  static void axpy_records(const record_format& f, const float* weights, std::size_t stride, std::size_t heads,
                           const std::uint8_t* records, std::size_t count, float* acc) noexcept {
    const std::size_t n = f.head_dim;
    with_row_kind(f, [&]<floats (*load)(const std::uint8_t*), std::size_t bytes,
                         float (*scalar_load)(const std::uint8_t*, std::size_t)>() {
      for_each_head_pass<heads_per_row_pass>(heads, [&]<std::size_t H>(std::size_t h) {
        axpy_rows<load, bytes, scalar_load, H>(f, weights + h * stride, stride, records, count, acc + h * n);
      });
    });
  }

  // The reference's butterflies: strides below the vector width within each vector (lane i
  // and lane i ^ h: the lower lane takes a + b, the upper a - b, as one multiply-add of
  // the partner with +-1, which is exact), wider strides between vectors.
  static void walsh_hadamard(float* block, std::size_t n) noexcept {
    if (n < width) return scalar::walsh_hadamard(block, n);
    for (std::size_t i = 0; i < n; i += width) {
      floats v = floats::load_unaligned(block + i);
      butterflies_within<1>(v);
      v.store_unaligned(block + i);
    }
    for (std::size_t half = width; half < n; half *= 2)
      for (std::size_t start = 0; start < n; start += 2 * half)
        for (std::size_t i = start; i < start + half; i += width) {
          const floats a = floats::load_unaligned(block + i), b = floats::load_unaligned(block + i + half);
          (a + b).store_unaligned(block + i);
          (a - b).store_unaligned(block + i + half);
        }
    const floats norm(1.0f / std::sqrt(static_cast<float>(n)));
    for (std::size_t i = 0; i < n; i += width) (floats::load_unaligned(block + i) * norm).store_unaligned(block + i);
  }
  template <unsigned H>
  struct partner_lane {
    static constexpr unsigned get(unsigned i, unsigned) { return i ^ H; }
  };
  template <unsigned H>
  static void butterflies_within(floats& v) noexcept {
    if constexpr (H < width) {
      alignas(64) static constexpr auto signs = [] {
        std::array<float, width> s{};
        for (std::size_t i = 0; i < width; ++i) s[i] = (i & H) ? -1.0f : 1.0f;
        return s;
      }();
      const floats partner =
          xsimd::swizzle(v, xsimd::make_batch_constant<xsimd::batch<std::uint32_t, Arch>, partner_lane<H>>());
      v = xsimd::fma(v, floats::load_aligned(signs.data()), partner);
      butterflies_within<2 * H>(v);
    }
  }

  // The vector conversion rounds to nearest even as float_to_half_bits does; only NaN
  // payloads differ (the reference makes every NaN sign | 0x7e00), so a vector holding a
  // NaN is converted element by element.
  static void floats_to_f16(const float* x, std::size_t n, std::uint16_t* out) noexcept {
    std::size_t i = 0;
    for (; i + width <= n; i += width) {
      const floats v = floats::load_unaligned(x + i);
      if (xsimd::any(xsimd::isnan(v)))
        scalar::floats_to_f16(x + i, width, out + i);
      else
        store_f16(v, out + i);
    }
    scalar::floats_to_f16(x + i, n - i, out + i);
  }
  // f16: clamp, then the vector conversion (a vector holding a NaN element by element, as
  // floats_to_f16). bf16: clamp, then the reference's rounding on the float's bits.
  static bool encode_raw(element_kind kind, const float* x, std::size_t n, std::uint8_t* out) noexcept {
    if (kind == element_kind::f32) return scalar::encode_raw(kind, x, n, out);
    const bool half = kind == element_kind::f16;
    const float top = half ? scalar::f16_max_finite : scalar::bf16_max_finite;
    const floats high(top), low(-top), largest(std::numeric_limits<float>::max());
    bool finite = true;
    std::size_t i = 0;
    for (; i + width <= n; i += width) {
      const floats v = floats::load_unaligned(x + i);
      if (!xsimd::all(xsimd::abs(v) <= largest)) { // an infinity or a NaN
        finite = false;
        scalar::encode_raw(kind, x + i, width, out + 2 * i);
        continue;
      }
      const floats clamped = xsimd::min(xsimd::max(v, low), high);
      if (half) {
        alignas(64) std::uint16_t halves[width];
        store_f16(clamped, halves);
        std::memcpy(out + 2 * i, halves, sizeof halves);
        continue;
      }
      using words = xsimd::batch<std::uint32_t, Arch>;
      const words bits = xsimd::bitwise_cast<words>(clamped);
      alignas(64) std::uint32_t rounded[width];
      ((bits + (words(0x7fffu) + ((bits >> 16) & words(1u)))) >> 16).store_aligned(rounded);
      for (std::size_t k = 0; k < width; ++k) {
        const auto word = static_cast<std::uint16_t>(rounded[k]);
        std::memcpy(out + 2 * (i + k), &word, 2);
      }
    }
    return scalar::encode_raw(kind, x + i, n - i, out + 2 * i) && finite;
  }

  static void f16_to_floats(const std::uint16_t* h, std::size_t n, float* out) noexcept {
    std::size_t i = 0;
    for (; i + width <= n; i += width) load_f16(reinterpret_cast<const std::uint8_t*>(h + i)).store_unaligned(out + i);
    scalar::f16_to_floats(h + i, n - i, out + i);
  }
};

} // namespace kvlab::kernels::simd
