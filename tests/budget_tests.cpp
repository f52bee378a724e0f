// Eviction budgets in bytes per token (recipe `budget=B`): every policy holds what fits B
// after every step once B covers what the policy protects, whatever the codec, fp16 tiers
// and demotion; streaming counts its sinks inside; the recipe part parses, round-trips and
// names its mistakes.
#include "test_files.hpp"

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>
import kvlab;

namespace {

std::vector<std::string> policies_with_a_budget() {
  std::vector<std::string> names;
  for (const auto& info : kvlab::builtin_registry().list())
    if (info.kind == kvlab::component_kind::eviction && info.at_budget) names.push_back(info.name);
  return names;
}

// Prefills every token of `data` into the cache of `recipe`, calling `check(cache, seen)`
// after each token's compression.
template <class Check>
void prefill_checking(const std::string& recipe, const kvlab::kv_data& data, Check check) {
  kvlab::kv_cache cache(kvlab::parse_recipe(recipe, kvlab::builtin_registry()), data.layers(), data.kv_heads(),
                        data.head_dim());
  kvlab::step_scratch scratch;
  for (std::size_t t = 0; t < data.tokens(); ++t) {
    kvlab::prefill_token(cache, data, t, data.tokens(), scratch, kvlab::active_kernels());
    check(cache, t + 1);
  }
}

const auto& small_llm() {
  static const auto data = kvlab::load_data("synthetic:llm(L=2,H=2,Q=4,T=400,D=32,seed=3)");
  return data;
}

} // namespace

BOOST_AUTO_TEST_SUITE(byte_budget)

// 4 stream pairs (2 layers x 2 KV heads) of head_dim 32. Per pair and token: fp16 keys and
// values 128 bytes; int4@group(16) 2 x (16 code bytes + 2 fp16 scales) = 40 bytes.
BOOST_AUTO_TEST_CASE(every_policy_holds_what_fits_the_budget_after_every_step) {
  struct codec {
    std::string recipe;
    double budget;     // bytes per token
    double pair_token; // bytes one held token costs a stream pair
  };
  const std::vector<codec> codecs{{"k=f16@token,v=f16@token", 128, 128},
                                  {"k=int4@group(16),v=int4@group(16)", 48, 40},
                                  {"k=f16@token,v=f16@token,demote=int4@group(16)", 256, 128 - 40}};
  const std::size_t streams = 4;
  for (const auto& policy : policies_with_a_budget())
    for (const auto& c : codecs) {
      const std::string recipe = c.recipe + ",evict=" + policy + ",budget=" + kvlab::format_number(c.budget);
      BOOST_TEST_CONTEXT(recipe) {
        std::size_t checked = 0;
        prefill_checking(recipe, small_llm(), [&](const kvlab::kv_cache& cache, std::size_t seen) {
          const double allowed = c.budget * static_cast<double>(seen);
          const double held = static_cast<double>(cache.bytes());
          // From 128 tokens on, every budget here covers snapkv's observation window of 32
          // (the most any policy protects); before, a policy's protected tokens may exceed it.
          if (seen < 128) return;
          BOOST_TEST_REQUIRE(held <= allowed, "after " << seen << " tokens");
          BOOST_TEST_REQUIRE(held > allowed - static_cast<double>(streams) * c.pair_token,
                             "after " << seen << " tokens");
          ++checked;
        });
        BOOST_TEST(checked == small_llm().tokens() - 127);
      }
    }
}

// fp16 tiers (sinks, the residual window) cost more than an int4 body token, and the count
// makes room for them: the budget still holds.
BOOST_AUTO_TEST_CASE(tokens_in_fp16_tiers_count_at_their_own_cost) {
  for (const auto& policy : policies_with_a_budget())
    for (const std::string tiers : {"sinks=4", "residual=8"}) {
      const std::string recipe = "k=int4@group(16),v=int4@group(16)," + tiers + ",evict=" + policy + ",budget=64";
      BOOST_TEST_CONTEXT(recipe) {
        prefill_checking(recipe, small_llm(), [&](const kvlab::kv_cache& cache, std::size_t seen) {
          if (seen < 160) return; // from here the budget covers the fp16 tiers and snapkv's window
          BOOST_TEST_REQUIRE(static_cast<double>(cache.bytes()) <= 64.0 * static_cast<double>(seen),
                             "after " << seen << " tokens");
        });
      }
    }
}

