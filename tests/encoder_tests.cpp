// The encoders equal the quantizers they stand for, bit for bit, on every ISA the CPU runs:
// uniform grids and codebooks into bit-packed codes, the fused per-token record encoder,
// 8-bit float codes, raw float records and the cache's fp16 rows.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
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

// Values whose quotients (x - zero) / scale fall exactly halfway between two codes, or one
// ulp to either side: each group of `group` channels fits to zero 0 and a scale that fp16
// holds exactly but whose reciprocal float does not.
void halfway_quotients(std::vector<float>& x, std::size_t group, const kvlab::encoding_rule& rule) {
  constexpr float step = 0x333p-13f; // 0.0999755859375
  const bool symmetric = rule.fit == kvlab::uniform_fit::absmax;
  const int codes = symmetric ? 2 * rule.offset : static_cast<int>(rule.max_code);
  for (std::size_t c = 0; c < x.size(); ++c) {
    const int m = static_cast<int>(c % static_cast<std::size_t>(codes)) - (symmetric ? rule.offset : 0);
    float v = (static_cast<float>(m) + 0.5f) * step;
    if (c % 3 == 1) v = std::nextafter(v, 1.0f);
    if (c % 3 == 2) v = std::nextafter(v, -1.0f);
    if (c % group == 0) v = symmetric ? static_cast<float>(rule.offset) * step : 0.0f; // absmax, or min
    if (c % group == 1 && !symmetric) v = static_cast<float>(rule.max_code) * step;    // max
    x[c] = v;
  }
}

// Group `group`'s parameters where a record of `layout` keeps them, after its codes.
void write_params(std::vector<std::uint8_t>& record, const kvlab::record_layout& layout, std::size_t group,
                  kvlab::group_params p) {
  const float params[2] = {p.scale, p.zero};
  for (unsigned i = 0; i < layout.params_per_group; ++i) {
    std::uint8_t* at = record.data() + layout.code_bytes() + (group * layout.params_per_group + i) * layout.param_bytes;
    const std::uint16_t half = kvlab::float_to_half_bits(params[i]);
    std::memcpy(at, layout.param_bytes == 4 ? static_cast<const void*>(&params[i]) : &half, layout.param_bytes);
  }
}

// n floats of random bit patterns (every class: subnormals, infinities, NaNs), each passed
// through rewrite(i, bits) first.
template <class Rewrite>
std::vector<float> random_bit_patterns(random_bytes& random, std::size_t n, Rewrite&& rewrite) {
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto bytes = random(4);
    std::uint32_t bits;
    std::memcpy(&bits, bytes.data(), 4);
    out[i] = std::bit_cast<float>(rewrite(i, bits));
  }
  return out;
}

// For every ISA and a few lengths n (vector bodies, tails, nothing): encode(kernels, n, out)
// writes expected's first n * bytes bytes and nothing past them.
template <class Encode>
void check_encodes_prefixes(const std::vector<std::uint8_t>& expected, std::size_t bytes, Encode&& encode) {
  std::vector<kvlab::isa> isas = simd_isas();
  isas.push_back(kvlab::isa::scalar);
  for (const auto isa : isas)
    for (const std::size_t n :
         {std::size_t{0}, std::size_t{5}, std::size_t{16}, std::size_t{37}, expected.size() / bytes}) {
      BOOST_TEST_CONTEXT(kvlab::isa_name(isa) << " n " << n) {
        const auto written = static_cast<std::ptrdiff_t>(n * bytes);
        std::vector<std::uint8_t> out(n * bytes + 1, 0xAB);
        encode(kvlab::kernels_for(isa), n, out.data());
        BOOST_TEST(std::vector(out.begin(), out.begin() + written) ==
                       std::vector(expected.begin(), expected.begin() + written),
                   boost::test_tools::per_element());
        BOOST_TEST(out[n * bytes] == 0xAB); // nothing written past n
      }
    }
}

} // namespace

BOOST_AUTO_TEST_SUITE(encoders)

