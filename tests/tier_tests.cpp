// The tiered cache: KIVI's residual window and per-channel blocks, sinks, exact byte
// accounting, flat vs paged storage, and decode attention against its references.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <utility>
#include <vector>
import kvlab;

namespace {

kvlab::kv_cache make_cache(const std::string& recipe, std::size_t layers, std::size_t kv_heads, std::size_t head_dim) {
  return kvlab::kv_cache(kvlab::parse_recipe(recipe, kvlab::builtin_registry()), layers, kv_heads, head_dim);
}

// Flat storage whose stores run out of memory (std::bad_alloc) once `slots_left` more
// records have been appended, counted across every store it made.
struct exhaustible_storage {
  using component_concept = kvlab::storage_tag;
  std::shared_ptr<long> slots_left = std::make_shared<long>(1L << 40);

  struct store final : kvlab::record_store {
    std::unique_ptr<kvlab::record_store> records;
    std::shared_ptr<long> slots_left;
    std::span<std::uint8_t> append_slots(std::size_t n) override {
      if (*slots_left <= 0) throw std::bad_alloc();
      const auto slots = records->append_slots(std::min<std::size_t>(n, static_cast<std::size_t>(*slots_left)));
      *slots_left -= static_cast<long>(slots.size() / records->record_bytes());
      return slots;
    }
    void pop_back() override { records->pop_back(); }
    void reserve(std::size_t n) override { records->reserve(n); }
    std::span<const std::uint8_t> record(std::size_t i) const override { return records->record(i); }
    std::span<const std::uint8_t> run(std::size_t first) const override { return records->run(first); }
    std::size_t size() const noexcept override { return records->size(); }
    std::size_t record_bytes() const noexcept override { return records->record_bytes(); }
    std::size_t bytes_reserved() const noexcept override { return records->bytes_reserved(); }
    void erase(std::span<const std::size_t> sorted) override { records->erase(sorted); }
  };

  std::string name() const { return "exhaustible"; }
  std::unique_ptr<kvlab::record_store> make_store(std::size_t record_bytes) const {
    auto s = std::make_unique<store>();
    s->records = kvlab::builtin_registry().make_storage("flat").make_store(record_bytes);
    s->slots_left = slots_left;
    return s;
  }
};

void fill(kvlab::kv_cache& cache, const kvlab::kv_data& data, std::size_t tokens) {
  for (std::size_t t = 0; t < tokens; ++t)
    for (std::size_t l = 0; l < data.layers(); ++l)
      for (std::size_t h = 0; h < data.kv_heads(); ++h)
        cache.append(l, h, data.keys.row(l, h, t), data.values.row(l, h, t));
}

// Every query head's row of token t in `layer`, q_heads x head_dim: decode attention's input.
std::vector<float> query_rows(const kvlab::kv_data& data, std::size_t layer, std::size_t t) {
  std::vector<float> queries;
  for (std::size_t h = 0; h < data.q_heads(); ++h)
    std::ranges::copy(data.queries.row(layer, h, t), std::back_inserter(queries));
  return queries;
}

// Exact attention (double) over what the cache holds, decoded by the reference decoders.
std::vector<double> dequantize_then_attend(const kvlab::kv_cache& cache, std::size_t layer, std::size_t kv_head,
                                           std::span<const float> query) {
  const auto& keys = cache.keys(layer, kv_head);
  const auto& values = cache.values(layer, kv_head);
  const std::size_t d = cache.head_dim(), n = keys.tokens();
  std::vector<float> k(n * d), v(n * d);
  for (std::size_t t = 0; t < n; ++t) {
    keys.decode(t, std::span(k).subspan(t * d, d));
    values.decode(t, std::span(v).subspan(t * d, d));
  }
  std::vector<double> out(d);
  kvlab::exact_decode_attention(query, k, v, d, out);
  return out;
}

// Whether two caches hold the same tokens bit for bit in (layer 0, kv_head): positions,
// decoded keys and values, bytes, and decode attention with `query` (its fixed-point value
// path included).
void require_same_head(const kvlab::kv_cache& a, const kvlab::kv_cache& b, std::size_t kv_head,
                       std::span<const float> query) {
  const std::size_t d = a.head_dim();
  for (const auto& [x, y] :
       {std::pair{&a.keys(0, kv_head), &b.keys(0, kv_head)}, std::pair{&a.values(0, kv_head), &b.values(0, kv_head)}}) {
    BOOST_TEST_REQUIRE(x->tokens_seen() == y->tokens_seen());
    BOOST_TEST_REQUIRE(std::ranges::equal(x->positions(), y->positions()));
    BOOST_TEST_REQUIRE(x->bytes() == y->bytes());
    std::vector<float> p(x->tokens() * d), q(p.size());
    x->decode(0, x->tokens(), p);
    y->decode(0, y->tokens(), q);
    BOOST_TEST_REQUIRE(p == q);
  }
  if (a.keys(0, kv_head).tokens() == 0) return;
  std::vector<float> out_a(d), out_b(d);
  kvlab::decode_attention(a, 0, query, out_a, kvlab::active_kernels());
  kvlab::decode_attention(b, 0, query, out_b, kvlab::active_kernels());
  BOOST_TEST_REQUIRE(out_a == out_b);
}

} // namespace

BOOST_AUTO_TEST_SUITE(tiers)

