// synthetic:llm data: shapes, determinism, each knob's measurable effect, bad knobs, and
// the KIVI finding (per-channel 2-bit key quantization beats per-token on these keys).
#include "test_files.hpp"

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <functional>
#include <numbers>
#include <span>
#include <string>
#include <utility>
#include <vector>
import kvlab;

namespace {

// synthetic:llm(args) through the generator's own entry point.
kvlab::kv_data llm(const std::string& args) {
  const std::string spec = "synthetic:llm(" + args + ")";
  return kvlab::synthetic_llm(kvlab::parse_term("llm(" + args + ")", spec), spec);
}

std::string llm_error(const std::string& args) {
  return kvlab_test::message_of<kvlab::error>([&] { llm(args); });
}

bool bit_identical(const kvlab::kv_tensor& a, const kvlab::kv_tensor& b) {
  return a.shape() == b.shape() &&
         std::memcmp(a.values().data(), b.values().data(), a.values().size() * sizeof(float)) == 0;
}

// Exact softmax attention weights of one query head at step t over keys 0..t, with the
// logits q.k / sqrt(D) in double precision.
std::vector<double> attention_weights(const kvlab::kv_data& d, std::size_t layer, std::size_t q_head, std::size_t t) {
  const std::size_t kv_head = q_head / (d.q_heads() / d.kv_heads());
  const auto q = d.queries.row(layer, q_head, t);
  std::vector<double> logits(t + 1);
  for (std::size_t s = 0; s <= t; ++s) {
    const auto k = d.keys.row(layer, kv_head, s);
    double dot = 0;
    for (std::size_t c = 0; c < d.head_dim(); ++c) dot += double{q[c]} * k[c];
    logits[s] = dot / std::sqrt(static_cast<double>(d.head_dim()));
  }
  const double top = *std::ranges::max_element(logits);
  double sum = 0;
  for (double& x : logits) sum += (x = std::exp(x - top));
  for (double& x : logits) x /= sum;
  return logits;
}

// Attention mass on the tokens [first, last] relative to their uniform share, averaged over
// layers, query heads and the last 32 decode steps.
double mass_over_uniform_share(const kvlab::kv_data& d, std::size_t first_back, std::size_t count, bool from_start) {
  double ratio = 0;
  std::size_t cases = 0;
  for (std::size_t layer = 0; layer < d.layers(); ++layer)
    for (std::size_t h = 0; h < d.q_heads(); ++h)
      for (std::size_t t = d.tokens() - 32; t < d.tokens(); ++t) {
        const auto w = attention_weights(d, layer, h, t);
        const std::size_t first = from_start ? 0 : t + 1 - first_back;
        double mass = 0;
        for (std::size_t s = first; s < first + count; ++s) mass += w[s];
        ratio += mass / (static_cast<double>(count) / static_cast<double>(t + 1));
        ++cases;
      }
  return ratio / static_cast<double>(cases);
}

// Root mean square of each key channel of one (layer, KV head), over all tokens.
std::vector<double> channel_rms(const kvlab::kv_data& d, std::size_t layer, std::size_t kv_head) {
  std::vector<double> rms(d.head_dim());
  for (std::size_t t = 0; t < d.tokens(); ++t) {
    const auto row = d.keys.row(layer, kv_head, t);
    for (std::size_t c = 0; c < d.head_dim(); ++c) rms[c] += double{row[c]} * row[c];
  }
  for (double& x : rms) x = std::sqrt(x / static_cast<double>(d.tokens()));
  return rms;
}

// Indices of the `count` largest entries.
std::vector<std::size_t> largest(const std::vector<double>& x, std::size_t count) {
  std::vector<std::size_t> order(x.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::ranges::sort(order, [&](std::size_t a, std::size_t b) { return x[a] > x[b]; });
  order.resize(count);
  std::ranges::sort(order);
  return order;
}

double kurtosis(std::span<const float> x) {
  double mean = 0;
  for (const float v : x) mean += v;
  mean /= static_cast<double>(x.size());
  double m2 = 0, m4 = 0;
  for (const float v : x) {
    const double d = v - mean;
    m2 += d * d;
    m4 += d * d * d * d;
  }
  m2 /= static_cast<double>(x.size());
  m4 /= static_cast<double>(x.size());
  return m4 / (m2 * m2);
}

double variance(std::span<const float> x) {
  double sum = 0, squares = 0;
  for (const float v : x) {
    sum += v;
    squares += double{v} * v;
  }
  const double n = static_cast<double>(x.size());
  return squares / n - (sum / n) * (sum / n);
}

// Correlation of two query heads' values at the same positions of layer 0.
double query_head_correlation(const kvlab::kv_data& d, std::size_t a, std::size_t b) {
  const auto x = d.queries.stream(0, a), y = d.queries.stream(0, b);
  double xy = 0, xx = 0, yy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    xy += double{x[i]} * y[i];
    xx += double{x[i]} * x[i];
    yy += double{y[i]} * y[i];
  }
  return xy / std::sqrt(xx * yy);
}

// Mean squared error of 2-bit (uint2) keys at a granularity, every (layer, KV head) a stream.
double key_mse_at_2_bits(const kvlab::kv_data& d, const std::string& granularity) {
  const auto& components = kvlab::builtin_registry();
  const auto quantizer = components.make_quantizer("uint2");
  const auto shape = components.make_granularity(granularity).group_shape(d.head_dim());
  return kvlab::quantize_dequantize(quantizer, shape, kvlab::param_precision::f16, d.keys.values(), d.tokens(),
                                    d.head_dim(), d.layers() * d.kv_heads())
      .stats.mse;
}

} // namespace

