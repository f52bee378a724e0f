// residual(P,R) and TurboQuant's inner-product variant (arXiv 2504.19874, sec. 3.2):
// residual(rht(lloyd<b-1>),qjl) is unbiased, its distortion on unit vectors is within the
// paper's bound for b = 1..4, and a stream's two tiers hold the same tokens through
// windows, erasure, take-backs and refusals.
#include <boost/test/unit_test.hpp>

#include <algorithm>
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

kvlab::kv_stream key_stream(const std::string& quantizer, std::size_t head_dim, kvlab::stream_tiers tiers = {}) {
  const auto q = kvlab::builtin_registry().make_quantizer(quantizer);
  return kvlab::kv_stream(q, {.tokens = 1, .channels = q.stored_dim(head_dim)}, head_dim, kvlab::param_precision::f32,
                          kvlab::builtin_registry().make_storage("flat"), tiers);
}

float score_of(const kvlab::kv_stream& stream, std::span<const float> query) {
  float score = 0.0f;
  stream.dot_all(kvlab::active_kernels(), query, 1, std::span(&score, 1));
  return score;
}

struct standardized {
  std::vector<double> prod, primary; // (score - q.k) / sqrt(V_r) of the sum, and of P alone
};

// Fresh (q, k = q, seeds) per trial: b-bit TurboQuant-prod and its (b-1)-bit MSE part,
// both standardized by the QJL variance of the residual r that P leaves,
// V_r = ((pi/2)|q|^2|r|^2 - (q.r)^2) / d.
standardized parallel_pair_errors(unsigned bits, std::size_t head_dim, std::size_t trials) {
  standardized out;
  for (std::size_t trial = 0; trial < trials; ++trial) {
    const auto q = gaussian(head_dim, 500 + trial);
    const std::string seed = std::to_string(trial);
    const std::string primary = "rht(lloyd" + std::to_string(bits - 1) + "," + seed + ")";
    auto prod = key_stream("residual(" + primary + ",qjl(0," + seed + "))", head_dim);
    auto alone = key_stream(primary, head_dim);
    prod.append(q, kvlab::active_kernels());
    alone.append(q, kvlab::active_kernels());
    std::vector<float> r(head_dim);
    alone.decode(0, r);
    for (std::size_t c = 0; c < head_dim; ++c) r[c] = q[c] - r[c];
    const double exact = dot(q, q), qr = dot(q, r);
    const double sd = std::sqrt((std::numbers::pi / 2.0 * dot(q, q) * dot(r, r) - qr * qr) / head_dim);
    out.prod.push_back((score_of(prod, q) - exact) / sd);
    out.primary.push_back((score_of(alone, q) - exact) / sd);
  }
  return out;
}

} // namespace

BOOST_AUTO_TEST_SUITE(residual_quantizers)

// Unbiased at b = 2 and 3 bits, with the QJL variance of the residual; the (b-1)-bit MSE
// quantizer alone is biased (it shrinks q.k), which the same check detects.
BOOST_AUTO_TEST_CASE(turboquant_prod_scores_are_unbiased_where_its_mse_part_is_not) {
  for (const unsigned bits : {2u, 3u}) {
    BOOST_TEST_CONTEXT("b = " << bits) {
      const auto u = parallel_pair_errors(bits, 64, 2000);
      const double n = static_cast<double>(u.prod.size());
      const auto [mean, sd] = mean_sd(u.prod);
      BOOST_TEST(std::fabs(mean) < 4.0 * sd / std::sqrt(n), "prod mean " << mean << " sd " << sd);
      std::vector<double> squares;
      for (const double v : u.prod) squares.push_back(v * v);
      const auto [mean_square, sd_square] = mean_sd(squares);
      BOOST_TEST(std::fabs(mean_square - 1.0) < 4.0 * sd_square / std::sqrt(n), "mean u^2 " << mean_square);
      const auto [primary_mean, primary_sd] = mean_sd(u.primary);
      BOOST_TEST(std::fabs(primary_mean) > 4.0 * primary_sd / std::sqrt(n), "mse-only mean " << primary_mean);
    }
  }
}