BOOST_AUTO_TEST_CASE(kivi2_bytes_per_token_match_the_exact_formula) {
  // KIVI-2, head_dim 128: keys uint2@channel(32), values uint2@group(32), residual 128.
  //   key block of 32 tokens:  32 x 128 x 2 bits = 1024 B codes + 128 channels x (scale, zero) x 2 B = 1536 B
  //   value token:             128 x 2 bits = 32 B codes + 4 groups x (scale, zero) x 2 B = 48 B
  //   window token (K or V):   128 x 2 B = 256 B
  // After T tokens: key blocks b = floor((T - 128) / 32), key window T - 32 b (128..159);
  // value body T - 128, value window 128.
  const std::size_t head_dim = 128;
  auto cache = make_cache("k=uint2@channel(32),v=uint2@group(32),residual=128", 1, 1, head_dim);
  const auto data = kvlab::load_data("synthetic:gaussian(L=1,H=1,Q=1,T=4099,D=128,seed=2)");
  for (std::size_t t = 0; t < data.tokens(); ++t) {
    cache.append(0, 0, data.keys.row(0, 0, t), data.values.row(0, 0, t));
    const std::size_t n = t + 1;
    const std::size_t key_blocks = n >= 128 ? (n - 128) / 32 : 0, key_window = n - 32 * key_blocks;
    const std::size_t value_body = n > 128 ? n - 128 : 0, value_window = n - value_body;
    const std::size_t expected = key_blocks * 1536 + key_window * 256 + value_body * 48 + value_window * 256;
    BOOST_TEST_REQUIRE(cache.bytes() == expected, "after " << n << " tokens");
    BOOST_TEST_REQUIRE(cache.keys(0, 0).window_tokens() == key_window);
  }
  // Long-run rate: 48 B per token for keys and for values, plus the windows.
  BOOST_TEST(cache.bytes(0, 0) == cache.bytes());
  BOOST_TEST(static_cast<double>(cache.bytes()) / 4099.0 < 2 * 48.0 + 2 * 256.0 * 160 / 4099.0);
}

BOOST_AUTO_TEST_CASE(residual_window_and_sinks_return_their_tokens_bit_exact_in_fp16) {
  auto cache = make_cache("k=uint2@channel(32),v=int4@group(32),residual=40,sinks=4", 1, 1, 64);
  const auto data = kvlab::load_data("synthetic:gaussian(L=1,H=1,Q=1,T=300,D=64,seed=3)");
  fill(cache, data, 300);
  const auto& keys = cache.keys(0, 0);
  BOOST_TEST(keys.sink_tokens() == 4u);
  BOOST_TEST(keys.window_tokens() >= 40u);
  BOOST_TEST(keys.window_tokens() < 40u + 32u);
  BOOST_TEST((keys.body_tokens() % 32) == 0u);
  BOOST_TEST(keys.tokens() == 300u);
  std::vector<float> decoded(64);
  const auto exact_in_fp16 = [&](const kvlab::kv_stream& stream, const kvlab::kv_tensor& source, std::size_t t) {
    stream.decode(t, decoded);
    for (std::size_t c = 0; c < 64; ++c)
      BOOST_TEST_REQUIRE(decoded[c] == kvlab::round_to_half(source.row(0, 0, t)[c]), "token " << t);
  };
  for (std::size_t t = 0; t < 4; ++t) exact_in_fp16(keys, data.keys, t);
  for (std::size_t t = 300 - keys.window_tokens(); t < 300; ++t) exact_in_fp16(keys, data.keys, t);
  for (std::size_t t = 300 - 40; t < 300; ++t) exact_in_fp16(cache.values(0, 0), data.values, t);
}

