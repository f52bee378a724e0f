// Every SIMD kernel the CPU can run equals the scalar reference: odd sizes, tails, every
// code width, misaligned rows and groups starting mid-byte.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <span>
#include <string>
#include <utility>
#include <vector>
import kvlab;
#include "kernel_test_helpers.hpp"

namespace {

using kvlab_test::random_bytes;
using kvlab_test::simd_isas;

// Sums of up to a few hundred products of O(1) values: summation order changes the result
// by a few ulps of the sum of magnitudes.
void check_close(float simd, float reference, float magnitude) {
  BOOST_TEST(std::fabs(simd - reference) <= 1e-5f * (magnitude + 1.0f));
}

} // namespace

BOOST_AUTO_TEST_SUITE(kernels)

BOOST_AUTO_TEST_CASE(simd_code_kernels_match_scalar_reference) {
  // Table lookups (dot/axpy_codes), raw affine codes (dot/axpy_raw_codes) and decode, for
  // every code width, odd sizes and groups starting mid-byte.
  const auto& scalar = kvlab::kernels_for(kvlab::isa::scalar);
  random_bytes random;
  for (const auto isa : simd_isas()) {
    const auto& simd = kvlab::kernels_for(isa);
    for (unsigned bits = 1; bits <= 8; ++bits) {
      const auto levels = random.floats(std::size_t{1} << bits);
      for (const std::size_t n : {1u, 7u, 15u, 16u, 17u, 31u, 33u, 64u, 100u, 129u}) {
        for (const std::size_t first : {0u, 1u, 2u, 3u, 32u}) {
          BOOST_TEST_CONTEXT(kvlab::isa_name(isa) << " bits " << bits << " n " << n << " first " << first) {
            const auto packed = random((first + n) * bits / 8 + 2);
            const auto query = random.floats(n);
            float magnitude = 0.0f;
            for (std::size_t i = 0; i < n; ++i) magnitude += std::fabs(query[i]) * 4.0f;
            check_close(simd.dot_codes(query.data(), packed.data(), first, n, bits, levels.data()),
                        scalar.dot_codes(query.data(), packed.data(), first, n, bits, levels.data()), magnitude);
            auto acc_simd = random.floats(n);
            auto acc_scalar = acc_simd;
            simd.axpy_codes(0.37f, packed.data(), first, n, bits, levels.data(), acc_simd.data());
            scalar.axpy_codes(0.37f, packed.data(), first, n, bits, levels.data(), acc_scalar.data());
            for (std::size_t i = 0; i < n; ++i) check_close(acc_simd[i], acc_scalar[i], 4.0f);

            check_close(simd.dot_raw_codes(query.data(), packed.data(), first, n, bits),
                        scalar.dot_raw_codes(query.data(), packed.data(), first, n, bits), 64.0f * magnitude);
            simd.axpy_raw_codes(0.37f, packed.data(), first, n, bits, acc_simd.data());
            scalar.axpy_raw_codes(0.37f, packed.data(), first, n, bits, acc_scalar.data());
            for (std::size_t i = 0; i < n; ++i) check_close(acc_simd[i], acc_scalar[i], 256.0f);

            std::vector<float> out_simd(n), out_scalar(n);
            simd.decode_codes(packed.data(), first, n, bits, levels.data(), 0.5f, -0.25f, out_simd.data());
            scalar.decode_codes(packed.data(), first, n, bits, levels.data(), 0.5f, -0.25f, out_scalar.data());
            for (std::size_t i = 0; i < n; ++i) check_close(out_simd[i], out_scalar[i], 4.0f);
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(simd_statistics_kernels_match_scalar_reference_exactly) {
  const auto& scalar = kvlab::kernels_for(kvlab::isa::scalar);
  random_bytes random;
  for (const auto isa : simd_isas()) {
    const auto& simd = kvlab::kernels_for(isa);
    for (const std::size_t n : {1u, 3u, 15u, 16u, 17u, 64u, 129u}) {
      const auto x = random.floats(n + 1);
      // Statistics are exact: the same value whatever the order of evaluation.
      BOOST_TEST(simd.absmax(x.data() + 1, n) == scalar.absmax(x.data() + 1, n));
      float lo_simd, hi_simd, lo_scalar, hi_scalar;
      simd.min_max(x.data() + 1, n, &lo_simd, &hi_simd);
      scalar.min_max(x.data() + 1, n, &lo_scalar, &hi_scalar);
      BOOST_TEST(lo_simd == lo_scalar);
      BOOST_TEST(hi_simd == hi_scalar);
    }
    // Signed zeros: min and max of a mix of -0 and +0 are +0 on every ISA, so a zero point
    // stored from them has the same bits everywhere.
    std::vector<float> zeros(40, 0.0f);
    for (std::size_t i = 0; i < zeros.size(); i += 3) zeros[i] = -0.0f;
    for (const std::size_t n : {2u, 17u, 40u}) {
      float lo, hi;
      simd.min_max(zeros.data(), n, &lo, &hi);
      BOOST_TEST((!std::signbit(lo) && !std::signbit(hi)), "n = " << n);
    }
  }
}

BOOST_AUTO_TEST_CASE(simd_softmax_matches_the_scalar_reference) {
  const auto& scalar = kvlab::kernels_for(kvlab::isa::scalar);
  random_bytes random;
  for (const auto isa : simd_isas()) {
    const auto& simd = kvlab::kernels_for(isa);
    for (const std::size_t n : {1u, 5u, 16u, 17u, 33u, 1000u}) {
      auto x = random.floats(n + 1);
      for (auto& v : x) v *= 8.0f; // a spread of logits, some far below the max
      std::vector<float> by_simd(x.begin() + 1, x.end()), by_scalar = by_simd; // misaligned source copied
      const float lse_simd = simd.softmax(by_simd.data(), n), lse_scalar = scalar.softmax(by_scalar.data(), n);
      BOOST_TEST(lse_simd == lse_scalar, boost::test_tools::tolerance(1e-6f));
      double total = 0.0;
      for (std::size_t i = 0; i < n; ++i) {
        BOOST_TEST_REQUIRE(std::fabs(by_simd[i] - by_scalar[i]) <= 1e-6f * by_scalar[i] + 1e-30f,
                           "n = " << n << ", i = " << i);
        total += by_simd[i];
      }
      BOOST_TEST(total == 1.0, boost::test_tools::tolerance(1e-5));
    }
    // The largest score wherever it lies: in each of the max pass's four running maxima
    // (vectors of 8 or 16 floats), in the vectors after the last four and in the tail.
    // Subtracting anything less than 200 would overflow e^x.
    for (const std::size_t at : {0u, 9u, 17u, 25u, 34u, 51u, 68u, 900u, 970u, 999u}) {
      std::vector<float> scores(1000, 0.0f);
      scores[at] = 200.0f;
      BOOST_TEST(simd.softmax(scores.data(), scores.size()) == 200.0f);
      BOOST_TEST(scores[at] == 1.0f, "the largest at " << at);
    }
    // The tails of exp: normal results down to the smallest normal, subnormal ones (which
    // xsimd's exp, on AVX2, flushes to zero: allowed), zero below e^-104 and at -inf, and a
    // NaN that spreads.
    std::vector<float> logits;
    for (float x = 0.0f; x > -110.0f; x -= 0.37f) logits.push_back(x);
    logits.push_back(-std::numeric_limits<float>::infinity());
    auto by_simd = logits, by_scalar = logits;
    simd.softmax(by_simd.data(), by_simd.size());
    scalar.softmax(by_scalar.data(), by_scalar.size());
    for (std::size_t i = 0; i < logits.size(); ++i)
      BOOST_TEST_REQUIRE(std::fabs(by_simd[i] - by_scalar[i]) <=
                             1e-6f * by_scalar[i] + std::numeric_limits<float>::min(),
                         kvlab::isa_name(isa) << ": logit " << logits[i]);
    if (isa != kvlab::isa::avx2) // vscalefps rounds into the subnormals: within 2 of their steps
      for (std::size_t i = 0; i < logits.size(); ++i)
        BOOST_TEST(std::fabs(by_simd[i] - by_scalar[i]) <= 1e-6f * by_scalar[i] + 3e-45f, "logit " << logits[i]);
    BOOST_TEST(by_simd.back() == 0.0f);
    logits[7] = std::numeric_limits<float>::quiet_NaN();
    simd.softmax(logits.data(), logits.size());
    BOOST_TEST(std::isnan(logits[7]));
  }
}

BOOST_AUTO_TEST_CASE(simd_record_run_kernels_match_scalar_for_every_layout) {
  // Multi-head dot and axpy over runs of records: every element kind, code width (vector
  // paths for 2, 4 and 8 bits, the scalar fallback for 3), groups narrower and wider than a
  // vector block (on AVX-512, 2- and 4-bit dots whose groups are whole dwords take the token-
  // lane kernel, the others the channel-lane one), 0 to 2 parameters, odd head_dims (tails), misaligned records and
  // heads, several head counts and a score stride wider than the run.
  using kvlab::element_kind;
  const auto& scalar = kvlab::kernels_for(kvlab::isa::scalar);
  random_bytes random;
  for (const auto isa : simd_isas()) {
    const auto& simd = kvlab::kernels_for(isa);
    for (const auto kind : {element_kind::f32, element_kind::f16, element_kind::bf16, element_kind::affine_codes,
                            element_kind::table_codes}) {
      const bool coded = kind == element_kind::affine_codes || kind == element_kind::table_codes;
      for (const unsigned bits : coded ? std::vector<unsigned>{2, 3, 4, 8} : std::vector<unsigned>{32}) {
        for (const std::size_t head_dim : {20u, 24u, 64u, 128u}) {
          for (const std::size_t group :
               coded ? std::vector<std::size_t>{8, 16, 32, head_dim} : std::vector{head_dim}) {
            if (head_dim % group != 0) continue;
            for (const unsigned params : coded ? std::vector<unsigned>{0, 1, 2} : std::vector<unsigned>{0}) {
              for (const bool params_f32 : {false, true}) {
                if (params == 0 && params_f32) continue;
                const auto levels = random.floats(std::size_t{1} << std::min(bits, 8u));
                kvlab::record_format f{.kind = kind,
                                       .head_dim = head_dim,
                                       .group_channels = group,
                                       .bits = kind == element_kind::f32 ? 32u
                                               : coded                   ? bits
                                                                         : 16u,
                                       .params_per_group = params,
                                       .params_f32 = params_f32,
                                       .offset = 3.0f,
                                       .levels = levels.data()};
                f.record_bytes = f.code_bytes() + f.groups() * params * (params_f32 ? 4 : 2) + 3; // odd stride
                for (const std::size_t count : {1u, 7u, 16u, 17u, 40u}) {
                  // Records of random codes with sane parameters (finite floats everywhere).
                  std::vector<std::uint8_t> records(count * f.record_bytes + 1);
                  std::vector<float> raw = random.floats(head_dim);
                  for (std::size_t t = 0; t < count; ++t) {
                    std::uint8_t* record = records.data() + 1 + t * f.record_bytes; // misaligned
                    const auto codes = random(f.code_bytes());
                    std::memcpy(record, codes.data(), codes.size());
                    for (std::size_t c = 0; c < head_dim && !coded; ++c) {
                      const float x = raw[c] * static_cast<float>(t + 1);
                      const std::uint16_t h = kvlab::float_to_half_bits(x), b = kvlab::float_to_bf16_bits(x);
                      if (kind == element_kind::f32) std::memcpy(record + 4 * c, &x, 4);
                      if (kind == element_kind::f16) std::memcpy(record + 2 * c, &h, 2);
                      if (kind == element_kind::bf16) std::memcpy(record + 2 * c, &b, 2);
                    }
                    for (std::size_t p = 0; p < f.groups() * params; ++p) {
                      const float value = 0.01f * static_cast<float>(p % 7 + 1);
                      const std::uint16_t h = kvlab::float_to_half_bits(value);
                      std::uint8_t* at = record + f.code_bytes() + p * (params_f32 ? 4 : 2);
                      if (params_f32)
                        std::memcpy(at, &value, 4);
                      else
                        std::memcpy(at, &h, 2);
                    }
                  }
                  const std::uint8_t* first = records.data() + 1;
                  // |decoded values| from the scalar reference: the scale of the rounding differences.
                  std::vector<float> magnitudes(count * head_dim);
                  for (std::size_t t = 0; t < count; ++t) {
                    const float one = 1.0f;
                    scalar.axpy_records(f, &one, 1, 1, first + t * f.record_bytes, 1, &magnitudes[t * head_dim]);
                  }
                  for (auto& m : magnitudes) m = std::fabs(m);
                  for (const std::size_t heads : {1u, 2u, 3u, 4u, 5u, 6u, 7u, 8u, 9u}) {
                    BOOST_TEST_CONTEXT(kvlab::isa_name(isa)
                                       << " kind " << static_cast<int>(kind) << " bits " << bits << " head_dim "
                                       << head_dim << " group " << group << " params " << params
                                       << (params_f32 ? " f32" : " f16") << " count " << count << " heads " << heads) {
                      const std::size_t stride = count + 5;
                      const auto queries = random.floats(heads * head_dim + 1); // heads start misaligned
                      std::vector<float> scores_simd(heads * stride, -7.0f), scores_scalar = scores_simd;
                      simd.dot_records(f, queries.data() + 1, heads, first, count, scores_simd.data(), stride);
                      scalar.dot_records(f, queries.data() + 1, heads, first, count, scores_scalar.data(), stride);
                      for (std::size_t h = 0; h < heads; ++h) {
                        for (std::size_t t = 0; t < count; ++t) {
                          float magnitude = 0.0f;
                          for (std::size_t c = 0; c < head_dim; ++c)
                            magnitude += std::fabs(queries[1 + h * head_dim + c]) * magnitudes[t * head_dim + c];
                          check_close(scores_simd[h * stride + t], scores_scalar[h * stride + t], 4.0f * magnitude);
                        }
                        for (std::size_t t = count; t < stride; ++t) BOOST_TEST(scores_simd[h * stride + t] == -7.0f);
                      }
                      const auto weights = random.floats(heads * stride);
                      auto acc_simd = random.floats(heads * head_dim + 1);
                      auto acc_scalar = acc_simd;
                      simd.axpy_records(f, weights.data(), stride, heads, first, count, acc_simd.data() + 1);
                      scalar.axpy_records(f, weights.data(), stride, heads, first, count, acc_scalar.data() + 1);
                      BOOST_TEST(acc_simd[0] == acc_scalar[0]);
                      for (std::size_t h = 0; h < heads; ++h)
                        for (std::size_t c = 0; c < head_dim; ++c) {
                          float magnitude = std::fabs(acc_scalar[1 + h * head_dim + c]);
                          for (std::size_t t = 0; t < count; ++t)
                            magnitude += std::fabs(weights[h * stride + t]) * magnitudes[t * head_dim + c];
                          check_close(acc_simd[1 + h * head_dim + c], acc_scalar[1 + h * head_dim + c],
                                      4.0f * magnitude);
                        }
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(integer_key_dots_keep_the_query_to_two_ulps_of_its_unit) {
  // avx512vnni's keys: the query is split per unit of (at most) 32 channels into three
  // signed 7-bit slices, so each element may move by max |q| of its unit / (127 * 2^15) and
  // no more. Checked against exact (double) dots over the decoded keys, with queries that
  // are plain, that have one outlier 10^6 times the rest (it must cost only its own
  // unit), whose units differ by powers of 10, and whose units are zero. A query that is
  // not finite takes the float kernels: the same bits as avx512.
  if (!kvlab::cpu_supports(kvlab::isa::avx512_vnni)) {
    BOOST_TEST_MESSAGE("this CPU has no AVX-512 VNNI: integer key dots not run");
    return;
  }
  const auto& vnni = kvlab::kernels_for(kvlab::isa::avx512_vnni);
  const auto& avx512 = kvlab::kernels_for(kvlab::isa::avx512);
  const auto& scalar = kvlab::kernels_for(kvlab::isa::scalar);
  random_bytes random;
  struct shape {
    unsigned bits;
    float offset;
    std::size_t head_dim, group;
  };
  // Offsets 0 (uint<b>) show slicing errors plainly; with an offset, offset times the sum of
  // the query (outlier included) rounds as much as they are large.
  for (const auto [bits, offset, head_dim, group] :
       {shape{4, 8.0f, 128, 32}, shape{8, 128.0f, 128, 32}, shape{4, 0.0f, 128, 32}, shape{4, 8.0f, 64, 64},
        shape{4, 0.0f, 48, 16}, shape{8, 0.0f, 24, 24}}) {
    const kvlab::record_format f{.kind = kvlab::element_kind::affine_codes,
                                 .record_bytes = head_dim * bits / 8 + head_dim / group * 4,
                                 .head_dim = head_dim,
                                 .group_channels = group,
                                 .bits = bits,
                                 .params_per_group = 2,
                                 .offset = offset};
    const std::size_t count = 37, groups = head_dim / group, unit = group % 32 == 0 ? 32 : group;
    std::vector<std::uint8_t> records = random(count * f.record_bytes);
    std::vector<float> scales(count * groups);
    for (std::size_t t = 0; t < count; ++t)
      for (std::size_t g = 0; g < groups; ++g) {
        // zero 0: a zero's term rounds with the sum of the query, outlier included, which
        // would hide how finely the other channels were sliced
        const float scale = 0.01f * static_cast<float>((t + g) % 7 + 1), zero = 0.0f;
        const std::uint16_t params[2] = {kvlab::float_to_half_bits(scale), kvlab::float_to_half_bits(zero)};
        std::memcpy(records.data() + t * f.record_bytes + f.code_bytes() + 4 * g, params, 4);
        scales[t * groups + g] = kvlab::half_bits_to_float(params[0]);
      }
    // The first unit's codes are 0: the outlier below (channel 5) and the rest of its unit
    // then add nothing, and the other units show whether they kept their own precision.
    for (std::size_t t = 0; t < count; ++t) std::memset(records.data() + t * f.record_bytes, 0, unit * bits / 8);
    std::vector<float> decoded(count * head_dim, 0.0f);
    for (std::size_t t = 0; t < count; ++t) {
      const float one = 1.0f;
      scalar.axpy_records(f, &one, 1, 1, records.data() + t * f.record_bytes, 1, &decoded[t * head_dim]);
    }
    for (const int kind : {0, 1, 2, 3}) {
      auto query = random.floats(head_dim);
      for (std::size_t c = 0; c < head_dim; ++c) {
        if (kind == 1 && c == 5) query[c] *= 1e6f;
        if (kind == 2) query[c] *= std::pow(10.0f, static_cast<float>(c / unit % 5) - 2.0f);
        if (kind == 3 && c / unit % 2 == 1) query[c] = 0.0f;
      }
      std::vector<float> scores(count);
      vnni.dot_records(f, query.data(), 1, records.data(), count, scores.data(), count);
      for (std::size_t t = 0; t < count; ++t) {
        BOOST_TEST_CONTEXT("bits " << bits << " head_dim " << head_dim << " group " << group << " query kind " << kind
                                   << " token " << t) {
          double exact = 0.0, slice_bound = 0.0, magnitude = 0.0;
          for (std::size_t c = 0; c < head_dim; ++c) {
            const float scale = scales[t * groups + c / group];
            const double code = kvlab::unpack_code(std::span(records).subspan(t * f.record_bytes), c, bits);
            const float unit_max = *std::max_element(query.begin() + static_cast<std::ptrdiff_t>(c / unit * unit),
                                                     query.begin() + static_cast<std::ptrdiff_t>((c / unit + 1) * unit),
                                                     [](float a, float b) { return std::fabs(a) < std::fabs(b); });
            exact += static_cast<double>(query[c]) * decoded[t * head_dim + c];
            slice_bound += std::fabs(unit_max) / (127.0 * 32768.0) * scale * code;
            // what the kernel sums in floats: q * scale * code, and offset times q
            magnitude += std::fabs(query[c]) * scale * (code + std::fabs(offset));
          }
          BOOST_TEST(std::fabs(scores[t] - exact) <= slice_bound + 4e-7 * magnitude);
        }
      }
    }
    auto infinite = random.floats(2 * head_dim);
    infinite[head_dim + 3] = std::numeric_limits<float>::infinity();
    std::vector<float> scores_vnni(2 * count), scores_avx512(2 * count);
    vnni.dot_records(f, infinite.data(), 2, records.data(), count, scores_vnni.data(), count);
    avx512.dot_records(f, infinite.data(), 2, records.data(), count, scores_avx512.data(), count);
    BOOST_TEST(std::memcmp(scores_vnni.data(), scores_avx512.data(), 4 * scores_vnni.size()) == 0);
  }
}

BOOST_AUTO_TEST_CASE(pair_table_key_dots_round_like_floats) {
  // The AVX-512 tables' 2-bit rows without parameters (KIVI's keys, one head): 16-entry
  // tables of two channels' query terms, looked up per pair of codes and added in a fixed
  // tree, all in fp32. Each table entry rounds at most twice, each dword's 8 lookups are
  // added in a tree of depth 3 and the head_dim / 16 dwords in order, so a score may be off
  // by (head_dim / 16 + 5) units of 2^-24 of the sum of its terms' magnitudes, and no
  // more. Packed rows (a full chunk of 32 and a short one) and rows with a gap between
  // them, head_dim 64, 128 and 256, offsets 0 (uint2) and 1 (int2), queries that are plain,
  // that have an outlier 10^6 times the rest, whose spans of 32 channels differ by powers
  // of 10 and whose every other span is zero, against exact (double) dots. A query with an
  // infinite element gives the same bits on avx512 and avx512vnni.
  std::vector<kvlab::isa> isas;
  for (const auto isa : {kvlab::isa::avx512, kvlab::isa::avx512_vnni})
    if (kvlab::cpu_supports(isa)) isas.push_back(isa);
  if (isas.empty()) {
    BOOST_TEST_MESSAGE("this CPU has no AVX-512: pair-table key dots not run");
    return;
  }
  random_bytes random;
  for (const auto isa : isas)
    for (const std::size_t head_dim : {64u, 128u, 256u})
      for (const float offset : {0.0f, 1.0f})
        for (const std::size_t gap : {0u, 3u}) {
          const kvlab::record_format f{.kind = kvlab::element_kind::affine_codes,
                                       .record_bytes = head_dim / 4 + gap,
                                       .head_dim = head_dim,
                                       .group_channels = head_dim,
                                       .bits = 2,
                                       .params_per_group = 0,
                                       .offset = offset};
          const std::size_t count = 37;
          const std::vector<std::uint8_t> records = random(count * f.record_bytes);
          for (const int kind : {0, 1, 2, 3}) {
            auto query = random.floats(head_dim);
            for (std::size_t c = 0; c < head_dim; ++c) {
              if (kind == 1 && c == 5) query[c] *= 1e6f;
              if (kind == 2) query[c] *= std::pow(10.0f, static_cast<float>(c / 32 % 5) - 2.0f);
              if (kind == 3 && c / 32 % 2 == 1) query[c] = 0.0f;
            }
            std::vector<float> scores(count);
            kvlab::kernels_for(isa).dot_records(f, query.data(), 1, records.data(), count, scores.data(), count);
            for (std::size_t t = 0; t < count; ++t) {
              BOOST_TEST_CONTEXT(kvlab::isa_name(isa) << " head_dim " << head_dim << " offset " << offset << " gap "
                                                      << gap << " query kind " << kind << " row " << t) {
                double exact = 0.0, magnitude = 0.0;
                for (std::size_t c = 0; c < head_dim; ++c) {
                  const double code = kvlab::unpack_code(std::span(records).subspan(t * f.record_bytes), c, 2);
                  exact += static_cast<double>(query[c]) * (code - offset);
                  magnitude += std::fabs(static_cast<double>(query[c]) * (code - offset));
                }
                const double bound = static_cast<double>(head_dim / 16 + 5) * 0x1p-24 * magnitude;
                BOOST_TEST(std::fabs(scores[t] - exact) <= bound);
              }
            }
          }
          auto infinite = random.floats(head_dim);
          infinite[3] = std::numeric_limits<float>::infinity();
          std::vector<float> scores(count), scores_avx512(count);
          kvlab::kernels_for(isa).dot_records(f, infinite.data(), 1, records.data(), count, scores.data(), count);
          kvlab::kernels_for(isas.front())
              .dot_records(f, infinite.data(), 1, records.data(), count, scores_avx512.data(), count);
          BOOST_TEST(std::memcmp(scores.data(), scores_avx512.data(), 4 * count) == 0);
        }
}

BOOST_AUTO_TEST_CASE(simd_channel_parameter_folds_match_scalar) {
  // Per-channel key blocks (KIVI) fold their scales and zeros into the queries once per
  // block: the scaled queries are plain products (bit-identical), the zero terms dots.
  // Head dims with and without tails, past the vector path's limit (1030), fp16 and f32,
  // one and two parameters per channel, misaligned parameters and queries.
  const auto& scalar = kvlab::kernels_for(kvlab::isa::scalar);
  random_bytes random;
  for (const auto isa : simd_isas()) {
    const auto& simd = kvlab::kernels_for(isa);
    for (const std::size_t n : {8u, 20u, 128u, 130u, 1030u})
      for (const unsigned per_channel : {1u, 2u})
        for (const bool params_f32 : {false, true})
          for (const std::size_t heads : {1u, 3u, 4u}) {
            BOOST_TEST_CONTEXT(kvlab::isa_name(isa) << " n " << n << " per_channel " << per_channel
                                                    << (params_f32 ? " f32" : " f16") << " heads " << heads) {
              const auto values = random.floats(n * per_channel);
              std::vector<std::uint8_t> params(1 + n * per_channel * (params_f32 ? 4 : 2));
              for (std::size_t i = 0; i < values.size(); ++i) {
                const std::uint16_t half = kvlab::float_to_half_bits(values[i]);
                if (params_f32)
                  std::memcpy(params.data() + 1 + 4 * i, &values[i], 4);
                else
                  std::memcpy(params.data() + 1 + 2 * i, &half, 2);
              }
              const auto queries = random.floats(heads * n + 1);
              std::vector<float> scaled_simd(heads * n, -7.0f), scaled_scalar = scaled_simd;
              std::vector<float> terms_simd(heads, -7.0f), terms_scalar = terms_simd;
              simd.fold_channel_params(params.data() + 1, n, per_channel, params_f32, queries.data() + 1, heads,
                                       scaled_simd.data(), terms_simd.data());
              scalar.fold_channel_params(params.data() + 1, n, per_channel, params_f32, queries.data() + 1, heads,
                                         scaled_scalar.data(), terms_scalar.data());
              BOOST_TEST(scaled_simd == scaled_scalar, boost::test_tools::per_element());
              for (std::size_t h = 0; h < heads; ++h) {
                float magnitude = 0.0f;
                for (std::size_t c = 0; per_channel > 1 && c < n; ++c)
                  magnitude += std::fabs(queries[1 + h * n + c] * values[c * per_channel + 1]);
                check_close(terms_simd[h], terms_scalar[h], magnitude);
                if (per_channel == 1) BOOST_TEST(terms_simd[h] == 0.0f);
              }
            }
          }
  }
}

BOOST_AUTO_TEST_CASE(channel_blocks_equal_folds_and_dots_block_by_block) {
  // One call over a stream's per-channel blocks (KIVI's keys) must give, bit for bit, what
  // fold_channel_params, dot_records and adding the zero terms give block by block, on
  // every table: 2-, 4- and 8-bit rows, head_dim 64, 96 (no compile-time shape), 128 and
  // 256, fp16 and f32 parameters, one or two per channel, 1 to 9 heads, full blocks, short
  // ones (eviction), a block split in two runs (pages), misaligned rows; and, bit for bit
  // (the float kernels' infinities and NaNs), a query with an infinite element.
  random_bytes random;
  std::vector<kvlab::isa> isas{kvlab::isa::scalar};
  for (const auto isa : simd_isas()) isas.push_back(isa);
  const std::vector<std::size_t> block_rows{32, 32, 7, 32, 1, 32};
  for (const auto isa : isas) {
    const auto& kernels = kvlab::kernels_for(isa);
    for (const unsigned bits : {2u, 4u, 8u})
      for (const std::size_t n : {64u, 96u, 128u, 256u})
        for (const unsigned per_channel : {1u, 2u})
          for (const bool params_f32 : {false, true})
            for (const std::size_t heads : {1u, 2u, 4u, 5u, 9u})
              for (const bool finite : {true, false}) {
                BOOST_TEST_CONTEXT(kvlab::isa_name(isa) << " bits " << bits << " n " << n << " per_channel "
                                                        << per_channel << (params_f32 ? " f32" : " f16") << " heads "
                                                        << heads << (finite ? "" : " infinite query")) {
                  const kvlab::record_format f{.kind = kvlab::element_kind::affine_codes,
                                               .record_bytes = n * bits / 8,
                                               .head_dim = n,
                                               .group_channels = n,
                                               .bits = bits,
                                               .params_per_group = 0,
                                               .offset = per_channel == 2 ? 0.0f
                                                                          : static_cast<float>((1u << (bits - 1)) - 1)};
                  std::size_t rows = 0;
                  for (const std::size_t count : block_rows) rows += count;
                  const auto codes = random(1 + rows * f.record_bytes);
                  const std::size_t param_bytes = n * per_channel * (params_f32 ? 4 : 2);
                  std::vector<std::uint8_t> params(block_rows.size() * param_bytes);
                  for (std::size_t i = 0; i < params.size() / (params_f32 ? 4 : 2); ++i) {
                    const float value = static_cast<float>(random.random.normal());
                    const std::uint16_t half = kvlab::float_to_half_bits(value);
                    std::memcpy(params.data() + i * (params_f32 ? 4 : 2),
                                params_f32 ? static_cast<const void*>(&value) : static_cast<const void*>(&half),
                                params_f32 ? 4 : 2);
                  }
                  // the fourth block lies in two runs of storage: two entries, the same parameters
                  std::vector<kvlab::channel_block> blocks;
                  for (std::size_t b = 0, first = 0; b < block_rows.size(); first += block_rows[b++]) {
                    const std::uint8_t* block_params = params.data() + b * param_bytes;
                    const std::uint8_t* block_codes = codes.data() + 1 + first * f.record_bytes;
                    if (b == 3) {
                      blocks.push_back({block_params, block_codes, first, 20});
                      blocks.push_back({block_params, block_codes + 20 * f.record_bytes, first + 20, 12});
                    } else {
                      blocks.push_back({block_params, block_codes, first, block_rows[b]});
                    }
                  }
                  auto queries = random.floats(heads * n);
                  if (!finite) queries[(heads - 1) * n + 5] = -std::numeric_limits<float>::infinity();
                  const std::size_t stride = rows + 3;
                  std::vector<float> whole(heads * stride, -7.0f), by_block = whole;
                  kernels.dot_channel_blocks(f, blocks.data(), blocks.size(), per_channel, params_f32, queries.data(),
                                             heads, whole.data(), stride);
                  std::vector<float> scaled(heads * n), zero_terms(heads);
                  for (const auto& block : blocks) {
                    kernels.fold_channel_params(block.params, n, per_channel, params_f32, queries.data(), heads,
                                                scaled.data(), zero_terms.data());
                    kernels.dot_records(f, scaled.data(), heads, block.rows, block.count, by_block.data() + block.first,
                                        stride);
                    for (std::size_t h = 0; h < heads; ++h)
                      for (std::size_t t = 0; t < block.count; ++t)
                        by_block[h * stride + block.first + t] += zero_terms[h];
                  }
                  if (finite)
                    BOOST_TEST(whole == by_block, boost::test_tools::per_element());
                  else
                    BOOST_TEST(std::memcmp(whole.data(), by_block.data(), 4 * whole.size()) == 0);
                }
              }
  }
}

BOOST_AUTO_TEST_CASE(record_runs_do_not_depend_on_how_a_run_is_split) {
  // The cache calls the kernels on runs split at page and block boundaries: every token's
  // score, and the sum over a run, must be the same bit for bit however it is split, for one
  // query head (the one-head kernels), GQA groups of two, three, four and eight (AVX-512
  // takes raw rows and fp8 codes eight heads per pass, and raw rows' scores two tokens at a
  // time; AVX2 takes raw rows' and 4- and 8-bit codes' scores two tokens at a time from two
  // heads).
  const auto& components = kvlab::builtin_registry();
  random_bytes random;
  std::vector<kvlab::isa> isas = simd_isas();
  isas.push_back(kvlab::isa::scalar);
  for (const auto& [quantizer, granularity] :
       {std::pair{"int4", "group(32)"}, std::pair{"uint2", "group(32)"}, std::pair{"int8", "group(32)"},
        std::pair{"fp8_e4m3", "token"}, std::pair{"f16", "token"}}) {
    const std::size_t head_dim = 128, count = 45, max_heads = 8;
    kvlab::quantized_body body(components.make_quantizer(quantizer),
                               components.make_granularity(granularity).group_shape(head_dim), head_dim,
                               kvlab::param_precision::f16, components.make_storage("flat"));
    for (std::size_t t = 0; t < count; ++t) body.append(random.floats(head_dim), kvlab::kernels_for(isas.back()));
    const auto run = body.store().run(0);
    const std::size_t bytes = run.size() / count;
    const auto& f = body.kernel_format();
    const auto queries = random.floats(max_heads * head_dim);
    const auto weights = random.floats(max_heads * count);
    for (const auto isa : isas)
      for (const std::size_t heads : {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{4}, max_heads}) {
        BOOST_TEST_CONTEXT(quantizer << " " << kvlab::isa_name(isa) << " heads " << heads) {
          const auto& kernels = kvlab::kernels_for(isa);
          std::vector<float> whole(heads * count), pieces(heads * count);
          std::vector<float> acc_whole(heads * head_dim, 0.0f), acc_pieces = acc_whole;
          kernels.dot_records(f, queries.data(), heads, run.data(), count, whole.data(), count);
          kernels.axpy_records(f, weights.data(), count, heads, run.data(), count, acc_whole.data());
          for (std::size_t first = 0, n = 1; first < count; first += n, n = n % 19 + 2) {
            n = std::min(n, count - first);
            kernels.dot_records(f, queries.data(), heads, run.data() + first * bytes, n, pieces.data() + first, count);
            kernels.axpy_records(f, weights.data() + first, count, heads, run.data() + first * bytes, n,
                                 acc_pieces.data());
          }
          BOOST_TEST(whole == pieces, boost::test_tools::per_element());
          BOOST_TEST(acc_whole == acc_pieces, boost::test_tools::per_element());
        }
      }
  }
}

// The tables with fixed-point values: the scalar reference and, where the CPU runs it,
// avx512vnni.
std::vector<kvlab::isa> fixed_point_isas() {
  std::vector<kvlab::isa> isas{kvlab::isa::scalar};
  for (const auto isa : simd_isas())
    if (kvlab::kernels_for(isa).axpy_records_fixed) isas.push_back(isa);
  return isas;
}

// Records of affine codes with fp16 group parameters: random codes (15, which int4 never
// writes, included), scales between 1/8 and 1/2, some 0, and with two parameters per group
// zeros between -2 and 2, some 0.
std::vector<std::uint8_t> coded_records(random_bytes& random, const kvlab::record_format& f, std::size_t count) {
  auto records = random(count * f.record_bytes + 1);
  const auto fraction = [&] { return static_cast<float>(random.random.next() % 1000) / 1000.0f; };
  for (std::size_t t = 0; t < count; ++t)
    for (std::size_t g = 0; g < f.groups(); ++g) {
      const float scale = (t + g) % 17 == 0 ? 0.0f : 0.125f + 0.375f * fraction();
      const float zero = (t + g) % 13 == 0 ? 0.0f : 4.0f * fraction() - 2.0f;
      for (unsigned p = 0; p < f.params_per_group; ++p) {
        const std::uint16_t half = kvlab::float_to_half_bits(p == 0 ? scale : zero);
        std::memcpy(records.data() + 1 + t * f.record_bytes + f.code_bytes() + 2 * (g * f.params_per_group + p), &half,
                    2);
      }
    }
  return records;
}

BOOST_AUTO_TEST_CASE(fixed_point_values_equal_the_scalar_reference_bit_for_bit) {
  // Integer sums: every table must give the scalar reference's, for every split of a run,
  // with 2- and 4-bit codes, scales alone or scales and zeros, one to eight groups,
  // head_dim 64 to 256, tails of every length, misaligned records, zero weights, and
  // weights whose F saturates at 2^32 - 1 and whose Z at -2^31.
  const auto& scalar = kvlab::kernels_for(kvlab::isa::scalar);
  // where the CPU has VNNI and VBMI the fast kernel must be among them, not only the reference
  if (kvlab::cpu_supports(kvlab::isa::avx512_vnni) && __builtin_cpu_supports("avx512vbmi"))
    BOOST_TEST(fixed_point_isas().size() == 2u);
  random_bytes random;
  for (const unsigned bits : {4u, 2u})
    for (const unsigned per_group : {1u, 2u})
      for (const std::size_t head_dim : {64u, 96u, 128u, 160u, 256u})
        for (const std::size_t group : {32u, 64u, 128u, 160u, 256u}) {
          if (head_dim % group != 0) continue;
          const std::size_t groups = head_dim / group;
          const kvlab::record_format f{.kind = kvlab::element_kind::affine_codes,
                                       .record_bytes = head_dim * bits / 8 + 2 * per_group * groups,
                                       .head_dim = head_dim,
                                       .group_channels = group,
                                       .bits = bits,
                                       .params_per_group = per_group,
                                       .offset = per_group == 2 ? 0.0f
                                                 : bits == 4    ? 7.0f
                                                                : 1.0f};
          BOOST_TEST(kvlab::fixed_point_values(f));
          for (const std::size_t count : {0u, 1u, 3u, 4u, 63u, 64u, 65u, 200u}) {
            const std::size_t heads = 2, stride = count + 3, grids = heads * groups * per_group;
            const auto records = coded_records(random, f, count);
            std::vector<float> weights(heads * stride), grid(grids);
            for (std::size_t i = 0; i < weights.size(); ++i)
              weights[i] = i % 7 == 0 ? 0.0f : std::fabs(random.floats(1)[0]);
            // 2^32: every token whose w s reaches 1 saturates (w >= 2 at the largest scales);
            // zeros' 2^31 likewise
            for (std::size_t i = 0; i < grids; ++i)
              grid[i] = per_group == 2 && i % 2 == 1 ? (i % 4 == 1 ? 0x1p31f : 0x1p20f)
                        : i % 3 == 0                 ? 0x1p32f
                                                     : 0x1p20f;
            std::vector<std::int64_t> expected(heads * head_dim, 0), expected_zeros(heads * groups, 0);
            std::vector<std::uint64_t> expected_weights(heads * groups, 0);
            scalar.axpy_records_fixed(f, weights.data(), stride, heads, grid.data(), records.data() + 1, count,
                                      expected.data(), expected_weights.data(), expected_zeros.data());
            for (const auto isa : fixed_point_isas()) {
              BOOST_TEST_CONTEXT(bits << " bits, " << per_group << " parameters, head_dim " << head_dim << " group "
                                      << group << " count " << count << " " << kvlab::isa_name(isa)) {
                const auto& kernels = kvlab::kernels_for(isa);
                // the run in one call (whole chunks of 64 records followed by whole ones take
                // their own pass), and split into calls of 1 to 27 records
                for (const bool whole : {true, false}) {
                  std::vector<std::int64_t> sums(heads * head_dim, 0), zero_sums(heads * groups, 0);
                  std::vector<std::uint64_t> weight_sums(heads * groups, 0);
                  for (std::size_t first = 0, n = 1; first < count; first += n, n = n % 23 + 5) {
                    n = whole ? count : std::min(n, count - first);
                    kernels.axpy_records_fixed(f, weights.data() + first, stride, heads, grid.data(),
                                               records.data() + 1 + first * f.record_bytes, n, sums.data(),
                                               weight_sums.data(), zero_sums.data());
                  }
                  BOOST_TEST(sums == expected, boost::test_tools::per_element());
                  BOOST_TEST(weight_sums == expected_weights, boost::test_tools::per_element());
                  BOOST_TEST(zero_sums == expected_zeros, boost::test_tools::per_element());
                }
              }
            }
          }
        }
}

BOOST_AUTO_TEST_CASE(fixed_point_values_do_not_overflow_on_long_runs) {
  // 600,000 tokens of bytes 0xFF (every 4-bit code 15, every 2-bit code 3) with every F
  // saturated at 2^32 - 1: the kernels' 32-bit sums of 4 tokens' products per lane would
  // pass 2^31 after about 66,000 tokens (bytes minus 128).
  const std::size_t count = 600000, head_dim = 128;
  for (const unsigned bits : {4u, 2u}) {
    const kvlab::record_format f{.kind = kvlab::element_kind::affine_codes,
                                 .record_bytes = head_dim * bits / 8 + 8,
                                 .head_dim = head_dim,
                                 .group_channels = 32,
                                 .bits = bits,
                                 .params_per_group = 1,
                                 .offset = 1.0f};
    std::vector<std::uint8_t> records(count * f.record_bytes, 0xFF);
    for (std::size_t t = 0; t < count; ++t)
      for (std::size_t g = 0; g < 4; ++g) {
        const std::uint16_t one = 0x3C00;
        std::memcpy(records.data() + t * f.record_bytes + f.code_bytes() + 2 * g, &one, 2);
      }
    const std::vector<float> weights(count, 1.0f), grid(4, 0x1p32f);
    const std::uint64_t saturated = 0xFFFFFFFFu, top_code = (1u << bits) - 1;
    for (const auto isa : fixed_point_isas()) {
      BOOST_TEST_CONTEXT(bits << " bits, " << kvlab::isa_name(isa)) {
        std::vector<std::int64_t> sums(head_dim, 0);
        std::vector<std::uint64_t> weight_sums(4, 0);
        kvlab::kernels_for(isa).axpy_records_fixed(f, weights.data(), count, 1, grid.data(), records.data(), count,
                                                   sums.data(), weight_sums.data(), nullptr);
        for (const auto sum : sums) BOOST_TEST(sum == static_cast<std::int64_t>(count * saturated * top_code));
        for (const auto sum : weight_sums) BOOST_TEST(sum == count * saturated);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(fixed_point_values_keep_fp32_accuracy) {
  // One head's values over int4@group(32) and uint2@group(32) bodies (scales alone; scales
  // and zeros), through the cache's fixed-point path where the table has one: the same
  // bits on every such table, and within fp32's own accuracy of the exact sum: 2^-23 of
  // each |w v| (the fp32 products, the rounding to integers) plus, per token, half a step
  // of the scales' grid times the level and half a step of the zeros' grid, the grids
  // putting the largest weight times the largest scale in [2^31, 2^32) and times the
  // largest |zero| in [2^29, 2^30). Bad weights (negative, NaN) take the float loop.
  const auto& components = kvlab::builtin_registry();
  for (const char* quantizer : {"int4", "uint2"}) {
    random_bytes random;
    const std::size_t head_dim = 128, count = 3000;
    kvlab::quantized_body body(components.make_quantizer(quantizer),
                               components.make_granularity("group(32)").group_shape(head_dim), head_dim,
                               kvlab::param_precision::f16, components.make_storage("paged(256)"));
    for (std::size_t t = 0; t < count; ++t) {
      auto token = random.floats(head_dim);
      for (auto& x : token) x *= t % 100 == 0 ? 8.0f : 1.0f; // a few tokens with 8x the scale
      body.append(token, kvlab::kernels_for(kvlab::isa::scalar));
    }
    const auto& format = body.kernel_format();
    const std::size_t per_group = format.params_per_group;
    const auto param = [&](std::size_t t, std::size_t g, unsigned which) {
      std::uint16_t half;
      std::memcpy(&half, body.store().record(t).data() + format.code_bytes() + 2 * (g * per_group + which), 2);
      return kvlab::half_bits_to_float(half);
    };
    // A peaked softmax: weights over many binades.
    std::vector<float> weights = random.floats(count);
    for (auto& w : weights) w *= 4.0f;
    kvlab::kernels_for(kvlab::isa::scalar).softmax(weights.data(), count);
    std::vector<double> exact(head_dim, 0.0), bound(head_dim, 0.0);
    std::vector<float> decoded(head_dim);
    float top_weight = 0.0f, top_scale = 0.0f, top_zero = 0.0f;
    for (std::size_t t = 0; t < count; ++t) top_weight = std::max(top_weight, weights[t]);
    for (std::size_t t = 0; t < count; ++t)
      for (std::size_t g = 0; g < 4; ++g) {
        top_scale = std::max(top_scale, param(t, g, 0));
        if (per_group == 2) top_zero = std::max(top_zero, std::fabs(param(t, g, 1)));
      }
    const double step = std::ldexp(1.0, std::ilogb(double{top_weight} * top_scale) - 31); // 1 / grid
    const double zero_step = per_group == 2 ? std::ldexp(1.0, std::ilogb(double{top_weight} * top_zero) - 29) : 0.0;
    for (std::size_t t = 0; t < count; ++t) {
      body.decode(t, decoded);
      for (std::size_t c = 0; c < head_dim; ++c) {
        const double term = double{weights[t]} * decoded[c];
        exact[c] += term;
        const float scale = param(t, c / 32, 0), zero = per_group == 2 ? param(t, c / 32, 1) : 0.0f;
        const double level = scale == 0.0f ? 0.0 : std::fabs((decoded[c] - zero) / scale); // F's error times it
        bound[c] += 0x1p-23 * std::fabs(term) + 0.5 * step * level + 0.5 * zero_step;
      }
    }
    // The same table without its fixed-point kernel: the float loop.
    const auto float_loop = [](kvlab::isa isa) {
      kvlab::kernel_table table = kvlab::kernels_for(isa);
      table.axpy_records_fixed = nullptr;
      return table;
    };
    std::vector<float> first_fixed;
    for (const auto isa : fixed_point_isas()) {
      BOOST_TEST_CONTEXT(quantizer << " " << kvlab::isa_name(isa)) {
        std::vector<float> out(head_dim, 0.0f), floats(head_dim, 0.0f);
        body.axpy_all(kvlab::kernels_for(isa), weights.data(), count, 1, out);
        body.axpy_all(float_loop(isa), weights.data(), count, 1, floats);
        for (std::size_t c = 0; c < head_dim; ++c) {
          BOOST_TEST(std::fabs(out[c] - exact[c]) <= bound[c] + 0x1p-24 * std::fabs(exact[c]));
          BOOST_TEST(std::fabs(floats[c] - exact[c]) <= bound[c] + 0x1p-24 * std::fabs(exact[c]));
        }
        BOOST_TEST(out != floats); // the fixed-point path was taken
        if (first_fixed.empty()) first_fixed = out;
        BOOST_TEST(out == first_fixed, boost::test_tools::per_element());
        // Weights the grid cannot hold take the float loop.
        for (const float bad : {-1e-3f, NAN}) {
          std::vector<float> bad_weights = weights;
          bad_weights[count / 2] = bad;
          std::vector<float> bad_out(head_dim, 0.0f), bad_floats(head_dim, 0.0f);
          body.axpy_all(kvlab::kernels_for(isa), bad_weights.data(), count, 1, bad_out);
          body.axpy_all(float_loop(isa), bad_weights.data(), count, 1, bad_floats);
          for (std::size_t c = 0; c < head_dim; ++c)
            BOOST_TEST((std::isnan(bad) ? std::isnan(bad_out[c]) : bad_out[c] == bad_floats[c]));
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(fp8_records_decode_to_the_quantizers_levels_on_every_isa) {
  // On AVX2 and AVX-512 fp8 codes decode through fp16 instead of a gather from the levels table
  // (when the table is bit for bit what that decoder gives): every code, NaN codes
  // included, must still decode to the quantizer's level, and the multi-head dot must
  // match the scalar reference.
  using kvlab::element_kind;
  const auto& components = kvlab::builtin_registry();
  const auto& scalar = kvlab::kernels_for(kvlab::isa::scalar);
  random_bytes random;
  struct fp8_shape {
    const char* name;
    std::size_t group_channels, head_dim;
  };
  // head_dim 64 and 128 have compile-time shapes in the pair kernels, 96 does not
  for (const auto& [name, group_channels, head_dim] :
       {fp8_shape{"fp8_e4m3", 32, 128}, fp8_shape{"fp8_e4m3fnuz", 32, 128}, fp8_shape{"fp8_e5m2", 32, 128},
        fp8_shape{"fp8_e4m3", 128, 128}, fp8_shape{"fp8_e4m3", 64, 64}, fp8_shape{"fp8_e4m3", 32, 96}}) {
    const auto quantizer = components.make_quantizer(name);
    const auto levels = quantizer.levels();
    const std::size_t every_code = (256 + head_dim - 1) / head_dim, count = 40, heads = 9, large_channel = 5;
    const float scale = 0.375f;
    const std::uint16_t scale_bits = kvlab::float_to_half_bits(scale);
    kvlab::record_format f{.kind = element_kind::table_codes,
                           .head_dim = head_dim,
                           .group_channels = group_channels,
                           .bits = 8,
                           .params_per_group = 1,
                           .levels = levels.data()};
    f.record_bytes = head_dim + 2 * f.groups();
    std::vector<std::uint8_t> records(count * f.record_bytes);
    for (std::size_t t = 0; t < count; ++t) {
      std::uint8_t* record = records.data() + t * f.record_bytes;
      const auto codes = random(head_dim);
      for (std::size_t i = 0; i < head_dim; ++i) {
        const std::uint8_t code = t < every_code ? static_cast<std::uint8_t>(t * head_dim + i) : codes[i];
        // past the first records (every code at least once), only finite levels, so dots stay finite
        record[i] = t < every_code || std::isfinite(levels[code]) ? code : std::uint8_t{0};
      }
      if (t >= every_code) record[large_channel] = 0x08; // a small level: the large query below stays finite
      for (std::size_t g = 0; g < f.groups(); ++g) std::memcpy(record + head_dim + 2 * g, &scale_bits, 2);
    }
    const auto queries = random.floats(heads * head_dim);
    std::vector<float> expected_scores(heads * count);
    scalar.dot_records(f, queries.data(), heads, records.data(), count, expected_scores.data(), count);
    for (const auto isa : simd_isas()) {
      BOOST_TEST_CONTEXT(name << " group " << group_channels << " head_dim " << head_dim << " "
                              << kvlab::isa_name(isa)) {
        const auto& kernels = kvlab::kernels_for(isa);
        // The quantizer's table takes the bit decoder, and one level off by an ulp takes
        // the table: the checks below then cover the decoder, not the gather it replaces.
        BOOST_TEST(kernels.decodes_fp8_levels(levels.data()));
        std::vector<float> altered(levels.begin(), levels.end());
        altered[0x21] = std::nextafter(altered[0x21], 1.0f);
        BOOST_TEST(!kernels.decodes_fp8_levels(altered.data()));
        BOOST_TEST(!scalar.decodes_fp8_levels(levels.data()));
        {
          // ...and decodes through that table: the altered level comes out (scale 1, exact).
          kvlab::record_format table = f;
          table.levels = altered.data();
          std::vector<std::uint8_t> record(f.record_bytes, 0x21);
          const std::uint16_t one_bits = kvlab::float_to_half_bits(1.0f);
          for (std::size_t g = 0; g < f.groups(); ++g) std::memcpy(record.data() + head_dim + 2 * g, &one_bits, 2);
          std::vector<float> decoded(head_dim, 0.0f);
          const float one = 1.0f;
          kernels.axpy_records(table, &one, 1, 1, record.data(), 1, decoded.data());
          BOOST_TEST(altered[0x21] != levels[0x21]);
          for (std::size_t i = 0; i < head_dim; ++i) BOOST_TEST_CONTEXT("channel " << i) {
              BOOST_TEST(decoded[i] == altered[0x21]);
            }
        }
        for (std::size_t t = 0; t < every_code; ++t) {
          std::vector<float> decoded(head_dim, 0.0f);
          const float one = 1.0f;
          kernels.axpy_records(f, &one, 1, 1, records.data() + t * f.record_bytes, 1, decoded.data());
          for (std::size_t i = 0; i < head_dim; ++i) {
            const unsigned code = records[t * f.record_bytes + i];
            const float level = levels[code];
            BOOST_TEST_CONTEXT("code " << code) {
              if (std::isnan(level))
                BOOST_TEST(std::isnan(decoded[i]));
              else
                BOOST_TEST(decoded[i] == scale * level);
            }
          }
        }
        const auto magnitude = [&](const float* query, std::size_t t) {
          float sum = 0.0f;
          for (std::size_t i = 0; i < head_dim; ++i)
            sum += std::fabs(query[i] * scale * levels[records[t * f.record_bytes + i]]);
          return sum;
        };
        // GQA groups of 4 and 9 (on AVX-512 a pass of 8 heads and a pass of 1).
        for (const std::size_t group : {std::size_t{4}, heads}) {
          std::vector<float> scores(group * count);
          kernels.dot_records(f, queries.data(), group, records.data(), count, scores.data(), count);
          for (std::size_t h = 0; h < group; ++h)
            for (std::size_t t = every_code; t < count; ++t)
              BOOST_TEST_CONTEXT("group " << group << " head " << h << " token " << t) {
                check_close(scores[h * count + t], expected_scores[h * count + t],
                            4.0f * magnitude(queries.data() + h * head_dim, t));
              }
        }
        // One head takes a kernel of its own (the query reordered and times the layout's
        // power of two once), and a query that power of two would overflow the general one:
        // both must match the reference, NaN codes giving NaN.
        auto large = queries;
        large[large_channel] = 2e36f;
        const std::vector<float>* query_sets[] = {&queries, &large};
        for (const auto* query_set : query_sets)
          for (std::size_t h = 0; h < heads; ++h) {
            const float* query = query_set->data() + h * head_dim;
            std::vector<float> one(count), reference(count);
            kernels.dot_records(f, query, 1, records.data(), count, one.data(), count);
            scalar.dot_records(f, query, 1, records.data(), count, reference.data(), count);
            for (std::size_t t = 0; t < count; ++t) {
              BOOST_TEST_CONTEXT("head " << h << " token " << t << (query_set == &large ? " large query" : "")) {
                if (t < every_code)
                  BOOST_TEST(std::isnan(one[t]) == std::isnan(reference[t]));
                else
                  check_close(one[t], reference[t], 4.0f * magnitude(query, t));
              }
            }
          }
        // The values of a GQA group (on AVX-512 each weight times its token's scale once per
        // chunk of 16 tokens, the last chunk short) over the records without NaN codes.
        const std::size_t finite = count - every_code;
        const std::uint8_t* finite_records = records.data() + every_code * f.record_bytes;
        const auto weights = random.floats(heads * finite);
        for (const std::size_t group : {std::size_t{4}, heads}) {
          std::vector<float> acc(group * head_dim, 0.0f), reference(group * head_dim, 0.0f);
          kernels.axpy_records(f, weights.data(), finite, group, finite_records, finite, acc.data());
          scalar.axpy_records(f, weights.data(), finite, group, finite_records, finite, reference.data());
          for (std::size_t h = 0; h < group; ++h)
            for (std::size_t i = 0; i < head_dim; ++i) {
              float value_magnitude = 0.0f;
              for (std::size_t t = 0; t < finite; ++t)
                value_magnitude +=
                    std::fabs(weights[h * finite + t] * scale * levels[finite_records[t * f.record_bytes + i]]);
              BOOST_TEST_CONTEXT("values, group " << group << " head " << h << " channel " << i) {
                check_close(acc[h * head_dim + i], reference[h * head_dim + i], 4.0f * value_magnitude);
              }
            }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(simd_float_row_kernels_match_scalar_on_misaligned_rows) {
  const auto& scalar = kvlab::kernels_for(kvlab::isa::scalar);
  random_bytes random;
  for (const auto isa : simd_isas()) {
    const auto& simd = kvlab::kernels_for(isa);
    for (const std::size_t n : {1u, 5u, 8u, 15u, 16u, 17u, 63u, 128u, 131u}) {
      for (const std::size_t misalign : {0u, 1u, 2u, 3u}) {
        // Rows hold valid, finite values of each format at an odd byte offset.
        const auto values = random.floats(n);
        std::vector<std::uint8_t> f32(4 * n + misalign), f16(2 * n + misalign), bf16(2 * n + misalign);
        for (std::size_t i = 0; i < n; ++i) {
          std::memcpy(f32.data() + misalign + 4 * i, &values[i], 4);
          const std::uint16_t h = kvlab::float_to_half_bits(values[i]), b = kvlab::float_to_bf16_bits(values[i]);
          std::memcpy(f16.data() + misalign + 2 * i, &h, 2);
          std::memcpy(bf16.data() + misalign + 2 * i, &b, 2);
        }
        const auto query = random.floats(n);
        float magnitude = 0.0f;
        for (std::size_t i = 0; i < n; ++i) magnitude += std::fabs(query[i] * values[i]);
        BOOST_TEST_CONTEXT(kvlab::isa_name(isa) << " n " << n << " misaligned by " << misalign) {
          const std::uint8_t* rows[] = {f32.data() + misalign, f16.data() + misalign, bf16.data() + misalign};
          using dot_fn = float (*)(const float*, const std::uint8_t*, std::size_t);
          using axpy_fn = void (*)(float, const std::uint8_t*, std::size_t, float*);
          const dot_fn simd_dots[] = {simd.dot_f32, simd.dot_f16, simd.dot_bf16};
          const dot_fn scalar_dots[] = {scalar.dot_f32, scalar.dot_f16, scalar.dot_bf16};
          const axpy_fn simd_axpys[] = {simd.axpy_f32, simd.axpy_f16, simd.axpy_bf16};
          const axpy_fn scalar_axpys[] = {scalar.axpy_f32, scalar.axpy_f16, scalar.axpy_bf16};
          for (int format = 0; format < 3; ++format) {
            check_close(simd_dots[format](query.data(), rows[format], n),
                        scalar_dots[format](query.data(), rows[format], n), magnitude);
            auto acc_simd = random.floats(n);
            auto acc_scalar = acc_simd;
            simd_axpys[format](-1.25f, rows[format], n, acc_simd.data());
            scalar_axpys[format](-1.25f, rows[format], n, acc_scalar.data());
            for (std::size_t i = 0; i < n; ++i) check_close(acc_simd[i], acc_scalar[i], 4.0f);
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(scalar_reference_decodes_packed_codes_exactly) {
  // Codes 0..2^bits-1 packed by the cache's packer come back from the kernel as levels.
  for (unsigned bits = 1; bits <= 8; ++bits) {
    const std::size_t n = 37;
    std::vector<std::uint32_t> codes(n);
    std::vector<float> levels(std::size_t{1} << bits), query(n, 0.0f);
    for (std::size_t i = 0; i < levels.size(); ++i) levels[i] = static_cast<float>(i);
    for (std::size_t i = 0; i < n; ++i) codes[i] = static_cast<std::uint32_t>((i * 5 + 3) % levels.size());
    std::vector<std::uint8_t> packed((n * bits + 7) / 8);
    kvlab::pack_codes(codes, bits, packed);
    std::vector<float> decoded(n, 0.0f);
    kvlab::kernels_for(kvlab::isa::scalar).axpy_codes(1.0f, packed.data(), 0, n, bits, levels.data(), decoded.data());
    for (std::size_t i = 0; i < n; ++i) {
      BOOST_TEST(decoded[i] == static_cast<float>(codes[i]));
      BOOST_TEST(kvlab::unpack_code(packed, i, bits) == codes[i]);
    }
  }
}

BOOST_AUTO_TEST_CASE(unknown_or_unavailable_isa_is_an_error) {
  BOOST_CHECK_THROW(kvlab::parse_isa("sse9"), kvlab::error);
  BOOST_TEST((kvlab::parse_isa("avx2") == kvlab::isa::avx2));
}

BOOST_AUTO_TEST_SUITE_END()