// Theorem 2 of the paper: for unit x and any y, D_prod = E[(y.x - y.x_hat)^2] is at most
// sqrt(3) pi^2 |y|^2 / d * 4^-b, with b = 1 the QJL sketch alone. Fresh sketches and
// rotations per vector; the codec decodes what a cache stream decodes.
BOOST_AUTO_TEST_CASE(turboquant_prod_distortion_on_unit_vectors_is_within_the_papers_bound) {
  const std::size_t head_dim = 128, trials = 800;
  for (unsigned bits = 1; bits <= 4; ++bits) {
    double squared_error = 0.0;
    for (std::size_t trial = 0; trial < trials; ++trial) {
      auto x = gaussian(head_dim, 900 + trial, 1), y = gaussian(head_dim, 900 + trial, 2);
      for (auto* v : {&x, &y}) {
        const double norm = std::sqrt(dot(*v, *v));
        for (auto& c : *v) c = static_cast<float>(c / norm);
      }
      const std::string seed = std::to_string(trial), sketch = "qjl(0," + seed + ")";
      const std::string name =
          bits == 1 ? sketch : "residual(rht(lloyd" + std::to_string(bits - 1) + "," + seed + ")," + sketch + ")";
      const auto quantizer = kvlab::builtin_registry().make_quantizer(name);
      const auto out = kvlab::quantize_dequantize(quantizer, {.tokens = 1, .channels = head_dim},
                                                  kvlab::param_precision::f32, x, 1, head_dim);
      const double error = dot(y, out.decoded) - dot(y, x);
      squared_error += error * error;
      if (trial == 0) BOOST_TEST(out.stats.bits_per_element == bits + (bits == 1 ? 32.0 : 64.0) / head_dim);
    }
    const double scaled = squared_error / trials * head_dim; // d * D_prod
    const double bound = std::sqrt(3.0) * std::numbers::pi * std::numbers::pi / std::pow(4.0, bits);
    BOOST_TEST_MESSAGE("b = " << bits << ": d * D_prod " << scaled << ", the bound " << bound);
    BOOST_TEST(scaled <= bound, "b = " << bits << ": d * D_prod " << scaled << " vs the bound " << bound);
  }
}

// Both tiers hold the same tokens: per-token encoding means erasing tokens leaves the
// others' decodes as they were; a take-back returns both tiers' bytes.
BOOST_AUTO_TEST_CASE(both_tiers_follow_windows_erasure_and_take_backs) {
  const std::size_t head_dim = 64, tokens = 30;
  const auto& kernels = kvlab::active_kernels();
  auto stream = key_stream("residual(int4,int2)", head_dim, {.sinks = 2, .residual = 5});
  const auto rows = gaussian(tokens * head_dim, 77);
  for (std::size_t t = 0; t < 2; ++t) stream.append(std::span(rows).subspan(t * head_dim, head_dim), kernels);
  stream.append_tokens(std::span(rows).subspan(2 * head_dim), tokens - 2, kernels);
  BOOST_TEST(stream.tokens() == tokens);
  BOOST_TEST(stream.body_tokens() == tokens - 2 - 5);
  // int4 then int2 per token, f32 scales: 32 + 4 and 16 + 4 bytes.
  BOOST_TEST(stream.body_token_bytes() == 56.0);
  BOOST_TEST(stream.bytes() == (tokens - 7) * 56 + 7 * 2 * head_dim);

  std::vector<float> before(tokens * head_dim), sum_of_parts(head_dim);
  stream.decode(0, tokens, before);
  // The decode is P's plus R's: better than P alone.
  auto alone = key_stream("int4", head_dim);
  double error_sum = 0.0, error_alone = 0.0;
  for (std::size_t t = 2; t < tokens - 5; ++t) {
    alone.append(std::span(rows).subspan(t * head_dim, head_dim), kernels);
    alone.decode(alone.tokens() - 1, sum_of_parts);
    for (std::size_t c = 0; c < head_dim; ++c) {
      error_sum += std::pow(before[t * head_dim + c] - rows[t * head_dim + c], 2);
      error_alone += std::pow(sum_of_parts[c] - rows[t * head_dim + c], 2);
    }
  }
  BOOST_TEST(error_sum < 0.4 * error_alone);

  const std::vector<std::size_t> erased{0, 3, 4, 10, 26};
  stream.erase(erased);
  BOOST_TEST(stream.tokens() == tokens - erased.size());
  std::vector<float> after((tokens - erased.size()) * head_dim);
  stream.decode(0, tokens - erased.size(), after);
  std::size_t kept = 0;
  for (std::size_t t = 0; t < tokens; ++t) {
    if (std::ranges::find(erased, t) != erased.end()) continue;
    for (std::size_t c = 0; c < head_dim; ++c)
      BOOST_TEST_REQUIRE(after[kept * head_dim + c] == before[t * head_dim + c], "token " << t);
    ++kept;
  }

  const std::size_t bytes = stream.bytes(), held = stream.tokens();
  const auto more = gaussian(12 * head_dim, 78);
  stream.append_tokens(more, 12, kernels);
  stream.take_back_newest(12);
  BOOST_TEST(stream.tokens() == held);
  BOOST_TEST(stream.bytes() == bytes);
}