BOOST_AUTO_TEST_SUITE(synthetic_llm)

BOOST_AUTO_TEST_CASE(has_the_requested_shapes_and_finite_values) {
  const auto d = llm("L=3,H=2,Q=6,T=100,D=64,seed=4");
  BOOST_TEST((d.keys.shape() == kvlab::kv_shape{3, 2, 100, 64}));
  BOOST_TEST((d.values.shape() == kvlab::kv_shape{3, 2, 100, 64}));
  BOOST_TEST((d.queries.shape() == kvlab::kv_shape{3, 6, 100, 64}));
  BOOST_TEST(d.source == "synthetic:llm(L=3,H=2,Q=6,T=100,D=64,seed=4)");
  BOOST_CHECK_NO_THROW(kvlab::require_finite(d.keys, "keys"));
  BOOST_CHECK_NO_THROW(kvlab::require_finite(d.values, "values"));
  BOOST_CHECK_NO_THROW(kvlab::require_finite(d.queries, "queries"));
}

BOOST_AUTO_TEST_CASE(defaults_are_those_of_the_gaussian_generator) {
  const auto d = kvlab::synthetic_llm(kvlab::parse_term("llm", "test"), "synthetic:llm");
  BOOST_TEST((d.keys.shape() == kvlab::kv_shape{2, 2, 1024, 128}));
  BOOST_TEST((d.queries.shape() == kvlab::kv_shape{2, 8, 1024, 128}));
  BOOST_TEST(bit_identical(d.keys, llm("L=2,H=2,Q=8,T=1024,D=128,seed=1").keys));
}

BOOST_AUTO_TEST_CASE(is_bit_identical_per_seed) {
  const auto a = llm("T=64,seed=7"), b = llm("T=64,seed=7");
  BOOST_TEST(bit_identical(a.keys, b.keys));
  BOOST_TEST(bit_identical(a.values, b.values));
  BOOST_TEST(bit_identical(a.queries, b.queries));
}

BOOST_AUTO_TEST_CASE(different_seeds_give_different_data) {
  const auto a = llm("T=64,seed=7"), b = llm("T=64,seed=8");
  BOOST_TEST(!bit_identical(a.keys, b.keys));
  BOOST_TEST(!bit_identical(a.values, b.values));
  BOOST_TEST(!bit_identical(a.queries, b.queries));
}

// One random stream per (tensor, layer, head): the first layer and the first tokens do not
// depend on how many layers or tokens are generated.
BOOST_AUTO_TEST_CASE(does_not_depend_on_generation_order) {
  const auto small = llm("L=1,T=100"), large = llm("L=2,T=300");
  for (std::size_t t = 0; t < 100; ++t) {
    BOOST_TEST(std::ranges::equal(small.keys.row(0, 1, t), large.keys.row(0, 1, t)));
    BOOST_TEST(std::ranges::equal(small.values.row(0, 1, t), large.values.row(0, 1, t)));
    BOOST_TEST(std::ranges::equal(small.queries.row(0, 5, t), large.queries.row(0, 5, t)));
  }
}

