// The fidelity protocol end to end: exact attention, compressed attention, metrics, bytes.
#include <boost/test/unit_test.hpp>

#include "test_files.hpp"
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ios>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>
import kvlab;

namespace {

kvlab::eval_result run(const std::string& recipe, const std::string& data, std::size_t steps = 32) {
  return kvlab::evaluate(kvlab::parse_recipe(recipe, kvlab::builtin_registry()), kvlab::load_data(data),
                         {.decode_steps = steps});
}

const std::string gaussian = "synthetic:gaussian(L=2,H=2,Q=8,T=1024,D=128,seed=1)";

} // namespace

BOOST_AUTO_TEST_SUITE(evaluation)

BOOST_AUTO_TEST_CASE(exact_attention_of_identical_keys_is_the_mean_value) {
  const std::size_t head_dim = 2;
  const std::vector<float> query{1, 2}, keys{0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f}, values{1, 0, 0, 1, 2, 2};
  std::vector<double> out(head_dim);
  kvlab::exact_decode_attention(query, keys, values, head_dim, out);
  BOOST_TEST(out[0] == 1.0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(out[1] == 1.0, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(exact_attention_of_a_group_is_each_head_alone_bit_for_bit) {
  // 37 tokens: four blocks of eight and a partial one.
  const std::size_t head_dim = 32, tokens = 37, heads = 4;
  kvlab::random_stream random(7, 0);
  const auto normal = [&](std::size_t n) {
    std::vector<float> x(n);
    for (auto& v : x) v = static_cast<float>(random.normal());
    return x;
  };
  const auto queries = normal(heads * head_dim), keys = normal(tokens * head_dim), values = normal(tokens * head_dim);
  std::vector<double> out(heads * head_dim), probabilities, dots;
  kvlab::exact_decode_attention(queries, keys, values, head_dim, out, &probabilities, &dots);
  BOOST_TEST(probabilities.size() == heads * tokens);
  BOOST_TEST(dots.size() == heads * tokens);
  for (std::size_t h = 0; h < heads; ++h) {
    std::vector<double> one_out(head_dim), one_probabilities, one_dots;
    kvlab::exact_decode_attention(std::span(queries).subspan(h * head_dim, head_dim), keys, values, head_dim, one_out,
                                  &one_probabilities, &one_dots);
    for (std::size_t c = 0; c < head_dim; ++c) BOOST_TEST(out[h * head_dim + c] == one_out[c]);
    for (std::size_t t = 0; t < tokens; ++t) {
      BOOST_TEST(probabilities[h * tokens + t] == one_probabilities[t]);
      BOOST_TEST(dots[h * tokens + t] == one_dots[t]);
    }
    // Against the plain definition: each dot in channel order, softmax, weighted sum.
    const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
    double max_score = -INFINITY;
    std::vector<double> p(tokens);
    for (std::size_t t = 0; t < tokens; ++t) {
      double dot = 0.0;
      for (std::size_t c = 0; c < head_dim; ++c)
        dot += double{queries[h * head_dim + c]} * double{keys[t * head_dim + c]};
      BOOST_TEST(one_dots[t] == dot);
      p[t] = dot * scale;
      max_score = std::max(max_score, p[t]);
    }
    double total = 0.0;
    for (auto& x : p) total += (x = std::exp(x - max_score));
    for (std::size_t t = 0; t < tokens; ++t) BOOST_TEST(one_probabilities[t] == p[t] / total);
  }
}

BOOST_AUTO_TEST_CASE(int8_per_token_meets_the_fidelity_bar_and_counts_its_bytes) {
  const auto r = run("k=int8@token,v=int8@token", gaussian);
  BOOST_TEST(r.metric("attn_rel_l2").mean < 0.02);
  BOOST_TEST(r.metric("attn_cosine").mean > 0.999);
  // 2 layers x 2 KV heads x (keys, values) x (128 one-byte codes + one fp16 scale).
  BOOST_TEST(r.bytes_per_token == 2.0 * 2 * 2 * (128 + 2));
  BOOST_TEST(r.cache_bytes == std::size_t{1024} * 2 * 2 * 2 * (128 + 2));
  BOOST_TEST(r.metric("attn_rel_l2").count == 2u * 8 * 32); // layers x query heads x steps
  BOOST_TEST(r.cache_bytes_per_head.size() == 4u);          // layers x KV heads
  std::size_t per_head_total = 0;
  for (const auto bytes : r.cache_bytes_per_head) per_head_total += bytes;
  BOOST_TEST(per_head_total == r.cache_bytes);
}

BOOST_AUTO_TEST_CASE(every_metric_reports_what_it_measures) {
  const auto f32 = run("k=f32@token,v=f32@token", "synthetic:gaussian(L=1,H=2,Q=4,T=300,D=64,seed=2)", 8);
  BOOST_TEST(f32.metric("score_kl").max < 1e-7); // compressed probabilities are floats
  BOOST_TEST(f32.metric("topk_recall").min == 1.0);
  BOOST_TEST(std::fabs(f32.metric("ip_bias").mean) < 1e-5);
  BOOST_TEST(f32.metric("ip_rmse").max < 1e-5);
  BOOST_TEST(f32.key_mse.max == 0.0);
  BOOST_TEST(f32.bits_k == 32.0);
  BOOST_TEST(f32.compression_vs_fp16 == 0.5);
  BOOST_TEST(f32.tokens_kept == 300.0);
  const auto int8 = run("k=int8@token,v=int4@group(32)", "synthetic:gaussian(L=1,H=2,Q=4,T=300,D=64,seed=2)", 8);
  BOOST_TEST(int8.bits_k == 8.0 * (64 + 2) / 64);     // codes + one fp16 scale per token
  BOOST_TEST(int8.bits_v == 8.0 * (32 + 2 * 2) / 64); // 4-bit codes + two fp16 scales
  BOOST_TEST(int8.compression_vs_fp16 == 4.0 * 64 / (66 + 36));
  BOOST_TEST(int8.metric("score_kl").mean > 0.0);
  BOOST_TEST(int8.key_snr_db.mean > 35.0); // int8 per token on N(0,1): about 39 dB
  BOOST_TEST(int8.value_snr_db.mean < int8.key_snr_db.mean);
}

BOOST_AUTO_TEST_CASE(every_registered_metric_is_measured_stored_and_tabled) {
  const auto data = kvlab::load_data("synthetic:gaussian(L=1,H=2,Q=4,T=96,D=64,seed=4)");
  const auto r = kvlab::evaluate(kvlab::parse_recipe("k=int4@group(32),v=int4@group(32)", kvlab::builtin_registry()),
                                 data, {.decode_steps = 4});
  const auto metrics = kvlab::builtin_registry().every_metric();
  BOOST_TEST(r.per_step.size() == metrics.size());
  const auto json = kvlab::parse_json(kvlab::to_json(r), "metrics.json");
  for (const auto& m : metrics) {
    BOOST_TEST_CONTEXT(m.name()) {
      BOOST_TEST(r.metric(m.name()).count == 1u * 4 * 4); // layers x query heads x steps
      BOOST_TEST(json.find(m.name()) != nullptr);
      BOOST_TEST(kvlab_test::contains(kvlab::summaries_json(r), "\"" + m.name() + "\""));
    }
  }
  // An error stores its worst cases, a similarity its lowest, a bias neither.
  BOOST_TEST(json.find("score_kl_p99") != nullptr);
  BOOST_TEST(json.find("topk_recall_min") != nullptr);
  BOOST_TEST(json.find("ip_bias_p99") == nullptr);
  BOOST_TEST(kvlab_test::contains(kvlab_test::message_of<kvlab::error>([&] { r.metric("nonsense"); }),
                                  "metric 'nonsense' was not measured (measured: "));
  // A subset can be asked for.
  const auto only =
      kvlab::evaluate(kvlab::parse_recipe("k=int4@group(32),v=int4@group(32)", kvlab::builtin_registry()), data,
                      {.decode_steps = 4, .metrics = {kvlab::builtin_registry().make_metric("topk_recall(4)")}});
  BOOST_TEST(only.per_step.size() == 1u);
  BOOST_TEST(only.metric("topk_recall(4)").mean > 0.0);
#ifdef KVLAB_TEST_STRATEGIES
  // tests/strategies/test_max_abs_error.cppm is found by the build alone.
  BOOST_TEST(r.metric("test_max_abs_error").max > 0.0);
  BOOST_TEST(r.metric("test_max_abs_error").max < 1.0);
#endif
}

BOOST_AUTO_TEST_CASE(metric_helpers_have_their_textbook_values) {
  const std::vector<double> p{0.5, 0.25, 0.25};
  const std::vector<double> q{0.25, 0.5, 0.25};
  BOOST_TEST(kvlab::kl_divergence(p, q) == 0.5 * std::log(2.0) + 0.25 * std::log(0.5),
             boost::test_tools::tolerance(1e-7));
  const std::vector<double> exact{0.4, 0.3, 0.2, 0.1};
  const std::vector<double> approx{0.1, 0.3, 0.2, 0.4};
  BOOST_TEST(kvlab::topk_recall(exact, approx, 2) == 0.5); // exact top 2 {0, 1}, compressed {3, 1}
  BOOST_TEST(kvlab::topk_recall(exact, approx, 4) == 1.0);
  const std::vector<double> exact_dots{2, 1}; // q.k of positions 0 and 1
  const std::vector<float> ip{1.5f, 1.5f};    // held positions 1 and 0: errors +0.5 and -0.5
  const std::vector<std::size_t> positions{1, 0};
  const auto [bias, rmse] = kvlab::inner_product_error(exact_dots, ip, positions);
  BOOST_TEST(bias == 0.0);
  BOOST_TEST(rmse == 0.5);
}

// score_kl = m (kept_kl + log m) + sum over dropped keys of p log(p / 1e-30), m the held mass.
BOOST_AUTO_TEST_CASE(score_kl_splits_into_dropped_mass_and_kept_kl) {
  const std::vector<double> exact{0.4, 0.3, 0.2, 0.1};
  const std::vector<double> approx{0.5, 0.0, 0.5, 0.0}; // positions 1 and 3 evicted
  const std::vector<std::size_t> held{2, 0};
  const double m = kvlab::held_mass(exact, held);
  BOOST_TEST(m == 0.6, boost::test_tools::tolerance(1e-15));
  BOOST_TEST(kvlab::dropped_mass(exact, held) == 0.4, boost::test_tools::tolerance(1e-15));
  const double kept = kvlab::kept_kl_divergence(exact, approx, held);
  const double p0 = 0.4 / 0.6, p2 = 0.2 / 0.6;
  BOOST_TEST(kept == p0 * std::log(p0 / 0.5) + p2 * std::log(p2 / 0.5), boost::test_tools::tolerance(1e-12));
  const double dropped_term = 0.3 * std::log(0.3 / 1e-30) + 0.1 * std::log(0.1 / 1e-30);
  BOOST_TEST(kvlab::kl_divergence(exact, approx) == m * (kept + std::log(m)) + dropped_term,
             boost::test_tools::tolerance(1e-12));

  // End to end: no eviction drops nothing and kept_kl is score_kl; a window drops mass.
  const auto full = run("k=int8@token,v=int8@token", gaussian, 8);
  BOOST_TEST(full.metric("dropped_mass").max == 0.0);
  BOOST_TEST(full.metric("kept_kl").mean == full.metric("score_kl").mean, boost::test_tools::tolerance(1e-9));
  const auto window = run("k=int8@token,v=int8@token,evict=window(256)", gaussian, 8);
  BOOST_TEST(window.metric("dropped_mass").mean > 0.1);
  BOOST_TEST(window.metric("kept_kl").mean < window.metric("score_kl").mean / 10);
}

BOOST_AUTO_TEST_CASE(a_shared_exact_reference_gives_the_same_results_bit_for_bit) {
  const auto& components = kvlab::builtin_registry();
  const auto data = kvlab::load_data("synthetic:llm(L=2,H=2,Q=4,T=96,D=32,seed=5)");
  const kvlab::eval_options options{.decode_steps = 8};
  const auto exact = kvlab::compute_exact_attention(data, options.decode_steps);
  BOOST_TEST(exact.entries.size() == 8u * 2 * 2); // decode steps x layers x KV heads
  for (const std::string recipe :
       {"k=int4@group(32),v=int4@group(32)", "k=uint2@channel(32),v=uint2@group(32),residual=16,evict=h2o(0.2,0.2)"}) {
    const auto r = kvlab::parse_recipe(recipe, components);
    BOOST_TEST(kvlab::to_json(kvlab::evaluate(r, data, options, &exact)) ==
               kvlab::to_json(kvlab::evaluate(r, data, options)));
  }
  // One computed for other decode steps is refused, not silently misread.
  const auto other = kvlab::compute_exact_attention(data, 4);
  BOOST_CHECK_THROW(kvlab::evaluate(kvlab::parse_recipe("k=f16@token,v=f16@token", components), data, options, &other),
                    kvlab::error);
  BOOST_CHECK_THROW(kvlab::compute_exact_attention(data, 96), kvlab::error);
}

BOOST_AUTO_TEST_CASE(f32_cache_matches_the_double_reference) {
  const auto r = run("k=f32@token,v=f32@token", gaussian);
  BOOST_TEST(r.metric("attn_rel_l2").mean < 1e-6);
  BOOST_TEST(r.bytes_per_token == 2.0 * 2 * 2 * 128 * 4);
}

BOOST_AUTO_TEST_CASE(fewer_bits_cost_fidelity_and_save_bytes) {
  const auto data = "synthetic:gaussian(L=1,H=2,Q=4,T=256,D=64,seed=3)";
  const auto f16 = run("k=f16@token,v=f16@token", data);
  const auto int8 = run("k=int8@group(32),v=int8@group(32)", data);
  const auto int4 = run("k=int4@group(32),v=int4@group(32)", data);
  BOOST_TEST(f16.metric("attn_rel_l2").mean < int8.metric("attn_rel_l2").mean);
  BOOST_TEST(int8.metric("attn_rel_l2").mean < int4.metric("attn_rel_l2").mean);
  BOOST_TEST(int4.metric("attn_rel_l2").mean < 0.2);
  // Per stream and token: f16 128 bytes; int8 64 + 2 scales; int4 32 + 2 scales.
  BOOST_TEST(f16.bytes_per_token == 2.0 * 2 * 128);
  BOOST_TEST(int8.bytes_per_token == 2.0 * 2 * (64 + 4));
  BOOST_TEST(int4.bytes_per_token == 2.0 * 2 * (32 + 4));
}

BOOST_AUTO_TEST_CASE(same_seed_gives_bit_identical_results) {
  const auto a = run("k=int4@group(32),v=int8@token", "synthetic:gaussian(T=200,seed=9)", 8);
  const auto b = run("k=int4@group(32),v=int8@token", "synthetic:gaussian(T=200,seed=9)", 8);
  const auto c = run("k=int4@group(32),v=int8@token", "synthetic:gaussian(T=200,seed=10)", 8);
  BOOST_TEST(kvlab::to_json(a) == kvlab::to_json(b));
  BOOST_TEST(a.metric("attn_rel_l2").mean != c.metric("attn_rel_l2").mean);
}

BOOST_AUTO_TEST_CASE(protocol_rejects_bad_step_counts_and_unsupported_tiers) {
  const auto data = kvlab::load_data("synthetic:gaussian(T=16)");
  const auto recipe = kvlab::parse_recipe("k=int8@token", kvlab::builtin_registry());
  BOOST_CHECK_THROW(kvlab::evaluate(recipe, data, {.decode_steps = 16}), kvlab::error);
  BOOST_CHECK_THROW(kvlab::evaluate(recipe, data, {.decode_steps = 0}), kvlab::error);
  const auto per_tensor = kvlab::parse_recipe("k=int8@tensor", kvlab::builtin_registry());
  BOOST_CHECK_THROW(kvlab::evaluate(per_tensor, data, {.decode_steps = 4}), kvlab::error);
}

BOOST_AUTO_TEST_CASE(non_finite_kv_data_is_reported_with_its_position) {
  auto data = kvlab::load_data("synthetic:gaussian(L=2,H=2,Q=2,T=8,D=4)");
  data.values.row(1, 0, 5)[3] = NAN;
  try {
    kvlab::evaluate(kvlab::parse_recipe("k=f16@token", kvlab::builtin_registry()), data, {.decode_steps = 2});
    BOOST_FAIL("NaN was accepted");
  } catch (const kvlab::error& e) {
    BOOST_TEST(std::string(e.what()).find(
                   "values holds a non-finite value (nan) at layer 1, head 0, token 5, channel 3") != std::string::npos,
               e.what());
  }
}

BOOST_AUTO_TEST_CASE(metrics_have_their_textbook_values) {
  const std::vector<float> approx{1, 0};
  const std::vector<double> exact{1, 1};
  BOOST_TEST(kvlab::relative_l2(approx, exact) == std::sqrt(0.5), boost::test_tools::tolerance(1e-12));
  BOOST_TEST(kvlab::cosine_similarity(approx, exact) == std::sqrt(0.5), boost::test_tools::tolerance(1e-12));
  std::vector<double> samples;
  for (int i = 1; i <= 100; ++i) samples.push_back(i);
  const auto s = kvlab::summarize(samples);
  BOOST_TEST(s.mean == 50.5);
  BOOST_TEST(s.p50 == 50.0);
  BOOST_TEST(s.p99 == 99.0);
  BOOST_TEST(s.max == 100.0);
  BOOST_TEST(s.min == 1.0);
}

// The JSON reader and the tokenizers share these.
BOOST_AUTO_TEST_CASE(utf8_encodes_each_length_at_its_boundaries_and_hex_digits_read_either_case) {
  const std::pair<std::uint32_t, std::string> cases[] = {{0x0, std::string(1, '\0')},
                                                         {0x7f, "\x7f"},
                                                         {0x80, "\xc2\x80"},
                                                         {0x7ff, "\xdf\xbf"},
                                                         {0x800, "\xe0\xa0\x80"},
                                                         {0xffff, "\xef\xbf\xbf"},
                                                         {0x10000, "\xf0\x90\x80\x80"},
                                                         {0x10ffff, "\xf4\x8f\xbf\xbf"}};
  for (const auto& [code, bytes] : cases) {
    std::string out = "x";
    kvlab::append_utf8(out, code);
    BOOST_TEST(out == "x" + bytes, "U+" << std::hex << code);
  }
  for (int c = 0; c < 256; ++c) {
    const char digit = static_cast<char>(c);
    const std::string_view hex = "0123456789abcdef", upper = "0123456789ABCDEF";
    const auto at = hex.find(digit), at_upper = upper.find(digit);
    const int expected = at != std::string_view::npos         ? static_cast<int>(at)
                         : at_upper != std::string_view::npos ? static_cast<int>(at_upper)
                                                              : -1;
    BOOST_TEST_REQUIRE(kvlab::hex_digit_value(digit) == expected, "character " << c);
  }
}

// Data too large for float attention or for a recipe's fp16 parts is an error explaining
// the range, never a result with NaN metrics.
BOOST_AUTO_TEST_CASE(data_beyond_the_float_and_fp16_ranges_is_refused_with_the_range) {
  const auto scaled = [](double factor) {
    kvlab::kv_data data = kvlab::load_data("synthetic:gaussian(L=1,H=1,Q=2,T=64,D=32,seed=1)");
    for (auto* t : {&data.keys, &data.values, &data.queries})
      for (float& x : t->values()) x = static_cast<float>(x * factor);
    return data;
  };
  const auto error_of = [](const std::string& recipe, const kvlab::kv_data& data) {
    return kvlab_test::message_of<kvlab::error>(
        [&] { kvlab::evaluate(kvlab::parse_recipe(recipe, kvlab::builtin_registry()), data, {.decode_steps = 8}); });
  };
  const auto huge = scaled(1e20);
  for (const std::string recipe : {"k=f32@token,v=f32@token", "k=int8@token,v=int8@token,scale=f32"}) {
    const std::string message = error_of(recipe, huge);
    BOOST_TEST(message.find("overflow float") != std::string::npos, recipe << ": " << message);
  }
  const auto large = scaled(1e6); // finite attention, beyond fp16
  const std::string residual = error_of("k=int8@token,v=f32@token,scale=f32,residual=8", large);
  BOOST_TEST(residual.find("keys of layer 0, KV head 0, appending token 0: value ") != std::string::npos, residual);
  BOOST_TEST(residual.find("beyond the fp16 range (65504) of the sink and residual tiers") != std::string::npos,
             residual);
  // The f16 quantizer saturates at +-65504 (a documented choice): finite, honest errors.
  const auto saturated = kvlab::evaluate(kvlab::parse_recipe("k=f16@token,v=f32@token", kvlab::builtin_registry()),
                                         large, {.decode_steps = 8});
  BOOST_TEST(std::isfinite(saturated.metric("attn_rel_l2").mean));
  BOOST_TEST(saturated.key_mse.mean > 1e9);
  const std::string scales = error_of("k=int8@token,v=f32@token", scaled(1e9));
  BOOST_TEST(scales.find("beyond the fp16 range (65504); use scale=f32") != std::string::npos, scales);
  const auto r = kvlab::evaluate(kvlab::parse_recipe("k=int8@token,v=f32@token,scale=f32", kvlab::builtin_registry()),
                                 large, {.decode_steps = 8});
  BOOST_TEST(std::isfinite(r.metric("attn_rel_l2").mean));
  BOOST_TEST(r.metric("attn_rel_l2").mean < 0.05);
}

// The memory check's cache estimate bounds what the cache holds, and closely.
BOOST_AUTO_TEST_CASE(cache_estimate_is_a_tight_upper_bound_without_eviction) {
  const auto data = kvlab::load_data("synthetic:gaussian(L=2,H=2,Q=4,T=512,D=64,seed=3)");
  for (const std::string text :
       {"k=int8@token,v=int8@token", "k=uint2@channel(32),v=uint2@group(32),residual=128",
        "k=f32@token,v=f16@token,scale=f32,sinks=4", "k=rht(lloyd3)@token,v=nf4@group(32)",
        "k=qjl(256)@token,v=int4@group(32)", "k=qjl(100)@token,v=f16@token",
        "k=qjl(32)@group(16),v=f16@token,residual=40",
        "k=residual(rht(lloyd2),qjl)@token,v=residual(int4,int2)@group(32),residual=16",
        "k=rht(polar)@token,v=polar(3,2,2)@group(32),sinks=2", "k=residual(rht(polar),qjl)@token,v=polar@group(16)",
        "k=rht(outliers(int4,1))@token,v=outliers(uint2,1)@group(32),residual=16"}) {
    BOOST_TEST_CONTEXT(text) {
      const auto recipe = kvlab::parse_recipe(text, kvlab::builtin_registry());
      const double estimate = kvlab::estimated_cache_bytes(recipe, 4, 512, 64);
      const auto held = static_cast<double>(kvlab::evaluate(recipe, data).cache_bytes);
      BOOST_TEST(estimate >= held);
      BOOST_TEST(estimate <= 1.1 * held);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
