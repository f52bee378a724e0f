// KVQuant's dense-and-sparse quantization (arXiv 2401.18079, sec. 3.4), outliers(Q,P).
// Checked here: a group's code is, by the documented layout, Q's code of the group with its
// largest magnitudes clamped into the range of the rest, then those values exactly (fp16)
// with their channels; so spikes no longer widen Q's scale, and the error on spiky tokens
// falls to that of tokens without them; bytes are counted exactly; and what cannot be
// coded is refused with a message.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <vector>
import kvlab;

#include "estimator_test_helpers.hpp"
#include "recipe_test_helpers.hpp"
#include "test_files.hpp"

namespace {

using kvlab_test::gaussian;

// Gaussian tokens with `spikes` channels per token, chosen at random, scaled by 30: the
// outliers real keys and values have.
std::vector<float> spiky_tokens(std::size_t tokens, std::size_t head_dim, std::size_t spikes, std::uint64_t seed) {
  auto rows = gaussian(tokens * head_dim, seed);
  kvlab::random_stream random(seed, 1);
  for (std::size_t t = 0; t < tokens; ++t)
    for (std::size_t s = 0; s < spikes; ++s) rows[t * head_dim + random.next() % head_dim] *= 30.0f;
  return rows;
}

double relative_error(const std::string& quantizer, kvlab::group_shape shape, std::span<const float> rows,
                      std::size_t head_dim) {
  const std::size_t tokens = rows.size() / head_dim;
  const auto out = kvlab::quantize_dequantize(kvlab::builtin_registry().make_quantizer(quantizer), shape,
                                              kvlab::param_precision::f16, rows, tokens, head_dim);
  double error = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    error += (double{out.decoded[i]} - rows[i]) * (double{out.decoded[i]} - rows[i]);
    norm += double{rows[i]} * rows[i];
  }
  return error / norm;
}

} // namespace

BOOST_AUTO_TEST_SUITE(outliers)

// Transcribes the layout of strategies/outliers.cppm for outliers(int4,P) and checks every
// field of many codes against a recomputation from the group, then the decoded group.
BOOST_AUTO_TEST_CASE(a_code_is_q_on_the_clamped_group_then_the_largest_values_exactly) {
  const auto int4 = kvlab::builtin_registry().make_quantizer("int4");
  const std::size_t channels = 64, groups = 500;
  const kvlab::parts::outliers outliers{int4, 5.0}; // ceil(3.2) = 4 outliers, 6-bit indices
  const auto codec = outliers.group_codec(channels);
  BOOST_TEST_REQUIRE(codec->code_bits() == 16 + channels * 4 + 4 * (6 + 16));
  const auto x = spiky_tokens(groups, channels, 3, 7);
  std::vector<std::uint8_t> code((codec->code_bits() + 7) / 8);
  std::vector<float> decoded(channels);
  for (std::size_t g = 0; g < groups; ++g) {
    const auto group = std::span(x).subspan(g * channels, channels);
    codec->encode(group, code, 0);
    codec->decode(code, 0, decoded);

    std::vector<std::size_t> order(channels);
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return std::fabs(group[a]) > std::fabs(group[b]); });
    std::vector<std::size_t> sparse(order.begin(), order.begin() + 4);
    std::sort(sparse.begin(), sparse.end());
    std::vector<float> dense(group.begin(), group.end());
    float lowest = INFINITY, highest = -INFINITY;
    for (std::size_t c = 0; c < channels; ++c)
      if (std::find(sparse.begin(), sparse.end(), c) == sparse.end())
        lowest = std::min(lowest, dense[c]), highest = std::max(highest, dense[c]);
    for (const std::size_t c : sparse) dense[c] = std::clamp(dense[c], lowest, highest);
    const auto p = kvlab::stored_params(int4, dense, kvlab::param_precision::f16);

    BOOST_TEST_REQUIRE(kvlab::read_bits(code, 0, 16) == kvlab::float_to_half_bits(p.scale), "group " << g);
    for (std::size_t c = 0; c < channels; ++c) {
      const std::uint32_t stored = kvlab::read_bits(code, 16 + 4 * c, 4);
      BOOST_TEST_REQUIRE(stored == int4.encode(dense[c], p), "group " << g << " channel " << c);
      const bool outlier = std::find(sparse.begin(), sparse.end(), c) != sparse.end();
      const float expected = outlier ? kvlab::round_to_half(group[c]) : int4.decode(stored, p);
      BOOST_TEST_REQUIRE(decoded[c] == expected, "group " << g << " channel " << c);
    }
    for (std::size_t i = 0; i < 4; ++i) {
      const std::size_t at = 16 + channels * 4 + i * 22;
      BOOST_TEST_REQUIRE(kvlab::read_bits(code, at, 6) == sparse[i], "group " << g << " outlier " << i);
      BOOST_TEST_REQUIRE(kvlab::read_bits(code, at + 6, 16) == kvlab::float_to_half_bits(group[sparse[i]]));
    }
  }
}