BOOST_AUTO_TEST_CASE(outlier_channels_have_much_larger_key_magnitude) {
  // Without RoPE and sinks every channel keeps its own values: the outliers are exactly the
  // `outlier_channels` largest, near outlier_scale, the others near 1.
  const auto d = llm("T=512,rope_base=0,sinks=0,outlier_channels=4,outlier_scale=8");
  std::vector<std::vector<std::size_t>> outliers;
  for (std::size_t layer = 0; layer < 2; ++layer)
    for (std::size_t h = 0; h < 2; ++h) {
      auto rms = channel_rms(d, layer, h);
      outliers.push_back(largest(rms, 4));
      std::ranges::sort(rms, std::greater<>());
      BOOST_TEST(rms[3] > 7.0);
      BOOST_TEST(rms[4] < 1.3);
    }
  // Which channels are outliers is drawn per (layer, KV head).
  BOOST_TEST((outliers[0] != outliers[1] && outliers[0] != outliers[2]));

  const auto none = llm("T=512,rope_base=0,sinks=0,outlier_channels=0");
  auto rms = channel_rms(none, 0, 0);
  BOOST_TEST(*std::ranges::max_element(rms) < 1.3);

  // With RoPE (the default) the outlier moves within its pair; the pair's energy stays.
  const auto roped = llm("T=512,sinks=0");
  rms = channel_rms(roped, 0, 0);
  std::vector<double> pair_energy(64);
  for (std::size_t i = 0; i < 64; ++i) pair_energy[i] = rms[i] * rms[i] + rms[i + 64] * rms[i + 64];
  std::ranges::sort(pair_energy);
  BOOST_TEST(pair_energy.back() > 20 * pair_energy[32]);
}

BOOST_AUTO_TEST_CASE(rope_rotates_pairs_i_and_i_plus_half_by_position) {
  const auto plain = llm("T=300,D=64,rope_base=0");
  for (const double base : {10000.0, 500.0}) {
    const auto roped = llm("T=300,D=64,rope_base=" + kvlab::format_number(base));
    BOOST_TEST(bit_identical(plain.values, roped.values)); // values are not rotated
    double worst = 0; // largest deviation from the expected rotation, relative to 1 + |value|
    for (const auto tensor : {&kvlab::kv_data::keys, &kvlab::kv_data::queries})
      for (std::size_t head = 0; head < (plain.*tensor).shape().heads; ++head)
        for (std::size_t t = 0; t < 300; ++t) {
          const auto x = (plain.*tensor).row(1, head, t), y = (roped.*tensor).row(1, head, t);
          for (std::size_t i = 0; i < 32; ++i) {
            const double angle = static_cast<double>(t) * std::pow(base, -2.0 * static_cast<double>(i) / 64.0);
            const double first = x[i] * std::cos(angle) - x[i + 32] * std::sin(angle);
            const double second = x[i] * std::sin(angle) + x[i + 32] * std::cos(angle);
            worst = std::max({worst, std::fabs(y[i] - first) / (1 + std::fabs(first)),
                              std::fabs(y[i + 32] - second) / (1 + std::fabs(second))});
          }
        }
    BOOST_TEST_INFO("rope_base " << base);
    BOOST_TEST(worst < 1e-5);
  }
}

BOOST_AUTO_TEST_CASE(sink_tokens_draw_more_attention_than_average) {
  const double with_sinks = mass_over_uniform_share(llm("sinks=4"), 0, 4, true);
  const double without = mass_over_uniform_share(llm("sinks=0"), 0, 4, true);
  BOOST_TEST_MESSAGE("attention on tokens 0..3 / uniform share: sinks=4 " << with_sinks << ", sinks=0 " << without);
  BOOST_TEST(with_sinks > 20.0);
  BOOST_TEST(without < 3.0);
}

BOOST_AUTO_TEST_CASE(locality_draws_attention_to_recent_tokens) {
  const double local = mass_over_uniform_share(llm("locality=0.5"), 32, 32, false);
  const double flat = mass_over_uniform_share(llm("locality=0"), 32, 32, false);
  BOOST_TEST_MESSAGE("attention on the last 32 tokens / uniform share: locality=0.5 " << local << ", locality=0 "
                                                                                      << flat);
  BOOST_TEST(local > 3.0);
  BOOST_TEST(flat < 1.5);
}

