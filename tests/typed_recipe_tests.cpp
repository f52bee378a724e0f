// Typed recipes (kvlab.compose): components as concept-checked values, erasure into the
// any_recipe that recipe strings parse into, and the combinations that do not compile.
#include <boost/test/unit_test.hpp>

#include "test_files.hpp"
#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <vector>
import kvlab;

using namespace kvlab_test;

namespace {

using namespace kvlab::parts;
using kvlab::stream;

// Quantizer-shaped, but never opted in.
struct untagged_quantizer {
  std::string name() const { return "untagged"; }
  unsigned bits() const { return 8; }
  unsigned params_per_group() const { return 1; }
  kvlab::element_format format() const { return kvlab::element_format::codebook; }
  std::span<const float> levels() const { return {}; }
  kvlab::group_params fit(std::span<const float>) const { return {}; }
  std::uint32_t encode(float, kvlab::group_params) const { return 0; }
  float decode(std::uint32_t, kvlab::group_params) const { return 0; }
};

using fp16 = stream<f16, token>;
using kvlab::CacheStream;
using kvlab::DemotionSlot;
using kvlab::EvictionPartsHaveAPolicy;
using kvlab::no_demotion;
using kvlab::own_schedule;

// The checks a typed recipe's body asserts, one per case; tests/compile_fail/ shows the
// compiler rejecting four of them in real recipes.
// A type that is not a Quantizer in the quantizer slot (or parts swapped).
static_assert(CacheStream<stream<int_q, token>>);
static_assert(!CacheStream<stream<int, token>>);
static_assert(!CacheStream<stream<untagged_quantizer, token>>);
static_assert(!CacheStream<stream<token, int_q>>);
static_assert(!CacheStream<int_q>);
// A granularity spanning the whole tensor cannot stream through a cache.
static_assert(CacheStream<stream<int_q, channel>>);
static_assert(!CacheStream<stream<int_q, tensor>>);
// Demoted tokens arrive one at a time: per-channel groups cannot hold them.
static_assert(DemotionSlot<stream<uint_q, token>>);
static_assert(DemotionSlot<stream<uint_q, group>>);
static_assert(DemotionSlot<no_demotion>);
static_assert(!DemotionSlot<stream<uint_q, channel>>);
static_assert(!DemotionSlot<stream<uint_q, tensor>>);
// Allocation, aggregation, schedule and demotion need an eviction policy.
static_assert(EvictionPartsHaveAPolicy<h2o, pyramid, gqa_max, every, fp16>);
static_assert(EvictionPartsHaveAPolicy<none, uniform, gqa_mean, own_schedule, no_demotion>);
static_assert(!EvictionPartsHaveAPolicy<none, pyramid, gqa_mean, own_schedule, no_demotion>);
static_assert(!EvictionPartsHaveAPolicy<none, uniform, gqa_max, own_schedule, no_demotion>);
static_assert(!EvictionPartsHaveAPolicy<none, uniform, gqa_mean, every, no_demotion>);
static_assert(!EvictionPartsHaveAPolicy<none, uniform, gqa_mean, own_schedule, fp16>);
// Components in the wrong slot.
static_assert(!kvlab::Allocation<h2o> && !kvlab::Eviction<pyramid> && !kvlab::ScheduleSlot<gqa_max>);
static_assert(!kvlab::Aggregation<step> && !kvlab::Storage<token>);

} // namespace

BOOST_AUTO_TEST_SUITE(typed_recipes)

BOOST_AUTO_TEST_CASE(a_typed_recipe_erases_into_the_recipe_its_string_parses_into) {
  const kvlab::any_recipe kivi2 =
      kvlab::recipe{.keys = stream{uint_q{2}, channel{32}}, .values = stream{uint_q{2}, group{32}}, .residual = 128};
  const auto parsed =
      kvlab::parse_recipe("k=uint2@channel(32),v=uint2@group(32),residual=128", kvlab::builtin_registry());
  BOOST_TEST(kvlab::canonical_name(kivi2) == kvlab::canonical_name(parsed));
  BOOST_TEST((kivi2 == parsed));
  // and both evaluate to the same bytes
  const auto data = kvlab::load_data("synthetic:llm(L=1,H=2,Q=4,T=96,D=64,seed=3)");
  BOOST_TEST(kvlab::to_json(kvlab::evaluate(kivi2, data, {.decode_steps = 4})) ==
             kvlab::to_json(kvlab::evaluate(parsed, data, {.decode_steps = 4})));
}