// Three spikes of 30 sigma per token of 128 channels: int4's scale follows the spikes and
// most channels fall into its zero level. With 3 outliers per token (P = 2: ceil(2.56)) the
// error is that of the spikes' absence: within 10 % of int4's on the same tokens without
// spikes, and far below int4's on the spiky ones. Likewise for per-group uint2 (KIVI's
// value format) with one outlier per group of 32 against spikes of one per group.
BOOST_AUTO_TEST_CASE(spikes_no_longer_widen_the_scale) {
  const std::size_t head_dim = 128, tokens = 2000;
  const auto spiky = spiky_tokens(tokens, head_dim, 3, 11);
  const auto plain = gaussian(tokens * head_dim, 11);
  const kvlab::group_shape token{.tokens = 1, .channels = head_dim};
  const double with_spikes = relative_error("int4", token, spiky, head_dim);
  const double without_spikes = relative_error("int4", token, plain, head_dim);
  const double kept = relative_error("outliers(int4,2)", token, spiky, head_dim);
  BOOST_TEST(kept < 0.1 * with_spikes, "outliers " << kept << ", int4 " << with_spikes);
  // The spikes are coded exactly and the rest is Gaussian-like: the relative error is the
  // plain tokens' error times the share of the norm that is not in the spikes.
  BOOST_TEST(kept < 1.1 * without_spikes, "outliers " << kept << ", int4 without spikes " << without_spikes);

  const kvlab::group_shape group{.tokens = 1, .channels = 32};
  const auto one_per_group = spiky_tokens(tokens, head_dim, 1, 13);
  const double uint2 = relative_error("uint2", group, one_per_group, head_dim);
  const double uint2_kept = relative_error("outliers(uint2,1)", group, one_per_group, head_dim);
  BOOST_TEST(uint2_kept < 0.5 * uint2, "outliers " << uint2_kept << ", uint2 " << uint2);
}

// Bits per element: Q's parameters and codes, then per outlier a ceil(log2 G)-bit index and
// a 16-bit value; a code of whole groups (polar) as its own.
BOOST_AUTO_TEST_CASE(bytes_count_indices_and_values) {
  const std::size_t head_dim = 128, tokens = 16;
  const auto values = gaussian(tokens * head_dim, 17);
  const auto bits = [&](const std::string& text, std::size_t channels) {
    return kvlab::quantize_dequantize(kvlab::builtin_registry().make_quantizer(text),
                                      {.tokens = 1, .channels = channels}, kvlab::param_precision::f16, values, tokens,
                                      head_dim)
        .stats.bits_per_element;
  };
  BOOST_TEST(bits("outliers(int4,1)", 128) == (16.0 + 128 * 4 + 2 * (7 + 16)) / 128); // ceil(1.28) = 2
  BOOST_TEST(bits("outliers(uint3,1)", 32) == (32.0 + 32 * 3 + 1 * (5 + 16)) / 32);   // scale and zero
  BOOST_TEST(bits("outliers(polar,1)", 128) == (8 * 62.0 + 2 * (7 + 16)) / 128);      // 8 blocks of 16
  BOOST_TEST(bits("outliers(int4,3)", 128) == (16.0 + 128 * 4 + 4 * 23) / 128);       // ceil(3.84) = 4
  BOOST_TEST(kvlab::parts::outliers(kvlab::parts::int_q{4}, 3.0).outliers_in(100) == 3u);
  BOOST_TEST(kvlab::parts::outliers(kvlab::parts::int_q{4}, 0.01).outliers_in(128) == 1u);
}

BOOST_AUTO_TEST_CASE(what_cannot_be_coded_is_refused_with_a_message) {
  kvlab_test::expect_cache_refused("k=outliers(int4,1)@channel(32)", "groups spanning tokens");
  kvlab_test::expect_cache_refused("k=outliers(rht(int4),1)@token", "rht(outliers(Q,P))");
  kvlab_test::expect_cache_refused("k=outliers(qjl,1)@token", "must decode alone");
  kvlab_test::expect_cache_refused("k=outliers(residual(int4,int2),1)@token", "must decode alone");
  kvlab_test::expect_cache_refused("k=outliers(int4,0)@token", "percentage of outliers");
  kvlab_test::expect_cache_refused("k=outliers(int4,50)@token", "percentage of outliers");
  kvlab_test::expect_cache_refused("k=outliers(int4)@token", "takes 2 arguments");
  kvlab_test::expect_cache_refused("k=outliers(int4,1)@group(1)", "leaving no dense part");

  const auto codec = kvlab::parts::outliers(kvlab::parts::int_q{4}, 1.0).group_codec(64);
  std::vector<std::uint8_t> code((codec->code_bits() + 7) / 8);
  std::vector<float> huge(64, 1.0f), nan(64, 1.0f);
  huge[9] = 70000.0f;
  nan[5] = NAN;
  BOOST_CHECK_EXCEPTION(codec->encode(huge, code, 0), kvlab::error, [](const kvlab::error& e) {
    return std::string(e.what()).find("outlier 70000 is beyond the fp16 range") != std::string::npos;
  });
  // Q's scale past fp16 while every outlier fits: named under outliers, without scale=f32.
  std::vector<float> wide(64, 0.0f);
  for (std::size_t c = 0; c < 64; ++c) wide[c] = c % 2 == 0 ? 60000.0f : -60000.0f;
  const auto uint1 = kvlab::parts::outliers(kvlab::builtin_registry().make_quantizer("uint1"), 1.0).group_codec(64);
  std::vector<std::uint8_t> small_code((uint1->code_bits() + 7) / 8);
  BOOST_CHECK_EXCEPTION(uint1->encode(wide, small_code, 0), kvlab::error, [](const kvlab::error& e) {
    const std::string message = e.what();
    return message.starts_with("outliers(uint1,1): ") && kvlab_test::contains(message, "beyond the fp16 range") &&
           !kvlab_test::contains(message, "scale=f32");
  });
  BOOST_CHECK_EXCEPTION(codec->encode(nan, code, 0), kvlab::error, [](const kvlab::error& e) {
    return std::string(e.what()).find("is not finite") != std::string::npos;
  });
}

BOOST_AUTO_TEST_SUITE_END()
