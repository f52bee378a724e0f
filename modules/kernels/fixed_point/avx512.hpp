// Values of 2- and 4-bit codes in fixed point (AVX-512 VNNI and VBMI): the isa::avx512_vnni
// table's axpy_records_fixed. The scalar reference is reference.hpp here.
#pragma once
#include "../token_lanes/columns_avx512.hpp"
#include "reference.hpp"

namespace kvlab::kernels::simd {

struct fixed_point_kernels : token_lane_columns {
  // Per group, the sum over tokens of w (s (code - offset) + z) is (sum of w s code) -
  // offset (sum of w s) + (sum of w z). Each token's w s is rounded once to a 32-bit
  // integer F on the caller's grid (w z to a signed Z on another), and every sum becomes
  // an exact integer sum. vpdpbusd multiplies 4 unsigned bytes by 4 signed bytes and adds
  // the 4 products to a dword: with byte j of 4 tokens' F in every dword of one vector,
  // and the same 4 tokens' code bytes of one channel position in each dword of another,
  // one instruction adds 4 tokens' byte-j products for 16 lanes. Integer sums are the same
  // in any order, so no split of a run changes them. One head per pass over the records:
  // for a GQA group the float kernel, which decodes each record once for every head, is
  // faster.
  // - F for 64 tokens at a time, 16 per vector: the parameters loaded a chunk ahead
  //   (their latency hidden), and one vpshufb per group and 16 tokens turns F into one
  //   dword of 4 bytes per byte j and 4 tokens, which the loop broadcasts from memory.
  // - A pass covers 64 channels (32 code bytes of 4-bit codes, 16 of 2-bit) of a chunk's
  //   quads of 4 records: one vpermt2b gathers 16 code bytes of each record into dwords (the
  //   4 records' bytes in each) per vector, and each vector gives 4 code vectors (see
  //   pass), each multiplied by the 4 bytes of F: 16 vpdpbusd per quad and pass.
  // - 4-bit codes: a vector is one unit of 32 channels, one group, whose F dword is
  //   broadcast. 2-bit codes: a vector holds two units, the first's bytes in even lanes and
  //   the second's in odd ones, so one broadcast qword carries both units' F.
  // - The sums stay in registers over the 64 tokens; the int32 sums go into int64 ones every
  //   2^15 tokens, before they can overflow (at most 4 * 255 * 128 per dword and 4 tokens).
  static constexpr std::size_t fixed_chunk = 64, fixed_flush = std::size_t{1} << 15;
  static constexpr std::size_t fixed_max_passes = 4, fixed_max_groups = 8; // head_dim <= 256

