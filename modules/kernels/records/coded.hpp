// Runs of coded records (2-, 4- and 8-bit affine or table codes, parameters per group) for
// the heads of a GQA group, in channel lanes: every ISA's kernels for the formats that
// vector_records accepts. fp8 table codes decode by bit moves (fp8/half_bits.hpp); on
// AVX-512 those in pairs of 32 go to fp8/pairs_avx512.hpp first. The scalar reference is
// reference.hpp here.
#pragma once
#include "reference.hpp"
#include "runs.hpp"

namespace kvlab::kernels::simd {

template <class Arch>
struct coded_kernels : record_runs<Arch> {
  using base = record_runs<Arch>;
  using base::width, base::fmadd, base::fnmadd, base::load_u8_codes, base::load_f16, base::permute, base::shift_right,
      base::lane_index, base::first_lane, base::read_params, base::fp8_codes, base::fp8_pairs,
      base::permute_reads_4_bits;
  using typename base::floats, typename base::ints, typename base::small_table;
  template <std::size_t H>
  using head_sums = typename base::template head_sums<H>;

  // Coded records of 8-, 4- or 2-bit codes. A block is `width` code bytes; lane k of its
  // j-th vector holds element per_byte * k + j of the block (code j of byte k). The kernels
  // work in that "split order", so one byte load feeds per_byte vectors; queries and
  // accumulators are reordered once per call. Values are scale * level + constant per
  // group (constant = zero, minus scale * offset for affine codes), both folded into one
  // multiply-add per vector, shared by every head.
  static std::size_t codes_per_byte(unsigned bits) noexcept { return 8 / bits; }
  static bool vector_records(const record_format& f) noexcept {
    if (f.bits != 8 && f.bits != 4 && f.bits != 2) return false;
    const std::size_t per_byte = codes_per_byte(f.bits), block = per_byte * width, group = f.group_channels;
    const bool blocks_fit_groups = group % block == 0 || (block % group == 0 && group % per_byte == 0);
    return f.head_dim % block == 0 && f.head_dim <= max_head_dim &&
           (f.params_per_group == 0 || (blocks_fit_groups && f.groups() <= max_groups));
  }
  // Lane k of vector j of each block is element PerByte * k + j: one strided gather (or
  // scatter) per vector.
  template <std::size_t PerByte>
  static void split_order(const float* in, std::size_t n, float* out) noexcept {
    const ints stride = lane_index() * ints(static_cast<std::int32_t>(PerByte));
    for (std::size_t b = 0; b < n; b += PerByte * width)
      for (std::size_t j = 0; j < PerByte; ++j) floats::gather(in + b + j, stride).store_aligned(out + b + j * width);
  }
  template <std::size_t PerByte>
  static void merge_order(const float* in, std::size_t n, float* out) noexcept {
    const ints stride = lane_index() * ints(static_cast<std::int32_t>(PerByte));
    for (std::size_t b = 0; b < n; b += PerByte * width)
      for (std::size_t j = 0; j < PerByte; ++j) floats::load_aligned(in + b + j * width).scatter(out + b + j, stride);
  }

  // How a block's lanes find their parameters: none (rows whose parameters the caller
  // folded in), one group per block, or several groups per block (a lane permute).
  enum class param_shape { none, whole, spanning };

  // Decodes the blocks of one record format (per call: tables and lane maps; per token:
  // each group's scale and constant).
  template <bool Affine, unsigned Bits>
  struct coded_values {
    static constexpr std::size_t per_byte = 8 / Bits, block = per_byte * width;
    // Each group's scale and constant, padded so a vector load from any group stays inside.
    struct terms {
      alignas(64) float scales[max_groups + width], constants[max_groups + width];
    };

    const record_format& f;
    small_table table;
    bool whole_groups;             // every block inside one group (else: each block spans several)
    std::size_t groups, params_at; // per token, no division: groups, and where parameters start
    bool one_load;                 // fp16 parameters that one vector load ending at the record's end holds
    ints lane_group;               // group of each lane, counted from the block's first group
    ints scale_lane, zero_lane;    // one_load: where group g's scale and zero land in that vector
    floats fixed_constant;
    std::uint16_t block_group[max_head_dim / width]; // first group of each block
    fp8_layout fp8 = fp8_layout::none;               // levels that decode_fp8 reproduces