// StreamingLLM at a budget keeps its 4 sinks inside it: 4 sinks and the most recent tokens
// that fill the rest, never 4 more; while the budget is below 4 tokens, the sinks alone.
BOOST_AUTO_TEST_CASE(streaming_counts_its_sinks_inside_the_budget) {
  prefill_checking("k=f16@token,v=f16@token,evict=streaming,budget=128", small_llm(),
                   [](const kvlab::kv_cache& cache, std::size_t seen) {
                     const std::size_t sinks = std::min<std::size_t>(seen, 4);
                     const std::size_t keep = std::max(seen / 4, sinks); // 128 of 512 bytes per token
                     std::vector<std::size_t> expected;
                     for (std::size_t p = 0; p < seen; ++p)
                       if (p < sinks || p + (keep - sinks) >= seen) expected.push_back(p);
                     const auto held = cache.keys(1, 1).positions();
                     BOOST_TEST_REQUIRE(std::vector<std::size_t>(held.begin(), held.end()) == expected,
                                        "after " << seen << " tokens");
                   });
}

// With demotion nothing is dropped: every token is held, in the full tier or the 2-bit one,
// within the budget.
BOOST_AUTO_TEST_CASE(demotion_at_a_budget_holds_every_token_in_the_same_bytes) {
  prefill_checking("k=f16@token,v=f16@token,evict=h2o,budget=200,demote=uint2@token", small_llm(),
                   [](const kvlab::kv_cache& cache, std::size_t seen) {
                     BOOST_TEST_REQUIRE(cache.keys(0, 1).tokens() == seen);
                     if (seen >= 16)
                       BOOST_TEST_REQUIRE(static_cast<double>(cache.bytes()) <= 200.0 * static_cast<double>(seen));
                   });
}

BOOST_AUTO_TEST_CASE(budgets_round_trip_their_canonical_names) {
  for (const std::string r : {"k=f16@token,v=f16@token,evict=h2o,budget=512",
                              "k=int4@group(32),v=int4@group(32),sinks=4,evict=snapkv,budget=204.8,alloc=pyramid(20),"
                              "demote=uint2@token"}) {
    const auto parsed = kvlab::parse_recipe(r, kvlab::builtin_registry());
    BOOST_TEST(kvlab::canonical_name(parsed) == r);
    BOOST_TEST((kvlab::parse_recipe(kvlab::canonical_name(parsed), kvlab::builtin_registry()) == parsed));
  }
  // Parts in any order; the canonical name puts budget after evict.
  BOOST_TEST(
      kvlab::canonical_name(kvlab::parse_recipe("budget=5.12e2,k=f16@token,evict=tova", kvlab::builtin_registry())) ==
      "k=f16@token,v=f16@token,evict=tova,budget=512");
}

BOOST_AUTO_TEST_CASE(bad_budgets_name_the_problem) {
  const auto fails_with = [](const std::string& recipe, const std::string& part) {
    const std::string message =
        kvlab_test::message_of<kvlab::error>([&] { kvlab::parse_recipe(recipe, kvlab::builtin_registry()); });
    BOOST_TEST(!message.empty(), recipe << " was accepted");
    BOOST_TEST(kvlab_test::contains(message, part), recipe << ": " << message);
  };
  fails_with("k=f16@token,budget=512", "needs the policy that keeps it, for example evict=h2o,budget=512");
  fails_with("k=f16@token,evict=h2o(0.1,0.1),budget=512", "write the policy's bare name, one of");
  fails_with("k=f16@token,evict=none,budget=512", "eviction 'none' cannot take a budget in bytes");
  fails_with("k=f16@token,evict=h2o,budget=0", "a budget is a positive number of bytes per token");
  fails_with("k=f16@token,evict=h2o,budget=-3", "got '-3'");
  fails_with("k=f16@token,evict=h2o,budget=lots", "'lots' is not a valid number");
  fails_with("k=f16@token,evict=h2o,budget=1e13", "at most 1099511627776");
  fails_with("k=f16@token,evict=h2o,budget=8,budget=9", "'budget' is given twice");
  // What the budget buys depends on the cache's shape: checked when the cache is built.
  const auto builds_with = [](const std::string& recipe, const std::string& part) {
    const auto r = kvlab::parse_recipe(recipe, kvlab::builtin_registry());
    const std::string message = kvlab_test::message_of<kvlab::error>([&] { kvlab::kv_cache(r, 2, 2, 32); });
    BOOST_TEST(kvlab_test::contains(message, part), recipe << ": " << message);
  };
  builds_with("k=f16@token,v=f16@token,evict=h2o,budget=512",
              "budget=512 bytes per token holds every token of this cache (512 bytes per token without eviction)");
  builds_with("k=f16@token,v=f16@token,evict=h2o,budget=64,demote=int8@token",
              "is not above what the demoted tier alone holds (272 bytes per token)");
}

BOOST_AUTO_TEST_SUITE_END()
