// Recipe strings: parse, canonical names, and the errors users see for bad parts.
#include <boost/test/unit_test.hpp>

#include "test_files.hpp"
#include <string>
import kvlab;

using namespace kvlab_test;

namespace {

// The message of the kvlab::error that parsing `text` throws ("" if none).
std::string parse_error(const std::string& text) {
  return kvlab_test::message_of<kvlab::error>([&] { kvlab::parse_recipe(text, kvlab::builtin_registry()); });
}

} // namespace

BOOST_AUTO_TEST_SUITE(recipes)

BOOST_AUTO_TEST_CASE(every_baseline_round_trips_through_its_canonical_name) {
  for (const auto& baseline : kvlab::configs::baselines()) {
    BOOST_TEST_CONTEXT(baseline.label) {
      const auto name = kvlab::canonical_name(baseline.value);
      const auto parsed = kvlab::parse_recipe(name, kvlab::builtin_registry());
      BOOST_TEST((parsed == baseline.value));
      BOOST_TEST(kvlab::canonical_name(parsed) == name);
    }
  }
}

BOOST_AUTO_TEST_CASE(parsing_fills_every_part_and_normalizes_spelling) {
  const auto r =
      kvlab::parse_recipe("v=int4@group( 32 ),k=int8@token,scale=f32,store=flat,evict=none", kvlab::builtin_registry());
  BOOST_TEST(r.keys.quantizer.name() == "int8");
  BOOST_TEST(r.keys.granularity.name() == "token");
  BOOST_TEST(r.values.quantizer.name() == "int4");
  BOOST_TEST(r.values.granularity.name() == "group(32)");
  BOOST_TEST((r.scale == kvlab::param_precision::f32));
  BOOST_TEST(kvlab::canonical_name(r) == "k=int8@token,v=int4@group(32),scale=f32");
}

BOOST_AUTO_TEST_CASE(canonical_name_lists_non_default_tiers) {
  const kvlab::any_recipe r =
      kvlab::recipe{.keys = kvlab::stream{kvlab::parts::int_q{8}, kvlab::parts::token{}}, .sinks = 4, .residual = 128};
  BOOST_TEST(kvlab::canonical_name(r) == "k=int8@token,v=f16@token,sinks=4,residual=128");
  BOOST_TEST((kvlab::parse_recipe(kvlab::canonical_name(r), kvlab::builtin_registry()) == r));
}

BOOST_AUTO_TEST_CASE(omitted_streams_default_to_f16_per_token) {
  const auto r = kvlab::parse_recipe("k=int8@token", kvlab::builtin_registry());
  BOOST_TEST(r.values.name() == "f16@token");
}

BOOST_AUTO_TEST_CASE(unknown_names_say_where_and_what_is_allowed) {
  // The allowed names come from the registry, so a new strategy file needs no edit here.
  const auto allowed = [](kvlab::component_kind kind) { return kvlab::builtin_registry().allowed(kind); };
  const auto quantizer = parse_error("k=int8@token,v=q4@token");
  BOOST_TEST(contains(quantizer, "recipe part 'v=q4@token'"), quantizer);
  BOOST_TEST(contains(quantizer, "unknown quantizer 'q4'; allowed: " + allowed(kvlab::component_kind::quantizer)),
             quantizer);
  BOOST_TEST(contains(allowed(kvlab::component_kind::quantizer), "int<b> (b = 2..8)"));
  const auto granularity = parse_error("k=int8@row");
  BOOST_TEST(
      contains(granularity, "unknown granularity 'row'; allowed: " + allowed(kvlab::component_kind::granularity)),
      granularity);
  const auto eviction = parse_error("k=int8@token,evict=h9o");
  BOOST_TEST(contains(eviction, "unknown eviction 'h9o'; allowed: " + allowed(kvlab::component_kind::eviction)),
             eviction);
  BOOST_TEST(contains(allowed(kvlab::component_kind::eviction), "h2o(H,R)"));
  const auto storage = parse_error("k=int8@token,store=ring");
  BOOST_TEST(contains(storage, "unknown storage 'ring'; allowed: " + allowed(kvlab::component_kind::storage)), storage);
  const auto width = parse_error("k=int1@token");
  BOOST_TEST(contains(width, "width 1 is outside 2..8"), width);
}

BOOST_AUTO_TEST_CASE(a_strategy_registered_twice_names_both_files) {
  kvlab::registry all;
  const kvlab::strategy_info window{.name = "window", .usage = "window(N)", .summary = "-", .paper = "-"};
  const auto make = [](const kvlab::strategy_args&) { return kvlab::parts::window{8}; };
  all.add("strategies/window.cppm", window, make);
  BOOST_TEST(all.list().front().source == "strategies/window.cppm");
  const std::string message =
      kvlab_test::message_of<kvlab::error>([&] { all.add("strategies/my_window.cppm", window, make); });
  BOOST_TEST(message == "strategies/my_window.cppm: eviction 'window' is registered twice (first by "
                        "strategies/window.cppm)",
             message);
  // Every built-in strategy knows its file.
  for (const auto& info : kvlab::builtin_registry().list()) BOOST_TEST(info.source.ends_with(".cppm"), info.name);
}

