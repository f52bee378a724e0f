// mxfp4 and nvfp4 against ggml's reference quantizers, byte for byte, and their scale
// bytes through the cache, the codec and the kernels.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>
import kvlab;

namespace {

std::vector<float> gaussian(std::size_t n, std::uint64_t seed, float scale) {
  kvlab::random_stream random(seed, 0);
  std::vector<float> x(n);
  for (auto& v : x) v = scale * static_cast<float>(random.normal());
  return x;
}

// ggml's reference (ggml-quants.c quantize_row_mxfp4_ref, quantize_row_nvfp4_ref,
// best_index_mxfp4; ggml-impl.h ggml_e8m0_to_fp32_half, ggml_fp32_to_ue4m3,
// ggml_ue4m3_to_fp32), written here from those files independently of the strategy file.
const std::int8_t kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

int best_index_mxfp4(float x, float e) {
  int best_index = 0;
  float best_err = std::fabs(kvalues_mxfp4[0] * e - x);
  for (int i = 1; i < 16; i++) {
    const float err = std::fabs(kvalues_mxfp4[i] * e - x);
    if (err < best_err) best_index = i, best_err = err;
  }
  return best_index;
}
float e8m0_to_fp32_half(std::uint8_t x) {
  const std::uint32_t bits = x < 2 ? 0x00200000u << x : static_cast<std::uint32_t>(x - 1) << 23;
  float result;
  std::memcpy(&result, &bits, 4);
  return result;
}
float ue4m3_to_fp32(std::uint8_t x) {
  if (x == 0 || x == 0x7F) return 0.0f;
  const int exp = (x >> 3) & 0xF, man = x & 0x7;
  const float raw = exp == 0 ? std::ldexp(static_cast<float>(man), -9) : std::ldexp(1.0f + man / 8.0f, exp - 7);
  return raw * 0.5f;
}
std::uint8_t fp32_to_ue4m3(float x) {
  if (!(x > 0.0f)) return 0;
  if (x > 448.0f) x = 448.0f;
  std::uint32_t bits;
  std::memcpy(&bits, &x, 4);
  const int fp32_exp = static_cast<int>((bits >> 23) & 0xFF) - 127;
  const int fp32_man = (bits >> 20) & 0x7;
  int ue4m3_exp = fp32_exp + 7;
  if (ue4m3_exp <= 0) {
    int man = static_cast<int>(x * 512.0f + 0.5f);
    if (man > 7) man = 7;
    if (man < 1) return 0;
    return static_cast<std::uint8_t>(man);
  }
  if (ue4m3_exp >= 15) return 0x7E;
  int ue4m3_man = fp32_man + static_cast<int>((bits >> 19) & 1);
  if (ue4m3_man > 7) {
    ue4m3_man = 0;
    ue4m3_exp++;
    if (ue4m3_exp >= 15) return 0x7E;
  }
  return static_cast<std::uint8_t>((ue4m3_exp << 3) | ue4m3_man);
}

// One ggml block: mxfp4 32 values (e, then 16 bytes), nvfp4 64 values (4 scales, 32 bytes).
std::vector<std::uint8_t> reference_block(const std::string& format, const float* x) {
  std::vector<std::uint8_t> block;
  if (format == "mxfp4") {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++)
      if (amax < std::fabs(x[j])) amax = std::fabs(x[j]);
    // below 2^-125 the exponent is negative, whose conversion to uint8_t is undefined in C:
    // there the reference follows kvlab's choice, e = 0
    const float exponent = amax > 0.0f ? std::floor(std::log2(amax)) - 2 + 127 : 0.0f;
    const std::uint8_t e = exponent < 0.0f ? 0 : static_cast<std::uint8_t>(exponent);
    const float d = e8m0_to_fp32_half(e);
    block.push_back(e);
    for (int j = 0; j < 16; ++j)
      block.push_back(static_cast<std::uint8_t>(best_index_mxfp4(x[j], d) | best_index_mxfp4(x[16 + j], d) << 4));
    return block;
  }
  std::vector<std::uint8_t> qs;
  for (int s = 0; s < 4; s++) {
    const float* xb = x + s * 16;
    float amax = 0.0f;
    for (int j = 0; j < 16; j++)
      if (amax < std::fabs(xb[j])) amax = std::fabs(xb[j]);
    const std::uint8_t ue = fp32_to_ue4m3(amax / 6.0f);
    block.push_back(ue);
    const float d = ue4m3_to_fp32(ue);
    for (int j = 0; j < 8; ++j)
      qs.push_back(static_cast<std::uint8_t>(best_index_mxfp4(xb[j], d) | best_index_mxfp4(xb[8 + j], d) << 4));
  }
  block.insert(block.end(), qs.begin(), qs.end());
  return block;
}