    // On AVX-512, affine codes of up to 4 bits take their values from a table of the codes
    // themselves: vpermps reads only the low 4 bits of each lane, so one permute replaces a
    // mask and a convert (2-bit codes: the table repeats every 4 entries, past the next code).
    static constexpr bool code_table = permute_reads_4_bits && Affine && Bits <= 4;
    // Width of the codes small_table looks up: the code table, table codes of up to 4 bits,
    // or none (affine codes convert, 8-bit table codes gather).
    static constexpr unsigned table_bits = code_table ? 4 : Affine || Bits > 4 ? 0 : Bits;
    static constexpr std::array<float, 16> table_of_codes = [] {
      std::array<float, 16> codes{};
      for (unsigned i = 0; i < 16; ++i) codes[i] = static_cast<float>(i % (1u << Bits));
      return codes;
    }();

    explicit coded_values(const record_format& format)
        : f(format), table(code_table ? table_of_codes.data() : format.levels, table_bits),
          whole_groups(format.group_channels % block == 0), fixed_constant(Affine ? -format.offset : 0.0f) {
      groups = f.groups();
      params_at = f.code_bytes();
      const std::size_t params = f.params_per_group, n = groups * params;
      one_load = params > 0 && !f.params_f32 && n <= width && params_at + 2 * n >= 2 * width;
      alignas(64) std::int32_t lanes[width], scales[width], zeros[width];
      for (std::size_t k = 0; k < width; ++k) {
        lanes[k] = static_cast<std::int32_t>(per_byte * k / f.group_channels);
        const std::size_t g = std::min(k, groups - 1); // lanes past the last group repeat it
        scales[k] = static_cast<std::int32_t>(width - n + g * params);
        zeros[k] = scales[k] + 1;
      }
      lane_group = ints::load_aligned(lanes);
      scale_lane = ints::load_aligned(scales);
      zero_lane = ints::load_aligned(zeros);
      for (std::size_t b = 0; b < f.head_dim / block; ++b)
        block_group[b] = static_cast<std::uint16_t>(b * block / f.group_channels);
      if constexpr (fp8_codes && !Affine && Bits == 8) fp8 = base::fp8_levels(f.levels);
    }

    void read(const std::uint8_t* record, terms& out) const noexcept {
      const std::size_t params = f.params_per_group;
      if (params == 0) return;
      if (one_load) { // the common case: one conversion and two permutes per token
        const floats all = load_f16(record + params_at + 2 * groups * params - 2 * width);
        const floats scales = permute(all, scale_lane), zeros = params > 1 ? permute(all, zero_lane) : floats(0.0f);
        scales.store_aligned(out.scales);
        (Affine ? fnmadd(scales, floats(f.offset), zeros) : zeros).store_aligned(out.constants);
        return;
      }
      alignas(64) float values[2 * max_groups];
      read_params(record + params_at, groups * params, f.params_f32, values);
      for (std::size_t g = 0; g < groups; ++g) {
        const float scale = values[g * params], zero = params > 1 ? values[g * params + 1] : 0.0f;
        out.scales[g] = scale;
        out.constants[g] = Affine ? zero - scale * f.offset : zero;
      }
    }

    // The per_byte vectors of unscaled levels of block b (for one head, which applies each
    // group's scale and constant once per group instead of once per vector). Fp8: the
    // layout fp8_levels found for this format (a template argument: no branch per block).
    template <fp8_layout Fp8 = fp8_layout::none>
    void levels(const std::uint8_t* record, std::size_t b, floats (&out)[per_byte]) const noexcept {
      if constexpr (Fp8 != fp8_layout::none) {
        out[0] = base::template decode_fp8<Fp8>(record + b * width);
        return;
      }
      const ints bytes = load_u8_codes(record + b * width);
      for (std::size_t j = 0; j < per_byte; ++j) {
        ints codes = j == 0 ? bytes : shift_right(bytes, static_cast<unsigned>(j * Bits));
        if constexpr (code_table) {
          out[j] = table(codes);
          continue;
        }
        if (j + 1 < per_byte) codes = codes & ints((1 << Bits) - 1); // the last code is the byte's top bits
        if constexpr (Affine)
          out[j] = xsimd::to_float(codes);
        else if constexpr (Bits <= 4)
          out[j] = table(codes);
        else
          out[j] = floats::gather(f.levels, codes);
      }
    }

