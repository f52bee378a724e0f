// Helpers of the tests that check which recipes a cache refuses. Include after `import kvlab;`.
#pragma once
#include <boost/test/unit_test.hpp>

#include <string>

namespace kvlab_test {

// A cache built from `recipe` (one layer, one KV head, head_dim 64) must throw kvlab::error
// whose message contains `expected`.
inline void expect_cache_refused(const std::string& recipe, const std::string& expected) {
  BOOST_TEST_CONTEXT(recipe) {
    try {
      kvlab::kv_cache cache(kvlab::parse_recipe(recipe, kvlab::builtin_registry()), 1, 1, 64);
      BOOST_TEST(false, "accepted");
    } catch (const kvlab::error& e) {
      BOOST_TEST(std::string(e.what()).find(expected) != std::string::npos, e.what());
    }
  }
}

} // namespace kvlab_test
