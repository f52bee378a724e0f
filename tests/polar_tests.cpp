// PolarQuant (arXiv 2502.02617): a block of 2^L channels coded as the quantized angles of a
// recursive polar transform and its radius. Checked here: the code is the paper's transform
// (Definition 1, Algorithm 1) as transcribed in this file; the codebooks are the optimal
// ones for Lemma 2's angle densities; the error on Gaussian vectors is what the angles'
// independence predicts, and falls by a constant factor per bit (Theorem 1's O(log 1/eps)
// bits per coordinate); a rotation first (rht(polar), PolarQuant-R) brings real-looking
// keys with outlier channels to the same error; bytes are counted exactly; and what cannot
// be coded is refused with a message.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>
#include <numbers>
#include <span>
#include <string>
#include <vector>
import kvlab;

#include "estimator_test_helpers.hpp"
#include "recipe_test_helpers.hpp"

namespace {

using kvlab_test::dot;
using kvlab_test::gaussian;
using kvlab_test::mean_sd;

kvlab::kv_stream stream_of(const kvlab::any_quantizer& quantizer, std::size_t head_dim, std::size_t channels) {
  return kvlab::kv_stream(quantizer, {.tokens = 1, .channels = channels}, head_dim, kvlab::param_precision::f16,
                          kvlab::builtin_registry().make_storage("flat"), {});
}

// The paper's transform and reconstruction of one block, transcribed from Algorithm 1:
// r0 = x; at level l, psi_j = atan(r_2j+1 / r_2j) (level 1 in [0, 2pi)), r_j = |(r_2j, r_2j+1)|;
// each angle takes its level's nearest centroid; DeQuant sets r_2j = r_j cos theta_j and
// r_2j+1 = r_j sin theta_j from the top radius (here rounded to fp16, as stored) down.
std::vector<double> paper_reconstruction(std::span<const float> block,
                                         std::span<const kvlab::strategies::polar::angle_codebook> books) {
  std::vector<double> r(block.begin(), block.end());
  std::vector<std::vector<double>> thetas;
  for (const auto& book : books) {
    std::vector<double> next, theta;
    for (std::size_t j = 0; 2 * j < r.size(); ++j) {
      double psi = std::atan2(r[2 * j + 1], r[2 * j]);
      if (psi < 0) psi += 2 * std::numbers::pi;
      double best = INFINITY, chosen = 0.0;
      for (const float c : book.centroids)
        if (std::fabs(psi - c) < best) best = std::fabs(psi - c), chosen = c;
      theta.push_back(chosen);
      next.push_back(std::hypot(r[2 * j], r[2 * j + 1]));
    }
    thetas.push_back(theta);
    r = next;
  }
  r[0] = kvlab::round_to_half(static_cast<float>(r[0]));
  for (std::size_t l = books.size(); l-- > 0;) {
    std::vector<double> below(2 * r.size());
    for (std::size_t j = 0; j < r.size(); ++j) {
      below[2 * j] = r[j] * std::cos(thetas[l][j]);
      below[2 * j + 1] = r[j] * std::sin(thetas[l][j]);
    }
    r = below;
  }
  return r;
}

// Relative error sum |x - x'|^2 / sum |x|^2 of a quantizer over `tokens` rows, through a cache
// stream, and the standard error of that ratio (from per-token errors, delta method).
std::pair<double, double> relative_error(const std::string& quantizer_text, std::span<const float> rows,
                                         std::size_t head_dim) {
  const auto quantizer = kvlab::builtin_registry().make_quantizer(quantizer_text);
  auto stream = stream_of(quantizer, head_dim, head_dim);
  const std::size_t tokens = rows.size() / head_dim;
  std::vector<double> errors, norms;
  std::vector<float> decoded(head_dim);
  for (std::size_t t = 0; t < tokens; ++t) {
    const auto x = rows.subspan(t * head_dim, head_dim);
    stream.append(x, kvlab::active_kernels());
    stream.decode(t, decoded);
    double error = 0.0;
    for (std::size_t c = 0; c < head_dim; ++c) error += (double{decoded[c]} - x[c]) * (double{decoded[c]} - x[c]);
    errors.push_back(error);
    norms.push_back(dot(x, x));
  }
  const auto [error_mean, error_sd] = mean_sd(errors);
  const auto [norm_mean, norm_sd] = mean_sd(norms);
  const double ratio = error_mean / norm_mean, n = static_cast<double>(tokens);
  // The ratio's spread is dominated by the errors' (the norms of d Gaussians vary little).
  const double standard_error = ratio * std::hypot(error_sd / error_mean, norm_sd / norm_mean) / std::sqrt(n);
  return {ratio, standard_error};
}

// Simpson's rule over [a, b], 4096 intervals.
template <class F>
double integral(double a, double b, F&& f) {
  const int n = 4096;
  const double h = (b - a) / n;
  double sum = f(a) + f(b);
  for (int i = 1; i < n; ++i) sum += (i % 2 ? 4 : 2) * f(a + i * h);
  return sum * h / 3;
}
// Lemma 2's density of a level-l angle (l >= 2), unnormalized: sin^(2^(l-1) - 1)(2 psi).
double level_density(std::size_t level, double psi) {
  return std::pow(std::sin(2 * psi), std::ldexp(1.0, static_cast<int>(level) - 1) - 1);
}

} // namespace