BOOST_AUTO_TEST_CASE(every_slot_composes_and_round_trips_its_canonical_name) {
  const kvlab::any_recipe full = kvlab::recipe{.keys = stream{rht{lloyd{3}}, token{}},
                                               .values = stream{fp8_e4m3{}, group{32}},
                                               .scale = kvlab::param_precision::f32,
                                               .sinks = 4,
                                               .residual = 16,
                                               .keys_before_rope = true,
                                               .eviction = snapkv{0.25, 16, 5},
                                               .allocation = adakv{0.5},
                                               .gqa = gqa_max{},
                                               .compress = every{8},
                                               .demote = stream{uint_q{2}, group{16}},
                                               .storage = paged{16}};
  const std::string name = kvlab::canonical_name(full);
  BOOST_TEST(name == "k=rht(lloyd3)@token,v=fp8_e4m3@group(32),scale=f32,sinks=4,residual=16,rope=pre,"
                     "evict=snapkv(0.25,16,5),alloc=adakv(0.5),gqa=max,compress=every(8),"
                     "demote=uint2@group(16),store=paged(16)");
  BOOST_TEST(kvlab::canonical_name(kvlab::parse_recipe(name, kvlab::builtin_registry())) == name);
  // Defaults are omitted, as in parsed recipes.
  const kvlab::any_recipe plain = kvlab::recipe{.keys = stream{int_q{8}, token{}}};
  BOOST_TEST(kvlab::canonical_name(plain) == "k=int8@token,v=f16@token");
  const kvlab::any_recipe dense_and_sparse = kvlab::recipe{.values = stream{outliers{uint_q{3}, 1.0}, group{32}}};
  BOOST_TEST(kvlab::canonical_name(dense_and_sparse) == "k=f16@token,v=outliers(uint3,1)@group(32)");
  const kvlab::any_recipe pyramid_h2o =
      kvlab::recipe{.eviction = h2o{64, 0.125}, .allocation = pyramid{}, .compress = prefill{}};
  BOOST_TEST(kvlab::canonical_name(pyramid_h2o) ==
             "k=f16@token,v=f16@token,evict=h2o(64,0.125),alloc=pyramid(20),compress=prefill");
}

BOOST_AUTO_TEST_CASE(every_baseline_and_config_recipe_round_trips) {
  std::vector<kvlab::any_recipe> all;
  for (const auto& b : kvlab::configs::baselines()) all.push_back(b.value);
  for (const auto& e : kvlab::builtin_experiments())
    if (e.cells)
      for (const auto& r : e.cells->recipes) all.push_back(r.value);
  BOOST_TEST(all.size() > 40u);
  for (const auto& r : all) {
    const std::string name = kvlab::canonical_name(r);
    BOOST_TEST((kvlab::parse_recipe(name, kvlab::builtin_registry()) == r), name);
  }
}

BOOST_AUTO_TEST_CASE(the_eviction_budget_sweep_covers_every_policy_the_registry_has) {
  // Derived from the registry: a policy file that sets at_budget joins the sweep unedited.
  std::size_t policies = 0;
  for (const auto& info : kvlab::builtin_registry().list())
    if (info.kind == kvlab::component_kind::eviction && info.at_budget) ++policies;
  BOOST_TEST(policies >= 7u);
  const auto recipes = kvlab::experiments::eviction_budget::recipes(kvlab::builtin_registry());
  // The full cache, every policy at 3 budgets, and h2o with demotion at 2 of them.
  BOOST_TEST(recipes.size() == 1 + 3 * policies + 2);
  for (const auto& info : kvlab::builtin_registry().list())
    if (info.kind == kvlab::component_kind::eviction && info.at_budget) {
      std::set<double> budgets;
      for (const auto& r : recipes)
        if (r.value.budget && r.value.budget->policy == info.name && r.label == info.name)
          budgets.insert(r.value.budget->bytes_per_token);
      BOOST_TEST(budgets.size() == 3u, info.name);
    }
}

BOOST_AUTO_TEST_CASE(typed_parameters_out_of_range_are_errors_naming_them) {
  BOOST_TEST(contains(message_of<kvlab::error>([] { (void)int_q{9}; }), "int<b>: b must be in 2..8, got 9"));
  BOOST_TEST(contains(message_of<kvlab::error>([] { (void)pyramid{0.5}; }), "beta must be >= 1"));
  BOOST_TEST(contains(message_of<kvlab::error>([] { (void)every{0}; }), "every(N): N must be in 1.."));
  BOOST_TEST(contains(message_of<kvlab::error>([] { (void)window{1.5}; }), "whole number of tokens"));
  // Aggregate fields are checked when a cache is built from them.
  const kvlab::any_recipe zero_group = kvlab::recipe{.keys = stream{int_q{8}, group{0}}};
  BOOST_TEST(contains(message_of<kvlab::error>([&] { kvlab::kv_cache(zero_group, 1, 1, 64); }),
                      "group(0): group size 0 must divide head_dim 64"));
  const kvlab::any_recipe bad_kernel = kvlab::recipe{.eviction = snapkv{16, 4, 4}};
  BOOST_TEST(
      contains(message_of<kvlab::error>([&] { kvlab::kv_cache(bad_kernel, 1, 1, 64); }), "the pooling kernel K odd"));
}

#ifdef KVLAB_TEST_STRATEGIES
BOOST_AUTO_TEST_CASE(an_allocation_rule_added_as_one_file_reaches_recipes_typed_and_parsed) {
  // tests/strategies/test_front_loaded.cppm is found by the build alone.
  const auto data = kvlab::load_data("synthetic:llm(L=4,H=1,Q=2,T=100,D=16,seed=7)");
  const kvlab::any_recipe typed = kvlab::recipe{.eviction = window{40}, .allocation = test_front_loaded{}};
  const auto parsed =
      kvlab::parse_recipe("k=f16@token,evict=window(40),alloc=test_front_loaded", kvlab::builtin_registry());
  BOOST_TEST((typed == parsed));
  kvlab::kv_cache cache(typed, 4, 1, 16);
  kvlab::step_scratch scratch;
  for (std::size_t t = 0; t < data.tokens(); ++t)
    kvlab::prefill_token(cache, data, t, data.tokens(), scratch, kvlab::active_kernels());
  std::vector<std::size_t> per_layer;
  for (std::size_t l = 0; l < 4; ++l) per_layer.push_back(cache.keys(l, 0).tokens());
  BOOST_TEST(per_layer == (std::vector<std::size_t>{60, 60, 20, 20}), boost::test_tools::per_element());
}
#endif

BOOST_AUTO_TEST_SUITE_END()
