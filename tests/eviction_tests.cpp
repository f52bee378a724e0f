// Eviction: every policy keeps exactly its budget after every step and storage really
// shrinks; streaming and h2o against brute-force references; ragged head budgets (adakv,
// pyramid); eviction composed with quantization and with demotion; bad recipes.
#include "test_files.hpp"

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <map>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>
import kvlab;

namespace {

kvlab::kv_cache make_cache(const std::string& recipe, const kvlab::kv_data& data) {
  return kvlab::kv_cache(kvlab::parse_recipe(recipe, kvlab::builtin_registry()), data.layers(), data.kv_heads(),
                         data.head_dim());
}

std::vector<std::size_t> held_positions(const kvlab::kv_stream& stream) {
  return {stream.positions().begin(), stream.positions().end()};
}

// Keys and values of every (layer, head) hold the same tokens.
void require_streams_agree(const kvlab::kv_cache& cache) {
  for (std::size_t l = 0; l < cache.layers(); ++l)
    for (std::size_t h = 0; h < cache.kv_heads(); ++h) {
      BOOST_TEST_REQUIRE(held_positions(cache.keys(l, h)) == held_positions(cache.values(l, h)));
      BOOST_TEST_REQUIRE(cache.keys(l, h).tokens() == cache.keys(l, h).positions().size());
    }
}

const auto& small_llm() {
  static const auto data = kvlab::load_data("synthetic:llm(L=2,H=2,Q=4,T=96,D=32,seed=3)");
  return data;
}

} // namespace

BOOST_AUTO_TEST_SUITE(eviction)