BOOST_AUTO_TEST_SUITE(polar)

BOOST_AUTO_TEST_CASE(a_token_decodes_as_the_papers_dequantized_transform) {
  const auto& kernels = kvlab::active_kernels();
  const std::size_t head_dim = 64, tokens = 20, heads = 4;
  const kvlab::parts::polar polar{};
  const kvlab::any_quantizer quantizer(polar);
  BOOST_TEST(quantizer.name() == "polar");
  BOOST_TEST((quantizer.format() == kvlab::element_format::group_code));
  auto stream = stream_of(quantizer, head_dim, head_dim);
  // Per block of 16: 8 x 4 + 4 x 2 + 2 x 2 + 1 x 2 = 46 angle bits and a 16-bit radius.
  BOOST_TEST(stream.body().layout().bytes() == head_dim / 16 * 62 / 8);
  const auto keys = gaussian(tokens * head_dim, 31), queries = gaussian(heads * head_dim, 32);
  for (std::size_t t = 0; t < tokens; ++t) stream.append(std::span(keys).subspan(t * head_dim, head_dim), kernels);
  BOOST_TEST(stream.bytes() == tokens * 31);

  std::vector<float> decoded(tokens * head_dim);
  for (std::size_t t = 0; t < tokens; ++t) {
    stream.decode(t, std::span(decoded).subspan(t * head_dim, head_dim));
    for (std::size_t b = 0; b < head_dim / 16; ++b) {
      const auto expected = paper_reconstruction(std::span(keys).subspan(t * head_dim + b * 16, 16), polar.codebooks());
      for (std::size_t i = 0; i < 16; ++i)
        BOOST_TEST_REQUIRE(std::fabs(decoded[t * head_dim + b * 16 + i] - expected[i]) <=
                               1e-5 * (1 + std::fabs(expected[i])),
                           "token " << t << " block " << b << " channel " << i);
    }
  }
  // Scores and value sums of a GQA group are those of the decoded tokens.
  std::vector<float> scores(heads * tokens), weights(heads * tokens), acc(heads * head_dim, 0.0f);
  for (std::size_t i = 0; i < weights.size(); ++i) weights[i] = 0.05f * static_cast<float>(i % 11);
  stream.dot_all(kernels, queries, heads, scores);
  stream.axpy_all(kernels, weights, heads, acc);
  for (std::size_t h = 0; h < heads; ++h) {
    std::vector<double> sum(head_dim, 0.0);
    for (std::size_t t = 0; t < tokens; ++t) {
      const auto k = std::span<const float>(decoded).subspan(t * head_dim, head_dim);
      const double expected = dot(std::span(queries).subspan(h * head_dim, head_dim), k);
      BOOST_TEST(std::fabs(scores[h * tokens + t] - expected) <= 1e-4 * (1 + std::fabs(expected)));
      for (std::size_t c = 0; c < head_dim; ++c) sum[c] += weights[h * tokens + t] * double{k[c]};
    }
    for (std::size_t c = 0; c < head_dim; ++c)
      BOOST_TEST(std::fabs(acc[h * head_dim + c] - sum[c]) <= 1e-4 * (1 + std::fabs(sum[c])));
  }
}