    // The per_byte value vectors of block b, parameters laid out as Shape says (a template
    // argument, so the hot loops carry no branch on it).
    template <param_shape Shape, fp8_layout Fp8>
    void values(const std::uint8_t* record, std::size_t b, const terms& t, floats (&out)[per_byte]) const noexcept {
      if constexpr (code_table && Shape == param_shape::whole) {
        // The block's group has 16 values, fma(code, scale, constant): one multiply-add
        // makes them all, and each code vector is then one permute of them (the same bits
        // as converting each code and multiply-adding it, one multiply-add per block
        // instead of one per vector).
        const std::size_t g = block_group[b];
        const floats group_values =
            fmadd(floats::load_unaligned(table_of_codes.data()), floats(t.scales[g]), floats(t.constants[g]));
        const ints bytes = load_u8_codes(record + b * width);
        for (std::size_t j = 0; j < per_byte; ++j)
          out[j] = permute(group_values, j == 0 ? bytes : shift_right(bytes, static_cast<unsigned>(j * Bits)));
        return;
      }
      levels<Fp8>(record, b, out);
      if constexpr (Shape == param_shape::none) {
        // scale 1: the constant alone (level * 1 + constant rounds as level + constant)
        if constexpr (Affine)
          for (std::size_t j = 0; j < per_byte; ++j) out[j] = out[j] + fixed_constant;
        return;
      } else {
        const std::size_t g = block_group[b];
        floats scale, constant;
        if constexpr (Shape == param_shape::whole) {
          scale = floats(t.scales[g]);
          constant = floats(t.constants[g]);
        } else {
          scale = permute(floats::load_unaligned(t.scales + g), lane_group);
          constant = permute(floats::load_unaligned(t.constants + g), lane_group);
        }
        for (std::size_t j = 0; j < per_byte; ++j) out[j] = fmadd(out[j], scale, constant);
      }
    }

    param_shape shape() const noexcept {
      if (f.params_per_group == 0) return param_shape::none;
      return whole_groups ? param_shape::whole : param_shape::spanning;
    }
  };

  // Calls use.template operator()<Blocks, Shape, Fp8>() with the record's parameter shape,
  // its number of blocks fixed at compile time for head_dim 128 (0: known at run time), so
  // the common shapes get fully unrolled loops with every sum in a register, and the fp8
  // layout of 8-bit table codes in whole groups (other shapes gather from the table).
  template <bool Affine, unsigned Bits, class Use>
  static void with_layout(const coded_values<Affine, Bits>& decode, Use&& use) noexcept {
    constexpr std::size_t blocks_of_128 = 128 / coded_values<Affine, Bits>::block;
    const auto with_shape = [&]<std::size_t Blocks>() {
      switch (decode.shape()) {
      case param_shape::none: return use.template operator()<Blocks, param_shape::none, fp8_layout::none>();
      case param_shape::whole:
        if constexpr (fp8_codes && !Affine && Bits == 8) {
          constexpr auto whole = param_shape::whole;
          switch (decode.fp8) {
          case fp8_layout::e4m3: return use.template operator()<Blocks, whole, fp8_layout::e4m3>();
          case fp8_layout::e4m3fnuz: return use.template operator()<Blocks, whole, fp8_layout::e4m3fnuz>();
          case fp8_layout::e5m2: return use.template operator()<Blocks, whole, fp8_layout::e5m2>();
          case fp8_layout::none: break;
          }
        }
        return use.template operator()<Blocks, param_shape::whole, fp8_layout::none>();
      case param_shape::spanning: return use.template operator()<Blocks, param_shape::spanning, fp8_layout::none>();
      }
    };
    if (decode.f.head_dim == 128) return with_shape.template operator()<blocks_of_128>();
    with_shape.template operator()<0>();
  }

