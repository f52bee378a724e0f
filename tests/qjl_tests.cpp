// QJL (arXiv 2406.03482, sec. 3): keys stored as sign sketches, scores by the paper's
// unbiased estimator. The estimator is checked against a transcription written here, its
// mean error and variance against the paper's expressions over fresh sketches, and the
// recipes that cannot hold a sketch are refused.
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

// The paper's estimator, from its definition: S's row i is the first d draws of
// random_stream(seed, 2^56 + i); score = sqrt(pi/2)/m * |k| * sum_i (S_i . q) sign(S_i . k).
double paper_estimate(std::span<const float> q, std::span<const float> k, std::size_t m, std::uint64_t seed) {
  double sum = 0.0;
  for (std::size_t i = 0; i < m; ++i) {
    kvlab::random_stream draws(seed, (std::uint64_t{1} << 56) + i);
    double sq = 0.0, sk = 0.0;
    for (std::size_t j = 0; j < q.size(); ++j) {
      const auto s = static_cast<float>(draws.normal());
      sq += double{s} * q[j];
      sk += double{s} * k[j];
    }
    sum += sk >= 0.0 ? sq : -sq;
  }
  return std::sqrt(std::numbers::pi / 2.0) / static_cast<double>(m) * std::sqrt(dot(k, k)) * sum;
}

kvlab::kv_stream key_stream(const kvlab::any_quantizer& quantizer, std::size_t head_dim,
                            kvlab::param_precision precision = kvlab::param_precision::f32) {
  const std::size_t m = quantizer.stored_dim(head_dim);
  return kvlab::kv_stream(quantizer, {.tokens = 1, .channels = m}, head_dim, precision,
                          kvlab::builtin_registry().make_storage("flat"), {});
}

enum class pair_kind { independent, parallel, orthogonal };

// Over `trials` fresh (q, k, sketch seed) triples, u = (score - q.k) / sqrt(V), V the
// paper's variance ((pi/2)|q|^2|k|^2 - (q.k)^2) / m: one score each, through a real stream.
std::vector<double> standardized_errors(const std::string& quantizer_text, std::size_t head_dim, std::size_t m,
                                        pair_kind kind, std::size_t trials) {
  const auto& kernels = kvlab::active_kernels();
  std::vector<double> u;
  for (std::size_t trial = 0; trial < trials; ++trial) {
    auto q = gaussian(head_dim, 1000 + trial, 1), k = gaussian(head_dim, 1000 + trial, 2);
    if (kind == pair_kind::parallel) k = q;
    if (kind == pair_kind::orthogonal) { // k minus its component along q
      const double along = dot(q, k) / dot(q, q);
      for (std::size_t c = 0; c < head_dim; ++c) k[c] -= static_cast<float>(along * q[c]);
    }
    const std::string text = quantizer_text == "qjl" ? "qjl(" + std::to_string(m) + "," + std::to_string(trial) + ")"
                                                     : "rht(" + quantizer_text + "," + std::to_string(trial) + ")";
    auto stream = key_stream(kvlab::builtin_registry().make_quantizer(text), head_dim);
    stream.append(k, kernels);
    float score = 0.0f;
    stream.dot_all(kernels, q, 1, std::span(&score, 1));
    const double exact = dot(q, k);
    const double variance = (std::numbers::pi / 2.0 * dot(q, q) * dot(k, k) - exact * exact) / static_cast<double>(m);
    u.push_back((score - exact) / std::sqrt(variance));
  }
  return u;
}

} // namespace

BOOST_AUTO_TEST_SUITE(qjl)

