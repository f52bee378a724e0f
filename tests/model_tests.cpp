// The model in the loop: the forward pass through kvlab's cache against a dense reference,
// determinism, and the llama2.c loader's checks.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "test_files.hpp"
import kvlab;

namespace {

const kvlab::model_config tiny_gqa{.architecture = "llama",
                                   .layers = 2,
                                   .hidden = 64,
                                   .heads = 4,
                                   .kv_heads = 2,
                                   .head_dim = 16,
                                   .ffn = 96,
                                   .vocab = 50,
                                   .context = 128,
                                   .rope = kvlab::rope_pairing::half_split};

std::vector<std::int32_t> token_sequence(std::size_t n, std::size_t vocab) {
  std::vector<std::int32_t> tokens(n);
  for (std::size_t i = 0; i < n; ++i) tokens[i] = static_cast<std::int32_t>((i * 7 + 3) % vocab);
  return tokens;
}

std::vector<float> cached_logits(const kvlab::model_config& c, const kvlab::model_weights& w, const std::string& recipe,
                                 std::span<const std::int32_t> tokens, unsigned threads) {
  const auto& components = kvlab::builtin_registry();
  kvlab::kv_cache cache(kvlab::parse_recipe(recipe, components), c.layers, c.kv_heads, c.head_dim);
  kvlab::cache_attention attention(cache, c, {.threads = threads});
  return kvlab::forward(c, w, tokens, 0, attention, 0, threads);
}

// Random weights with query and key projections 25x the initialisation's, so attention is
// far from uniform.
kvlab::model_weights peaked_weights(const kvlab::model_config& c, std::uint64_t seed) {
  kvlab::model_weights w = kvlab::random_weights(c, seed);
  for (auto& l : w.layers)
    for (auto* m : {&l.wq, &l.wk})
      for (auto& x : *m) x *= 25.0f;
  return w;
}

double max_abs_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double largest = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) largest = std::max(largest, std::abs(double{a[i]} - b[i]));
  return largest;
}

} // namespace

BOOST_AUTO_TEST_SUITE(model)

BOOST_AUTO_TEST_CASE(logits_are_bit_identical_for_any_thread_count) {
  const kvlab::model_config wide{
      .layers = 1, .hidden = 256, .heads = 8, .kv_heads = 2, .head_dim = 32, .ffn = 640, .vocab = 300, .context = 0};
  const kvlab::model_weights w = kvlab::random_weights(wide, 3);
  const auto tokens = token_sequence(64, wide.vocab);
  for (const std::string recipe : {"k=int4@group(32),v=int4@group(32)", "k=f16@token,v=f16@token,evict=h2o(16,8)"}) {
    const auto one = cached_logits(wide, w, recipe, tokens, 1);
    const auto two = cached_logits(wide, w, recipe, tokens, 2);
    BOOST_TEST(one == two);
  }
}

// An f32 cache loses nothing, so the logits are dense attention's to float rounding: with
// keys cached after RoPE (the fused kernels), and with keys cached before it (rope=pre,
// KVQuant, arXiv 2401.18079, sec. 3.2: attention rotates each decoded key by its position),
// for both RoPE pairings. A lossy cache really changes the logits (so the comparison can
// fail), and a lossy per-channel cache gives other logits before RoPE than after it.
BOOST_AUTO_TEST_CASE(f32_cache_reproduces_dense_attention_logits_to_float_rounding) {
  for (const auto pairing : {kvlab::rope_pairing::half_split, kvlab::rope_pairing::interleaved}) {
    kvlab::model_config c = tiny_gqa;
    c.rope = pairing;
    const kvlab::model_weights w = peaked_weights(c, 7);
    const auto tokens = token_sequence(40, c.vocab);
    kvlab::dense_attention dense(c);
    const auto reference = kvlab::forward(c, w, tokens, 0, dense, 0);
    for (const std::string rope : {"", ",rope=pre"}) {
      const auto f32 = cached_logits(c, w, "k=f32@token,v=f32@token" + rope, tokens, 1);
      BOOST_TEST(max_abs_difference(f32, reference) < 2e-5, rope);
      const auto int2 = cached_logits(c, w, "k=int2@token,v=int2@token" + rope, tokens, 1);
      BOOST_TEST(max_abs_difference(int2, reference) > 1e-3, rope);
    }
    const auto before = cached_logits(c, w, "k=uint2@channel(8),v=f16@token,rope=pre", tokens, 1);
    const auto after = cached_logits(c, w, "k=uint2@channel(8),v=f16@token", tokens, 1);
    BOOST_TEST(max_abs_difference(before, reference) > 1e-3);
    BOOST_TEST(max_abs_difference(before, after) > 1e-3);
    // Eviction observes the weights rotary attention traces.
    const auto evicting = cached_logits(c, w, "k=f32@token,v=f32@token,evict=h2o(12,6),rope=pre", tokens, 1);
    const auto evicting_after = cached_logits(c, w, "k=f32@token,v=f32@token,evict=h2o(12,6)", tokens, 1);
    BOOST_TEST(max_abs_difference(evicting, evicting_after) < 2e-5);
    BOOST_TEST(max_abs_difference(evicting, reference) > 1e-3);
  }
}