  template <bool Affine, unsigned Bits, std::size_t H>
  static void dot_coded(const record_format& f, const float* queries, const std::uint8_t* records, std::size_t count,
                        float* scores, std::size_t stride) noexcept {
    using values = coded_values<Affine, Bits>;
    const values decode(f);
    if constexpr (fp8_pairs && !Affine && Bits == 8) { // fp8 layouts: the pair kernel where it fits
      bool done = false;
      with_layout(decode, [&]<std::size_t, param_shape, fp8_layout Fp8>() {
        if constexpr (Fp8 != fp8_layout::none)
          done = fp8_pair_kernels<Arch>::template dot_heads<Fp8, H>(decode.f, queries, records, count, scores, stride);
      });
      if (done) return;
    }
    if constexpr (H == 1)
      if (decode.shape() == param_shape::whole)
        return with_layout(decode, [&]<std::size_t Blocks, param_shape, fp8_layout Fp8>() {
          const auto run = [&]<bool Folded>() {
            const auto one_head = [&]<std::size_t B, std::size_t PerGroup>() {
              dot_coded_one_head<Affine, Bits, B, PerGroup, Folded, Fp8>(decode, queries, records, count, scores);
            };
            switch (f.group_channels / values::block) {
            case 1: return one_head.template operator()<Blocks, 1>();
            case 2: return one_head.template operator()<Blocks, 2>();
            case 4: return one_head.template operator()<Blocks, 4>();
            case 8: return one_head.template operator()<Blocks, 8>();
            default: return one_head.template operator()<0, 0>();
            }
          };
          if (Affine && f.params_per_group == 1 && decode.one_load) return run.template operator()<Affine>();
          run.template operator()<false>();
        });
    with_layout(decode, [&]<std::size_t Blocks, param_shape Shape, fp8_layout Fp8>() {
      dot_coded_heads<Affine, Bits, H, Blocks, Shape, Fp8>(decode, queries, records, count, scores, stride);
    });
  }

  template <bool Affine, unsigned Bits, std::size_t H, std::size_t Blocks, param_shape Shape, fp8_layout Fp8>
  static void dot_coded_heads(const coded_values<Affine, Bits>& decode, const float* queries,
                              const std::uint8_t* records, std::size_t count, float* scores,
                              std::size_t stride) noexcept {
    using values = coded_values<Affine, Bits>;
    const std::size_t n = decode.f.head_dim, blocks = Blocks ? Blocks : n / values::block;
    const std::size_t record_bytes = decode.f.record_bytes;
    if constexpr (width < 16 && H >= 2 && Bits >= 4) {
      // AVX2: the sums of T neighbouring tokens from t (T = 1 or 2), one multiply-add chain
      // per head and token, each query vector loaded once for the T tokens (the queries
      // outnumber 16 registers, so every multiply-add would otherwise load its own). Two
      // tokens' 2-bit codes are 8 vectors, which with 8 chains leave no register free.
      const auto tokens_from = [&]<std::size_t T>(std::size_t t) __attribute__((always_inline)) {
        typename values::terms terms[T];
        if constexpr (Shape != param_shape::none)
          for (std::size_t k = 0; k < T; ++k) decode.read(records + (t + k) * record_bytes, terms[k]);
        std::array<head_sums<H>, T> sums;
        for (auto& token : sums) std::fill_n(token.lanes, H, floats(0.0f));
        for (std::size_t b = 0; b < blocks; ++b) {
          floats v[T][values::per_byte];
          for (std::size_t k = 0; k < T; ++k)
            decode.template values<Shape, Fp8>(records + (t + k) * record_bytes, b, terms[k], v[k]);
          for (std::size_t j = 0; j < values::per_byte; ++j)
            for (std::size_t h = 0; h < H; ++h) {
              const floats query = floats::load_unaligned(queries + h * n + b * values::block + j * width);
              for (std::size_t k = 0; k < T; ++k) sums[k].lanes[h] = fmadd(query, v[k][j], sums[k].lanes[h]);
            }
        }
        return sums;
      };
      return base::template reduce_tokens<H>(
          records, record_bytes, count, scores, stride,
          [&](std::size_t t) __attribute__((always_inline)) { return tokens_from.template operator()<1>(t)[0]; },
          [&](std::size_t t) __attribute__((always_inline)) { return tokens_from.template operator()<2>(t); });
    }
    base::template reduce_tokens<H>(
        records, record_bytes, count, scores, stride, [&](std::size_t t) __attribute__((always_inline)) {
          const std::uint8_t* record = records + t * record_bytes;
          typename values::terms terms;
          if constexpr (Shape != param_shape::none) decode.read(record, terms);
          // Two sums per head (even and odd vectors) halve the chains of
          // dependent multiply-adds; local, so they stay in registers.
          floats even[H], odd[H];
          std::fill_n(even, H, floats(0.0f));
          std::fill_n(odd, H, floats(0.0f));
          for (std::size_t b = 0; b < blocks; ++b) {
            floats v[values::per_byte];
            decode.template values<Shape, Fp8>(record, b, terms, v);
            for (std::size_t j = 0; j < values::per_byte; ++j)
              for (std::size_t h = 0; h < H; ++h) {
                floats& sum = (b * values::per_byte + j) % 2 == 0 ? even[h] : odd[h];
                sum = fmadd(floats::load_unaligned(queries + h * n + b * values::block + j * width), v[j], sum);
              }
          }
          head_sums<H> sums;
          for (std::size_t h = 0; h < H; ++h) sums.lanes[h] = even[h] + odd[h];
          return sums;
        });
  }

