// Kernel entry points: one table of function pointers per instruction set.
// The scalar table is the reference; the AVX2 and AVX-512 tables are built from the same
// family templates in their own translation units with their own -m flags (see
// dispatch/ and docs/kernels.md).
// Plain header, not a module: ISA-flagged code must never be in a module target.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string_view>

#include "fp8/rounding.hpp"

namespace kvlab::kernels {

// avx512_vnni: the AVX-512 kernels, with integer dot products for the keys of 4- and 8-bit
// affine codes with per-token parameters and, where the CPU also has AVX-512 VBMI (Ice Lake,
// Zen 4 and later), fixed-point values of 2- and 4-bit ones.
enum class isa { scalar, avx2, avx512, avx512_vnni };

// How the elements of a record decode.
enum class element_kind : std::uint8_t {
  f32,          // raw binary32
  f16,          // raw binary16
  bf16,         // raw bfloat16
  affine_codes, // scale * (code - offset) + zero (int<b>, uint<b>)
  table_codes,  // scale * levels[code] + zero (nf4, lloyd<b>, fp8, ...)
  group_codes   // a record decoded whole by the quantizer's own codec (PolarQuant): the reference kernels only
};

// How a uniform grid (int<b>, uint<b>) fits its parameters to a group.
enum class uniform_fit : std::uint8_t {
  absmax, // symmetric: scale = absmax / offset, zero = 0
  min_max // asymmetric: scale = (max - min) / max_code, zero = min
};

// How a sorted codebook (nf4, lloyd<b>) fits its scale to a group (zero is 0).
enum class codebook_scale : std::uint8_t {
  absmax,          // nf4: the group's largest |x|
  root_mean_square // lloyd<b>: sqrt(mean of x^2), see root_mean_square below
};

// sqrt(mean of x^2) of x[0, n): the squares (exact in double) summed in double into eight
// partial sums, element i into sum i % 8, added at the end as
// ((s0 + s4) + (s2 + s6)) + ((s1 + s5) + (s3 + s7)). The order is fixed, so the scale does
// not depend on the ISA, and the eight sums are independent chains that a vector of
// doubles runs in step (one chain in channel order made lloyd<b> appends wait on 32 dependent
// adds per group).
inline float root_mean_square(const float* x, std::size_t n) noexcept {
  if (n == 0) return 0.0f;
  double sums[8] = {};
  for (std::size_t i = 0; i < n; ++i) sums[i % 8] += double{x[i]} * double{x[i]};
  const double total = ((sums[0] + sums[4]) + (sums[2] + sums[6])) + ((sums[1] + sums[5]) + (sums[3] + sums[7]));
  return static_cast<float>(std::sqrt(total / static_cast<double>(n)));
}

// A sorted codebook's decision thresholds (nf4, lloyd<b>), and an index of 16 buckets over
// them for vector encoders, which then look a value up instead of comparing it with every
// threshold. A value y falls in bucket b = clamp(floor(fma(y, per_bucket, origin)), 0, 15).
// Every threshold below the bucket's range, widened by 1/16 of a bucket on each side (far
// more than the rounding of that multiply-add moves y), is counted in below[b]; the at most
// two inside the widened range are first[b] and second[b] (+infinity when fewer), each
// counted when it is < y as the linear count does, so codes are the same bit for bit.
// `bucketed` is false when a widened range holds more than two thresholds, or there are
// too few thresholds for the index to pay.
struct nearest_thresholds {
  const float* values = nullptr; // ascending
  unsigned count = 0;
  bool bucketed = false;
  float per_bucket = 0.0f, origin = 0.0f;
  alignas(64) float below[16] = {}, first[16] = {}, second[16] = {};