// The positional component adds position_logit x mean_i cos(distance x theta_i) to every
// logit, over the RoPE pairs that turn by at most pi over position_span tokens: with no
// content in the queries (sharpness=0) and no sinks, the mean logit over many positions at
// a distance is that kernel, since the key noise averages out.
BOOST_AUTO_TEST_CASE(the_positional_logit_falls_with_distance_as_its_rope_pairs_turn) {
  const std::size_t tokens = 4096, dim = 16, span = 64;
  const double position_logit = 4;
  const auto d =
      llm("L=1,H=1,Q=1,T=4096,D=16,sinks=0,outlier_channels=0,sharpness=0,position_logit=4,position_span=64");
  // Pairs i of D = 16 with theta_i = 10000^(-2i/16) <= pi / 64, without the sink pair (the last).
  std::vector<double> thetas;
  for (std::size_t i = 0; i + 1 < dim / 2; ++i)
    if (const double theta = std::pow(10000.0, -2.0 * static_cast<double>(i) / dim);
        theta * static_cast<double>(span) <= std::numbers::pi)
      thetas.push_back(theta);
  BOOST_TEST_REQUIRE(thetas.size() == 4u); // 0.0316, 0.01, 0.00316, 0.001
  for (const std::size_t distance : {0u, 16u, 64u, 256u, 1024u}) {
    double mean = 0;
    std::size_t count = 0;
    for (std::size_t t = distance; t < tokens; ++t, ++count) {
      const auto q = d.queries.row(0, 0, t), k = d.keys.row(0, 0, t - distance);
      double dot = 0;
      for (std::size_t c = 0; c < dim; ++c) dot += double{q[c]} * k[c];
      mean += dot / std::sqrt(static_cast<double>(dim));
    }
    mean /= static_cast<double>(count);
    double kernel = 0;
    for (const double theta : thetas) kernel += std::cos(static_cast<double>(distance) * theta);
    kernel *= position_logit / static_cast<double>(thetas.size());
    BOOST_TEST_INFO("distance " << distance << ": mean logit " << mean << ", kernel " << kernel);
    BOOST_TEST(std::fabs(mean - kernel) < 0.15);
  }
}

// sharpness multiplies the content logits; sharpness_spread varies it per query head.
BOOST_AUTO_TEST_CASE(sharpness_concentrates_attention_and_its_spread_varies_heads) {
  // One query head per KV head, so the report's heads are the query heads.
  const auto report = [](const std::string& knobs) {
    return kvlab::data_report(llm("L=1,H=8,Q=8,T=512,sinks=0," + knobs));
  };
  const auto flat = kvlab::mean_over_heads(report("sharpness=0.5"));
  const auto sharp = kvlab::mean_over_heads(report("sharpness=2"));
  BOOST_TEST(sharp.normalized_entropy < flat.normalized_entropy - 0.2);
  BOOST_TEST(sharp.top1 > flat.top1 + 0.2);
  const auto entropy_range = [](const std::vector<kvlab::head_statistics>& heads) {
    const auto [low, high] = std::ranges::minmax(heads, {}, &kvlab::head_statistics::normalized_entropy);
    return high.normalized_entropy - low.normalized_entropy;
  };
  const double same = entropy_range(report("sharpness_spread=0")),
               spread = entropy_range(report("sharpness_spread=1.5"));
  BOOST_TEST_MESSAGE("range of H/log n over 8 heads: sharpness_spread=0 " << same << ", 1.5 " << spread);
  BOOST_TEST(spread > 3 * same);
}

BOOST_AUTO_TEST_CASE(values_are_heavy_tailed_with_unit_variance) {
  const auto heavy = llm("value_dof=4"), light = llm("value_dof=1000");
  BOOST_TEST_MESSAGE("value kurtosis: value_dof=4 " << kurtosis(heavy.values.values()) << ", value_dof=1000 "
                                                    << kurtosis(light.values.values()));
  BOOST_TEST(kurtosis(heavy.values.values()) > 5.0); // a Gaussian's is 3
  BOOST_TEST(std::fabs(kurtosis(light.values.values()) - 3.0) < 0.1);
  BOOST_TEST(std::fabs(variance(heavy.values.values()) - 1.0) < 0.1);
  BOOST_TEST(std::fabs(variance(light.values.values()) - 1.0) < 0.02);
}