  // One head over groups of whole blocks: q . (s L + c) = s (q . L) + c (sum of q) per group,
  // so each vector costs one multiply-add and each group one more; the constant terms are
  // one vector multiply with the query's group sums (taken once per call). Blocks per
  // record and per group are fixed at compile time for the common shapes (0: at run time).
  // Symmetric codes with fp16 scales (Folded: c = -s * offset) need no constants at all:
  // each group's sum starts at -offset * (sum of q), and the scales are used straight from
  // their one converted load.
  template <bool Affine, unsigned Bits, std::size_t Blocks, std::size_t BlocksPerGroup, bool Folded, fp8_layout Fp8>
  static void dot_coded_one_head(const coded_values<Affine, Bits>& decode, const float* query,
                                 const std::uint8_t* records, std::size_t count, float* scores) noexcept {
    using values = coded_values<Affine, Bits>;
    const record_format& f = decode.f;
    // Compile-time constants where the shape is (captured run-time values are not unrolled).
    constexpr std::size_t fixed_groups = Blocks != 0 && BlocksPerGroup != 0 ? Blocks / BlocksPerGroup : 0;
    const std::size_t blocks_per_group = BlocksPerGroup ? BlocksPerGroup : f.group_channels / values::block;
    const std::size_t groups = fixed_groups ? fixed_groups : decode.groups;
    const std::size_t record_bytes = f.record_bytes, params_at = decode.params_at;
    alignas(64) float query_sums[max_groups + width] = {};
    for (std::size_t g = 0; g < groups; ++g)
      query_sums[g] = std::accumulate(query + g * f.group_channels, query + (g + 1) * f.group_channels, 0.0f);
    // Lanes past the last group are masked (their constants may be any bits, NaN included).
    using mask = typename floats::batch_bool_type;
    mask in_range[max_groups / width + 1];
    floats starts[max_groups]; // Folded: -offset * (sum of q) in lane 0
    if constexpr (Folded) {
      for (std::size_t g = 0; g < groups; ++g) starts[g] = first_lane(-f.offset * query_sums[g]);
    } else {
      const floats lanes = xsimd::to_float(lane_index());
      for (std::size_t g = 0; g < groups; g += width)
        in_range[g / width] = lanes < floats(static_cast<float>(groups - g));
    }
    base::template reduce_tokens<1>(
        records, record_bytes, count, scores, 0, [&](std::size_t t) __attribute__((always_inline)) {
          const std::size_t group_count = fixed_groups ? fixed_groups : groups;
          const std::size_t group_blocks = BlocksPerGroup ? BlocksPerGroup : blocks_per_group;
          const std::uint8_t* record = records + t * record_bytes;
          typename values::terms terms;
          alignas(64) float loaded[width];
          const float* scales = terms.scales;
          if constexpr (Folded) { // group g's scale is lane width - groups + g of the one load
            load_f16(record + params_at + 2 * group_count - 2 * width).store_aligned(loaded);
            scales = loaded + (width - group_count);
            // Hide where `scales` points, so each group's scale is one broadcast load (a load
            // port) rather than the stored vector forwarded through two shuffles per group.
            asm("" : "+r"(scales));
          } else {
            decode.read(record, terms);
          }
          floats total(0.0f);
          for (std::size_t g = 0; g < group_count; ++g) {
            // Two sums per group (even and odd blocks) halve its chain of dependent
            // multiply-adds: 8-bit codes per token on AVX2 are a group of 16 blocks, and on
            // one chain fp8_e4m3@token's dot ran at half the speed (AMD Zen 3, in L2). Named
            // sums, not an array indexed at run time, which would live in memory.
            const float* q = query + g * group_blocks * values::block;
            const auto add_block = [&](std::size_t b, floats& sum) __attribute__((always_inline)) {
              floats levels[values::per_byte];
              decode.template levels<Fp8>(record, g * group_blocks + b, levels);
              for (std::size_t j = 0; j < values::per_byte; ++j)
                sum = fmadd(floats::load_unaligned(q + b * values::block + j * width), levels[j], sum);
            };
            floats even = Folded ? starts[g] : floats(0.0f), odd(0.0f);
            std::size_t b = 0;
            for (; b + 2 <= group_blocks; b += 2) {
              add_block(b, even);
              add_block(b + 1, odd);
            }
            if (b < group_blocks) add_block(b, even);
            total = fmadd(even + odd, floats(scales[g]), total);
          }
          if constexpr (!Folded)
            for (std::size_t g = 0; g < group_count; g += width) {
              const floats constants =
                  xsimd::select(in_range[g / width], floats::load_unaligned(terms.constants + g), floats(0.0f));
              total = fmadd(constants, floats::load_aligned(query_sums + g), total);
            }
          return head_sums<1>{{total}};
        });
  }