// A token the residual tier refuses (an int8 scale past fp16 for a bf16 rounding error of
// 1e30) stops the run there in both tiers; the tokens before it stay.
BOOST_AUTO_TEST_CASE(a_token_the_residual_refuses_leaves_both_tiers_at_the_tokens_before_it) {
  const std::size_t head_dim = 8;
  const auto q = kvlab::builtin_registry().make_quantizer("residual(bf16,int8)");
  kvlab::kv_stream stream(q, {.tokens = 1, .channels = head_dim}, head_dim, kvlab::param_precision::f16,
                          kvlab::builtin_registry().make_storage("flat"), {});
  auto rows = gaussian(4 * head_dim, 5);
  rows[2 * head_dim + 3] = 1.2345e30f;
  BOOST_CHECK_THROW(stream.append_tokens(rows, 4, kvlab::active_kernels()), kvlab::error);
  BOOST_TEST(stream.tokens() == 2u);
  BOOST_TEST(stream.body_tokens() == 2u);
  BOOST_TEST(stream.bytes() == 2 * (2 * head_dim + head_dim + 2)); // bf16 row, int8 codes and an fp16 scale
  std::vector<float> decoded(head_dim);
  stream.decode(1, decoded);
  for (std::size_t c = 0; c < head_dim; ++c)
    BOOST_TEST(std::fabs(decoded[c] - rows[head_dim + c]) < 1e-3f * (1.0f + std::fabs(rows[head_dim + c])));
}

BOOST_AUTO_TEST_CASE(recipes_of_residual_quantizers) {
  const auto& components = kvlab::builtin_registry();
  kvlab_test::expect_cache_refused("k=int8@token,v=residual(rht(lloyd2),qjl)@token", "is a sketch");
  kvlab_test::expect_cache_refused("k=rht(residual(int4,int2))@token", "rotate inside the residual");
  kvlab_test::expect_cache_refused("k=residual(int4,int2)@channel(32)", "needs per-token groups");
  kvlab_test::expect_cache_refused("k=residual(int4)@token", "takes 2 arguments");
  kvlab_test::expect_cache_refused("k=residual(residual(int4,int2),int2)@token", "a residual of its own");
  const auto recipe =
      kvlab::parse_recipe("k=residual(rht(lloyd2),qjl(128))@token,v=residual(int4,int2)@group(32)", components);
  BOOST_TEST(kvlab::canonical_name(kvlab::parse_recipe(kvlab::canonical_name(recipe), components)) ==
             kvlab::canonical_name(recipe));
  // Keys: 64 x 2 bits and an fp16 RMS, then 128 sign bits and an fp16 norm.
  kvlab::kv_cache cache(recipe, 1, 1, 64);
  BOOST_TEST(cache.keys(0, 0).body_token_bytes() == 16.0 + 2.0 + 16.0 + 2.0);
  // Values: int4 with two fp16 scales per token, then int2 with one.
  BOOST_TEST(cache.values(0, 0).body_token_bytes() == 32.0 + 4.0 + 16.0 + 2.0);
}

BOOST_AUTO_TEST_SUITE_END()