BOOST_AUTO_TEST_CASE(query_heads_of_one_gqa_group_are_correlated) {
  const auto d = llm("T=512,H=2,Q=8"); // query heads 0..3 use KV head 0, 4..7 KV head 1
  BOOST_TEST(query_head_correlation(d, 0, 1) > 0.6);
  BOOST_TEST(query_head_correlation(d, 2, 3) > 0.6);
  BOOST_TEST(std::fabs(query_head_correlation(d, 0, 4)) < 0.1);
  const auto independent = llm("T=512,H=2,Q=8,group_correlation=0,locality=0,sinks=0");
  BOOST_TEST(std::fabs(query_head_correlation(independent, 0, 1)) < 0.1);
}

// KIVI (arXiv 2402.02750 sec. 3.1): at 2 bits, keys quantized per channel beat keys
// quantized per token, because of the outlier channels. channel(32) groups hold 32 values
// and token groups 128, so group(32) (per token, 32 channels) is the same-size control:
// on Gaussian keys it ties with channel(32), on llm keys it loses clearly.
BOOST_AUTO_TEST_CASE(per_channel_beats_per_token_for_keys_at_2_bits) {
  const auto d = llm("");
  const double channel = key_mse_at_2_bits(d, "channel(32)");
  const double token = key_mse_at_2_bits(d, "token");
  const double group = key_mse_at_2_bits(d, "group(32)");
  BOOST_TEST_MESSAGE("llm keys, uint2 MSE: channel(32) " << channel << ", token " << token << ", group(32) " << group);
  BOOST_TEST(channel * 4 < token);
  BOOST_TEST(channel * 2 < group);

  const auto gaussian = kvlab::load_data("synthetic:gaussian(L=2,H=2,Q=8,T=1024,D=128,seed=1)");
  const double gaussian_channel = key_mse_at_2_bits(gaussian, "channel(32)");
  const double gaussian_group = key_mse_at_2_bits(gaussian, "group(32)");
  BOOST_TEST_MESSAGE("gaussian keys, uint2 MSE: channel(32) " << gaussian_channel << ", group(32) " << gaussian_group
                                                              << ", token " << key_mse_at_2_bits(gaussian, "token"));
  BOOST_TEST(gaussian_channel > 0.8 * gaussian_group);

  // Without outlier channels the advantage goes: the outliers cause it.
  const auto plain = llm("outlier_channels=0");
  BOOST_TEST(key_mse_at_2_bits(plain, "channel(32)") > 0.8 * key_mse_at_2_bits(plain, "group(32)"));
}

BOOST_AUTO_TEST_CASE(bad_knobs_are_rejected_with_their_name) {
  const std::pair<std::string, std::string> cases[] = {
      {"locality=1.5", "parameter locality = 1.5 must be in [0, 1]"},
      {"locality=nan", "parameter locality: 'nan' is not a finite number"},
      {"group_correlation=-0.1", "parameter group_correlation = -0.1 must be in [0, 1]"},
      {"value_dof=2", "parameter value_dof = 2 must be > 2"},
      {"outlier_scale=-1", "parameter outlier_scale = -1 must be in [0, 10000]"},
      {"outlier_channels=129", "parameter outlier_channels = 129 must be at most D = 128"},
      {"outlier_channels=2.5", "parameter outlier_channels = 2.5 must be a whole number in 0..1000000000"},
      {"sinks=2000", "parameter sinks = 2000 must be at most T = 1024"},
      {"rope_base=0.5", "parameter rope_base = 0.5 must be 0 (RoPE off) or in (1, 1e12]"},
      {"D=127", "parameter D = 127 must be even"},
      {"T=1", "parameter T = 1 must be a whole number in 2..1000000000"},
      {"seed=1.5", "parameter seed = 1.5 must be a whole number in 0..1000000000"},
      {"Q=7", "Q = 7 query heads is not a multiple of H = 2 KV heads"},
      {"T=12x", "parameter T: '12x' is not a valid number"},
      {"sinks", "argument 'sinks' is not key=value"},
      {"T=4,T=5", "parameter 'T' is given twice"},
      {"L=100000,T=100000", "4194304 MiB of float32), the limit"},
      {"L=268435456,H=1,Q=1,T=268435456,D=256", "4194304 MiB of float32), the limit"},
      {"bogus=1", "unknown parameter 'bogus'; allowed: L (default 2), H (default 2), Q (default 8), T (default "
                  "1024), D (default 128), seed (default 1), outlier_channels (default 4), outlier_scale (default "
                  "8), rope_base (default 10000), sinks (default 4), locality (default 0.5), value_dof (default 4), "
                  "group_correlation (default 0.5), sharpness (default 1), sharpness_spread (default 0), sink_logit "
                  "(default 5), position_logit (default 0), position_span (default 64)"},
      {"sharpness=-1", "parameter sharpness = -1 must be in [0, 100]"},
      {"sharpness_spread=4", "parameter sharpness_spread = 4 must be in [0, 3]"},
      {"sink_logit=60", "parameter sink_logit = 60 must be in [0, 50]"},
      {"position_logit=4,rope_base=0", "parameter position_logit = 4 needs RoPE (rope_base > 0)"},
      {"position_logit=4,D=2,outlier_channels=0", "parameter position_logit = 4 needs D >= 4"},
      {"position_span=0", "parameter position_span = 0 must be a whole number in 1..1000000000"},
  };
  for (const auto& [args, expected] : cases) {
    const std::string message = llm_error(args);
    BOOST_TEST_INFO("llm(" << args << ") -> " << message);
    BOOST_TEST(message.find("data spec 'synthetic:llm(" + args + ")'") == 0);
    BOOST_TEST(message.find(expected) != std::string::npos);
  }
}