  // Block by block, every head's accumulators of the block in registers across a chunk of
  // tokens, whose terms are read once.
  template <bool Affine, unsigned Bits, std::size_t H>
  static void axpy_coded(const record_format& f, const float* weights, std::size_t stride, const std::uint8_t* records,
                         std::size_t count, float* acc) noexcept {
    const coded_values<Affine, Bits> decode(f);
    if constexpr (fp8_pairs && !Affine && Bits == 8) { // fp8 layouts: the pair kernel where it fits
      bool done = false;
      with_layout(decode, [&]<std::size_t, param_shape, fp8_layout Fp8>() {
        if constexpr (Fp8 != fp8_layout::none)
          done = fp8_pair_kernels<Arch>::template axpy_heads<Fp8, H>(f, weights, stride, records, count, acc);
      });
      if (done) return;
    }
    with_layout(decode, [&]<std::size_t Blocks, param_shape Shape, fp8_layout Fp8>() {
      axpy_coded_heads<Affine, Bits, H, Blocks, Shape, Fp8>(decode, weights, stride, records, count, acc);
    });
  }

  template <bool Affine, unsigned Bits, std::size_t H, std::size_t Blocks, param_shape Shape, fp8_layout Fp8>
  static void axpy_coded_heads(const coded_values<Affine, Bits>& decode, const float* weights, std::size_t stride,
                               const std::uint8_t* records, std::size_t count, float* acc) noexcept {
    using values = coded_values<Affine, Bits>;
    constexpr std::size_t chunk = 16, per_byte = values::per_byte;
    // Blocks per pass: at least 8 independent multiply-add chains (fewer wait on latency).
    constexpr std::size_t per_pass = std::max<std::size_t>(1, 8 / (H * per_byte));
    const std::size_t n = decode.f.head_dim, blocks = Blocks ? Blocks : n / values::block;
    const std::size_t record_bytes = decode.f.record_bytes;
    const chunk_passes passes(blocks, per_pass);
    typename values::terms terms[chunk];
    for (std::size_t first = 0; first < count; first += chunk) {
      const std::size_t tokens = std::min(chunk, count - first);
      const std::uint8_t* chunk_records = records + first * record_bytes;
      const prefetch_span ahead = lines_ahead(chunk_records, tokens * record_bytes);
      if constexpr (Shape != param_shape::none)
        for (std::size_t t = 0; t < tokens; ++t) decode.read(chunk_records + t * record_bytes, terms[t]);
      const auto pass = [&]<std::size_t P>(std::size_t b, std::size_t pass_index) __attribute__((always_inline)) {
        floats sums[H][P][per_byte];
        for (std::size_t h = 0; h < H; ++h)
          for (std::size_t p = 0; p < P; ++p)
            for (std::size_t j = 0; j < per_byte; ++j)
              sums[h][p][j] = floats::load_unaligned(acc + h * n + (b + p) * values::block + j * width);
        for (std::size_t t = 0; t < tokens; ++t) {
          passes.prefetch(ahead, pass_index, t, tokens);
          floats v[P][per_byte];
          for (std::size_t p = 0; p < P; ++p)
            decode.template values<Shape, Fp8>(chunk_records + t * record_bytes, b + p, terms[t], v[p]);
          for (std::size_t h = 0; h < H; ++h) {
            const floats w(weights[h * stride + first + t]);
            for (std::size_t p = 0; p < P; ++p)
              for (std::size_t j = 0; j < per_byte; ++j) sums[h][p][j] = fmadd(w, v[p][j], sums[h][p][j]);
          }
        }
        for (std::size_t h = 0; h < H; ++h)
          for (std::size_t p = 0; p < P; ++p)
            for (std::size_t j = 0; j < per_byte; ++j)
              sums[h][p][j].store_unaligned(acc + h * n + (b + p) * values::block + j * width);
      };
      std::size_t b = 0, pass_index = 0;
      for (; b + per_pass <= blocks; b += per_pass) pass.template operator()<per_pass>(b, pass_index++);
      for (; b < blocks; ++b) pass.template operator()<1>(b, pass_index++);
    }
  }