// A token of 128 values encoded by the cache's body (group(32) for mxfp4, group(16) for
// nvfp4), its codes and scale bytes read back from the record and written in ggml's layout.
std::vector<std::vector<std::uint8_t>> cache_blocks_as_ggml(const std::string& name, const std::vector<float>& x) {
  const auto& components = kvlab::builtin_registry();
  const auto& format =
      *(name == "mxfp4" ? &kvlab::strategies::microscaling::mxfp4 : &kvlab::strategies::microscaling::nvfp4);
  const auto shape = components.make_granularity("group(" + std::to_string(format.block) + ")").group_shape(x.size());
  kvlab::quantized_body body(components.make_quantizer(name), shape, x.size(), kvlab::param_precision::f16,
                             components.make_storage("flat"));
  const auto& layout = body.layout();
  BOOST_TEST(layout.param_bytes == 1u);
  std::vector<std::uint8_t> record(layout.bytes(), 0);
  body.encode(x, kvlab::kernels_for(kvlab::isa::scalar), record);
  const std::size_t values = name == "mxfp4" ? 32 : 64, per_block = values / format.block;
  std::vector<std::vector<std::uint8_t>> blocks;
  for (std::size_t first = 0; first < x.size(); first += values) {
    std::vector<std::uint32_t> codes;
    for (std::size_t j = 0; j < values; ++j) codes.push_back(kvlab::unpack_code(record, first + j, layout.bits));
    const auto scales = std::span(record).subspan(layout.code_bytes() + first / format.block, per_block);
    blocks.push_back(kvlab::strategies::microscaling::ggml_block(format, codes, scales));
  }
  return blocks;
}

} // namespace

BOOST_AUTO_TEST_SUITE(microscaling)