BOOST_AUTO_TEST_SUITE_END()

// kvlab data-report's statistics on workloads whose values are known.
BOOST_AUTO_TEST_SUITE(data_report)

BOOST_AUTO_TEST_CASE(statistics_have_their_textbook_values) {
  const std::size_t tokens = 100, dim = 4;
  kvlab::kv_data d{kvlab::kv_tensor({1, 1, tokens, dim}), kvlab::kv_tensor({1, 1, tokens, dim}),
                   kvlab::kv_tensor({1, 1, tokens, dim}), "constructed"};
  // Keys: channel 0 holds 8, the others 1, so every q.k is equal for a query of zeros:
  // attention is uniform. Values: +-1 alternately (kurtosis 1).
  for (std::size_t t = 0; t < tokens; ++t) {
    auto k = d.keys.row(0, 0, t);
    k[0] = 8, k[1] = k[2] = k[3] = 1;
    for (std::size_t c = 0; c < dim; ++c) d.values.row(0, 0, t)[c] = (t + c) % 2 ? 1.0f : -1.0f;
  }
  const auto report = kvlab::data_report(d, {.probes = 2, .local_window = 64});
  BOOST_TEST_REQUIRE(report.size() == 1u);
  const auto& s = report[0];
  // Probes at t = 98 and 99: n = 99 and 100 keys.
  BOOST_TEST(s.entropy == (std::log(99.0) + std::log(100.0)) / 2, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(s.normalized_entropy == 1.0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(s.sink_mass == (1 / 99.0 + 1 / 100.0) / 2, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(s.local_mass == (64 / 99.0 + 64 / 100.0) / 2, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(s.top1 == (1 / 99.0 + 1 / 100.0) / 2, boost::test_tools::tolerance(1e-12));    // one key each
  BOOST_TEST(s.top10 == (10 / 99.0 + 10 / 100.0) / 2, boost::test_tools::tolerance(1e-12)); // ceil(9.9), 10
  BOOST_TEST(s.top25 == (25 / 99.0 + 25 / 100.0) / 2, boost::test_tools::tolerance(1e-12)); // ceil(24.75), 25
  BOOST_TEST(s.key_outlier_ratio == 8.0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(s.value_kurtosis == 1.0, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(the_knobs_move_the_statistics_they_imitate) {
  const auto mean = [](const std::string& knobs) {
    return kvlab::mean_over_heads(kvlab::data_report(llm("T=512," + knobs)));
  };
  BOOST_TEST(mean("sinks=4").sink_mass > 10 * mean("sinks=0").sink_mass);
  BOOST_TEST(mean("locality=0.9").local_mass > mean("locality=0").local_mass + 0.1);
  BOOST_TEST(mean("outlier_channels=4").key_outlier_ratio > 4 * mean("outlier_channels=0").key_outlier_ratio);
  BOOST_TEST(mean("value_dof=5").value_kurtosis > mean("value_dof=100").value_kurtosis + 2);
  const auto gaussian =
      kvlab::mean_over_heads(kvlab::data_report(kvlab::load_data("synthetic:gaussian(L=1,H=2,Q=4,T=512,D=64,seed=1)")));
  BOOST_TEST(gaussian.value_kurtosis == 3.0, boost::test_tools::tolerance(0.1));
  BOOST_TEST(gaussian.key_outlier_ratio < 1.3);
}

BOOST_AUTO_TEST_SUITE_END()