  // Bits, HeadDim, Groups and PerGroup (parameters per group): the shape at compile time
  // (0 when known only at run time; with the parameter count fixed, fix_batch has no
  // branches).
  template <unsigned Bits, std::size_t HeadDim, std::size_t Groups, std::size_t PerGroup>
  __attribute__((target("avx512vnni,avx512vbmi"))) static void
  axpy_fixed_one_head(const record_format& f, const float* weights, const float* grid, const std::uint8_t* records,
                      std::size_t count, std::int64_t* sums, std::uint64_t* weight_sums,
                      std::int64_t* zero_sums) noexcept {
    static_assert(Bits == 4 || Bits == 2);
    const std::size_t n = HeadDim ? HeadDim : f.head_dim, groups = Groups ? Groups : f.groups();
    const std::size_t per_group = PerGroup ? PerGroup : f.params_per_group;
    const std::size_t record_bytes = f.record_bytes, code_bytes = n * Bits / 8;
    // records of the compile-time shape, fp16 parameters and nothing else (0: no such shape)
    constexpr std::size_t shape_record_bytes =
        HeadDim && Groups && PerGroup ? HeadDim * Bits / 8 + 2 * Groups * PerGroup : 0;
    const std::size_t passes = (n + 63) / 64, units = n / 32, units_per_group = units / groups;
    // slices[g]: dword 4 q + j holds byte j of F of group g for the 4 tokens of the chunk's
    // quad q (batch b's 16 tokens fill bytes [64 b, 64 b + 64)). 2-bit codes: pairs[p] holds,
    // at 32 q + 8 j, quad q's dword j of pass p's two units side by side.
    alignas(64) std::uint8_t slices[fixed_max_groups][fixed_chunk * 4];
    alignas(64) std::uint8_t pairs[Bits == 2 ? fixed_max_passes : 1][fixed_chunk * 8];
    alignas(64) std::int32_t partial[fixed_max_passes][4][4][16]; // pass, code vector, byte j of F
    // Per group, since the last flush: the sum of F and of Z + 2^31 (Z with its sign bit
    // flipped, as unsigned) by byte, dword 4 l + j adding byte j of 4 tokens (vpdpbusd
    // with ones: one instruction per group and 16 tokens), at most 2^11 * 4 * 255 < 2^31
    // per flush.
    alignas(64) std::int32_t weight_bytes[fixed_max_groups][16], zero_bytes[fixed_max_groups][16];
    std::uint64_t call_weight_sums[fixed_max_groups] = {};
    std::int64_t call_zero_sums[fixed_max_groups] = {};
    const auto sum_of_bytes = [](const std::int32_t* lanes) {
      std::int64_t sum = 0;
      for (std::size_t d = 0; d < 16; ++d) sum += std::int64_t{lanes[d]} << (8 * (d % 4));
      return sum;
    };
    const __m512i ones = _mm512_set1_epi8(1), sign_bits = _mm512_set1_epi32(std::numeric_limits<std::int32_t>::min());
    alignas(64) std::uint8_t control[64], interleave[2][64];
    for (std::size_t k = 0; k < 64; ++k) control[k] = static_cast<std::uint8_t>(k / 16 * 16 + k % 4 * 4 + k % 16 / 4);
    // Dword m, byte k of vector v: record k's byte b of the pass's 32, from A = (r0 | r1),
    // B = (r2 | r3); b = 16 v + m (4-bit), or m / 2 and 8 + m / 2 in even and odd lanes
    // (2-bit, whose pass is the first 16 bytes).
    for (std::size_t v = 0; v < 2; ++v)
      for (std::size_t m = 0; m < 16; ++m)
        for (std::size_t k = 0; k < 4; ++k) {
          const std::size_t b = Bits == 4 ? 16 * v + m : m / 2 + 8 * (m % 2);
          interleave[v][4 * m + k] = static_cast<std::uint8_t>(k / 2 * 64 + k % 2 * 32 + b);
        }
    const __m512i by_byte = _mm512_load_si512(control);
    const __m512i first_vector = _mm512_load_si512(interleave[0]), second_vector = _mm512_load_si512(interleave[1]);

    // The fp16 parameters of a chunk's batches of 16 records, two per dword (the first in
    // its low half), 0 past the end. Parameter k is group k / per_group's number k % per_group.
    const std::size_t params = groups * per_group;
    __m512i chunk_params[fixed_chunk / 16][fixed_max_groups];
    const auto load_chunk_params = [&](std::size_t first) __attribute__((always_inline)) {
      const std::size_t size = std::min(fixed_chunk, count - first);
      for (std::size_t b = 0; 16 * b < size; ++b)
        load_dword_columns(records + (first + 16 * b) * record_bytes + code_bytes, record_bytes,
                           std::min<std::size_t>(16, size - 16 * b), 2 * params, chunk_params[b]);
    };
    // F (and Z) of batch b's 16 tokens into slices (and pairs).
    const auto fix_batch = [&](std::size_t first, std::size_t size,
                               std::size_t b) __attribute__((always_inline, target("avx512vnni,avx512vbmi"))) {
      const __mmask16 valid = static_cast<__mmask16>((1u << std::min<std::size_t>(16, size - 16 * b)) - 1);
      const __m512 w = _mm512_maskz_loadu_ps(valid, weights + first + 16 * b);
      const auto add_bytes = [&](std::int32_t* lanes, __m512i x) __attribute__((always_inline, target("avx512vnni"))) {
        _mm512_store_si512(lanes, _mm512_dpbusd_epi32(_mm512_load_si512(lanes), x, ones));
      };
      for (std::size_t g = 0; g < groups; ++g) {
        const float* grids = grid + g * per_group;
        const __m512 x =
            _mm512_mul_ps(_mm512_mul_ps(w, _mm512_set1_ps(grids[0])), fp16_parameter(chunk_params[b], g * per_group));
        const __m512i fixed = _mm512_cvt_roundps_epu32(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        const __m512i fixed_bytes = _mm512_shuffle_epi8(fixed, by_byte);
        _mm512_store_si512(slices[g] + 64 * b, fixed_bytes);
        add_bytes(weight_bytes[g], fixed_bytes);
        if (per_group == 2) {
          const __m512 z = _mm512_mul_ps(_mm512_mul_ps(w, _mm512_set1_ps(grids[1])),
                                         fp16_parameter(chunk_params[b], g * per_group + 1));
          const __m512i zero = _mm512_cvt_roundps_epi32(z, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
          add_bytes(zero_bytes[g], _mm512_shuffle_epi8(_mm512_maskz_xor_epi32(valid, zero, sign_bits), by_byte));
        }
      }
      if constexpr (Bits == 2)
        for (std::size_t p = 0; p < passes; ++p) {
          const std::size_t unit = 2 * p, second = std::min(unit + 1, units - 1);
          const __m512i a = _mm512_load_si512(slices[unit / units_per_group] + 64 * b);
          const __m512i c = _mm512_load_si512(slices[second / units_per_group] + 64 * b);
          const __m512i low = _mm512_unpacklo_epi32(a, c), high = _mm512_unpackhi_epi32(a, c);
          _mm512_store_si512(pairs[p] + 128 * b,
                             _mm512_permutex2var_epi64(low, _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11), high));
          _mm512_store_si512(pairs[p] + 128 * b + 64,
                             _mm512_permutex2var_epi64(low, _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15), high));
        }
    };
    // Pass p over a chunk's quads (all 16 when Full, with no check for records past the
    // end). The code vectors of a vector of code bytes x:
    // - 4-bit: x & 0x0F, and x ^ 0x80 read as signed (x - 128), which give the high
    //   nibbles' sum as (sum(F (x - 128)) - sum(F low) + 128 sum(F)) / 16;
    // - 2-bit: x & 0x03, x & 0x0C, x & 0x30 (the codes times 1, 4, 16) and x ^ 0x80, which
    //   give the top codes' sum the same way, over 64.
    // One instruction per code vector instead of a shift and a mask. A pass of a last odd
    // unit has the second unit's bytes masked to zero, its sums never read. Not inlined:
    // its 16 sums, 4 code vectors and F fit the 32 vector registers only without the rest
    // of the kernel's live values (inlined, 4 sums go to the stack and back every quad).
    struct chunk_run {
      const std::uint8_t* records;
      std::size_t size;
      prefetch_span ahead, next; // lines 8 KiB past the next chunk into L2; the next chunk's into L1
    };
    // QuadLines (not 0): a whole chunk followed by a whole one, of records of the shape's
    // size, whose lines are asked for in straight lines, QuadLines per quad (prefetch_part's
    // loop took a third of a pass's instructions).
    const auto pass = [&]<bool Full, std::size_t QuadLines>(const chunk_run& chunk, std::size_t p) __attribute__((
                          noinline, target("avx512vnni,avx512vbmi"))) {
      const std::size_t chunk_quads = Full ? fixed_chunk / 4 : (chunk.size + 3) / 4;
      constexpr std::size_t pass_bytes = 8 * Bits; // 64 channels
      const std::size_t bytes = std::min<std::size_t>(pass_bytes, code_bytes - pass_bytes * p);
      // 2-bit codes load 32 bytes of which the pass uses 16: the rest masked off too
      const __mmask32 byte_mask = bytes == 32 ? ~__mmask32{0} : (__mmask32{1} << bytes) - 1;
      const std::size_t unit = 2 * p, second = std::min(unit + 1, units - 1);
      const std::size_t first_group = unit / units_per_group, second_group = second / units_per_group;
      const __m512i high_bits = _mm512_set1_epi8(static_cast<char>(0x80));
      __m512i acc[4][4]; // [code vector][byte j of F]
      for (std::size_t v = 0; v < 4; ++v)
        for (std::size_t j = 0; j < 4; ++j) acc[v][j] = _mm512_load_si512(partial[p][v][j]);
      for (std::size_t q = 0; q < chunk_quads; ++q) {
        if constexpr (QuadLines != 0) {
          const std::uint8_t* next_quad = chunk.records + (fixed_chunk + 4 * q) * record_bytes;
          for (std::size_t k = 0; k < QuadLines; ++k) {
            if (p == 0)
              _mm_prefetch(reinterpret_cast<const char*>(next_quad + prefetch_distance + 64 * k), _MM_HINT_T1);
            if (p == passes - 1) _mm_prefetch(reinterpret_cast<const char*>(next_quad + 64 * k), _MM_HINT_T0);
          }
        } else {
          if (p == 0) prefetch_part(chunk.ahead, q, chunk_quads);
          if (p == passes - 1) prefetch_part<_MM_HINT_T0>(chunk.next, q, chunk_quads);
        }
        const std::uint8_t* quad = chunk.records + 4 * q * record_bytes + pass_bytes * p;
        // head_dim 128 (HeadDim) takes every pass's bytes whole: plain loads, which from DRAM
        // measured faster than masked ones (KIVI-2's values 1.76-1.82 ns per token against
        // 1.88-1.96)
        const auto half = [&](std::size_t k) __attribute__((always_inline)) {
          if (Full || 4 * q + k < chunk.size) {
            if (HeadDim != 0 && Bits == 2)
              return _mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(quad + k * record_bytes)));
            if (HeadDim != 0 && Bits == 4)
              return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(quad + k * record_bytes));
            return _mm256_maskz_loadu_epi8(byte_mask, quad + k * record_bytes);
          }
          return _mm256_setzero_si256();
        };
        const __m512i a = _mm512_inserti64x4(_mm512_castsi256_si512(half(0)), half(1), 1);
        const __m512i b = _mm512_inserti64x4(_mm512_castsi256_si512(half(2)), half(3), 1);
        __m512i codes[4];
        if constexpr (Bits == 4) {
          const __m512i first = _mm512_permutex2var_epi8(a, first_vector, b);
          const __m512i second = _mm512_permutex2var_epi8(a, second_vector, b);
          const __m512i low_nibbles = _mm512_set1_epi8(0x0F);
          codes[0] = _mm512_and_si512(first, low_nibbles);
          codes[1] = _mm512_xor_si512(first, high_bits);
          codes[2] = _mm512_and_si512(second, low_nibbles);
          codes[3] = _mm512_xor_si512(second, high_bits);
          for (std::size_t j = 0; j < 4; ++j) {
            std::int32_t first_bytes, second_bytes; // quad q's dword j
            std::memcpy(&first_bytes, slices[first_group] + 16 * q + 4 * j, 4);
            std::memcpy(&second_bytes, slices[second_group] + 16 * q + 4 * j, 4);
            const __m512i first_j = _mm512_set1_epi32(first_bytes), second_j = _mm512_set1_epi32(second_bytes);
            acc[0][j] = _mm512_dpbusd_epi32(acc[0][j], first_j, codes[0]);
            acc[1][j] = _mm512_dpbusd_epi32(acc[1][j], first_j, codes[1]);
            acc[2][j] = _mm512_dpbusd_epi32(acc[2][j], second_j, codes[2]);
            acc[3][j] = _mm512_dpbusd_epi32(acc[3][j], second_j, codes[3]);
          }
        } else {
          const __m512i x = _mm512_permutex2var_epi8(a, first_vector, b);
          codes[0] = _mm512_and_si512(x, _mm512_set1_epi8(0x03));
          codes[1] = _mm512_and_si512(x, _mm512_set1_epi8(0x0C));
          codes[2] = _mm512_and_si512(x, _mm512_set1_epi8(0x30));
          codes[3] = _mm512_xor_si512(x, high_bits);
          for (std::size_t j = 0; j < 4; ++j) {
            std::int64_t both; // quad q's dword j of the two units
            std::memcpy(&both, pairs[p] + 32 * q + 8 * j, 8);
            const __m512i f_j = _mm512_set1_epi64(both);
            for (std::size_t v = 0; v < 4; ++v) acc[v][j] = _mm512_dpbusd_epi32(acc[v][j], f_j, codes[v]);
          }
        }
      }
      for (std::size_t v = 0; v < 4; ++v)
        for (std::size_t j = 0; j < 4; ++j) _mm512_store_si512(partial[p][v][j], acc[v][j]);
    };

    // totals[p][v][lane]: the call's sum of F times code vector v of pass p, per lane.
    alignas(64) std::int64_t totals[fixed_max_passes][4][16] = {};
    if (count > 0) load_chunk_params(0);
    for (std::size_t begin = 0; begin < count; begin += fixed_flush) {
      const std::size_t end = std::min(count, begin + fixed_flush);
      std::memset(partial, 0, sizeof partial);
      std::memset(weight_bytes, 0, sizeof weight_bytes);
      std::memset(zero_bytes, 0, sizeof zero_bytes);
      for (std::size_t first = begin; first < end; first += fixed_chunk) {
        const std::size_t size = std::min(fixed_chunk, end - first);
        const std::uint8_t* chunk_records = records + first * record_bytes;
        // The next chunk's parameters are the first loads of its lines, so the lines asked
        // for lead by a chunk more than in the other loops: 8 KiB past the next chunk. With
        // 8 KiB past this one, int4 records (a chunk is 4.6 KB) left those loads waiting on
        // lines still in flight: on AMD Zen 5 int4 attention took 8.8-9.1 ns per token
        // against 6.0-6.2 with the float loop; with the lead, 6.3-6.4. They are loaded after
        // this chunk's passes, not before: from DRAM the values alone took 2.05-2.25 ns per
        // token against 2.35-2.5 (int4@group(32)) and 1.93-2.05 against 2.0-2.3 (KIVI-2's),
        // with the same times in L2 and L3. The last pass asks for the next chunk's lines
        // into L1 (in the first pass that cost 5-9 % in L2 and L3): otherwise whether those
        // loads found their lines in L1 depended on where the linker put the code (the
        // hardware's L1 prefetchers go by the loads' addresses). KIVI-2 attention, one
        // benchmark binary linked at four code offsets 16 bytes apart: 4.57-5.66 ns per
        // token without, 4.57-4.91 with.
        const std::uint8_t* next_records = chunk_records + fixed_chunk * record_bytes;
        const std::size_t next_size =
            first + fixed_chunk < count ? std::min(fixed_chunk, count - first - fixed_chunk) : 0;
        const chunk_run chunk{chunk_records, size, lines_ahead(next_records, size * record_bytes),
                              lines_covering(next_records, next_size * record_bytes)};
        for (std::size_t b = 0; 16 * b < size; ++b) fix_batch(first, size, b);
        for (std::size_t p = 0; p < passes; ++p) {
          if (size == fixed_chunk && next_size == fixed_chunk && record_bytes == shape_record_bytes)
            pass.template operator()<true, (4 * shape_record_bytes + 63) / 64>(chunk, p);
          else if (size == fixed_chunk)
            pass.template operator()<true, 0>(chunk, p);
          else
            pass.template operator()<false, 0>(chunk, p);
        }
        if (first + fixed_chunk < count) load_chunk_params(first + fixed_chunk);
      }
      // totals += sum over j of partial << 8 j, 8 lanes at a time
      for (std::size_t p = 0; p < passes; ++p)
        for (std::size_t v = 0; v < 4; ++v)
          for (std::size_t half = 0; half < 2; ++half) {
            std::int64_t* out = totals[p][v] + 8 * half;
            __m512i total = _mm512_load_si512(out);
            for (std::size_t j = 0; j < 4; ++j) {
              const __m256i lanes = _mm256_load_si256(reinterpret_cast<const __m256i*>(partial[p][v][j] + 8 * half));
              total = _mm512_add_epi64(total, _mm512_slli_epi64(_mm512_cvtepi32_epi64(lanes), 8 * j));
            }
            _mm512_store_si512(out, total);
          }
      for (std::size_t g = 0; g < groups; ++g) {
        call_weight_sums[g] += static_cast<std::uint64_t>(sum_of_bytes(weight_bytes[g]));
        call_zero_sums[g] +=
            sum_of_bytes(zero_bytes[g]) - static_cast<std::int64_t>(end - begin) * (std::int64_t{1} << 31);
      }
    }
    for (std::size_t g = 0; g < groups; ++g) {
      weight_sums[g] += call_weight_sums[g];
      if (per_group == 2) zero_sums[g] += call_zero_sums[g];
    }
    const std::size_t group_bytes = f.group_channels * Bits / 8;
    for (std::size_t p = 0; p < passes; ++p)
      for (std::size_t lane = 0; lane < 16; ++lane) {
        if constexpr (Bits == 4) {
          for (std::size_t vector = 0; vector < 2; ++vector) {
            const std::size_t byte = 32 * p + 16 * vector + lane;
            if (byte >= code_bytes) continue;
            const auto weight_sum = static_cast<std::int64_t>(call_weight_sums[byte / group_bytes]);
            const std::int64_t low = totals[p][2 * vector][lane], bytes = totals[p][2 * vector + 1][lane];
            sums[2 * byte] += low;
            sums[2 * byte + 1] += (bytes - low + 128 * weight_sum) / 16;
          }
        } else {
          const std::size_t byte = 16 * p + lane / 2 + 8 * (lane % 2);
          if (byte >= code_bytes) continue;
          const auto weight_sum = static_cast<std::int64_t>(call_weight_sums[byte / group_bytes]);
          const std::int64_t c0 = totals[p][0][lane], c1 = totals[p][1][lane], c2 = totals[p][2][lane];
          const std::int64_t bytes = totals[p][3][lane];
          sums[4 * byte] += c0;
          sums[4 * byte + 1] += c1 / 4;
          sums[4 * byte + 2] += c2 / 16;
          sums[4 * byte + 3] += (bytes + 128 * weight_sum - c0 - c1 - c2) / 64;
        }
      }
  }

  static void axpy_records_fixed(const record_format& f, const float* weights, std::size_t stride, std::size_t heads,
                                 const float* grid, const std::uint8_t* records, std::size_t count, std::int64_t* sums,
                                 std::uint64_t* weight_sums, std::int64_t* zero_sums) noexcept {
    if (!fixed_point_values(f))
      return scalar::axpy_records_fixed(f, weights, stride, heads, grid, records, count, sums, weight_sums, zero_sums);
    const std::size_t n = f.head_dim, groups = f.groups(), per_group = f.params_per_group;
    for (std::size_t h = 0; h < heads; ++h) {
      const auto run = [&]<unsigned Bits, std::size_t HeadDim, std::size_t Groups>() {
        const auto with = [&]<std::size_t PerGroup>() {
          axpy_fixed_one_head<Bits, HeadDim, Groups, PerGroup>(f, weights + h * stride, grid + h * groups * per_group,
                                                               records, count, sums + h * n, weight_sums + h * groups,
                                                               zero_sums ? zero_sums + h * groups : nullptr);
        };
        if constexpr (HeadDim == 0)
          with.template operator()<0>();
        else if (per_group == 2) // scale and zero (KIVI's values); else a scale alone (int4)
          with.template operator()<2>();
        else
          with.template operator()<1>();
      };
      const auto shapes = [&]<unsigned Bits>() {
        if (n == 128 && groups == 4)
          run.template operator()<Bits, 128, 4>();
        else if (n == 128 && groups == 1)
          run.template operator()<Bits, 128, 1>();
        else
          run.template operator()<Bits, 0, 0>();
      };
      if (f.bits == 4)
        shapes.template operator()<4>();
      else
        shapes.template operator()<2>();
    }
  }
};

} // namespace kvlab::kernels::simd