// Lemma 2: after a random rotation the level-1 angles are uniform and a level-l angle has
// density proportional to sin^(2^(l-1) - 1)(2 psi). Level 1's codebook is the uniform grid;
// each other level's meets Lloyd's two conditions for its density (thresholds halfway, each
// centroid its cell's mean), recomputed here by Simpson's rule.
BOOST_AUTO_TEST_CASE(codebooks_are_optimal_for_lemma_2s_angle_densities) {
  const kvlab::parts::polar polar{};
  const auto books = polar.codebooks();
  BOOST_TEST_REQUIRE(books.size() == 4u);
  BOOST_TEST(books[0].centroids.size() == 16u);
  for (std::size_t i = 0; i < 16; ++i)
    BOOST_TEST(std::fabs(books[0].centroids[i] - (i + 0.5) * std::numbers::pi / 8) < 1e-6);
  for (std::size_t level = 2; level <= 4; ++level) {
    const auto density = [&](double psi) { return level_density(level, psi); };
    const auto& book = books[level - 1];
    BOOST_TEST_REQUIRE(book.centroids.size() == 4u);
    for (std::size_t i = 0; i < 3; ++i)
      BOOST_TEST(std::fabs(book.thresholds[i] - (book.centroids[i] + book.centroids[i + 1]) / 2) < 1e-6);
    for (std::size_t i = 0; i < 4; ++i) {
      const double from = i == 0 ? 0.0 : book.thresholds[i - 1],
                   to = i == 3 ? std::numbers::pi / 2 : book.thresholds[i];
      const double mean = integral(from, to, [&](double p) { return p * density(p); }) / integral(from, to, density);
      BOOST_TEST(std::fabs(book.centroids[i] - mean) < 1e-5, "level " << level << " centroid " << i);
      // Symmetric about pi/4, as the density is.
      BOOST_TEST(std::fabs(book.centroids[i] + book.centroids[3 - i] - std::numbers::pi / 2) < 1e-5);
    }
  }
}

// A block's code, read back by its documented layout (level-1 codes of 4 bits, then levels
// 2-4 of 2 bits, then the fp16 radius), holds each angle's nearest centroid by the
// transform transcribed above; and over 20000 Gaussian blocks each level's codes fall in
// their cells as often as Lemma 2's density says, within 4 standard errors.
BOOST_AUTO_TEST_CASE(codes_are_the_angles_nearest_centroids_at_lemma_2s_frequencies) {
  const kvlab::parts::polar polar{};
  const auto books = polar.codebooks();
  const auto codec = polar.group_codec(16);
  BOOST_TEST_REQUIRE(codec->code_bits() == 62u);
  const std::size_t blocks = 20000, widths[] = {4, 2, 2, 2}, counts[] = {8, 4, 2, 1};
  const auto x = gaussian(blocks * 16, 41);
  std::vector<std::vector<double>> frequency(4);
  for (std::size_t l = 0; l < 4; ++l) frequency[l].assign(books[l].centroids.size(), 0.0);
  std::vector<std::uint8_t> code(8);
  for (std::size_t b = 0; b < blocks; ++b) {
    const auto block = std::span(x).subspan(b * 16, 16);
    codec->encode(block, code, 0);
    std::vector<double> r(block.begin(), block.end());
    std::size_t at = 0;
    for (std::size_t l = 0; l < 4; ++l) {
      std::vector<double> next;
      for (std::size_t j = 0; j < counts[l]; ++j, at += widths[l]) {
        const std::uint32_t stored = kvlab::read_bits(code, at, static_cast<unsigned>(widths[l]));
        frequency[l][stored] += 1.0;
        double psi = std::atan2(r[2 * j + 1], r[2 * j]);
        if (psi < 0) psi += 2 * std::numbers::pi;
        std::uint32_t nearest = 0;
        for (std::uint32_t k = 1; k < books[l].centroids.size(); ++k)
          if (std::fabs(psi - books[l].centroids[k]) < std::fabs(psi - books[l].centroids[nearest])) nearest = k;
        BOOST_TEST_REQUIRE(stored == nearest, "block " << b << " level " << l + 1 << " angle " << j);
        next.push_back(std::hypot(r[2 * j], r[2 * j + 1]));
      }
      r = next;
    }
    BOOST_TEST_REQUIRE(kvlab::read_bits(code, 46, 16) == kvlab::float_to_half_bits(static_cast<float>(r[0])));
  }
  for (std::size_t l = 0; l < 4; ++l) {
    const auto& book = books[l];
    const double n = static_cast<double>(blocks * counts[l]);
    const double total =
        l == 0 ? 1.0 : integral(0.0, std::numbers::pi / 2, [&](double p) { return level_density(l + 1, p); });
    for (std::size_t k = 0; k < book.centroids.size(); ++k) {
      const double from = k == 0 ? 0.0 : book.thresholds[k - 1];
      const double to =
          k + 1 == book.centroids.size() ? (l == 0 ? 2 * std::numbers::pi : std::numbers::pi / 2) : book.thresholds[k];
      const double expected =
          l == 0 ? 1.0 / 16 : integral(from, to, [&](double p) { return level_density(l + 1, p); }) / total;
      const double observed = frequency[l][k] / n;
      BOOST_TEST(std::fabs(observed - expected) < 4 * std::sqrt(expected * (1 - expected) / n),
                 "level " << l + 1 << " code " << k << ": " << observed << " against " << expected);
    }
  }
}

