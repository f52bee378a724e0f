// Recipe strings: parse, canonical names, and the errors users see for bad parts.
#include <boost/test/unit_test.hpp>

#include "test_files.hpp"
#include <string>
import kvlab;

using namespace kvlab_test;

namespace {

const kvlab::registry& components() { return kvlab::builtin_registry(); }

// The message of the kvlab::error that parsing `text` throws ("" if none).
std::string parse_error(const std::string& text) {
  try {
    kvlab::parse_recipe(text, components());
  } catch (const kvlab::error& e) {
    return e.what();
  }
  return "";
}

} // namespace

BOOST_AUTO_TEST_SUITE(recipes)

BOOST_AUTO_TEST_CASE(every_baseline_round_trips_through_its_canonical_name) {
  for (const auto& baseline : kvlab::configs::baselines()) {
    BOOST_TEST_CONTEXT(baseline.label) {
      const auto name = kvlab::canonical_name(baseline.value);
      const auto parsed = kvlab::parse_recipe(name, components());
      BOOST_TEST((parsed == kvlab::normalized(baseline.value, components())));
      BOOST_TEST(kvlab::canonical_name(parsed) == name);
    }
  }
}

BOOST_AUTO_TEST_CASE(parsing_fills_every_part_and_normalizes_spelling) {
  const auto r = kvlab::parse_recipe("v=int4@group( 32 ),k=int8@token,scale=f32,store=flat,evict=none", components());
  BOOST_TEST(r.keys.quantizer == "int8");
  BOOST_TEST(r.keys.granularity == "token");
  BOOST_TEST(r.values.quantizer == "int4");
  BOOST_TEST(r.values.granularity == "group(32)");
  BOOST_TEST((r.scale == kvlab::param_precision::f32));
  BOOST_TEST(kvlab::canonical_name(r) == "k=int8@token,v=int4@group(32),scale=f32");
}

BOOST_AUTO_TEST_CASE(canonical_name_lists_non_default_tiers) {
  const kvlab::recipe r{.keys = {.quantizer = "int8"}, .sinks = 4, .residual = 128};
  BOOST_TEST(kvlab::canonical_name(r) == "k=int8@token,v=f16@token,sinks=4,residual=128");
  BOOST_TEST((kvlab::parse_recipe(kvlab::canonical_name(r), components()) == r));
}

BOOST_AUTO_TEST_CASE(omitted_streams_default_to_f16_per_token) {
  const auto r = kvlab::parse_recipe("k=int8@token", components());
  BOOST_TEST(r.values.quantizer == "f16");
  BOOST_TEST(r.values.granularity == "token");
}

BOOST_AUTO_TEST_CASE(unknown_names_say_where_and_what_is_allowed) {
  const auto quantizer = parse_error("k=int8@token,v=q4@token");
  BOOST_TEST(contains(quantizer, "recipe part 'v=q4@token'"), quantizer);
  BOOST_TEST(
      contains(quantizer,
               "unknown quantizer 'q4'; allowed: bf16, f16, f32, fp8_e4m3, fp8_e4m3fnuz, fp8_e5m2, int<b> (b = 2..8)"),
      quantizer);
  const auto granularity = parse_error("k=int8@row");
  BOOST_TEST(contains(granularity, "unknown granularity 'row'; allowed: channel(G), group(G), tensor, token"),
             granularity);
  const auto eviction = parse_error("k=int8@token,evict=h9o");
  BOOST_TEST(contains(eviction, "unknown eviction 'h9o'; allowed: h2o(H,R), knorm(B), none, random(B,seed), "
                                "snapkv(B,W,K), streaming(S,N), tova(B), window(N)"),
             eviction);
  const auto storage = parse_error("k=int8@token,store=ring");
  BOOST_TEST(contains(storage, "unknown storage 'ring'; allowed: flat"), storage);
  const auto width = parse_error("k=int1@token");
  BOOST_TEST(contains(width, "width 1 is outside 2..8"), width);
}

BOOST_AUTO_TEST_CASE(malformed_parts_are_rejected_with_their_position) {
  BOOST_TEST(contains(parse_error("k=int8@token,int8"), "recipe part 2 'int8': expected key=value"));
  BOOST_TEST(contains(parse_error("k=int8"), "recipe part 1 'k=int8': expected quantizer@granularity"));
  BOOST_TEST(contains(parse_error("k=int8@token,k=f16@token"), "'k' is given twice"));
  BOOST_TEST(contains(parse_error("k=int8@token,residual=lots"), "'lots' is not a valid number"));
  BOOST_TEST(contains(parse_error("k=int8@token,scale=f8"), "scale must be f16 or f32"));
  BOOST_TEST(contains(parse_error("k=int8@group(32"), "missing ')'"));
  BOOST_TEST(contains(parse_error("k=int8@group(32,16)"), "takes 1 argument"));
  BOOST_TEST(contains(parse_error("k=int8@group(0)"), "group size must be positive"));
  BOOST_TEST(contains(parse_error("k=int8@token,v="), "empty value for 'v'"));
  BOOST_TEST(contains(parse_error("k=in-t8@token"), "is not a valid name"));
}

BOOST_AUTO_TEST_CASE(registry_rejects_a_name_registered_twice) {
  kvlab::registry r;
  const auto make = kvlab::registry::eviction_factory(
      [](const kvlab::strategy_args&) { return kvlab::builtin_registry().make_eviction("none"); });
  r.add({.name = "twice", .usage = "twice"}, make);
  BOOST_CHECK_THROW(r.add({.name = "twice", .usage = "twice"}, make), kvlab::error);
}

BOOST_AUTO_TEST_SUITE_END()