// The rotation rotary attention applies to one key is apply_rope's, bit for bit.
BOOST_AUTO_TEST_CASE(rotary_table_rotates_as_apply_rope) {
  for (const auto pairing : {kvlab::rope_pairing::half_split, kvlab::rope_pairing::interleaved}) {
    kvlab::rotary_table table(16, 10000.0, pairing);
    table.extend(300);
    BOOST_TEST(table.positions() == 300u);
    kvlab::random_stream random(5, 0);
    for (const std::size_t position : {0u, 1u, 17u, 299u}) {
      std::vector<float> row(16);
      for (auto& x : row) x = static_cast<float>(random.normal());
      auto expected = row;
      kvlab::apply_rope(expected, 1, 16, position, 10000.0, pairing);
      table.rotate(row, position);
      BOOST_TEST(row == expected);
    }
  }
}

BOOST_AUTO_TEST_CASE(keys_before_rope_need_the_model_and_their_positions) {
  const auto& components = kvlab::builtin_registry();
  const auto recipe = kvlab::parse_recipe("k=int4@channel(8),v=int4@token,rope=pre", components);
  BOOST_TEST(kvlab::canonical_name(recipe) == "k=int4@channel(8),v=int4@token,rope=pre");
  BOOST_TEST(kvlab::canonical_name(kvlab::parse_recipe("k=int4@token,rope=post", components)) ==
             "k=int4@token,v=f16@token");
  BOOST_CHECK_EXCEPTION(
      kvlab::parse_recipe("k=int4@token,rope=late", components), kvlab::error,
      [](const kvlab::error& e) { return kvlab_test::contains(e.what(), "rope must be pre or post"); });
  BOOST_CHECK_EXCEPTION(
      kvlab::parse_recipe("k=qjl@token,rope=pre", components), kvlab::error,
      [](const kvlab::error& e) { return kvlab_test::contains(e.what(), "rope=pre rotates decoded keys"); });
  // Data without a model has no RoPE to apply.
  const auto data = kvlab::load_data("synthetic:gaussian(L=1,H=2,Q=4,T=64,D=16,seed=3)");
  BOOST_CHECK_EXCEPTION(kvlab::evaluate(recipe, data), kvlab::error, [](const kvlab::error& e) {
    return kvlab_test::contains(e.what(), "keeps keys before RoPE (rope=pre)");
  });
  // A chunk whose first position is not the number of cached tokens.
  const kvlab::model_weights w = kvlab::random_weights(tiny_gqa, 9);
  kvlab::kv_cache cache(recipe, tiny_gqa.layers, tiny_gqa.kv_heads, tiny_gqa.head_dim);
  kvlab::cache_attention attention(cache, tiny_gqa, {});
  const auto tokens = token_sequence(8, tiny_gqa.vocab);
  BOOST_CHECK_EXCEPTION(kvlab::forward(tiny_gqa, w, tokens, 5, attention, 0), kvlab::error, [](const kvlab::error& e) {
    return kvlab_test::contains(e.what(), "a chunk at position 5 after 0 cached tokens");
  });
}