// The paper's distortion claim at its recommended budget: for Gaussian x, the relative
// error E|x - x'|^2 / E|x|^2 of polar(4,2,2,2) (3.875 bits per coordinate) is the value the
// angles' independence predicts, 2 (1 - prod_l E[cos(angle error_l)]), within 4 standard
// errors; and one more bit at every level divides it by at least 3 (Theorem 1: O(log 1/eps)
// bits per coordinate; 4 per bit in the limit).
BOOST_AUTO_TEST_CASE(gaussian_error_is_the_predicted_one_and_falls_geometrically_with_bits) {
  const std::size_t head_dim = 128, tokens = 4000;
  const auto rows = gaussian(tokens * head_dim, 51);
  double previous = 0.0;
  for (const std::string text : {"polar", "polar(5,3,3,3)", "polar(6,4,4,4)"}) {
    BOOST_TEST_CONTEXT(text) {
      const auto quantizer = kvlab::builtin_registry().make_quantizer(text);
      const auto typed = text == "polar"            ? kvlab::parts::polar{}
                         : text == "polar(5,3,3,3)" ? kvlab::parts::polar{{5, 3, 3, 3}}
                                                    : kvlab::parts::polar{{6, 4, 4, 4}};
      BOOST_TEST(typed.name() == quantizer.name());
      const double predicted = typed.gaussian_relative_mse();
      const auto [measured, standard_error] = relative_error(text, rows, head_dim);
      BOOST_TEST(std::fabs(measured - predicted) < 4 * standard_error + 1e-6,
                 "measured " << measured << " +- " << standard_error << ", predicted " << predicted);
      if (text == "polar") BOOST_TEST((predicted > 0.02 && predicted < 0.05), "predicted " << predicted);
      if (previous > 0.0) BOOST_TEST(measured < previous / 3, "measured " << measured << " after " << previous);
      previous = measured;
    }
  }
}