  nearest_thresholds() = default;
  nearest_thresholds(const float* thresholds, unsigned threshold_count) : values(thresholds), count(threshold_count) {
    constexpr unsigned buckets = 16, fewest = 7; // below 7 thresholds, comparing with each is as cheap
    if (count < fewest) return;
    const double lowest = values[0], highest = values[count - 1];
    if (!(highest > lowest)) return;
    // Thresholds span buckets 1..14; the outer buckets reach to -infinity and +infinity.
    per_bucket = static_cast<float>((buckets - 2) / (highest - lowest));
    origin = static_cast<float>(1.0 - lowest * double{per_bucket});
    if (!std::isfinite(per_bucket) || !std::isfinite(origin)) return;
    constexpr double margin = 1.0 / 16;
    constexpr float infinity = std::numeric_limits<float>::infinity();
    for (unsigned b = 0; b < buckets; ++b) {
      const double from = b == 0 ? -double{infinity} : (b - margin - origin) / per_bucket;
      const double to = b + 1 == buckets ? double{infinity} : (b + 1 + margin - origin) / per_bucket;
      unsigned under = 0, inside = 0;
      float candidates[2] = {infinity, infinity};
      for (unsigned i = 0; i < count; ++i) {
        if (values[i] < from) {
          ++under;
        } else if (values[i] < to) {
          if (inside == 2) return;
          candidates[inside++] = values[i];
        }
      }
      below[b] = static_cast<float>(under);
      first[b] = candidates[0];
      second[b] = candidates[1];
    }
    bucketed = true;
  }
};

// The widest group_codes record the reference kernels decode (into a stack buffer).
inline constexpr std::size_t max_group_coded_head_dim = 1024;

// Layout of the records of one stream: one token per record, `record_bytes` apart. Codes
// (or raw floats) first, bit-packed; then per group of `group_channels` channels its
// parameters (scale, then zero when params_per_group == 2), fp16 or f32, or one byte each
// that indexes scale_levels (mxfp4's and nvfp4's scales; the reference kernels only).
struct record_format {
  element_kind kind = element_kind::f32;
  std::size_t record_bytes = 0;
  std::size_t head_dim = 0;
  std::size_t group_channels = 0;
  unsigned bits = 32;
  unsigned params_per_group = 0;
  bool params_f32 = false;
  float offset = 0.0f;                 // affine_codes
  const float* levels = nullptr;       // table_codes
  const float* scale_levels = nullptr; // 256 scales by byte, where parameters are bytes
  // group_codes: decode_record(codec, record, head_dim, out) writes the record's head_dim
  // values (head_dim at most max_group_coded_head_dim)
  void (*decode_record)(const void* codec, const std::uint8_t* record, std::size_t head_dim,
                        float* out) noexcept = nullptr;
  const void* codec = nullptr;

  bool params_f16_or_f32() const noexcept { return scale_levels == nullptr; }