BOOST_AUTO_TEST_CASE(capture_records_what_the_model_attends_with) {
  const kvlab::model_weights w = kvlab::random_weights(tiny_gqa, 9);
  const auto tokens = token_sequence(24, tiny_gqa.vocab);
  const auto captured = kvlab::capture_kv(tiny_gqa, w, tokens, "test");
  const auto& d = captured.data;
  BOOST_TEST((d.keys.shape() == kvlab::kv_shape{2, 2, 24, 16}));
  BOOST_TEST((d.queries.shape() == kvlab::kv_shape{2, 4, 24, 16}));
  // RoPE applied to the recorded pre-RoPE keys gives the recorded keys, bit for bit.
  for (std::size_t layer = 0; layer < 2; ++layer)
    for (std::size_t h = 0; h < 2; ++h) {
      std::vector<float> rotated(captured.keys_before_rope.stream(layer, h).begin(),
                                 captured.keys_before_rope.stream(layer, h).end());
      kvlab::apply_rope(rotated, 1, 16, 0, tiny_gqa.rope_theta, tiny_gqa.rope);
      const auto keys = d.keys.stream(layer, h);
      BOOST_TEST(std::ranges::equal(rotated, keys));
      BOOST_TEST(!std::ranges::equal(captured.keys_before_rope.stream(layer, h), keys));
    }
  // The captured workload is what the cached forward pass attends with: an f32 cache over
  // it reproduces exact attention.
  const auto& components = kvlab::builtin_registry();
  const auto r = kvlab::evaluate(kvlab::parse_recipe("k=f32@token,v=f32@token", components), d, {.decode_steps = 8});
  BOOST_TEST(r.metric("attn_rel_l2").max < 1e-5);
}

BOOST_AUTO_TEST_CASE(llama2c_loader_rejects_malformed_checkpoints) {
  const auto expect_error = [](const std::string& bytes, const std::string& fragment) {
    kvlab_test::scratch_file file("model");
    file.write(bytes);
    BOOST_CHECK_EXCEPTION(kvlab::load_llama2c_checkpoint(file.path()), kvlab::error, [&](const kvlab::error& e) {
      const bool found = std::string(e.what()).find(fragment) != std::string::npos;
      if (!found) BOOST_TEST_MESSAGE("message: " << e.what());
      return found;
    });
  };
  const auto header = [](std::vector<std::int32_t> fields) {
    std::string bytes(fields.size() * 4, '\0');
    std::memcpy(bytes.data(), fields.data(), bytes.size());
    return bytes;
  };
  expect_error({}, "shorter than the 28-byte header");
  expect_error(header({0x616b3432, 1, 0, 0, 0, 0, 0}), "versioned llama2.c export");
  expect_error(header({64, 172, 0, 8, 4, 512, 512}), "n_layers is 0");
  expect_error(header({64, 172, 5, 8, 3, 512, 512}), "8 query heads is not a multiple of 3 KV heads");
  expect_error(header({64, 172, 5, 8, 4, 512, 512}), "needs 1056540 bytes; the file has 28 (is it truncated?)");
  expect_error(header({1 << 30, 1 << 30, 1 << 30, 1, 1, 1 << 30, 512}), "more than 2^40 parameters");
  // 2147483645 layers of 8589934604 floats each wrap around 2^64 to the 16 floats of this file
  // (tests/fuzz/corpus/llama2c/crash-parameter-count-wraps).
  expect_error(header({2, 1431655764, 2147483645, 1, 1, 24, 1}) + std::string(64, '\0'),
               "more than 2^40 parameters in all");
}

BOOST_AUTO_TEST_CASE(model_config_refuses_sizes_whose_parameter_count_wraps_around) {
  // Every size and the embedding below 2^40, but the FFN matrices hold 2^64 floats: 0 in
  // 64-bit arithmetic, which empty FFN tensors in a Hugging Face file would have matched.
  const kvlab::model_config c{
      .layers = 1, .hidden = 1 << 24, .heads = 1, .kv_heads = 1, .head_dim = 2, .ffn = 1ull << 40, .vocab = 1};
  BOOST_CHECK_EXCEPTION(kvlab::check_model_config(c, "config"), kvlab::error, [](const kvlab::error& e) {
    return std::string(e.what()) ==
           "config: the declared sizes give more than 2^40 parameters in all (a corrupt header?)";
  });
}

BOOST_AUTO_TEST_SUITE_END()