BOOST_AUTO_TEST_CASE(malformed_parts_are_rejected_with_their_position) {
  BOOST_TEST(contains(parse_error("k=int8@token,int8"), "recipe part 2 'int8': expected key=value"));
  BOOST_TEST(contains(parse_error("k=int8"), "recipe part 1 'k=int8': expected quantizer@granularity"));
  BOOST_TEST(contains(parse_error("k=int8@token,k=f16@token"), "'k' is given twice"));
  BOOST_TEST(contains(parse_error("k=int8@token,residual=lots"), "'lots' is not a valid number"));
  BOOST_TEST(contains(parse_error("k=int8@token,scale=f8"), "scale must be f16 or f32"));
  BOOST_TEST(contains(parse_error("k=int8@group(32"), "missing ')'"));
  BOOST_TEST(contains(parse_error("k=int8@group(32,16)"), "takes 1 argument"));
  BOOST_TEST(contains(parse_error("k=int8@group(0)"), "group size G (channels): '0' is outside 1..65536"));
  BOOST_TEST(contains(parse_error("k=int8@token,v="), "empty value for 'v'"));
  BOOST_TEST(contains(parse_error("k=in-t8@token"), "is not a valid name"));
}

BOOST_AUTO_TEST_CASE(numbers_outside_their_range_are_rejected_with_the_range) {
  // counts near 2^64 would wrap sums of tiers; budgets past an integer would convert with UB
  BOOST_TEST(contains(parse_error("k=int8@token,residual=18446744073709551600"),
                      "'18446744073709551600' is outside 0..1073741824"));
  BOOST_TEST(contains(parse_error("k=int8@token,sinks=99999999999999999999999"), "is out of range (the largest is"));
  BOOST_TEST(contains(parse_error("k=int8@token,evict=window(inf)"), "'inf' is not a finite number"));
  BOOST_TEST(contains(parse_error("k=int8@token,evict=window(nan)"), "'nan' is not a finite number"));
  BOOST_TEST(contains(parse_error("k=int8@token,evict=window(1e30)"), "whole number of tokens in 1..1073741824"));
  BOOST_TEST(contains(parse_error("k=int8@token,evict=h2o(inf,inf)"), "is not a finite number"));
  BOOST_TEST(contains(parse_error("k=int8@token,evict=streaming(4,3333333333333333333364)"), "1..1073741824"));
  BOOST_TEST(contains(parse_error("k=int8@token,evict=streaming(99999999999,8)"), "outside 0..1073741824"));
  BOOST_TEST(contains(parse_error("k=int8@token,evict=snapkv(8,0,3)"), "observation window W: '0' is outside"));
  BOOST_TEST(contains(parse_error("k=int8@token,evict=window(8),compress=every(0)"), "'0' is outside 1..1073741824"));
  BOOST_TEST(contains(parse_error("k=int8@token,evict=window(8),alloc=pyramid(inf)"), "is not a finite number"));
  BOOST_TEST(contains(parse_error("k=int8@channel(70000)"), "'70000' is outside 1..65536"));
  BOOST_TEST(contains(parse_error("k=int8@token,residual=-1"), "is not a valid number"));
  // the largest accepted values still parse
  BOOST_TEST(parse_error("k=int8@token,residual=1073741824,evict=window(1073741824)").empty());
}

BOOST_AUTO_TEST_CASE(deep_nesting_is_an_error_not_a_stack_overflow) {
  std::string deep;
  for (int i = 0; i < 12000; ++i) deep += "rht(";
  deep += "int4";
  for (int i = 0; i < 12000; ++i) deep += ")";
  BOOST_TEST(contains(parse_error("k=" + deep + "@token"), "parentheses nest deeper than 16 levels"));
  BOOST_TEST(parse_error("k=rht(rht(int4))@token").empty());
}

BOOST_AUTO_TEST_CASE(every_spelling_of_a_component_gets_one_canonical_name) {
  const auto name = [](const std::string& text) {
    return kvlab::canonical_name(kvlab::parse_recipe(text, kvlab::builtin_registry()));
  };
  BOOST_TEST(name("k=int08@token,v=uint002@group(032)") == "k=int8@token,v=uint2@group(32)");
  BOOST_TEST(name("k=rht(lloyd03)@token,evict=window(1e2)") == "k=rht(lloyd3)@token,v=f16@token,evict=window(100)");
  BOOST_TEST(name("k=int8@channel( 32 ),evict=h2o(0.50,8.0)") == "k=int8@channel(32),v=f16@token,evict=h2o(0.5,8)");
  BOOST_TEST(name("k=int4@token,store=paged(016)") == "k=int4@token,v=f16@token,store=paged(16)");
}

BOOST_AUTO_TEST_CASE(every_registered_name_round_trips_through_the_name_it_gives_itself) {
  const auto& r = kvlab::builtin_registry();
  const auto check = [&](kvlab::component_kind kind, auto&& make) {
    const auto instances = r.instances(kind);
    BOOST_TEST(!instances.empty(), kvlab::kind_name(kind));
    for (const auto& instance : instances) {
      BOOST_TEST_CONTEXT(instance) {
        const std::string first = make(instance).name();
        BOOST_TEST(make(first).name() == first);
      }
    }
  };
  using kind = kvlab::component_kind;
  check(kind::quantizer, [&](const std::string& t) { return r.make_quantizer(t); });
  check(kind::granularity, [&](const std::string& t) { return r.make_granularity(t); });
  check(kind::eviction, [&](const std::string& t) { return r.make_eviction(t); });
  check(kind::storage, [&](const std::string& t) { return r.make_storage(t); });
  check(kind::allocation, [&](const std::string& t) { return r.make_allocation(t); });
  check(kind::schedule, [&](const std::string& t) { return r.make_schedule(t); });
  check(kind::aggregation, [&](const std::string& t) { return r.make_aggregation(t); });
}

BOOST_AUTO_TEST_CASE(registry_rejects_a_name_registered_twice) {
  kvlab::registry r;
  const auto make = [](const kvlab::strategy_args&) { return kvlab::parts::none{}; };
  r.add({.name = "twice", .usage = "twice"}, make);
  BOOST_CHECK_THROW(r.add({.name = "twice", .usage = "twice"}, make), kvlab::error);
}

BOOST_AUTO_TEST_SUITE_END()