BOOST_AUTO_TEST_CASE(simd_encoders_choose_the_scalar_codes_bit_for_bit) {
  const auto& scalar = kvlab::kernels_for(kvlab::isa::scalar);
  random_bytes random;
  // Sorted, as codebooks' are, with a repeat; up to 20 of them.
  const float thresholds[] = {-2.6f, -2.1f, -1.5f, -1.2f, -0.9f, -0.6f, -0.4f, -0.25f, -0.1f, -0.1f,
                              0.0f,  0.1f,  0.2f,  0.45f, 0.7f,  1.0f,  1.3f,  1.6f,   2.0f,  2.4f};
  for (const auto isa : simd_isas()) {
    const auto& simd = kvlab::kernels_for(isa);
    for (unsigned bits = 1; bits <= 8; ++bits) {
      for (const std::size_t n : {1u, 8u, 15u, 16u, 17u, 32u, 100u, 128u}) {
        for (const std::size_t first : {0u, 1u, 2u, 32u}) {
          BOOST_TEST_CONTEXT(kvlab::isa_name(isa) << " bits " << bits << " n " << n << " first " << first) {
            auto x = random.floats(n);
            x[0] = 0.75f; // (0.75 - 0.5) / 0.5 = 0.5 exactly: a tie, rounded to even
            const unsigned max_code = (1u << bits) - 1u;
            const int offset = static_cast<int>(max_code / 2);
            for (const float scale : {0.5f, 0.037f, 0.0f}) {
              // Bytes outside [first, first + n) must survive: start both from the same noise.
              auto packed_simd = random((first + n) * bits / 8 + 2);
              auto packed_scalar = packed_simd;
              simd.encode_uniform(x.data(), n, scale, 0.5f, offset, max_code, bits, packed_simd.data(), first);
              scalar.encode_uniform(x.data(), n, scale, 0.5f, offset, max_code, bits, packed_scalar.data(), first);
              BOOST_TEST_REQUIRE(packed_simd == packed_scalar);
              const unsigned count = std::min<unsigned>(max_code, 20);
              simd.encode_nearest(x.data(), n, scale, -0.05f, thresholds, count, bits, packed_simd.data(), first);
              scalar.encode_nearest(x.data(), n, scale, -0.05f, thresholds, count, bits, packed_scalar.data(), first);
              BOOST_TEST_REQUIRE(packed_simd == packed_scalar);
            }
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(codebook_bucket_index_counts_thresholds_as_comparing_with_each) {
  // Values on every threshold and one ulp to either side, and on every bucket's edges and
  // one ulp off, through the record encoder of each ISA against the scalar reference's
  // linear count. Each group holds a 1 (its absmax, so its scale), so y = x exactly; the
  // Lloyd-Max thresholds (up to 2.4) are taken quartered, which keeps their spacing.
  const auto& components = kvlab::builtin_registry();
  const auto thresholds_of = [&](const char* name, float times) {
    std::vector<float> t;
    for (const float v : components.make_quantizer(name).encoding().thresholds) t.push_back(v * times);
    return t;
  };
  const std::pair<std::vector<float>, bool> codebooks[] = {
      {thresholds_of("nf4", 1.0f), true},
      {thresholds_of("lloyd4", 0.25f), true},
      {thresholds_of("lloyd3", 0.25f), true},
      {{-0.9f, -0.89f, -0.5f, -0.49f, 0.0f, 0.01f, 0.3f, 0.31f, 0.8f, 0.81f}, true}, // two per bucket
      {{-1.0f, -0.5f, 0.0f, 0.001f, 0.002f, 0.003f, 0.5f, 1.0f}, false}};            // three in one
  const auto& scalar = kvlab::kernels_for(kvlab::isa::scalar);
  for (const auto& [thresholds, bucketed] : codebooks) {
    const kvlab::nearest_thresholds index(thresholds.data(), static_cast<unsigned>(thresholds.size()));
    BOOST_TEST_REQUIRE(index.bucketed == bucketed); // the vector path below is the one meant
    std::vector<float> y = {0.0f, -0.0f, 1.0f, -1.0f, 0.999f, -0.999f};
    for (const float t : thresholds)
      for (const float v : {t, std::nextafter(t, -2.0f), std::nextafter(t, 2.0f)}) y.push_back(v);
    for (int b = 0; b <= 16 && bucketed; ++b) {
      const float edge = (static_cast<float>(b) - index.origin) / index.per_bucket;
      for (const float v : {edge, std::nextafter(edge, -2.0f), std::nextafter(edge, 2.0f)})
        if (std::abs(v) <= 1.0f) y.push_back(v);
    }
    constexpr std::size_t group = 32;
    const std::size_t groups = (y.size() + group - 2) / (group - 1);
    std::vector<float> x(groups * group, 0.0f);
    for (std::size_t i = 0; i < y.size(); ++i) x[i / (group - 1) * group + 1 + i % (group - 1)] = y[i];
    for (std::size_t g = 0; g < groups; ++g) x[g * group] = 1.0f;
    constexpr unsigned bits = 4;
    const kvlab::record_format f{.kind = kvlab::element_kind::table_codes,
                                 .record_bytes = x.size() * bits / 8 + 2 * groups,
                                 .head_dim = x.size(),
                                 .group_channels = group,
                                 .bits = bits,
                                 .params_per_group = 1};
    std::vector<std::uint8_t> expected(f.record_bytes);
    BOOST_TEST_REQUIRE(
        scalar.encode_nearest_records(f, kvlab::codebook_scale::absmax, index, x.data(), 1, expected.data()) == 1u);
    for (const auto isa : simd_isas()) {
      BOOST_TEST_CONTEXT(kvlab::isa_name(isa) << ", " << thresholds.size() << " thresholds") {
        std::vector<std::uint8_t> record(f.record_bytes);
        BOOST_TEST_REQUIRE(kvlab::kernels_for(isa).encode_nearest_records(f, kvlab::codebook_scale::absmax, index,
                                                                          x.data(), 1, record.data()) == 1u);
        BOOST_TEST(record == expected, boost::test_tools::per_element());
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(record_encoders_write_the_quantizers_records_byte_for_byte) {
  // quantized_body::encode takes the fused encoder for int<b> and uint<b> (also under rht),
  // the fp8 encoder, the raw float conversions and the codebook encoder; its records must
  // be the ones the quantizer's own fit, stored_params and per-element encode give, on
  // every ISA, every width, odd head_dims and groups, fp16 and f32 params.
  const auto& components = kvlab::builtin_registry();
  std::vector<std::string> quantizers = {"rht(int4)",     "rht(uint8)", "fp8_e4m3", "fp8_e4m3fnuz", "fp8_e5m2",
                                         "rht(fp8_e4m3)", "f16",        "bf16",     "f32",          "nf4",
                                         "lloyd2",        "lloyd3",     "lloyd4"};
  for (unsigned bits = 1; bits <= 8; ++bits) {
    if (bits >= 2) quantizers.push_back("int" + std::to_string(bits));
    quantizers.push_back("uint" + std::to_string(bits));
  }
  const std::pair<std::size_t, const char*> shapes[] = {{37, "token"},      {64, "token"},      {21, "group(7)"},
                                                        {48, "group(16)"},  {256, "group(16)"}, {128, "group(32)"},
                                                        {544, "group(32)"}, {40, "group(20)"}};
  random_bytes random;
  std::vector<kvlab::isa> isas = simd_isas();
  isas.push_back(kvlab::isa::scalar);
  for (const auto& name : quantizers) {
    const kvlab::any_quantizer q = components.make_quantizer(name);
    const unsigned bits = q.bits();
    for (const auto& [head_dim, granularity] : shapes) {
      const auto shape = components.make_granularity(granularity).group_shape(head_dim);
      for (const auto precision : {kvlab::param_precision::f16, kvlab::param_precision::f32}) {
        kvlab::quantized_body body(q, shape, head_dim, precision, components.make_storage("flat"));
        const auto& layout = body.layout();
        // Trials 0-2 and 7-9: N(0, 9) data. 3: fp16-subnormal scales. 4: quotients halfway
        // between codes and one ulp off. 5: f32-subnormal scales (fp16: 0). 6 (f32 only, fp16
        // overflows): scales past 2^125 (int<b> up to 4 bits), whose reciprocals the SIMD
        // encoders do not use, and groups whose float sum overflows, which the vector
        // encoders' finite check refuses and the generic path encodes.
        for (int trial = 0; trial < 10; ++trial) {
          if (trial == 6 && precision == kvlab::param_precision::f16) continue;
          auto x = random.floats(head_dim);
          const float spread = trial == 3 ? 1e-6f : trial == 5 ? 1e-39f : trial == 6 ? 3e37f : 3.0f;
          for (auto& v : x) v *= spread;
          if (trial == 4 && q.encoding().fit) halfway_quotients(x, shape.channels, q.encoding());
          if (trial == 6 && (q.encoding().fit == kvlab::uniform_fit::absmax || q.encoding().scale_fit))
            for (std::size_t c = 1; c < head_dim; c += shape.channels) {
              x[c] = 3.2e38f;
              if (shape.channels >= 32) x[c + 16] = 3.2e38f; // one lane on every ISA: its sum overflows
            }
          std::fill_n(x.begin(), shape.channels, 0.5f); // a constant group (scale 0)
          if (trial == 1) std::fill_n(x.begin(), shape.channels, 0.0f);
          if (trial < 4) x[head_dim - 1] = 0.25f * static_cast<float>(trial); // ties and signed zeros
          std::vector<std::uint8_t> expected(layout.bytes(), 0);
          std::vector<std::uint32_t> codes(head_dim);
          for (std::size_t g = 0; g < layout.groups(); ++g) {
            const auto values = std::span<const float>(x).subspan(g * shape.channels, shape.channels);
            const auto p = kvlab::stored_params(q, values, precision);
            write_params(expected, layout, g, p);
            for (std::size_t c = 0; c < shape.channels; ++c) codes[g * shape.channels + c] = q.encode(values[c], p);
          }
          kvlab::pack_codes(codes, bits, std::span(expected).first(layout.code_bytes()));
          for (const auto isa : isas) {
            BOOST_TEST_CONTEXT(name << " " << granularity << " head_dim " << head_dim << " trial " << trial << " "
                                    << kvlab::isa_name(isa)
                                    << (precision == kvlab::param_precision::f32 ? " f32" : " f16")) {
              std::vector<std::uint8_t> record(layout.bytes(), 0); // as the body's scratch: padding bits are kept
              body.encode(x, kvlab::kernels_for(isa), record);
              BOOST_TEST_REQUIRE(record == expected, boost::test_tools::per_element());
            }
          }
        }
        // A scale past fp16's range is the quantizer's error, not a silent infinity.
        if (precision == kvlab::param_precision::f16 && q.params_per_group() > 0) {
          std::vector<float> huge(head_dim, 1e12f);
          huge[0] = -1e12f;
          std::vector<std::uint8_t> record(layout.bytes());
          for (const auto isa : isas) BOOST_TEST_CONTEXT(name << " " << granularity << " " << kvlab::isa_name(isa)) {
              BOOST_CHECK_THROW(body.encode(huge, kvlab::kernels_for(isa), record), kvlab::error);
            }
        }
        // A value that is not finite is an error for every quantizer, raw floats included,
        // in a whole vector of the token or in its last channel (a vector kernel's tail).
        for (const float bad : {NAN, INFINITY, -INFINITY})
          for (const std::size_t at : {head_dim / 2, head_dim - 1}) {
            std::vector<float> token(head_dim, 0.5f);
            token[at] = bad;
            std::vector<std::uint8_t> record(layout.bytes());
            for (const auto isa : isas)
              BOOST_TEST_CONTEXT(name << " " << granularity << " " << kvlab::isa_name(isa) << " " << bad << " at "
                                      << at) {
                BOOST_CHECK_THROW(body.encode(token, kvlab::kernels_for(isa), record), kvlab::error);
              }
          }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(per_channel_blocks_are_the_quantizers_columns_byte_for_byte) {
  // quantized_body::encode takes the fused block encoder for int<b> and uint<b> under
  // channel(G) (KIVI's keys); each block must be what the quantizer's own fit,
  // stored_params and encode give column by column, on every ISA: whole vectors of channels
  // and not, odd block lengths, fp16 and f32 params, constant and all-zero columns, ties.
  const auto& components = kvlab::builtin_registry();
  std::vector<std::string> quantizers = {"rht(uint2)", "rht(int4)"};
  for (unsigned bits = 1; bits <= 8; ++bits) {
    if (bits >= 2) quantizers.push_back("int" + std::to_string(bits));
    quantizers.push_back("uint" + std::to_string(bits));
  }
  const std::pair<std::size_t, const char*> shapes[] = {
      {128, "channel(32)"}, {64, "channel(7)"}, {24, "channel(2)"}, {40, "channel(16)"}, {256, "channel(3)"}};
  random_bytes random;
  std::vector<kvlab::isa> isas = simd_isas();
  isas.push_back(kvlab::isa::scalar);
  for (const auto& name : quantizers) {
    const kvlab::any_quantizer q = components.make_quantizer(name);
    for (const auto& [head_dim, granularity] : shapes) {
      const auto shape = components.make_granularity(granularity).group_shape(head_dim);
      for (const auto precision : {kvlab::param_precision::f16, kvlab::param_precision::f32}) {
        kvlab::quantized_body body(q, shape, head_dim, precision, components.make_storage("flat"));
        const auto& layout = body.layout();
        const std::size_t tokens = shape.tokens;
        // Trials 0-2: N(0, 9). 3: fp16-subnormal scales. 4: quotients halfway between codes
        // and one ulp off, down every column but the first two.
        for (int trial = 0; trial < 5; ++trial) {
          auto x = random.floats(tokens * head_dim);
          const float spread = trial == 3 ? 1e-6f : 3.0f;
          for (auto& v : x) v *= spread;
          std::vector<float> halfway(tokens);
          for (std::size_t c = 0; c < head_dim; ++c) {
            if (trial == 4) halfway_quotients(halfway, tokens, q.encoding());
            for (std::size_t j = 0; j < tokens; ++j) {
              if (trial == 4) x[j * head_dim + c] = halfway[(j + c) % tokens];
              if (c == 0) x[j * head_dim] = 0.5f;     // a constant column (scale 0)
              if (c == 1) x[j * head_dim + 1] = 0.0f; // an all-zero column
            }
          }
          std::vector<std::uint8_t> expected(layout.bytes(), 0);
          std::vector<std::uint32_t> codes(tokens * head_dim);
          std::vector<float> column(tokens);
          for (std::size_t c = 0; c < head_dim; ++c) {
            for (std::size_t j = 0; j < tokens; ++j) column[j] = x[j * head_dim + c];
            const auto p = kvlab::stored_params(q, column, precision);
            write_params(expected, layout, c, p);
            for (std::size_t j = 0; j < tokens; ++j) codes[j * head_dim + c] = q.encode(column[j], p);
          }
          kvlab::pack_codes(codes, q.bits(), std::span(expected).first(layout.code_bytes()));
          for (const auto isa : isas) {
            BOOST_TEST_CONTEXT(name << " " << granularity << " head_dim " << head_dim << " trial " << trial << " "
                                    << kvlab::isa_name(isa)
                                    << (precision == kvlab::param_precision::f32 ? " f32" : " f16")) {
              std::vector<std::uint8_t> record(layout.bytes(), 0xAB); // every byte is written
              body.encode(x, kvlab::kernels_for(isa), record);
              BOOST_TEST_REQUIRE(record == expected, boost::test_tools::per_element());
            }
          }
        }
        // Errors stay the quantizer's: a scale past fp16, a value that is not finite.
        std::vector<float> bad(tokens * head_dim, 0.5f);
        std::vector<std::uint8_t> record(layout.bytes());
        for (const auto isa : isas) {
          BOOST_TEST_CONTEXT(name << " " << granularity << " " << kvlab::isa_name(isa)) {
            if (precision == kvlab::param_precision::f16) {
              bad[head_dim + 3] = 1e12f, bad[3] = -1e12f;
              BOOST_CHECK_THROW(body.encode(bad, kvlab::kernels_for(isa), record), kvlab::error);
              bad[head_dim + 3] = 0.5f, bad[3] = 0.5f;
            }
            for (const float value : {NAN, INFINITY}) {
              bad[bad.size() - 1] = value;
              BOOST_CHECK_THROW(body.encode(bad, kvlab::kernels_for(isa), record), kvlab::error);
            }
            bad[bad.size() - 1] = 0.5f;
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(fp16_rows_convert_as_the_scalar_reference_on_every_isa) {
  // The cache's fp16 tiers go through these: every ISA must give the reference's bits.
  // Floats: random bit patterns (every class: subnormals, infinities, NaNs), values
  // halfway between two halves (ties to even), the overflow threshold 65520 and the
  // smallest subnormal's half; NaNs in the middle of a vector. Halves: all 65,536 (a NaN
  // stays a NaN; signaling ones may come back quieted).
  random_bytes random;
  auto floats = random_bit_patterns(random, 4099, [](std::size_t i, std::uint32_t bits) {
    return i % 3 != 1 ? bits : (bits & 0x8000'0000u) | (0x3880'0000u + (bits & 0x07ff'e000u)) | 0x1000u; // a tie
  });
  for (const float special : {65520.0f, 65519.99f, -65520.0f, 0x1p-25f, 0x1.8p-25f, 0x1p-26f, -0.0f, INFINITY})
    floats.push_back(special);
  floats[20] = NAN;
  const auto& scalar = kvlab::kernels_for(kvlab::isa::scalar);
  std::vector<std::uint16_t> expected(floats.size());
  scalar.floats_to_f16(floats.data(), floats.size(), expected.data());
  std::vector<std::uint16_t> halves(65536);
  std::iota(halves.begin(), halves.end(), std::uint16_t{0});
  std::vector<float> expected_floats(halves.size());
  scalar.f16_to_floats(halves.data(), halves.size(), expected_floats.data());
  for (const auto isa : simd_isas()) {
    BOOST_TEST_CONTEXT(kvlab::isa_name(isa)) {
      const auto& kernels = kvlab::kernels_for(isa);
      for (const std::size_t n : {std::size_t{0}, std::size_t{5}, std::size_t{16}, std::size_t{37}, floats.size()}) {
        std::vector<std::uint16_t> out(n + 1, 0xABCD);
        kernels.floats_to_f16(floats.data(), n, out.data());
        BOOST_TEST(std::vector(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n)) ==
                       std::vector(expected.begin(), expected.begin() + static_cast<std::ptrdiff_t>(n)),
                   boost::test_tools::per_element());
        BOOST_TEST(out[n] == 0xABCD); // nothing written past n
      }
      std::vector<float> out(halves.size());
      kernels.f16_to_floats(halves.data(), halves.size(), out.data());
      for (std::size_t i = 0; i < halves.size(); ++i)
        BOOST_TEST((std::isnan(expected_floats[i])
                        ? std::isnan(out[i])
                        : std::bit_cast<std::uint32_t>(out[i]) == std::bit_cast<std::uint32_t>(expected_floats[i])));
    }
  }
}

BOOST_AUTO_TEST_CASE(walsh_hadamard_gives_the_scalar_references_bits_on_every_isa) {
  // rht(...) rotates every token and query through this kernel: every ISA must give the
  // reference's bits, for blocks below, at and above each vector width. The reference is
  // itself checked against the definition: H_n H_n = n I, so the normalized transform
  // applied twice gives the block back within rounding.
  random_bytes random;
  const auto& scalar = kvlab::kernels_for(kvlab::isa::scalar);
  for (std::size_t n = 1; n <= 4096; n *= 2) {
    auto block = random.floats(n);
    std::vector<float> twice = block;
    scalar.walsh_hadamard(twice.data(), n);
    scalar.walsh_hadamard(twice.data(), n);
    for (std::size_t i = 0; i < n; ++i)
      BOOST_TEST(std::fabs(twice[i] - block[i]) <= 1e-5f, "n " << n << " element " << i);
    block[n / 2] = 1e30f; // a large outlier: sums round differently if the order changes
    std::vector<float> expected = block;
    scalar.walsh_hadamard(expected.data(), n);
    if (n == 4) { // H_4 by hand: (x0 + x1 + x2 + x3, x0 - x1 + x2 - x3, x0 + x1 - x2 - x3, x0 - x1 - x2 + x3) / 2
      std::vector<float> x{1.0f, 2.0f, 3.0f, 5.0f};
      scalar.walsh_hadamard(x.data(), 4);
      BOOST_TEST(x == (std::vector<float>{5.5f, -1.5f, -2.5f, 0.5f}), boost::test_tools::per_element());
    }
    for (const auto isa : simd_isas()) {
      std::vector<float> out = block;
      kvlab::kernels_for(isa).walsh_hadamard(out.data(), n);
      for (std::size_t i = 0; i < n; ++i)
        BOOST_TEST(std::bit_cast<std::uint32_t>(out[i]) == std::bit_cast<std::uint32_t>(expected[i]),
                   kvlab::isa_name(isa) << " n " << n << " element " << i);
    }
  }
}

BOOST_AUTO_TEST_CASE(fp8_encoders_choose_the_quantizers_codes_on_every_isa) {
  // Floats of every class (random bit patterns: subnormals, infinities, NaNs), values
  // halfway between two codes of each binade, the saturation threshold and the subnormal
  // range, under scales that move them across the format's range (0: every code 0).
  random_bytes random;
  auto x = random_bit_patterns(random, 2053, [](std::size_t i, std::uint32_t bits) {
    const std::uint32_t sign = bits & 0x8000'0000u;
    if (i % 4 == 1) return sign | (0x3a00'0000u + (bits & 0x07e0'0000u)) | 0x0008'0000u; // e4m3 ties
    if (i % 4 == 2) return sign | (0x3a00'0000u + (bits & 0x07c0'0000u)) | 0x0010'0000u; // e5m2 ties
    return bits;
  });
  for (const float special : {448.0f, 464.0f, 480.0f, 240.0f, 57344.0f, 61440.0f, 0x1p-9f, 0x1p-10f, 0x1.8p-10f,
                              0x1p-16f, 0x1p-17f, -0.0f, 0.0f, INFINITY, -INFINITY, NAN})
    x.push_back(special);
  for (const char* name : {"fp8_e4m3", "fp8_e4m3fnuz", "fp8_e5m2"}) {
    const kvlab::any_quantizer q = kvlab::builtin_registry().make_quantizer(name);
    const auto rule = q.encoding();
    BOOST_TEST_REQUIRE((rule.kind == kvlab::encoding_kind::float8 && rule.fp8.has_value()));
    for (const float scale : {1.0f, 0.37f, 1e-3f, 3e-41f, 0.0f}) {
      std::vector<std::uint8_t> expected(x.size());
      for (std::size_t i = 0; i < x.size(); ++i)
        expected[i] = static_cast<std::uint8_t>(q.encode(x[i], {.scale = scale}));
      BOOST_TEST_CONTEXT(name << " scale " << scale) {
        check_encodes_prefixes(expected, 1, [&](const kvlab::kernel_table& kernels, std::size_t n, std::uint8_t* out) {
          kernels.encode_fp8(x.data(), n, scale, *rule.fp8, out);
        });
      }
      // Quotients at and within a few ulps of a tie under this scale, where multiplying by
      // the scale's reciprocal and dividing by the scale round to different floats.
      std::vector<float> near_ties;
      for (std::size_t i = 0; i < 2053; ++i)
        if (i % 4 == 1 || i % 4 == 2) {
          float up = x[i] * scale, down = up;
          near_ties.push_back(up);
          for (int k = 0; k < 5; ++k) {
            up = std::nextafter(up, INFINITY), down = std::nextafter(down, -INFINITY);
            near_ties.push_back(up), near_ties.push_back(down);
          }
        }
      std::vector<std::uint8_t> tie_codes(near_ties.size());
      for (std::size_t i = 0; i < near_ties.size(); ++i)
        tie_codes[i] = static_cast<std::uint8_t>(q.encode(near_ties[i], {.scale = scale}));
      BOOST_TEST_CONTEXT(name << " scale " << scale << ", quotients near ties") {
        check_encodes_prefixes(tie_codes, 1, [&](const kvlab::kernel_table& kernels, std::size_t n, std::uint8_t* out) {
          kernels.encode_fp8(near_ties.data(), n, scale, *rule.fp8, out);
        });
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(raw_float_records_encode_as_the_quantizers_on_every_isa) {
  // f16 and bf16 saturate at their largest finite value before rounding (65520 would round
  // to infinity); NaNs anywhere in a vector; f32 is a copy.
  random_bytes random;
  auto x = random_bit_patterns(random, 1029, [](std::size_t, std::uint32_t bits) { return bits; });
  for (const float special :
       {65520.0f, 65519.99f, -65520.0f, 0x1p-25f, 0x1.fep127f, 0x1.ffp127f, -0x1.ffp127f, -0.0f, INFINITY, -INFINITY})
    x.push_back(special);
  x[20] = NAN;
  const std::pair<const char*, kvlab::element_kind> formats[] = {
      {"f16", kvlab::element_kind::f16}, {"bf16", kvlab::element_kind::bf16}, {"f32", kvlab::element_kind::f32}};
  for (const auto& [name, kind] : formats) {
    const kvlab::any_quantizer q = kvlab::builtin_registry().make_quantizer(name);
    const std::size_t bytes = q.bits() / 8;
    std::vector<std::uint8_t> expected(x.size() * bytes);
    for (std::size_t i = 0; i < x.size(); ++i) {
      const std::uint32_t code = q.encode(x[i], {});
      std::memcpy(expected.data() + i * bytes, &code, bytes); // little-endian, as records hold them
    }
    BOOST_TEST_CONTEXT(name) {
      check_encodes_prefixes(expected, bytes,
                             [&](const kvlab::kernel_table& kernels, std::size_t n, std::uint8_t* out) {
                               const bool finite = kernels.encode_raw(kind, x.data(), n, out);
                               BOOST_TEST(finite == std::all_of(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(n),
                                                                [](float v) { return std::isfinite(v); }));
                             });
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