  std::size_t code_bytes() const noexcept { return (head_dim * bits + 7) / 8; }
  std::size_t groups() const noexcept { return head_dim / group_channels; }
};

// The vector kernels keep the sums of up to this many query heads of a GQA group in
// registers; a larger group takes one pass over the records per heads_per_pass heads. With
// AVX-512 rows of floats and fp8 codes take 8 heads per pass (row_kernels and
// coded_kernels say why).
inline constexpr std::size_t heads_per_pass = 4;

// Values of 2- and 4-bit affine codes (scale * (code - offset), plus a zero with two
// parameters per group: int<b>, uint<b>) with fp16 parameters, in groups of whole
// 32-channel units and up to 256 channels: the records axpy_records_fixed takes.
inline bool fixed_point_values(const record_format& f) noexcept {
  return f.kind == element_kind::affine_codes && (f.bits == 4 || f.bits == 2) &&
         (f.params_per_group == 1 || f.params_per_group == 2) && !f.params_f32 && f.group_channels % 32 == 0 &&
         f.head_dim % f.group_channels == 0 && f.head_dim != 0 && f.head_dim <= 256;
}

// One run of rows of a per-channel block (KIVI's keys): the block's parameters (as
// fold_channel_params takes them), `count` rows of codes without parameters from `rows`,
// and where their scores go (scores[h * stride + first + t]). A block whose rows lie in two
// runs of storage is two of these, with the same parameters.
struct channel_block {
  const std::uint8_t* params;
  const std::uint8_t* rows;
  std::size_t first;
  std::size_t count;
};

// Codes are bit-packed little-endian: element i occupies bits [i*bits, (i+1)*bits) of the
// byte stream, least significant bit first. `levels` maps a code to its unscaled value
// (2^bits entries). `first` is the index of the first element used, so a group inside a
// packed row can be addressed without re-aligning it.
struct kernel_table {
  isa instruction_set;
  // sum over i < n of query[i] * levels[code(first + i)]
  float (*dot_codes)(const float* query, const std::uint8_t* packed, std::size_t first, std::size_t n, unsigned bits,
                     const float* levels);
  // acc[i] += alpha * levels[code(first + i)] for i < n
  void (*axpy_codes)(float alpha, const std::uint8_t* packed, std::size_t first, std::size_t n, unsigned bits,
                     const float* levels, float* acc);
  // Affine codebooks (int<b>, uint<b>: level = code - offset) skip the table: the caller
  // folds offset, scale and zero in once per group.
  // sum over i < n of query[i] * code(first + i)
  float (*dot_raw_codes)(const float* query, const std::uint8_t* packed, std::size_t first, std::size_t n,
                         unsigned bits);
  // acc[i] += alpha * code(first + i) for i < n
  void (*axpy_raw_codes)(float alpha, const std::uint8_t* packed, std::size_t first, std::size_t n, unsigned bits,
                         float* acc);
  // Group statistics for parameter fitting (exact: max and min do not depend on order).
  float (*absmax)(const float* x, std::size_t n);
  void (*min_max)(const float* x, std::size_t n, float* min, float* max);
  // out[i] = scale * levels[code(first + i)] + zero for i < n
  void (*decode_codes)(const std::uint8_t* packed, std::size_t first, std::size_t n, unsigned bits, const float* levels,
                       float scale, float zero, float* out);
  // Uniform grids (int<b>, uint<b>): code = clamp(round_to_even((x - zero) / scale) + offset,
  // 0, max_code), or offset when scale == 0. Overwrites elements [first, first + n).
  void (*encode_uniform)(const float* x, std::size_t n, float scale, float zero, int offset, unsigned max_code,
                         unsigned bits, std::uint8_t* packed, std::size_t first);
  // Sorted codebooks (nf4, lloyd<b>): code = number of thresholds t with t < (x - zero) / scale
  // (taken as 0 when scale == 0), thresholds ascending. Overwrites elements [first, first + n).
  void (*encode_nearest)(const float* x, std::size_t n, float scale, float zero, const float* thresholds,
                         unsigned threshold_count, unsigned bits, std::uint8_t* packed, std::size_t first);
  // 8-bit float codes (fp8_e4m3, fp8_e4m3fnuz, fp8_e5m2), one byte each: codes[i] =
  // fp8_code(x[i] / scale, r) for i < n, or 0 when scale == 0.
  void (*encode_fp8)(const float* x, std::size_t n, float scale, const fp8_rounding& r, std::uint8_t* codes);
  // `count` per-token records of affine codes (f: head_dim, groups, bits, offset, parameters,
  // record_bytes) from `count` consecutive rows of f.head_dim values at x, into consecutive
  // records: each group fitted by `fit` (scale divided in float, then rounded as stored: fp16
  // to nearest even unless params_f32) and encoded as encode_uniform does under the stored
  // parameters. Returns how many leading records it wrote: count, or the index of the first
  // row whose parameter overflows fp16 or that holds a value that is not finite (that
  // record unspecified, the rest untouched). A vector encoder may stop earlier, at a finite
  // row whose values' float sum overflows (its finite check); the caller encodes from the
  // returned row on, one row at a time, as for any other stop.
  std::size_t (*encode_uniform_records)(const record_format& f, uniform_fit fit, unsigned max_code, const float* x,
                                        std::size_t count, std::uint8_t* records);
  // The same for sorted-codebook codes (nf4, lloyd<b>): each group's scale fitted by `fit`
  // (rounded as stored), its codes as encode_nearest gives them under the stored scale; a
  // row stops the call when a value is not finite or the scale overflows fp16.
  std::size_t (*encode_nearest_records)(const record_format& f, codebook_scale fit,
                                        const nearest_thresholds& thresholds, const float* x, std::size_t count,
                                        std::uint8_t* records);
  // The same for 8-bit float codes: each group scaled by absmax / r.max_finite (rounded as
  // stored) and encoded as encode_fp8 does under the stored scale; a row stops the call when
  // a value or a scale is not finite.
  std::size_t (*encode_fp8_records)(const record_format& f, const fp8_rounding& r, const float* x, std::size_t count,
                                    std::uint8_t* records);
  // One per-channel block of affine codes (KIVI's keys): `tokens` rows of f.head_dim values
  // at x, each channel's column fitted by `fit` (rounded as stored) and encoded as
  // encode_uniform does under the stored parameters. The block holds the rows' codes
  // (f.code_bytes() each, token-major), then each channel's f.params_per_group parameters.
  // Returns false, the block unspecified, when a parameter overflows fp16 or a value is not
  // finite.
  bool (*encode_uniform_channels)(const record_format& f, uniform_fit fit, unsigned max_code, std::size_t tokens,
                                  const float* x, std::uint8_t* block);
  // Whole runs of records for the `heads` query heads of one GQA group, the attention hot
  // loop: each record is decoded once for all heads. Coded elements decode as
  // scale * level + (zero, minus scale * offset for affine codes).
  // scores[h * stride + t] = query_h . decoded(record t) for h < heads, t < count, where
  // query_h is queries[h * head_dim, (h + 1) * head_dim).
  void (*dot_records)(const record_format& format, const float* queries, std::size_t heads, const std::uint8_t* records,
                      std::size_t count, float* scores, std::size_t stride);
  // acc_h += sum over t < count of weights[h * stride + t] * decoded(record t) for h < heads,
  // where acc_h is acc[h * head_dim, (h + 1) * head_dim).
  void (*axpy_records)(const record_format& format, const float* weights, std::size_t stride, std::size_t heads,
                       const std::uint8_t* records, std::size_t count, float* acc);
  // Values in 32-bit fixed point (records with fixed_point_values(format); null in tables
  // without a fast version). grid[(h * groups + g) * params_per_group + p] is head h's grid
  // for parameter p (scale, zero) of group g, a power of two. For h < heads, t < count and
  // group g of record t, with weight w = weights[h * stride + t], scale s and zero z:
  //   F = round_to_even(fl(fl(w * grid_scale) * s)), 2^32 - 1 when that is not below 2^32:
  //       sums[h * head_dim + i] += F * code(i), weight_sums[h * groups + g] += F;
  //   with zeros (params_per_group 2), Z = round_to_even(fl(fl(w * grid_zero) * z)), -2^31
  //       when its magnitude is not below 2^31: zero_sums[h * groups + g] += Z (zero_sums
  //       is not used without zeros).
  // Weights must not be negative or NaN (callers check); the caller picks each grid so that
  // F stays below 2^32 and |Z| below 2^31. Integer sums do not depend on order: no split of
  // a run changes them.
  void (*axpy_records_fixed)(const record_format& format, const float* weights, std::size_t stride, std::size_t heads,
                             const float* grid, const std::uint8_t* records, std::size_t count, std::int64_t* sums,
                             std::uint64_t* weight_sums, std::int64_t* zero_sums);
  // One block of per-channel parameters (per_channel of 1: scales; 2: scale, zero
  // interleaved; fp16 or f32) folded into `heads` queries of n channels:
  // scaled[h * n + c] = queries[h * n + c] * scale(c) and zero_terms[h] = query_h . zeros
  // (0 without zeros), so each row of the block is a plain dot with its codes.
  void (*fold_channel_params)(const std::uint8_t* params, std::size_t n, unsigned per_channel, bool params_f32,
                              const float* queries, std::size_t heads, float* scaled, float* zero_terms);
  // Every block of a per-channel stream in one call, rows in `format` (no parameters of
  // their own): per block, fold_channel_params, dot_records over its rows with the folded
  // queries, and each head's zero term added to its scores; bit for bit what those calls
  // give block by block. One call per stream instead of one per 32-token block saves the
  // kernels' setup per block (KIVI-2's keys in L2: 3.1 ns per token against 3.9-4.0).
  void (*dot_channel_blocks)(const record_format& format, const channel_block* blocks, std::size_t count,
                             unsigned per_channel, bool params_f32, const float* queries, std::size_t heads,
                             float* scores, std::size_t stride);
  // Raw float rows, possibly unaligned: f32, IEEE f16 and bf16 bit patterns.
  float (*dot_f32)(const float* query, const std::uint8_t* row, std::size_t n);
  void (*axpy_f32)(float alpha, const std::uint8_t* row, std::size_t n, float* acc);
  float (*dot_f16)(const float* query, const std::uint8_t* row, std::size_t n);
  void (*axpy_f16)(float alpha, const std::uint8_t* row, std::size_t n, float* acc);
  float (*dot_bf16)(const float* query, const std::uint8_t* row, std::size_t n);
  void (*axpy_bf16)(float alpha, const std::uint8_t* row, std::size_t n, float* acc);
  // Rows of IEEE fp16 bits (fp16 tiers of the cache): out[i] = float_to_half_bits(x[i]) (to
  // nearest even, every NaN sign | 0x7e00) and out[i] = half_bits_to_float(h[i]) (exact;
  // a NaN stays a NaN) for i < n.
  void (*floats_to_f16)(const float* x, std::size_t n, std::uint16_t* out);
  // In place, the normalized Walsh-Hadamard transform of block[0, n), n a power of two:
  // the scalar reference's float operations, so every ISA gives the same bits.
  void (*walsh_hadamard)(float* block, std::size_t n);
  void (*f16_to_floats)(const std::uint16_t* h, std::size_t n, float* out);
  // A record of raw floats (kind f32, f16 or bf16) from x[0, n): f32 copied; f16 and bf16
  // rounded to nearest even after saturating at the format's largest finite value (what
  // the f16 and bf16 quantizers store; every NaN as float_to_half_bits or
  // float_to_bf16_bits makes it). Returns whether every x[i] is finite (the cache rejects
  // a token that is not).
  bool (*encode_raw)(element_kind kind, const float* x, std::size_t n, std::uint8_t* out);
  // Softmax in place over scores[0, n), n >= 1: scores[i] = exp(scores[i] - max) / sum.
  // Returns the log-sum-exp, max + log(sum).
  float (*softmax)(float* scores, std::size_t n);
  // Whether the record kernels decode 8-bit table codes with these levels from the codes'
  // bits (an fp8 layout the ISA's decoder reproduces for all 256 codes) rather than by
  // looking each code up in the table.
  bool (*decodes_fp8_levels)(const float* levels);
};

const kernel_table& scalar_kernels() noexcept;
// The table of the best ISA this CPU runs, or the one the environment variable KVLAB_ISA
// names (scalar, avx2, avx512, avx512vnni; an unknown or unsupported name falls back to scalar and
// is reported by kvlab.simd's checked accessor).
const kernel_table& active_kernels() noexcept;
const kernel_table& avx2_kernels() noexcept;
const kernel_table& avx512_kernels() noexcept;
const kernel_table& avx512_vnni_kernels() noexcept;
// The table of one ISA, whether or not this CPU runs it (callers check cpu_supports).
const kernel_table& kernels_of(isa instruction_set) noexcept;

// What this CPU can run (checked once, with cpuid).
bool cpu_supports(isa instruction_set) noexcept;
std::string_view isa_name(isa instruction_set) noexcept;

} // namespace kvlab::kernels