  // Calls use.template operator()<Affine, Bits>() for a format vector_records accepts.
  template <class Use>
  static void with_codes(const record_format& f, Use&& use) noexcept {
    const auto with_bits = [&]<bool Affine>() {
      if (f.bits == 8) return use.template operator()<Affine, 8>();
      if (f.bits == 4) return use.template operator()<Affine, 4>();
      return use.template operator()<Affine, 2>();
    };
    if (f.kind == element_kind::affine_codes) return with_bits.template operator()<true>();
    return with_bits.template operator()<false>();
  }

  static bool serves(const record_format& f) noexcept { return vector_records(f); }
  // Heads per pass over the records. 8-bit table codes (fp8) cost a widen, shifts, a select
  // and an fp16 conversion per 16 codes, so with AVX-512's 32 registers a GQA group of 8
  // decodes them once: fp8_e4m3@token attention at GQA 8 (32k tokens from DRAM, one thread,
  // AMD Zen 5) 38.6-40.9 ns per token and KV head against 51.6-64.7 in two passes of 4, in
  // alternated runs. int8 and int4@group(32) ran no faster in one pass of 8 (their decode is
  // a convert and a multiply-add), and 8 heads' sums of 2-bit codes take every register.
  template <bool Affine, unsigned Bits>
  static constexpr std::size_t heads_per_coded_pass = width >= 16 && !Affine && Bits == 8 ? 8 : max_heads;
  // dot_records and axpy_records for the formats this family serves: queries and
  // accumulators in split order for codes of fewer than 8 bits.
  static void dot_records(const record_format& f, const float* queries, std::size_t heads, const std::uint8_t* records,
                          std::size_t count, float* scores, std::size_t stride) noexcept {
    const std::size_t n = f.head_dim;
    if (!vector_records(f)) return scalar::dot_records(f, queries, heads, records, count, scores, stride);
    with_codes(f, [&]<bool Affine, unsigned Bits>() {
      constexpr std::size_t per_byte = 8 / Bits;
      alignas(64) float split[per_byte > 1 ? max_heads * max_head_dim : 1]; // 8-bit codes are in order
      for_each_head_pass<heads_per_coded_pass<Affine, Bits>>(heads, [&]<std::size_t H>(std::size_t h) {
        if constexpr (per_byte == 1)
          return dot_coded<Affine, Bits, H>(f, queries + h * n, records, count, scores + h * stride, stride);
        for (std::size_t k = 0; k < H; ++k) split_order<per_byte>(queries + (h + k) * n, n, split + k * n);
        dot_coded<Affine, Bits, H>(f, split, records, count, scores + h * stride, stride);
      });
    });
  }
  static void axpy_records(const record_format& f, const float* weights, std::size_t stride, std::size_t heads,
                           const std::uint8_t* records, std::size_t count, float* acc) noexcept {
    const std::size_t n = f.head_dim;
    with_codes(f, [&]<bool Affine, unsigned Bits>() {
      constexpr std::size_t per_byte = 8 / Bits;
      alignas(64) float split[per_byte > 1 ? max_heads * max_head_dim : 1];
      for_each_head_pass<heads_per_coded_pass<Affine, Bits>>(heads, [&]<std::size_t H>(std::size_t h) {
        if constexpr (per_byte == 1)
          return axpy_coded<Affine, Bits, H>(f, weights + h * stride, stride, records, count, acc + h * n);
        for (std::size_t k = 0; k < H; ++k) split_order<per_byte>(acc + (h + k) * n, n, split + k * n);
        axpy_coded<Affine, Bits, H>(f, weights + h * stride, stride, records, count, split);
        for (std::size_t k = 0; k < H; ++k) merge_order<per_byte>(split + k * n, n, acc + (h + k) * n);
      });
    });
  }
};

} // namespace kvlab::kernels::simd