BOOST_AUTO_TEST_CASE(scores_are_the_papers_estimator_read_from_the_projected_query) {
  const auto& kernels = kvlab::active_kernels();
  // head_dim and m not multiples of 8, four query heads of a GQA group, a few tokens.
  const std::size_t head_dim = 72, m = 100, tokens = 9, heads = 4;
  const auto quantizer = kvlab::builtin_registry().make_quantizer("qjl(100,5)");
  BOOST_TEST(quantizer.stored_dim(head_dim) == m);
  BOOST_TEST(!quantizer.invertible());
  auto stream = key_stream(quantizer, head_dim);
  const auto keys = gaussian(tokens * head_dim, 11), queries = gaussian(heads * head_dim, 12);
  for (std::size_t t = 0; t < tokens; ++t) stream.append(std::span(keys).subspan(t * head_dim, head_dim), kernels);
  // m sign bits and the norm's f32 scale per key.
  BOOST_TEST(stream.body().layout().bytes() == (m + 7) / 8 + 4);
  BOOST_TEST(stream.bytes() == tokens * ((m + 7) / 8 + 4));

  std::vector<float> scores(heads * tokens), decoded(head_dim);
  stream.dot_all(kernels, queries, heads, scores);
  for (std::size_t h = 0; h < heads; ++h) {
    const auto q = std::span(queries).subspan(h * head_dim, head_dim);
    for (std::size_t t = 0; t < tokens; ++t) {
      const auto k = std::span(keys).subspan(t * head_dim, head_dim);
      const double expected = paper_estimate(q, k, m, 5), score = scores[h * tokens + t];
      BOOST_TEST(std::fabs(score - expected) <= 1e-4 * (1.0 + std::fabs(expected)), "head " << h << " token " << t);
      // The decoded key is S^T c sign(S k): its product with q is the same estimate.
      stream.decode(t, decoded);
      BOOST_TEST(std::fabs(dot(q, decoded) - score) <= 1e-4 * (1.0 + std::fabs(score)));
    }
  }
  // Value sums through the adjoint equal the sum of decoded keys.
  std::vector<float> weights(heads * tokens), acc(heads * head_dim, 0.0f);
  for (std::size_t i = 0; i < weights.size(); ++i) weights[i] = 0.1f * static_cast<float>(i % 7);
  stream.axpy_all(kernels, weights, heads, acc);
  for (std::size_t h = 0; h < heads; ++h) {
    std::vector<double> expected(head_dim, 0.0);
    for (std::size_t t = 0; t < tokens; ++t) {
      stream.decode(t, decoded);
      for (std::size_t c = 0; c < head_dim; ++c) expected[c] += weights[h * tokens + t] * double{decoded[c]};
    }
    for (std::size_t c = 0; c < head_dim; ++c)
      BOOST_TEST(std::fabs(acc[h * head_dim + c] - expected[c]) <= 1e-4 * (1.0 + std::fabs(expected[c])));
  }
}

// The paper's claim: E[score] = q.k, Var = ((pi/2)|q|^2|k|^2 - (q.k)^2)/m. With u the
// standardized error, mean u = 0 and mean u^2 = 1, each within 4 standard errors.
BOOST_AUTO_TEST_CASE(the_estimator_is_unbiased_with_the_papers_variance) {
  struct setting {
    std::size_t head_dim, m;
    pair_kind kind;
    std::size_t trials;
  };
  for (const auto& s :
       {setting{64, 64, pair_kind::independent, 3000}, setting{64, 64, pair_kind::parallel, 3000},
        setting{64, 32, pair_kind::orthogonal, 3000}, setting{128, 256, pair_kind::independent, 1500}}) {
    BOOST_TEST_CONTEXT("head_dim " << s.head_dim << " m " << s.m << " kind " << static_cast<int>(s.kind)) {
      const auto u = standardized_errors("qjl", s.head_dim, s.m, s.kind, s.trials);
      std::vector<double> squares;
      for (const double v : u) squares.push_back(v * v);
      const auto [mean, sd] = mean_sd(u);
      const auto [mean_square, sd_square] = mean_sd(squares);
      const double n = static_cast<double>(u.size());
      BOOST_TEST(std::fabs(mean) < 4.0 * sd / std::sqrt(n), "mean " << mean << " sd " << sd);
      BOOST_TEST(std::fabs(mean_square - 1.0) < 4.0 * sd_square / std::sqrt(n),
                 "mean u^2 " << mean_square << " sd " << sd_square);
    }
  }
}

// The same check fails for a biased quantizer: rht(lloyd1) keeps 1 bit per channel too, but
// shrinks q.k (its scale is the rotated key's RMS, not the estimator's).
BOOST_AUTO_TEST_CASE(the_unbiasedness_check_fails_for_a_biased_one_bit_quantizer) {
  const auto u = standardized_errors("lloyd1", 64, 64, pair_kind::parallel, 1000);
  const auto [mean, sd] = mean_sd(u);
  BOOST_TEST(std::fabs(mean) > 4.0 * sd / std::sqrt(static_cast<double>(u.size())), "mean " << mean << " sd " << sd);
}

