// Compile-only checks: strategies satisfy their concept, and a type with the right shape
// but without the opt-in tag does not. These fail the build, not a test run.
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>
import kvlab;
import kvlab.strategies.f16;
import kvlab.strategies.int_symmetric;
import kvlab.strategies.token;
import kvlab.strategies.group;
import kvlab.strategies.none;
import kvlab.strategies.flat;

namespace {

using namespace kvlab;

// Quantizer-shaped, but never opted in.
struct untagged_quantizer {
  std::string name() const { return "untagged"; }
  unsigned bits() const { return 8; }
  unsigned params_per_group() const { return 1; }
  element_format format() const { return element_format::codebook; }
  std::span<const float> levels() const { return {}; }
  group_params fit(std::span<const float>) const { return {}; }
  std::uint32_t encode(float, group_params) const { return 0; }
  float decode(std::uint32_t, group_params) const { return 0; }
};
// Opted in with the wrong tag.
struct mistagged_quantizer : untagged_quantizer {
  using component_concept = granularity_tag;
};
// Opted in, but most of the interface (fit, encode, decode, ...) is missing.
struct incomplete_quantizer {
  using component_concept = quantizer_tag;
  std::string name() const { return "incomplete"; }
  unsigned bits() const { return 8; }
};
struct untagged_granularity {
  std::string name() const { return "g"; }
  kvlab::group_shape group_shape(std::size_t) const { return {}; }
};
struct untagged_eviction {
  std::string name() const { return "e"; }
  std::vector<std::size_t> victims(const eviction_view&) const { return {}; }
};
struct untagged_storage {
  std::string name() const { return "s"; }
  std::unique_ptr<record_store> make_store(std::size_t) const { return nullptr; }
};

static_assert(Quantizer<strategies::f16::float16>);
static_assert(Quantizer<strategies::int_symmetric::symmetric_int>);
static_assert(Granularity<strategies::token::per_token>);
static_assert(Granularity<strategies::group::channel_group>);
static_assert(Eviction<strategies::none::keep_all>);
static_assert(Storage<strategies::flat::flat_storage>);

static_assert(!Quantizer<untagged_quantizer>);
static_assert(!Quantizer<mistagged_quantizer>);
static_assert(!Quantizer<incomplete_quantizer>);
static_assert(!Granularity<untagged_granularity>);
static_assert(!Eviction<untagged_eviction>);
static_assert(!Storage<untagged_storage>);
// A component of one kind is not a component of another.
static_assert(!Granularity<strategies::int_symmetric::symmetric_int>);
static_assert(!Quantizer<strategies::token::per_token>);

} // namespace

BOOST_AUTO_TEST_SUITE(static_checks)

BOOST_AUTO_TEST_CASE(concept_checks_compiled) {
  // The assertions above ran at compile time; this case records that this file was built.
  BOOST_TEST(Quantizer<strategies::int_symmetric::symmetric_int>);
}

BOOST_AUTO_TEST_SUITE_END()