BOOST_AUTO_TEST_CASE(every_policy_keeps_its_budget_after_every_step_and_frees_the_bytes) {
  const auto& data = small_llm();
  const auto& kernels = kvlab::active_kernels();
  // int8 per token, flat storage: every held token costs the same measured record.
  const auto full = [&] {
    auto cache = make_cache("k=int8@token,v=int8@token", data);
    for (std::size_t t = 0; t < 10; ++t) kvlab::append_token(cache, data, t);
    return cache.bytes(0, 0) / 10;
  }();
  std::vector<std::string> policies = kvlab::builtin_registry().instances(kvlab::component_kind::eviction);
  for (const std::string extra : {"window(0.25)", "h2o(0.1,0.2)", "tova(0.3)", "knorm(0.5)", "random(0.2,7)"})
    policies.push_back(extra);
  for (const auto& policy : policies) {
    BOOST_TEST_CONTEXT(policy) {
      const std::string recipe = "k=int8@token,v=int8@token,evict=" + policy;
      auto cache = make_cache(recipe, data);
      const auto eviction = kvlab::builtin_registry().make_eviction(policy);
      const auto schedule = eviction.needs().schedule;
      const bool at_prefill = schedule && schedule->after_prefill();
      const std::size_t prefill = data.tokens();
      std::size_t expected = 0;
      kvlab::step_scratch scratch;
      for (std::size_t t = 0; t < prefill; ++t) {
        kvlab::prefill_token(cache, data, t, prefill, scratch, kernels);
        if (t + 1 == prefill) cache.prefill_done();
        // The budget, except that evicted tokens never come back: a budget that grows
        // faster than one token per step (sums of ratios) is reached step by step.
        expected = at_prefill && t + 1 < prefill ? t + 1 : std::min(expected + 1, eviction.budget(t + 1));
        for (std::size_t l = 0; l < data.layers(); ++l)
          for (std::size_t h = 0; h < data.kv_heads(); ++h) {
            BOOST_TEST_REQUIRE(cache.keys(l, h).tokens() == expected, "after token " << t);
            BOOST_TEST_REQUIRE(cache.bytes(l, h) == expected * full, "after token " << t);
          }
        require_streams_agree(cache);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(compress_every_n_lets_the_cache_grow_between_compressions) {
  const auto& data = small_llm();
  for (const std::string policy : {"window(10)", "h2o(6,4)"}) {
    auto cache = make_cache("k=int4@group(16),v=int4@group(16),evict=" + policy + ",compress=every(8)", data);
    std::size_t expected = 0;
    kvlab::step_scratch scratch;
    for (std::size_t t = 0; t < data.tokens(); ++t) {
      kvlab::prefill_token(cache, data, t, data.tokens(), scratch, kvlab::active_kernels());
      expected = (t + 1) % 8 == 0 ? std::min<std::size_t>(expected + 1, 10) : expected + 1;
      BOOST_TEST_REQUIRE(cache.keys(1, 0).tokens() == expected, policy << " after token " << t);
    }
    require_streams_agree(cache);
  }
}

// top_scores against a full sort by (score, index), on scores with many ties: every count
// of dropped tokens from none to past the one-pass path's limit, and a large selection.
BOOST_AUTO_TEST_CASE(top_scores_keeps_what_a_full_sort_keeps_ties_to_the_more_recent) {
  kvlab::random_stream random(7, 1);
  for (const std::size_t n : std::vector<std::size_t>{1, 2, 9, 40, 1000})
    for (std::size_t dropped = 0; dropped <= std::min<std::size_t>(n, 12); ++dropped) {
      std::vector<double> scores(n);
      for (auto& s : scores) s = std::floor(4.0 * random.uniform()); // values 0..3: ties everywhere
      if (n > 3) scores[n / 2] = kvlab::protected_score;
      std::vector<std::size_t> order(n);
      for (std::size_t i = 0; i < n; ++i) order[i] = i;
      std::ranges::sort(order, [&](std::size_t a, std::size_t b) {
        return scores[a] > scores[b] || (scores[a] == scores[b] && a > b);
      });
      std::vector<std::size_t> expected(order.begin(), order.end() - static_cast<std::ptrdiff_t>(dropped));
      std::ranges::sort(expected);
      BOOST_TEST_CONTEXT("n " << n << ", dropped " << dropped) {
        BOOST_TEST(kvlab::top_scores(scores, n - dropped) == expected, boost::test_tools::per_element());
      }
    }
}

BOOST_AUTO_TEST_CASE(streaming_keeps_exactly_the_first_4_and_the_last_n) {
  const auto& data = small_llm();
  auto cache = make_cache("k=f16@token,v=uint4@group(16),evict=streaming(4,10)", data);
  kvlab::step_scratch scratch;
  for (std::size_t t = 0; t < data.tokens(); ++t) {
    kvlab::prefill_token(cache, data, t, data.tokens(), scratch, kvlab::active_kernels());
    std::vector<std::size_t> expected;
    for (std::size_t p = 0; p <= t; ++p)
      if (p < 4 || p + 10 > t) expected.push_back(p);
    for (std::size_t h = 0; h < data.kv_heads(); ++h) BOOST_TEST_REQUIRE(held_positions(cache.keys(1, h)) == expected);
  }
}

// H2O, Algorithm 1 of arXiv 2306.14048, written out in double precision: after token t
// every held key adds the mean (over the query group) of its softmax weight; then all but
// the R most recent and the H heaviest of the others are dropped.
BOOST_AUTO_TEST_CASE(h2o_keeps_the_heaviest_accumulated_mass_like_a_brute_force_reference) {
  const auto data = kvlab::load_data("synthetic:gaussian(L=1,H=1,Q=2,T=60,D=16,seed=4)");
  const std::size_t heavy = 6, recent = 4, d = 16;
  auto cache = make_cache("k=f32@token,v=f32@token,evict=h2o(6,4)", data);
  std::vector<std::size_t> held;
  std::map<std::size_t, double> mass;
  kvlab::step_scratch scratch;
  for (std::size_t t = 0; t < data.tokens(); ++t) {
    kvlab::prefill_token(cache, data, t, data.tokens(), scratch, kvlab::active_kernels());
    held.push_back(t);
    mass[t] = 0.0;
    for (std::size_t q = 0; q < 2; ++q) {
      std::vector<double> logits;
      for (const std::size_t p : held) {
        double dot = 0.0;
        for (std::size_t c = 0; c < d; ++c) dot += double{data.queries.row(0, q, t)[c]} * data.keys.row(0, 0, p)[c];
        logits.push_back(dot / std::sqrt(double(d)));
      }
      const double top = *std::ranges::max_element(logits);
      double total = 0.0;
      for (auto& x : logits) total += (x = std::exp(x - top));
      for (std::size_t i = 0; i < held.size(); ++i) mass[held[i]] += logits[i] / total / 2.0;
    }
    if (held.size() > heavy + recent) {
      std::vector<std::size_t> older(held.begin(), held.end() - static_cast<std::ptrdiff_t>(recent));
      std::ranges::sort(older, [&](std::size_t a, std::size_t b) { return mass[a] > mass[b]; });
      std::vector<std::size_t> kept(older.begin(), older.begin() + static_cast<std::ptrdiff_t>(heavy));
      kept.insert(kept.end(), held.end() - static_cast<std::ptrdiff_t>(recent), held.end());
      std::ranges::sort(kept);
      held = kept;
    }
    BOOST_TEST_REQUIRE(held_positions(cache.keys(0, 0)) == held, "after token " << t);
  }
}

// knorm scores held keys by norms the cache keeps up to date as tokens arrive and as a
// residual window or a per-channel block is re-encoded into the body; after every step,
// what it keeps must be what the keys decoded one at a time say: the budget's smallest norms.
BOOST_AUTO_TEST_CASE(knorm_keeps_the_smallest_key_norms_like_a_brute_force_reference) {
  const auto data = kvlab::load_data("synthetic:llm(L=1,H=2,Q=2,T=150,D=32,seed=4)");
  for (const std::string keys : {"k=uint2@channel(16)", "k=rht(int4)@group(16),residual=8", "k=f16@token,sinks=2",
                                 "k=uint2@channel(16),residual=4"}) {
    auto cache = make_cache(keys + ",v=f16@token,evict=knorm(40)", data);
    std::size_t compared = 0;
    for (std::size_t t = 0; t < data.tokens(); ++t) {
      for (std::size_t h = 0; h < 2; ++h) cache.append(0, h, data.keys.row(0, h, t), data.values.row(0, h, t));
      std::vector<std::vector<std::pair<double, std::size_t>>> norms(2); // (norm, position) per head
      for (std::size_t h = 0; h < 2; ++h) {
        const auto& stream = cache.keys(0, h);
        std::vector<float> key(32);
        for (std::size_t i = 0; i < stream.evictable_tokens(); ++i) {
          stream.decode(i, key);
          double squares = 0.0;
          for (const float x : key) squares += double{x} * x;
          norms[h].emplace_back(std::sqrt(squares), stream.positions()[i]);
        }
      }
      cache.token_done();
      require_streams_agree(cache);
      for (std::size_t h = 0; h < 2; ++h) {
        const auto held = held_positions(cache.keys(0, h));
        BOOST_TEST_REQUIRE(held.size() == std::min<std::size_t>(t + 1, 40), keys);
        double largest_kept = 0.0, smallest_dropped = INFINITY;
        for (const auto& [norm, position] : norms[h]) {
          if (std::ranges::binary_search(held, position))
            largest_kept = std::max(largest_kept, norm);
          else
            smallest_dropped = std::min(smallest_dropped, norm);
        }
        BOOST_TEST_REQUIRE(largest_kept <= smallest_dropped, keys << ", head " << h << ", token " << t);
        compared += smallest_dropped < INFINITY;
      }
    }
    BOOST_TEST(compared == 2 * (data.tokens() - 40), keys);
  }
}

BOOST_AUTO_TEST_CASE(gqa_aggregation_max_and_mean_choose_differently_and_both_keep_the_budget) {
  const auto data = kvlab::load_data("synthetic:llm(L=1,H=1,Q=4,T=80,D=32,seed=5)");
  std::vector<std::vector<std::size_t>> choices;
  for (const std::string gqa : {"mean", "max"}) {
    auto cache = make_cache("k=f16@token,v=f16@token,evict=h2o(12,4),gqa=" + gqa, data);
    kvlab::step_scratch scratch;
    for (std::size_t t = 0; t < data.tokens(); ++t)
      kvlab::prefill_token(cache, data, t, data.tokens(), scratch, kvlab::active_kernels());
    BOOST_TEST(cache.keys(0, 0).tokens() == 16u);
    choices.push_back(held_positions(cache.keys(0, 0)));
  }
  BOOST_TEST(choices[0] != choices[1]);
}

BOOST_AUTO_TEST_CASE(adakv_gives_heads_different_counts_that_sum_to_the_layer_budget) {
  const auto data = kvlab::load_data("synthetic:llm(L=2,H=4,Q=8,T=128,D=32,seed=6)");
  auto cache = make_cache("k=f16@token,v=f16@token,evict=h2o(16,8),alloc=adakv(0.25)", data);
  kvlab::step_scratch scratch;
  for (std::size_t t = 0; t < data.tokens(); ++t) {
    kvlab::prefill_token(cache, data, t, data.tokens(), scratch, kvlab::active_kernels());
    const std::size_t budget = std::min<std::size_t>(t + 1, 24);
    for (std::size_t l = 0; l < 2; ++l) {
      std::size_t sum = 0;
      for (std::size_t h = 0; h < 4; ++h) {
        sum += cache.keys(l, h).tokens();
        BOOST_TEST_REQUIRE(cache.keys(l, h).tokens() >= budget / 4); // the safeguard, alpha x budget
      }
      BOOST_TEST_REQUIRE(sum == 4 * budget, "layer " << l << " after token " << t);
    }
  }
  std::set<std::size_t> counts;
  for (std::size_t l = 0; l < 2; ++l)
    for (std::size_t h = 0; h < 4; ++h) counts.insert(cache.keys(l, h).tokens());
  BOOST_TEST(counts.size() > 1u, "heads hold different numbers of tokens");
  require_streams_agree(cache);
}

BOOST_AUTO_TEST_CASE(pyramid_gives_lower_layers_more_with_the_same_total) {
  const auto data = kvlab::load_data("synthetic:llm(L=4,H=1,Q=2,T=100,D=16,seed=7)");
  auto cache = make_cache("k=f16@token,v=f16@token,evict=window(40),alloc=pyramid(4)", data);
  kvlab::step_scratch scratch;
  for (std::size_t t = 0; t < data.tokens(); ++t)
    kvlab::prefill_token(cache, data, t, data.tokens(), scratch, kvlab::active_kernels());
  std::vector<std::size_t> per_layer;
  for (std::size_t l = 0; l < 4; ++l) per_layer.push_back(cache.keys(l, 0).tokens());
  // top = 40 / 4 = 10, bottom = 2 x 40 - 10 = 70, linear in between; total 4 x 40.
  BOOST_TEST(per_layer == (std::vector<std::size_t>{70, 50, 30, 10}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(per_channel_key_blocks_lose_single_tokens_and_free_their_parameters_last) {
  const auto data = kvlab::load_data("synthetic:gaussian(L=1,H=1,Q=1,T=64,D=32,seed=8)");
  auto cache = make_cache("k=uint2@channel(16),v=f16@token", data);
  for (std::size_t t = 0; t < 64; ++t) kvlab::append_token(cache, data, t);
  auto& keys = cache.keys(0, 0);
  // Attention reads the (thinned) blocks exactly as their decoded tokens; it runs before
  // and after each erase, so a list of the blocks' runs kept from before an erase fails it.
  const std::vector<float> query(data.queries.row(0, 0, 63).begin(), data.queries.row(0, 0, 63).end());
  const auto check_attention = [&] {
    std::vector<float> scores(keys.tokens()), decoded(32);
    keys.dot_all(kvlab::active_kernels(), query, 1, scores);
    for (std::size_t t = 0; t < keys.tokens(); ++t) {
      keys.decode(t, decoded);
      double dot = 0.0;
      for (std::size_t c = 0; c < 32; ++c) dot += double{query[c]} * decoded[c];
      BOOST_TEST_REQUIRE(std::fabs(scores[t] - dot) < 1e-4 * (1.0 + std::fabs(dot)), "token " << t);
    }
  };
  check_attention();
  std::vector<std::vector<float>> before(64, std::vector<float>(32));
  for (std::size_t t = 0; t < 64; ++t) keys.decode(t, before[t]);
  const std::size_t row = 32 * 2 / 8, params = 32 * 2 * 2; // codes per token; scale and zero per channel
  BOOST_TEST(keys.bytes() == 64 * row + 4 * params);
  // Drop 15 of block 0's 16 tokens and 3 of block 2's: block 0 keeps its parameters for
  // its last token, and each thinned block's live count is stored (2 bytes per block).
  std::vector<std::size_t> victims;
  for (std::size_t t = 0; t < 15; ++t) victims.push_back(t);
  for (const std::size_t t : {33u, 40u, 47u}) victims.push_back(t);
  keys.erase(victims);
  BOOST_TEST(keys.bytes() == 46 * row + 4 * params + 4 * 2);
  check_attention();
  std::vector<std::size_t> survivors;
  for (std::size_t t = 0; t < 64; ++t)
    if (!std::ranges::binary_search(victims, t)) survivors.push_back(t);
  std::vector<float> after(32);
  for (std::size_t i = 0; i < survivors.size(); ++i) {
    keys.decode(i, after);
    BOOST_TEST_REQUIRE(after == before[survivors[i]], "token " << survivors[i] << " was re-quantized");
  }
  // Block 0's last token goes: its parameters go with it.
  const std::vector<std::size_t> last_of_block_0{0};
  keys.erase(last_of_block_0);
  BOOST_TEST(keys.bytes() == 45 * row + 3 * params + 3 * 2);
  check_attention();
}

BOOST_AUTO_TEST_CASE(eviction_composes_with_kivi_quantization_below_either_alone) {
  const auto data = kvlab::load_data("synthetic:llm(L=2,H=2,Q=8,T=1024,D=128,seed=1)");
  for (const std::string store : {"", ",store=paged(16)"}) {
    const std::string kivi = "k=uint2@channel(32),v=uint2@group(32),residual=128";
    const auto evaluate = [&](const std::string& r) {
      return kvlab::evaluate(kvlab::parse_recipe(r + store, kvlab::builtin_registry()), data);
    };
    const auto both = evaluate(kivi + ",evict=h2o(0.1,0.1)");
    const auto quantized = evaluate(kivi);
    const auto evicted = evaluate("k=f16@token,v=f16@token,evict=h2o(0.1,0.1)");
    BOOST_TEST(both.tokens_kept == std::ceil(0.1 * 1024) * 2, store);
    BOOST_TEST(both.bytes_per_token < quantized.bytes_per_token, store);
    BOOST_TEST(both.bytes_per_token < evicted.bytes_per_token, store);
    BOOST_TEST(both.metric("attn_rel_l2").mean > 0.0);
  }
}

// Erasure compacts paged storage page by page, where flat storage moves one buffer; the
// records and their order are the same, so an evicting eval measures the same attention
// (runs of records split at page boundaries change no result).
BOOST_AUTO_TEST_CASE(evicting_into_paged_storage_measures_what_flat_storage_does) {
  const auto data = kvlab::load_data("synthetic:llm(L=2,H=2,Q=8,T=600,D=64,seed=4)");
  for (const std::string recipe :
       {"k=f16@token,v=f16@token,evict=h2o(0.1,0.1)", "k=int4@group(32),v=int4@group(32),evict=tova(0.2)",
        "k=uint2@channel(32),v=uint2@group(32),residual=64,evict=h2o(0.1,0.1)"}) {
    const auto flat = kvlab::evaluate(kvlab::parse_recipe(recipe, kvlab::builtin_registry()), data);
    const auto paged =
        kvlab::evaluate(kvlab::parse_recipe(recipe + ",store=paged(4)", kvlab::builtin_registry()), data);
    BOOST_TEST(flat.tokens_kept == paged.tokens_kept, recipe);
    BOOST_TEST_REQUIRE(flat.per_step.size() == paged.per_step.size());
    for (std::size_t m = 0; m < flat.per_step.size(); ++m) {
      const auto &a = flat.per_step[m].stats, &b = paged.per_step[m].stats;
      BOOST_TEST((a.mean == b.mean && a.min == b.min && a.max == b.max), recipe << ": " << flat.per_step[m].name);
    }
    BOOST_TEST(flat.key_mse.mean == paged.key_mse.mean, recipe);
    BOOST_TEST(flat.value_mse.mean == paged.value_mse.mean, recipe);
  }
}

BOOST_AUTO_TEST_CASE(demoted_tokens_stay_readable_in_a_lower_precision_tier) {
  const auto& data = small_llm();
  auto cache = make_cache("k=f16@token,v=f16@token,evict=window(16),demote=int4@group(16)", data);
  kvlab::step_scratch scratch;
  for (std::size_t t = 0; t < data.tokens(); ++t)
    kvlab::prefill_token(cache, data, t, data.tokens(), scratch, kvlab::active_kernels());
  require_streams_agree(cache);
  const auto& keys = cache.keys(0, 1);
  BOOST_TEST(keys.tokens() == data.tokens()); // nothing dropped
  BOOST_TEST(keys.evictable_tokens() == 16u);
  BOOST_TEST(keys.demoted_tokens() == data.tokens() - 16);
  // 16 fp16 tokens + 80 demoted ones (16 codes of 4 bits + fp16 scale per group of 16).
  BOOST_TEST(keys.bytes() == 16 * 64 + 80 * (16 + 2 * 2));
  // Each held token decodes to its own source row (int4 error, not another token's values).
  std::vector<float> decoded(32);
  for (std::size_t i = 0; i < keys.tokens(); ++i) {
    keys.decode(i, decoded);
    const auto source = data.keys.row(0, 1, keys.positions()[i]);
    double error = 0.0, signal = 0.0;
    for (std::size_t c = 0; c < 32; ++c) error += std::pow(decoded[c] - source[c], 2), signal += source[c] * source[c];
    BOOST_TEST_REQUIRE(error < 0.05 * signal, "held token " << i);
  }
}

BOOST_AUTO_TEST_CASE(the_same_recipe_and_seed_give_identical_results) {
  const auto data = kvlab::load_data("synthetic:llm(L=2,H=2,Q=4,T=200,D=32,seed=9)");
  for (const std::string r : {"k=int4@group(32),v=int4@group(32),evict=random(0.3,5)",
                              "k=f16@token,v=f16@token,evict=snapkv(0.25,16,5),alloc=adakv"}) {
    const auto recipe = kvlab::parse_recipe(r, kvlab::builtin_registry());
    BOOST_TEST(kvlab::to_json(kvlab::evaluate(recipe, data)) == kvlab::to_json(kvlab::evaluate(recipe, data)));
  }
}

BOOST_AUTO_TEST_CASE(bad_eviction_recipes_name_the_problem) {
  const auto fails_with = [](const std::string& recipe, const std::string& part) {
    const std::string message =
        kvlab_test::message_of<kvlab::error>([&] { kvlab::parse_recipe(recipe, kvlab::builtin_registry()); });
    BOOST_TEST(!message.empty(), recipe << " was accepted");
    BOOST_TEST(kvlab_test::contains(message, part), recipe << ": " << message);
  };
  fails_with("k=f16@token,evict=window(0)", "budget");
  fails_with("k=f16@token,evict=window(1.5)", "whole number");
  fails_with("k=f16@token,evict=window(abc)", "window(abc)");
  fails_with("k=f16@token,evict=window", "takes 1 argument");
  fails_with("k=f16@token,evict=h2o(0.1)", "h2o(H,R)");
  fails_with("k=f16@token,evict=snapkv(64,8,4)", "odd");
  fails_with("k=f16@token,evict=snapkv(64,0,5)", "observation window W: '0' is outside 1..");
  fails_with("k=f16@token,evict=lru(5)", "lru");
  fails_with("k=f16@token,evict=h2o(4,4),alloc=fair",
             "unknown allocation 'fair'; allowed: " +
                 kvlab::builtin_registry().allowed(kvlab::component_kind::allocation));
  fails_with("k=f16@token,evict=h2o(4,4),alloc=adakv(2)", "alpha must be in [0, 1], got 2");
  fails_with("k=f16@token,evict=h2o(4,4),gqa=median",
             "unknown aggregation 'median'; allowed: " +
                 kvlab::builtin_registry().allowed(kvlab::component_kind::aggregation));
  fails_with("k=f16@token,evict=h2o(4,4),compress=every(0)", "'every(0)', N: '0' is outside 1..");
  fails_with("k=f16@token,evict=h2o(4,4),compress=sometimes",
             "unknown schedule 'sometimes'; allowed: " +
                 kvlab::builtin_registry().allowed(kvlab::component_kind::schedule));
  fails_with("k=f16@token,evict=h2o(4,4),demote=uint2", "quantizer@granularity");
  fails_with("k=f16@token,evict=h2o(4,4),demote=uint9@token", "uint9");
  fails_with("k=f16@token,demote=uint2@token", "need an eviction policy");
  fails_with("k=f16@token,alloc=adakv", "need an eviction policy");
  // Demotion needs per-token groups: known only with the head dimension, at cache construction.
  const auto r =
      kvlab::parse_recipe("k=f16@token,v=f16@token,evict=h2o(4,4),demote=uint2@channel(16)", kvlab::builtin_registry());
  BOOST_CHECK_EXCEPTION(kvlab::kv_cache(r, 1, 1, 32), kvlab::error, [](const kvlab::error& e) {
    return std::string(e.what()).find("per-token groups") != std::string::npos;
  });
}

BOOST_AUTO_TEST_CASE(recipes_with_eviction_round_trip_their_canonical_names) {
  for (const std::string r : {"k=f16@token,v=f16@token,evict=h2o(0.1,0.1)",
                              "k=uint2@channel(32),v=uint2@group(32),residual=128,evict=h2o(0.1,0.1)",
                              "k=f16@token,v=f16@token,evict=snapkv(64,8,5),alloc=adakv(0.2),gqa=max,compress=every(16)"
                              ",demote=uint2@token,store=paged(16)",
                              "k=f16@token,v=f16@token,evict=streaming(4,128),alloc=pyramid(20)"}) {
    const auto parsed = kvlab::parse_recipe(r, kvlab::builtin_registry());
    BOOST_TEST(kvlab::canonical_name(parsed) == r);
    BOOST_TEST((kvlab::parse_recipe(kvlab::canonical_name(parsed), kvlab::builtin_registry()) == parsed));
  }
  // Defaults are spelled out in normalized form.
  BOOST_TEST(
      kvlab::canonical_name(kvlab::parse_recipe("k=f16@token,evict=h2o(4,4),alloc=adakv", kvlab::builtin_registry())) ==
      "k=f16@token,v=f16@token,evict=h2o(4,4),alloc=adakv(0.2)");
}

BOOST_AUTO_TEST_SUITE_END()
