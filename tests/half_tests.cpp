#include <boost/test/unit_test.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
import kvlab;

BOOST_AUTO_TEST_SUITE(half_precision)

BOOST_AUTO_TEST_CASE(every_half_value_round_trips_through_float) {
  for (std::uint32_t bits = 0; bits < 0x10000; ++bits) {
    const auto h = static_cast<std::uint16_t>(bits);
    const float f = kvlab::half_bits_to_float(h);
    if (std::isnan(f)) {
      BOOST_TEST(std::isnan(kvlab::half_bits_to_float(kvlab::float_to_half_bits(f))));
      continue;
    }
    BOOST_TEST_REQUIRE(kvlab::float_to_half_bits(f) == h, "half 0x" << std::hex << bits);
  }
}

BOOST_AUTO_TEST_CASE(known_half_values_decode_exactly) {
  BOOST_TEST(kvlab::half_bits_to_float(0x3c00) == 1.0f);
  BOOST_TEST(kvlab::half_bits_to_float(0xc000) == -2.0f);
  BOOST_TEST(kvlab::half_bits_to_float(0x7bff) == 65504.0f);
  BOOST_TEST(kvlab::half_bits_to_float(0x0001) == 0x1p-24f); // smallest subnormal
  BOOST_TEST(kvlab::half_bits_to_float(0x0400) == 0x1p-14f); // smallest normal
  BOOST_TEST(std::isinf(kvlab::half_bits_to_float(0x7c00)));
}

BOOST_AUTO_TEST_CASE(float_to_half_rounds_ties_to_even) {
  // 1 + 2^-11 lies halfway between 1 and 1 + 2^-10: the even mantissa (1.0) wins.
  BOOST_TEST(kvlab::float_to_half_bits(1.0f + 0x1p-11f) == 0x3c00);
  // 1 + 3 * 2^-11 lies halfway between 1 + 2^-10 (odd) and 1 + 2^-9 (even).
  BOOST_TEST(kvlab::float_to_half_bits(1.0f + 3 * 0x1p-11f) == 0x3c02);
  // Just above halfway rounds up.
  BOOST_TEST(kvlab::float_to_half_bits(std::nextafter(1.0f + 0x1p-11f, 2.0f)) == 0x3c01);
  // Subnormal tie: 1.5 * 2^-24 rounds to 2 * 2^-24 (even), 0.5 * 2^-24 to 0.
  BOOST_TEST(kvlab::float_to_half_bits(1.5f * 0x1p-24f) == 0x0002);
  BOOST_TEST(kvlab::float_to_half_bits(0.5f * 0x1p-24f) == 0x0000);
  // 65520 is halfway between 65504 and 65536 (not representable): rounds to infinity.
  BOOST_TEST(kvlab::float_to_half_bits(65519.0f) == 0x7bff);
  BOOST_TEST(kvlab::float_to_half_bits(65520.0f) == 0x7c00);
}

BOOST_AUTO_TEST_CASE(bfloat16_rounds_ties_to_even_and_keeps_nan) {
  BOOST_TEST(kvlab::float_to_bf16_bits(1.0f) == 0x3f80);
  BOOST_TEST(kvlab::float_to_bf16_bits(std::bit_cast<float>(0x3f808000u)) == 0x3f80); // tie, even
  BOOST_TEST(kvlab::float_to_bf16_bits(std::bit_cast<float>(0x3f818000u)) == 0x3f82); // tie, to even
  BOOST_TEST(std::isnan(kvlab::bf16_bits_to_float(kvlab::float_to_bf16_bits(std::numeric_limits<float>::quiet_NaN()))));
}

BOOST_AUTO_TEST_SUITE_END()