BOOST_AUTO_TEST_CASE(mxfp4_and_nvfp4_equal_ggmls_reference_quantizers_byte_for_byte) {
  // Gaussian tokens at scales from tiny to large; zeros; and values on the midpoints
  // between E2M1 levels (ties: the first of ggml's table, the one nearer zero) with a block
  // largest magnitude that makes the scale 0.5 (mxfp4: amax 4 gives e = 127; nvfp4: amax 6
  // gives UE4M3 1.0), each block sign-mirrored in its second half; then every token one ulp up.
  std::vector<std::vector<float>> tokens;
  for (const float scale : {1.0f, 1e-3f, 300.0f, 1e-20f, 0.01f})
    tokens.push_back(gaussian(128, static_cast<std::uint64_t>(1e6f * scale) + 1, scale));
  tokens.emplace_back(128, 0.0f);
  const float midpoints[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  std::vector<float> ties(128);
  for (std::size_t j = 0; j < 128; ++j) {
    const std::size_t in_block = j % 16;
    const float sign = (j / 8) % 2 ? -1.0f : 1.0f;
    ties[j] = in_block == 0 ? (j % 32 == 0 ? 4.0f : 6.0f) : sign * midpoints[in_block % 7];
  }
  tokens.push_back(ties);
  // a block whose largest magnitude is beyond its scale's top level (mxfp4: 7 > 12 * 0.5)
  std::vector<float> clipped = ties;
  clipped[0] = 7.0f;
  tokens.push_back(clipped);
  // nvfp4's top scales: amax 2600 (2600 / 6 in UE4M3's top exponent: 0x7e) and 1488
  // (1488 / 6 = 248 rounds up into the top exponent); and its subnormal scales (0.05 / 6)
  std::vector<float> large = gaussian(128, 11, 100.0f);
  large[0] = 2600.0f, large[20] = -1500.0f, large[70] = 1488.0f, large[100] = 0.05f;
  for (std::size_t j = 96; j < 128; ++j)
    if (j != 100) large[j] *= 1e-4f;
  tokens.push_back(large);
  for (std::size_t t = 0, original = tokens.size(); t < original; ++t) {
    auto nudged = tokens[t];
    for (auto& v : nudged) v = std::nextafter(v, INFINITY);
    tokens.push_back(nudged);
  }
  // mxfp4's E8M0 ends: amax 3e-38 (e = 0), 6e-38 (e = 1), 3e38 (e = 252), 1.5e-38 (a
  // negative exponent: kvlab's e = 0)
  std::vector<float> exponents = gaussian(128, 12, 1.0f);
  const float block_scales[] = {3e-38f, 6e-38f, 3e38f, 1.5e-38f};
  for (std::size_t j = 0; j < 128; ++j) exponents[j] = block_scales[j / 32] * std::tanh(exponents[j]);
  for (std::size_t b = 0; b < 4; ++b) exponents[32 * b + 5] = block_scales[b];
  BOOST_TEST(cache_blocks_as_ggml("mxfp4", exponents)[0][0] == 0);
  BOOST_TEST(cache_blocks_as_ggml("mxfp4", exponents)[1][0] == 1);
  BOOST_TEST(cache_blocks_as_ggml("mxfp4", exponents)[2][0] == 252);
  for (std::size_t b = 0; b < 4; ++b) BOOST_TEST_CONTEXT("mxfp4 exponents block " << b) {
      BOOST_TEST(cache_blocks_as_ggml("mxfp4", exponents)[b] == reference_block("mxfp4", exponents.data() + 32 * b),
                 boost::test_tools::per_element());
    }
  for (const std::string format : {"mxfp4", "nvfp4"})
    for (std::size_t t = 0; t < tokens.size(); ++t) {
      const auto blocks = cache_blocks_as_ggml(format, tokens[t]);
      const std::size_t values = format == "mxfp4" ? 32 : 64;
      for (std::size_t b = 0; b < blocks.size(); ++b) BOOST_TEST_CONTEXT(format << " token " << t << " block " << b) {
          BOOST_TEST(blocks[b] == reference_block(format, tokens[t].data() + values * b),
                     boost::test_tools::per_element());
        }
    }
  // nvfp4(S): blocks of x as nvfp4 blocks of x / S (S a power of two: x / S exact), its
  // scales S times theirs.
  for (std::size_t t = 0; t < 4; ++t) {
    auto scaled = tokens[t];
    for (auto& v : scaled) v *= 4.0f;
    const auto blocks = cache_blocks_as_ggml("nvfp4(4)", scaled);
    for (std::size_t b = 0; b < blocks.size(); ++b) BOOST_TEST_CONTEXT("nvfp4(4) token " << t << " block " << b) {
        BOOST_TEST(blocks[b] == reference_block("nvfp4", tokens[t].data() + 64 * b), boost::test_tools::per_element());
      }
  }
  BOOST_TEST(kvlab::builtin_registry().make_quantizer("nvfp4(0.25)").name() == "nvfp4(0.25)");
  BOOST_TEST(kvlab::builtin_registry().make_quantizer("nvfp4(1)").name() == "nvfp4");
  // Written out by hand: mxfp4 of x_j = (j - 16) / 4 (amax 4: e = 127, d = 0.5, levels
  // 0, 0.5, 1, 1.5, 2, 3, 4, 6 doubled): x_0 = -4 is code 14 (-8 * 0.5), x_16 = 0 code 0.
  std::vector<float> ramp(128);
  for (std::size_t j = 0; j < 128; ++j) ramp[j] = (static_cast<float>(j % 32) - 16.0f) / 4.0f;
  const auto ramp_block = cache_blocks_as_ggml("mxfp4", ramp)[0];
  BOOST_TEST(ramp_block[0] == 127);
  BOOST_TEST(ramp_block[1] == 14);   // x_0 = -4: -8 * 0.5; x_16 = 0: code 0
  BOOST_TEST(ramp_block[2] == 14);   // x_1 = -3.75: -8 * 0.5; x_17 = 0.25, between 0 and 0.5: 0
  BOOST_TEST(ramp_block[3] == 0x1d); // x_2 = -3.5, between -3 and -4: -3 (code 13); x_18 = 0.5: code 1
}

BOOST_AUTO_TEST_CASE(scale_bytes_count_in_bytes_and_survive_rotation) {
  const std::size_t tokens = 512, head_dim = 128;
  const auto values = gaussian(tokens * head_dim, 3, 1.0f);
  const auto& components = kvlab::builtin_registry();
  const auto stats = [&](const char* q, const char* g) {
    return kvlab::quantize_dequantize(components.make_quantizer(q),
                                      components.make_granularity(g).group_shape(head_dim), kvlab::param_precision::f16,
                                      values, tokens, head_dim)
        .stats;
  };
  const auto mxfp4 = stats("mxfp4", "group(32)"), nvfp4 = stats("nvfp4", "group(16)"),
             q4_0 = stats("q4_0", "group(32)");
  BOOST_TEST_MESSAGE("relative RMSE: mxfp4@group(32) " << mxfp4.relative_rmse << ", nvfp4@group(16) "
                                                       << nvfp4.relative_rmse << ", q4_0@group(32) "
                                                       << q4_0.relative_rmse);
  BOOST_TEST(mxfp4.bits_per_element == 4.25); // one byte per 32 values
  BOOST_TEST(nvfp4.bits_per_element == 4.5);  // one byte per 16
  // A finer scale (16 values, 3 mantissa bits) errs less than a power of two per 32.
  BOOST_TEST(nvfp4.relative_rmse < mxfp4.relative_rmse);
  // The same bytes in a cache: 4-bit codes and a scale byte per group, per token.
  const auto& kernels = kvlab::active_kernels();
  kvlab::kv_stream stream(components.make_quantizer("mxfp4"), {.tokens = 1, .channels = 32}, head_dim,
                          kvlab::param_precision::f32, components.make_storage("flat"), {});
  for (std::size_t t = 0; t < 4; ++t) stream.append(std::span(values).subspan(t * head_dim, head_dim), kernels);
  BOOST_TEST(stream.body().layout().bytes() == 64u + 4u); // scale=f32 does not apply to E8M0 scales
  BOOST_TEST(stream.bytes() == 4u * 68u);
  // rht(Q) keeps Q's scale bytes: a power of two per 32 rotated values.
  const auto rotated = components.make_quantizer("rht(mxfp4)");
  BOOST_TEST(rotated.scale_levels().size() == 256u);
  const auto out = kvlab::quantize_dequantize(rotated, {.tokens = 1, .channels = 32}, kvlab::param_precision::f16,
                                              values, tokens, head_dim);
  BOOST_TEST(out.stats.bits_per_element == 4.25);
  BOOST_TEST(out.stats.relative_rmse < 0.2);
}

BOOST_AUTO_TEST_CASE(out_of_range_blocks_and_per_channel_groups_are_refused_by_name) {
  const auto& components = kvlab::builtin_registry();
  std::vector<float> big(16, 1.0f);
  big[3] = 3000.0f;
  BOOST_CHECK_EXCEPTION(kvlab::quantize_dequantize(components.make_quantizer("nvfp4"), {.tokens = 1, .channels = 16},
                                                   kvlab::param_precision::f16, big, 1, 16),
                        kvlab::error, [](const kvlab::error& e) {
                          return std::string(e.what()).find(
                                     "3000 is beyond its range (2688, 2688 times the per-tensor scale 1)") !=
                                 std::string::npos;
                        });
  // nvfp4(2) holds twice as much: 3000 / 2 / 6 = 250 rounds up into UE4M3's top exponent,
  // which saturates at 0x7e (448, stored halved: 224, times S), so 3000 takes 6 * 448.
  BOOST_TEST(fp32_to_ue4m3(250.0f) == 0x7e);
  BOOST_TEST(kvlab::quantize_dequantize(components.make_quantizer("nvfp4(2)"), {.tokens = 1, .channels = 16},
                                        kvlab::param_precision::f16, big, 1, 16)
                 .decoded[3] == 2688.0f);
  // mxfp4 takes no per-tensor scale, nvfp4 no negative one and no second argument
  BOOST_CHECK_THROW(components.make_quantizer("mxfp4(2)"), kvlab::error);
  BOOST_CHECK_THROW(components.make_quantizer("nvfp4(-1)"), kvlab::error);
  BOOST_CHECK_THROW(components.make_quantizer("nvfp4(1,2)"), kvlab::error);
  BOOST_CHECK_EXCEPTION(kvlab::kv_stream(components.make_quantizer("mxfp4"), {.tokens = 32, .channels = 1}, 64,
                                         kvlab::param_precision::f16, components.make_storage("flat"), {}),
                        kvlab::error, [](const kvlab::error& e) {
                          return std::string(e.what()).find("mxfp4 keeps a scale byte per block") != std::string::npos;
                        });
}

BOOST_AUTO_TEST_SUITE_END()