// Keys with outlier channels (a few channels 20x the rest, as real keys have) are far from
// Gaussian: polar alone codes them worse than its Gaussian prediction, rht(polar) (the
// paper's PolarQuant-R) brings them back to it.
BOOST_AUTO_TEST_CASE(a_rotation_first_brings_outlier_keys_to_the_gaussian_error) {
  const std::size_t head_dim = 128, tokens = 2000;
  auto rows = gaussian(tokens * head_dim, 61);
  for (std::size_t t = 0; t < tokens; ++t)
    for (const std::size_t c : {3u, 40u, 77u, 101u}) rows[t * head_dim + c] *= 20.0f;
  const double predicted = kvlab::parts::polar{}.gaussian_relative_mse();
  const auto [plain, plain_se] = relative_error("polar", rows, head_dim);
  const auto [rotated, rotated_se] = relative_error("rht(polar)", rows, head_dim);
  BOOST_TEST(plain > 1.5 * predicted, "polar " << plain << ", predicted " << predicted);
  BOOST_TEST(std::fabs(rotated - predicted) < 0.1 * predicted, "rht(polar) " << rotated << " +- " << rotated_se);
}

BOOST_AUTO_TEST_CASE(the_codec_counts_the_papers_bits_and_decodes_as_the_cache) {
  const std::size_t head_dim = 128, tokens = 64;
  const auto values = gaussian(tokens * head_dim, 71);
  for (const std::string text : {"polar", "rht(polar)"}) {
    BOOST_TEST_CONTEXT(text) {
      const auto quantizer = kvlab::builtin_registry().make_quantizer(text);
      const auto out = kvlab::quantize_dequantize(quantizer, {.tokens = 1, .channels = 32}, kvlab::param_precision::f16,
                                                  values, tokens, head_dim);
      BOOST_TEST(out.stats.bits_per_element == 3.875);
      auto stream = stream_of(quantizer, head_dim, 32);
      std::vector<float> decoded(head_dim);
      for (std::size_t t = 0; t < tokens; ++t) {
        stream.append(std::span(values).subspan(t * head_dim, head_dim), kvlab::active_kernels());
        stream.decode(t, decoded);
        for (std::size_t c = 0; c < head_dim; ++c) BOOST_TEST_REQUIRE(decoded[c] == out.decoded[t * head_dim + c]);
      }
    }
  }
  // polar(3,2,2): blocks of 8, 4 x 3 + 2 x 2 + 2 + 16 = 34 bits.
  const auto small =
      kvlab::quantize_dequantize(kvlab::builtin_registry().make_quantizer("polar(3,2,2)"),
                                 {.tokens = 1, .channels = 128}, kvlab::param_precision::f16, values, tokens, head_dim);
  BOOST_TEST(small.stats.bits_per_element == 34.0 / 8);
}

BOOST_AUTO_TEST_CASE(what_cannot_be_coded_is_refused_with_a_message) {
  const auto& components = kvlab::builtin_registry();
  kvlab_test::expect_cache_refused("k=polar@channel(32)", "groups spanning tokens");
  kvlab_test::expect_cache_refused("k=polar(2,2,2,2,2,2)@group(32)", "codes blocks of 64 channels");
  kvlab_test::expect_cache_refused("k=polar(9)@token", "bits of level 1");
  kvlab_test::expect_cache_refused("k=polar(2,2,2,2,2,2,2,2)@token", "1 to 7 levels");
  BOOST_CHECK_THROW(kvlab::parts::polar(std::vector<unsigned>{}), kvlab::error);

  // A block whose norm is beyond the fp16 radius, and a value that is not finite.
  auto stream = stream_of(components.make_quantizer("polar"), 16, 16);
  std::vector<float> huge(16, 0.0f), nan(16, 1.0f);
  huge[3] = 70000.0f;
  nan[5] = NAN;
  try {
    stream.append(huge, kvlab::active_kernels());
    BOOST_TEST(false, "accepted");
  } catch (const kvlab::error& e) {
    BOOST_TEST(std::string(e.what()).find("beyond the fp16 range") != std::string::npos, e.what());
  }
  BOOST_CHECK_THROW(stream.append(nan, kvlab::active_kernels()), kvlab::error);
  BOOST_TEST(stream.tokens() == 0u);
  // Zero vectors code and decode to zero.
  const std::vector<float> zero(16, 0.0f);
  stream.append(zero, kvlab::active_kernels());
  std::vector<float> decoded(16, 1.0f);
  stream.decode(0, decoded);
  for (const float v : decoded) BOOST_TEST(v == 0.0f);
}

BOOST_AUTO_TEST_SUITE_END()