BOOST_AUTO_TEST_CASE(the_codec_stores_the_sketch_and_counts_its_bits) {
  const std::size_t head_dim = 64, m = 128, tokens = 256;
  const auto values = gaussian(tokens * head_dim, 21);
  const auto quantizer = kvlab::builtin_registry().make_quantizer("qjl(128,3)");
  const auto out = kvlab::quantize_dequantize(quantizer, {.tokens = 1, .channels = m}, kvlab::param_precision::f16,
                                              values, tokens, head_dim);
  // m sign bits and an fp16 norm per token, over head_dim values.
  BOOST_TEST(out.stats.bits_per_element == (m + 16.0) / head_dim);
  BOOST_TEST(out.stats.groups == tokens);
  // The codec decodes what a cache stream decodes (the same sketch, the same adjoint).
  auto stream = key_stream(quantizer, head_dim, kvlab::param_precision::f16);
  std::vector<float> decoded(head_dim);
  for (std::size_t t = 0; t < tokens; ++t) {
    stream.append(std::span(values).subspan(t * head_dim, head_dim), kvlab::active_kernels());
    stream.decode(t, decoded);
    for (std::size_t c = 0; c < head_dim; ++c) BOOST_TEST_REQUIRE(decoded[c] == out.decoded[t * head_dim + c]);
  }
  // Groups must not span tokens: one scale is one key's norm.
  BOOST_CHECK_THROW(kvlab::quantize_dequantize(quantizer, {.tokens = 32, .channels = m}, kvlab::param_precision::f16,
                                               values, tokens, head_dim),
                    kvlab::error);
  BOOST_CHECK_THROW(kvlab::quantize_dequantize(quantizer, {.tokens = 1, .channels = head_dim + 1},
                                               kvlab::param_precision::f16, values, tokens, head_dim),
                    kvlab::error);
}

BOOST_AUTO_TEST_CASE(recipes_refuse_a_sketch_where_tokens_are_decoded) {
  const auto& components = kvlab::builtin_registry();
  kvlab_test::expect_cache_refused("k=f16@token,v=qjl@token", "v=qjl is a sketch");
  kvlab_test::expect_cache_refused("k=qjl@token,v=int8@token,evict=h2o(0.1,0.1),demote=qjl@token",
                                   "demote=qjl is a sketch");
  kvlab_test::expect_cache_refused("k=rht(qjl)@token", "qjl is a sketch");
  kvlab_test::expect_cache_refused("k=qjl@channel(32)", "needs per-token groups");
  kvlab_test::expect_cache_refused("k=qjl(65537)@token", "sketch size M");
  kvlab_test::expect_cache_refused("k=qjl@token,v=int8@token,evict=h2o(0.1,0.1),demote=int4@token",
                                   "re-encodes decoded keys");
  BOOST_TEST(kvlab::canonical_name(kvlab::parse_recipe("k=qjl(0)@token", components)) ==
             kvlab::canonical_name(kvlab::parse_recipe("k=qjl@token", components)));
  const auto recipe = kvlab::parse_recipe("k=qjl(256,9)@token,v=int4@group(32)", components);
  BOOST_TEST(kvlab::canonical_name(kvlab::parse_recipe(kvlab::canonical_name(recipe), components)) ==
             kvlab::canonical_name(recipe));
  BOOST_TEST(kvlab::canonical_name(recipe).find("k=qjl(256,9)@token") != std::string::npos);
  // A key is 256 sign bits and an fp16 norm, whatever head_dim.
  kvlab::kv_cache cache(recipe, 1, 1, 128);
  BOOST_TEST(cache.keys(0, 0).body_token_bytes() == 34.0);
}

// Through the evaluator: the logits' mean shift (ip_bias) is small next to their error
// (ip_rmse), and the key bits are counted exactly. (A shrinking quantizer's mean shift
// averages out on zero-mean data too; the stream-level test above is the unbiasedness check.)
BOOST_AUTO_TEST_CASE(evaluated_logits_of_qjl_keys_are_unbiased) {
  const auto data = kvlab::load_data("synthetic:gaussian(L=1,H=4,Q=8,T=512,D=64,seed=4)");
  const auto r = kvlab::evaluate(kvlab::parse_recipe("k=qjl(256)@token,v=f16@token", kvlab::builtin_registry()), data);
  const double bias = r.metric("ip_bias").mean, rmse = r.metric("ip_rmse").mean;
  BOOST_TEST(std::fabs(bias) < 0.05 * rmse, "ip_bias " << bias << " ip_rmse " << rmse);
  BOOST_TEST(r.bits_k == (256.0 + 16.0) / 64.0);
}

BOOST_AUTO_TEST_SUITE_END()