// Eviction policies that read keys (knorm) get every held key from one ranged decode; it
// must give what decoding the tokens one at a time gives, in every tier and across the
// ragged per-channel blocks that erases leave.
BOOST_AUTO_TEST_CASE(a_range_of_held_tokens_decodes_as_its_tokens_do_one_by_one) {
  const auto data = kvlab::load_data("synthetic:gaussian(L=1,H=1,Q=1,T=300,D=64,seed=5)");
  for (const std::string recipe : {"k=uint2@channel(32),v=int4@group(32),residual=40,sinks=4",
                                   "k=rht(lloyd2)@token,v=nf4@group(16)", "k=bf16@token,v=f32@token,store=paged(16)",
                                   "k=f16@token,v=fp8_e4m3@token,evict=window(16),demote=int4@group(16)"}) {
    auto cache = make_cache(recipe, 1, 1, 64);
    fill(cache, data, 300);
    cache.compress(); // the demoting recipe moves all but 16 tokens to its lower tier
    for (kvlab::kv_stream* stream : {&cache.keys(0, 0), &cache.values(0, 0)}) {
      std::vector<std::size_t> victims; // inside blocks 0 and 1 and at the start of block 3
      for (const std::size_t t : {5u, 6u, 40u, 41u, 42u, 100u, 101u})
        if (t < stream->evictable_tokens()) victims.push_back(t);
      stream->erase(victims);
      const std::size_t n = stream->tokens();
      std::vector<float> one_by_one(n * 64);
      for (std::size_t t = 0; t < n; ++t) stream->decode(t, std::span(one_by_one).subspan(t * 64, 64));
      for (const auto [first, last] :
           {std::pair<std::size_t, std::size_t>{0, n}, {1, n - 1}, {3, 61}, {31, 97}, {n / 2, n}, {n - 1, n}, {7, 7}}) {
        std::vector<float> ranged((last - first) * 64, -1.0f);
        stream->decode(first, last - first, ranged);
        BOOST_TEST_REQUIRE(std::ranges::equal(ranged, std::span(one_by_one).subspan(first * 64, ranged.size())),
                           recipe << ": tokens [" << first << ", " << last << ")");
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(a_block_is_quantized_once_when_all_its_tokens_leave_the_window) {
  auto cache = make_cache("k=uint4@channel(8),v=f16@token,residual=5", 1, 1, 16);
  const auto data = kvlab::load_data("synthetic:gaussian(L=1,H=1,Q=1,T=64,D=16,seed=4)");
  std::vector<std::uint8_t> first_block;
  for (std::size_t t = 0; t < 64; ++t) {
    cache.append(0, 0, data.keys.row(0, 0, t), data.values.row(0, 0, t));
    const auto& keys = cache.keys(0, 0);
    const std::size_t n = t + 1;
    // Never a complete block beyond the residual left in the window.
    BOOST_TEST_REQUIRE(keys.window_tokens() < 5u + 8u);
    BOOST_TEST_REQUIRE(keys.body_tokens() == (n >= 5 ? (n - 5) / 8 * 8 : 0));
    if (keys.body_tokens() == 8 && first_block.empty()) {
      const auto record = keys.body().store().record(0);
      first_block.assign(record.begin(), record.end());
    }
  }
  // Later appends never touched (re-quantized) the first block.
  const auto record = cache.keys(0, 0).body().store().record(0);
  BOOST_TEST(std::vector<std::uint8_t>(record.begin(), record.end()) == first_block);
}

BOOST_AUTO_TEST_CASE(flat_and_paged_storage_give_bit_identical_attention) {
  const auto data = kvlab::load_data("synthetic:gaussian(L=2,H=2,Q=8,T=333,D=128,seed=5)");
  for (const std::string base : {"k=int4@group(32),v=int8@token", "k=uint2@channel(32),v=uint2@group(32),residual=64",
                                 "k=rht(lloyd3)@token,v=f16@token,sinks=4"}) {
    auto flat = make_cache(base, 2, 2, 128);
    auto paged = make_cache(base + ",store=paged(16)", 2, 2, 128);
    fill(flat, data, 333);
    fill(paged, data, 333);
    const auto& kernels = kvlab::active_kernels();
    for (std::size_t layer = 0; layer < 2; ++layer) {
      const auto queries = query_rows(data, layer, 332);
      std::vector<float> out_flat(8 * 128), out_paged(8 * 128);
      kvlab::decode_attention(flat, layer, queries, out_flat, kernels);
      kvlab::decode_attention(paged, layer, queries, out_paged, kernels);
      BOOST_TEST(out_flat == out_paged, base);
    }
    BOOST_TEST(paged.bytes() > flat.bytes(), "page padding and page tables are counted"); // 333 tokens, pages of 16
  }
}

BOOST_AUTO_TEST_CASE(erasing_half_of_one_head_frees_its_pages_and_nothing_else) {
  const std::size_t head_dim = 64, tokens = 160, page = 16;
  auto cache = make_cache("k=int8@token,v=int8@token,store=paged(16)", 1, 2, head_dim);
  const auto data = kvlab::load_data("synthetic:gaussian(L=1,H=2,Q=2,T=160,D=64,seed=6)");
  fill(cache, data, tokens);
  const std::size_t record = head_dim + 2; // int8 codes + fp16 scale
  const std::size_t page_bytes = page * record + sizeof(void*);
  BOOST_TEST(cache.bytes(0, 0) == 2 * (tokens / page) * page_bytes);
  const std::size_t other_head = cache.bytes(0, 1);
  // Drop every other token of head 0's keys: 80 records remain, 5 pages instead of 10.
  std::vector<std::size_t> victims;
  for (std::size_t t = 0; t < tokens; t += 2) victims.push_back(t);
  cache.keys(0, 0).erase(victims);
  BOOST_TEST(cache.keys(0, 0).tokens() == tokens / 2);
  BOOST_TEST(cache.bytes(0, 0) == (tokens / page) * page_bytes + (tokens / 2 / page) * page_bytes);
  BOOST_TEST(cache.bytes(0, 1) == other_head);
  // The survivors are the odd tokens, in order.
  std::vector<float> decoded(head_dim);
  for (std::size_t i = 0; i < tokens / 2; ++i) {
    cache.keys(0, 0).decode(i, decoded);
    for (std::size_t c = 0; c < head_dim; ++c)
      BOOST_TEST_REQUIRE(std::fabs(decoded[c] - data.keys.row(0, 0, 2 * i + 1)[c]) <= 0.05f);
  }
}

BOOST_AUTO_TEST_CASE(prefill_stores_what_token_by_token_appends_store) {
  const auto data = kvlab::load_data("synthetic:gaussian(L=1,H=2,Q=2,T=80,D=32,seed=11)");
  auto appended = make_cache("k=uint4@channel(16),v=int8@token,residual=8", 1, 2, 32);
  auto prefilled = make_cache("k=uint4@channel(16),v=int8@token,residual=8", 1, 2, 32);
  fill(appended, data, 80);
  prefilled.prefill(0, data.keys.values(), data.values.values(), 80);
  BOOST_TEST(prefilled.bytes() == appended.bytes());
  std::vector<float> a(32), b(32);
  for (std::size_t h = 0; h < 2; ++h)
    for (std::size_t t = 0; t < 80; ++t) {
      appended.keys(0, h).decode(t, a);
      prefilled.keys(0, h).decode(t, b);
      BOOST_TEST_REQUIRE(a == b);
    }
  BOOST_CHECK_THROW(prefilled.prefill(0, data.keys.values().first(10), data.values.values(), 80), kvlab::error);
}

BOOST_AUTO_TEST_CASE(two_threads_give_bit_identical_attention) {
  const auto data = kvlab::load_data("synthetic:llm(L=1,H=4,Q=8,T=300,D=64,seed=9)");
  auto cache = make_cache("k=uint2@channel(32),v=int4@group(32),residual=32,sinks=2", 1, 4, 64);
  fill(cache, data, 300);
  const auto queries = query_rows(data, 0, 299);
  std::vector<float> one(8 * 64), two(8 * 64);
  kvlab::attention_trace trace_one, trace_two;
  kvlab::decode_attention(cache, 0, queries, one, kvlab::active_kernels(), &trace_one, 1);
  kvlab::decode_attention(cache, 0, queries, two, kvlab::active_kernels(), &trace_two, 2);
  BOOST_TEST(one == two);
  BOOST_TEST(trace_one.probabilities == trace_two.probabilities);
}

// An eviction policy observing prefill tokens reads only the weights; they must be those
// of full decode attention, bit for bit, whatever the thread count.
BOOST_AUTO_TEST_CASE(attention_weights_are_the_decode_attention_trace) {
  const auto data = kvlab::load_data("synthetic:llm(L=1,H=2,Q=8,T=200,D=64,seed=4)");
  auto cache = make_cache("k=int4@group(32),v=int8@token,residual=16,sinks=2", 1, 2, 64);
  fill(cache, data, 200);
  const auto queries = query_rows(data, 0, 199);
  std::vector<float> out(8 * 64);
  kvlab::attention_trace full, weights_one, weights_two;
  kvlab::decode_attention(cache, 0, queries, out, kvlab::active_kernels(), &full);
  kvlab::attention_weights(cache, 0, queries, kvlab::active_kernels(), weights_one, 1);
  kvlab::attention_weights(cache, 0, queries, kvlab::active_kernels(), weights_two, 2);
  BOOST_TEST(full.probabilities.size() == 8u * 200u);
  BOOST_TEST(weights_one.probabilities == full.probabilities);
  BOOST_TEST(weights_one.log_sum_exp == full.log_sum_exp);
  BOOST_TEST(weights_two.probabilities == full.probabilities);
  BOOST_CHECK_THROW(kvlab::attention_weights(cache, 0, std::vector<float>(64), kvlab::active_kernels(), weights_one),
                    kvlab::error);
}

BOOST_AUTO_TEST_CASE(decode_attention_over_f32_matches_the_double_reference) {
  const auto data = kvlab::load_data("synthetic:gaussian(L=1,H=2,Q=8,T=1024,D=128,seed=7)");
  auto cache = make_cache("k=f32@token,v=f32@token", 1, 2, 128);
  fill(cache, data, 1024);
  const auto queries = query_rows(data, 0, 1023);
  std::vector<float> out(8 * 128);
  kvlab::decode_attention(cache, 0, queries, out, kvlab::active_kernels());
  for (std::size_t h = 0; h < 8; ++h) {
    std::vector<double> exact(128);
    kvlab::exact_decode_attention(data.queries.row(0, h, 1023), data.keys.stream(0, h / 4),
                                  data.values.stream(0, h / 4), 128, exact);
    const double error = kvlab::relative_l2(std::span(out).subspan(h * 128, 128), exact);
    BOOST_TEST(error < 1e-6, "query head " << h << ": " << error);
  }
}

BOOST_AUTO_TEST_CASE(decode_attention_over_every_recipe_matches_dequantize_then_attend) {
  const auto data = kvlab::load_data("synthetic:gaussian(L=1,H=2,Q=4,T=150,D=64,seed=8)");
  for (const auto& q : kvlab::builtin_registry().instances(kvlab::component_kind::quantizer)) {
    for (const std::string granularity : {"token", "group(32)", "channel(16)"}) {
      for (const std::string tiers : {"", ",residual=20,sinks=3"}) {
        const auto quantizer = kvlab::builtin_registry().make_quantizer(q);
        // A sketch holds keys only (values are decoded and summed).
        const std::string value = quantizer.invertible() ? q + "@" + granularity : "f16@token";
        const std::string recipe = "k=" + q + "@" + granularity + ",v=" + value + tiers;
        BOOST_TEST_CONTEXT(recipe) {
          // Scale bytes, a sketch's norm, a residual and a code of whole groups are per token.
          if (granularity.starts_with("channel") &&
              (!quantizer.scale_levels().empty() || !quantizer.invertible() || quantizer.residual() ||
               quantizer.format() == kvlab::element_format::group_code)) {
            BOOST_CHECK_THROW(make_cache(recipe, 1, 2, 64), kvlab::error);
            continue;
          }
          auto cache = make_cache(recipe, 1, 2, 64);
          fill(cache, data, 150);
          const auto queries = query_rows(data, 0, 149);
          std::vector<float> out(4 * 64);
          kvlab::attention_trace trace;
          kvlab::decode_attention(cache, 0, queries, out, kvlab::active_kernels(), &trace);
          for (std::size_t h = 0; h < 4; ++h) {
            const auto reference = dequantize_then_attend(cache, 0, h / 2, std::span(queries).subspan(h * 64, 64));
            BOOST_TEST(kvlab::relative_l2(std::span(out).subspan(h * 64, 64), reference) < 1e-5);
            double mass = 0.0;
            for (const float p : trace.head(h)) mass += p;
            BOOST_TEST(std::fabs(mass - 1.0) < 1e-5);
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(attention_trace_log_sum_exp_normalizes_the_scores) {
  auto cache = make_cache("k=f32@token,v=f32@token", 1, 1, 4);
  const std::vector<float> keys[] = {{1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 2, 0}};
  for (const auto& k : keys) cache.append(0, 0, k, k);
  const std::vector<float> query{2, 0, 2, 0};
  std::vector<float> out(4);
  kvlab::attention_trace trace;
  kvlab::decode_attention(cache, 0, query, out, kvlab::active_kernels(), &trace);
  // Scaled scores q.k / sqrt(4): 1, 0, 2.
  const double lse = std::log(std::exp(1.0) + std::exp(0.0) + std::exp(2.0));
  BOOST_TEST(trace.log_sum_exp[0] == lse, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(trace.probabilities[2] == std::exp(2.0 - lse), boost::test_tools::tolerance(1e-6));
}

BOOST_AUTO_TEST_CASE(tier_and_storage_errors_name_the_problem) {
  BOOST_CHECK_THROW(make_cache("k=int8@tensor", 1, 1, 64), kvlab::error);
  auto kivi = make_cache("k=uint2@channel(8),v=f16@token", 1, 1, 64);
  const std::vector<std::size_t> first{0};
  BOOST_CHECK_THROW(kivi.keys(0, 0).erase(first), kvlab::error); // holds no token 0 yet
  BOOST_CHECK_THROW(make_cache("k=int8@token,store=paged(0)", 1, 1, 64), kvlab::error);
  auto cache = make_cache("k=int8@token", 1, 1, 64);
  BOOST_CHECK_THROW(cache.append(0, 1, std::vector<float>(64), std::vector<float>(64)), kvlab::error);
  BOOST_CHECK_THROW(cache.append(0, 0, std::vector<float>(63), std::vector<float>(64)), kvlab::error);
  std::vector<float> out(64);
  BOOST_CHECK_THROW(kvlab::decode_attention(cache, 0, std::vector<float>(64), out, kvlab::active_kernels()),
                    kvlab::error); // no tokens yet
}

// A token no tier can hold (beyond fp16 in a sink or the window, not finite in the body)
// is refused whole: the stream neither counts it nor keeps a position for it, and the next
// token takes its place.
BOOST_AUTO_TEST_CASE(a_refused_token_leaves_no_trace_in_any_tier) {
  std::vector<float> good(32, 0.5f), too_large(32, 0.5f), not_finite(32, 0.5f);
  too_large[3] = 1e6f;
  not_finite[5] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<std::pair<std::string, std::vector<float>>> cases{
      {"k=int8@token,sinks=2", too_large},          // refused by the sinks
      {"k=int8@token,residual=4", too_large},       // by the residual window
      {"k=int8@token", not_finite},                 // by the body
      {"k=int8@token,store=paged(2)", not_finite}}; // by the body, on a page of its own or not
  for (const auto& [recipe, bad] : cases)
    for (const std::size_t before : {0u, 1u, 2u, 3u}) {
      if (recipe.find("sinks") != std::string::npos && before >= 2) continue; // the sinks are full
      BOOST_TEST_CONTEXT(recipe << ", after " << before << " tokens") {
        auto cache = make_cache(recipe, 1, 1, 32);
        for (std::size_t t = 0; t < before; ++t) cache.append(0, 0, good, good);
        const std::size_t bytes = cache.bytes();
        BOOST_CHECK_THROW(cache.append(0, 0, bad, good), kvlab::error);
        const kvlab::kv_stream& keys = cache.keys(0, 0);
        BOOST_TEST(keys.tokens_seen() == before);
        BOOST_TEST(keys.tokens() == before);
        BOOST_TEST(keys.positions().size() == before);
        BOOST_TEST(cache.bytes() == bytes); // storage gave back what the refused token took
        cache.append(0, 0, good, good);
        BOOST_TEST(keys.positions().size() == before + 1);
        BOOST_TEST(keys.positions().back() == before);
        std::vector<float> decoded(32);
        for (std::size_t t = 0; t <= before; ++t) { // every held token is the good one, exactly as encoded
          keys.decode(t, decoded);
          for (std::size_t c = 0; c < 32; ++c) BOOST_TEST(std::fabs(decoded[c] - 0.5f) < 0.01f);
        }
      }
    }
}

// Keys and values of a token are one append: a value the cache refuses takes the key back
// out, whichever tier the key went to, so both streams keep the same tokens.
BOOST_AUTO_TEST_CASE(a_refused_value_takes_its_key_back_out) {
  std::vector<float> good(32, 0.5f), not_finite(32, 0.5f);
  not_finite[31] = std::numeric_limits<float>::infinity();
  for (const std::string recipe :
       {"k=int8@token,v=int8@token", "k=f16@token,v=int4@group(32),store=paged(2)", "k=int8@token,sinks=2",
        "k=int8@token,residual=4", "k=uint2@channel(4),v=uint2@token,residual=2"})
    for (const std::size_t before : {0u, 1u, 2u, 3u, 5u}) {
      BOOST_TEST_CONTEXT(recipe << ", after " << before << " tokens") {
        auto cache = make_cache(recipe, 1, 1, 32);
        for (std::size_t t = 0; t < before; ++t) cache.append(0, 0, good, good);
        const std::size_t bytes = cache.bytes();
        BOOST_CHECK_THROW(cache.append(0, 0, good, not_finite), kvlab::error);
        for (const kvlab::kv_stream* stream : {&cache.keys(0, 0), &cache.values(0, 0)}) {
          BOOST_TEST(stream->tokens_seen() == before);
          BOOST_TEST(stream->tokens() == before);
        }
        BOOST_TEST(cache.bytes() == bytes);
        cache.append(0, 0, good, good);
        BOOST_TEST(cache.keys(0, 0).tokens() == cache.values(0, 0).tokens());
      }
    }
}

BOOST_AUTO_TEST_CASE(storage_out_of_memory_leaves_no_half_appended_token) {
  // Not only refused values: any exception from an append (here std::bad_alloc from the
  // store) takes the token's key back out, including a block its key moved from the window
  // to the body, and the cache goes on as if the append had not been tried.
  std::vector<float> token(32, 0.5f);
  int failures = 0;
  for (const std::string recipe : {"k=int8@token,v=int8@token", "k=int8@token,v=int8@token,residual=2",
                                   "k=uint2@channel(4),v=uint2@token,residual=2"})
    for (const std::size_t before : {0u, 2u, 3u, 6u})
      for (const long slots : {0L, 1L}) { // the key's slot fails, or the value's
        BOOST_TEST_CONTEXT(recipe << ", after " << before << " tokens, " << slots << " slots left") {
          auto parsed = kvlab::parse_recipe(recipe, kvlab::builtin_registry());
          exhaustible_storage storage;
          parsed.storage = kvlab::any_storage(storage);
          kvlab::kv_cache cache(parsed, 1, 1, 32);
          for (std::size_t t = 0; t < before; ++t) cache.append(0, 0, token, token);
          const std::size_t bytes = cache.bytes();
          *storage.slots_left = slots;
          bool failed = false; // an append that stores no record (into a window) cannot fail
          try {
            cache.append(0, 0, token, token);
          } catch (const std::bad_alloc&) {
            failed = true;
            ++failures;
          }
          const std::size_t held = failed ? before : before + 1;
          for (const kvlab::kv_stream* stream : {&cache.keys(0, 0), &cache.values(0, 0)}) {
            BOOST_TEST(stream->tokens_seen() == held);
            BOOST_TEST(stream->tokens() == held);
          }
          if (failed) BOOST_TEST(cache.bytes() == bytes);
          *storage.slots_left = 1L << 40;
          for (int t = 0; t < 5; ++t) cache.append(0, 0, token, token);
          BOOST_TEST(cache.keys(0, 0).tokens() == held + 5);
          BOOST_TEST(cache.values(0, 0).tokens() == held + 5);
        }
      }
  BOOST_TEST(failures >= 14); // both slots of every per-token case; flushes of the key and the value
}

// append_tokens encodes a run of records per kernel call where a stream takes tokens
// straight into its body, passes them through a residual window in one conversion where it
// has one, and appends sinks still to come one by one: either way the cache is the one
// `count` appends leave (key norms included).
BOOST_AUTO_TEST_CASE(appending_tokens_in_runs_stores_what_appends_one_by_one_store) {
  const auto data = kvlab::load_data("synthetic:llm(L=1,H=1,Q=1,T=120,D=64,seed=5)");
  const auto keys = data.keys.values(), values = data.values.values();
  const auto query = data.queries.row(0, 0, 119);
  for (const std::string recipe :
       {"k=int8@group(32),v=int4@group(32)", "k=fp8_e4m3@token,v=nf4@group(16)", "k=f16@token,v=bf16@token",
        "k=rht(int4)@group(32),v=lloyd2@group(32)", "k=uint4@group(16),v=uint2@group(32),store=paged(7)",
        "k=int8@token,v=int8@token,sinks=3", "k=uint2@channel(8),v=int4@group(32),residual=8",
        "k=int8@token,v=int4@group(32),evict=knorm,budget=60", "k=uint2@channel(32),v=uint2@group(32),residual=32",
        "k=int4@channel(16),v=int4@channel(16)", "k=uint2@channel(8),v=int4@group(32),residual=8,evict=knorm,budget=60",
        "k=int8@token,v=int4@group(32),residual=8,sinks=7,store=paged(7)",
        "k=rht(int4)@group(32),v=int8@token,residual=5"})
    BOOST_TEST_CONTEXT(recipe) {
      auto one_by_one = make_cache(recipe, 1, 1, 64), in_runs = make_cache(recipe, 1, 1, 64);
      for (std::size_t t = 0; t < 120; ++t) one_by_one.append(0, 0, data.keys.row(0, 0, t), data.values.row(0, 0, t));
      // 5 tokens one by one, then runs of 1, 50 and 64 tokens
      for (std::size_t t = 0; t < 5; ++t) in_runs.append(0, 0, data.keys.row(0, 0, t), data.values.row(0, 0, t));
      for (const auto& [first, count] : std::vector<std::pair<std::size_t, std::size_t>>{{5, 1}, {6, 50}, {56, 64}})
        in_runs.append_tokens(0, 0, keys.subspan(first * 64, count * 64), values.subspan(first * 64, count * 64),
                              count);
      require_same_head(one_by_one, in_runs, 0, query);
      if (one_by_one.evicts()) BOOST_TEST(one_by_one.score(0, 0) == in_runs.score(0, 0));
    }
}

// A token that cannot be encoded in a run is named, with its layer, head and tensor; the
// tokens before it stay in both streams, the cache as their appends one by one leave it
// (the value grid's bounds included), and appends go on from there.
BOOST_AUTO_TEST_CASE(a_token_refused_in_a_run_is_named_and_the_tokens_before_it_stay) {
  const auto data = kvlab::load_data("synthetic:llm(L=1,H=1,Q=1,T=40,D=32,seed=8)");
  const auto query = data.queries.row(0, 0, 39);
  for (const std::string recipe :
       {"k=int8@token,v=int4@group(32)", "k=int4@group(16),v=uint2@group(16),store=paged(4)"})
    for (const bool in_values : {false, true})
      BOOST_TEST_CONTEXT(recipe << (in_values ? ", a value refused" : ", a key refused")) {
        std::vector<float> keys(data.keys.values().begin(), data.keys.values().end());
        std::vector<float> values(data.values.values().begin(), data.values.values().end());
        (in_values ? values : keys)[(3 + 13) * 32 + 5] = std::numeric_limits<float>::quiet_NaN(); // token 16
        auto in_runs = make_cache(recipe, 1, 1, 32), one_by_one = make_cache(recipe, 1, 1, 32);
        for (std::size_t t = 0; t < 3; ++t) {
          in_runs.append(0, 0, data.keys.row(0, 0, t), data.values.row(0, 0, t));
          one_by_one.append(0, 0, data.keys.row(0, 0, t), data.values.row(0, 0, t));
        }
        try {
          in_runs.append_tokens(0, 0, std::span(keys).subspan(3 * 32, 30 * 32),
                                std::span(values).subspan(3 * 32, 30 * 32), 30);
          BOOST_ERROR("a NaN was appended");
        } catch (const kvlab::error& e) {
          const std::string message = e.what();
          BOOST_TEST(message.find(std::string(in_values ? "values" : "keys") +
                                  " of layer 0, KV head 0, appending token 16") == 0);
        }
        for (std::size_t t = 3; t < 16; ++t) one_by_one.append(0, 0, data.keys.row(0, 0, t), data.values.row(0, 0, t));
        require_same_head(one_by_one, in_runs, 0, query);
        for (std::size_t t = 17; t < 40; ++t) {
          in_runs.append(0, 0, data.keys.row(0, 0, t), data.values.row(0, 0, t));
          one_by_one.append(0, 0, data.keys.row(0, 0, t), data.values.row(0, 0, t));
        }
        require_same_head(one_by_one, in_runs, 0, query);
      }
}

// Through a residual window, a run stops where appends one by one stop: at the token holding
// a value fp16 cannot hold, or, when the body refuses a block leaving the window, at the
// token whose arrival moved it out. The error names that token; the tokens before it stay.
BOOST_AUTO_TEST_CASE(a_run_through_the_window_stops_where_appends_one_by_one_stop) {
  const auto data = kvlab::load_data("synthetic:llm(L=1,H=1,Q=1,T=40,D=32,seed=8)");
  const auto query = data.queries.row(0, 0, 39);
  struct refusal {
    std::string recipe;
    bool in_values;
    std::vector<std::pair<std::size_t, float>> set; // value index, value
    std::size_t token;                              // the token refused
  };
  const std::size_t d = 32;
  for (const auto& [recipe, in_values, set, token] : std::vector<refusal>{
           // fp16 cannot hold 1e6, nor a NaN: token 16 itself
           {"k=uint2@channel(8),v=int4@group(32),residual=8", false, {{16 * d + 5, 1e6f}}, 16},
           {"k=uint2@channel(8),v=int4@group(32),residual=8", true, {{16 * d + 5, NAN}}, 16},
           // uint1's scale (max - min) / 1 = 120000 is past fp16: token 16's per-token record
           // leaves the 4-token window when token 20 arrives
           {"k=int8@token,v=uint1@group(32),residual=4", true, {{16 * d + 1, 60000.0f}, {16 * d + 2, -60000.0f}}, 20},
           // the same for channel 5 of the key block of tokens 16-19, leaving at token 21
           {"k=uint1@channel(4),v=int8@token,residual=2",
            false,
            {{16 * d + 5, 60000.0f}, {17 * d + 5, -60000.0f}},
            21}})
    BOOST_TEST_CONTEXT(recipe << (in_values ? ", a value refused" : ", a key refused")) {
      std::vector<float> keys(data.keys.values().begin(), data.keys.values().end());
      std::vector<float> values(data.values.values().begin(), data.values.values().end());
      for (const auto& [at, value] : set) (in_values ? values : keys)[at] = value;
      auto in_runs = make_cache(recipe, 1, 1, d), one_by_one = make_cache(recipe, 1, 1, d);
      const auto row = [&](const std::vector<float>& rows, std::size_t t) { return std::span(rows).subspan(t * d, d); };
      for (std::size_t t = 0; t < 3; ++t) in_runs.append(0, 0, row(keys, t), row(values, t));
      std::string expected_message;
      for (std::size_t t = 0; t <= token; ++t) try {
          one_by_one.append(0, 0, row(keys, t), row(values, t));
        } catch (const kvlab::error& e) {
          expected_message = e.what();
          BOOST_TEST_REQUIRE(t == token);
        }
      BOOST_TEST_REQUIRE(expected_message.find(std::string(in_values ? "values" : "keys") +
                                               " of layer 0, KV head 0, appending token " + std::to_string(token)) ==
                         0);
      try {
        in_runs.append_tokens(0, 0, std::span(keys).subspan(3 * d, 30 * d), std::span(values).subspan(3 * d, 30 * d),
                              30);
        BOOST_ERROR("the run was not refused");
      } catch (const kvlab::error& e) {
        BOOST_TEST(std::string(e.what()) == expected_message);
      }
      require_same_head(one_by_one, in_runs, 0, query);
    }
}

// Storage out of memory in a run through a residual window: the tokens whose flushed
// records were stored stay, in both streams, and the cache goes on as appends one by one.
BOOST_AUTO_TEST_CASE(storage_out_of_memory_in_a_window_run_keeps_both_streams_at_the_same_tokens) {
  const auto data = kvlab::load_data("synthetic:llm(L=1,H=1,Q=1,T=40,D=32,seed=3)");
  const auto keys = data.keys.values(), values = data.values.values();
  const std::string recipe = "k=int8@token,v=int4@group(32),residual=4";
  for (const long slots : {0L, 7L, 16L, 19L, 33L}) BOOST_TEST_CONTEXT(slots << " slots left") {
      auto parsed = kvlab::parse_recipe(recipe, kvlab::builtin_registry());
      exhaustible_storage storage;
      parsed.storage = kvlab::any_storage(storage);
      kvlab::kv_cache cache(parsed, 1, 1, 32);
      *storage.slots_left = slots;
      // 20 tokens flush 16 records per stream, keys first; the values' m-th record, refused,
      // leaves with the arrival of token m + 4.
      const std::size_t expected = slots < 16 ? 0 : std::min<std::size_t>(20, static_cast<std::size_t>(slots) - 12);
      if (expected < 20)
        BOOST_CHECK_THROW(cache.append_tokens(0, 0, keys.first(20 * 32), values.first(20 * 32), 20), std::bad_alloc);
      else
        cache.append_tokens(0, 0, keys.first(20 * 32), values.first(20 * 32), 20);
      BOOST_TEST(cache.keys(0, 0).tokens() == expected);
      BOOST_TEST(cache.values(0, 0).tokens() == expected);
      *storage.slots_left = 1L << 40;
      auto one_by_one = make_cache(recipe, 1, 1, 32);
      for (std::size_t t = 0; t < expected; ++t)
        one_by_one.append(0, 0, data.keys.row(0, 0, t), data.values.row(0, 0, t));
      require_same_head(one_by_one, cache, 0, data.queries.row(0, 0, 39));
      for (std::size_t t = expected; t < 40; ++t) {
        cache.append(0, 0, data.keys.row(0, 0, t), data.values.row(0, 0, t));
        one_by_one.append(0, 0, data.keys.row(0, 0, t), data.values.row(0, 0, t));
      }
      require_same_head(one_by_one, cache, 0, data.queries.row(0, 0, 39));
    }
}

// Storage out of memory in a run: a key's failure leaves no token of the call behind; a
// value's leaves the tokens whose values were stored, in both streams; the cache goes on.
BOOST_AUTO_TEST_CASE(storage_out_of_memory_in_a_run_keeps_both_streams_at_the_same_tokens) {
  const auto data = kvlab::load_data("synthetic:llm(L=1,H=1,Q=1,T=40,D=32,seed=3)");
  const auto keys = data.keys.values(), values = data.values.values();
  for (const long slots : {0L, 7L, 19L, 20L, 33L}) BOOST_TEST_CONTEXT(slots << " slots left") {
      auto parsed = kvlab::parse_recipe("k=int8@token,v=int4@group(32)", kvlab::builtin_registry());
      exhaustible_storage storage;
      parsed.storage = kvlab::any_storage(storage);
      kvlab::kv_cache cache(parsed, 1, 1, 32);
      *storage.slots_left = slots;
      std::size_t expected = 0; // tokens held after the call
      if (slots >= 20) expected = std::min<std::size_t>(20, static_cast<std::size_t>(slots) - 20);
      BOOST_CHECK_THROW(cache.append_tokens(0, 0, keys.first(20 * 32), values.first(20 * 32), 20), std::bad_alloc);
      BOOST_TEST(cache.keys(0, 0).tokens() == expected);
      BOOST_TEST(cache.values(0, 0).tokens() == expected);
      BOOST_TEST(cache.keys(0, 0).tokens_seen() == expected);
      *storage.slots_left = 1L << 40;
      auto one_by_one = make_cache("k=int8@token,v=int4@group(32)", 1, 1, 32);
      for (std::size_t t = 0; t < expected; ++t)
        one_by_one.append(0, 0, data.keys.row(0, 0, t), data.values.row(0, 0, t));
      for (std::size_t t = expected; t < 40; ++t) {
        cache.append(0, 0, data.keys.row(0, 0, t), data.values.row(0, 0, t));
        one_by_one.append(0, 0, data.keys.row(0, 0, t), data.values.row(0, 0, t));
      }
      require_same_head(one_by_one, cache, 0, data.queries.row(0, 0, 39));
    }
}

BOOST_AUTO_TEST_SUITE_END()
