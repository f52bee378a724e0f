// Data specs: the Gaussian generator and every kind of bad spec.
#include "test_files.hpp"

#include <boost/test/unit_test.hpp>

#include <cmath>
#include <string>
import kvlab;

namespace {

std::string load_error(const std::string& spec) {
  return kvlab_test::message_of<kvlab::error>([&] { kvlab::load_data(spec); });
}

} // namespace

BOOST_AUTO_TEST_SUITE(data)

BOOST_AUTO_TEST_CASE(gaussian_has_the_requested_shape_and_unit_variance) {
  const auto d = kvlab::load_data("synthetic:gaussian(L=3,H=2,Q=6,T=500,D=64,seed=4)");
  BOOST_TEST((d.keys.shape() == kvlab::kv_shape{3, 2, 500, 64}));
  BOOST_TEST((d.values.shape() == kvlab::kv_shape{3, 2, 500, 64}));
  BOOST_TEST((d.queries.shape() == kvlab::kv_shape{3, 6, 500, 64}));
  double sum = 0, squares = 0;
  for (const float x : d.keys.values()) {
    sum += x;
    squares += double{x} * x;
  }
  const double n = static_cast<double>(d.keys.values().size());
  BOOST_TEST(std::fabs(sum / n) < 0.01);
  BOOST_TEST(std::fabs(squares / n - 1.0) < 0.02);
}

BOOST_AUTO_TEST_CASE(gaussian_is_reproducible_per_seed) {
  const auto a = kvlab::load_data("synthetic:gaussian(T=16,seed=2)");
  const auto b = kvlab::load_data("synthetic:gaussian(T=16,seed=2)");
  const auto c = kvlab::load_data("synthetic:gaussian(T=16,seed=3)");
  BOOST_TEST(std::ranges::equal(a.keys.values(), b.keys.values()));
  BOOST_TEST(!std::ranges::equal(a.keys.values(), c.keys.values()));
  BOOST_TEST(!std::ranges::equal(a.keys.values(), a.values.values())); // tensors differ too
}

#ifdef KVLAB_TEST_STRATEGIES
BOOST_AUTO_TEST_CASE(a_data_source_added_as_one_file_reaches_load_data) {
  // tests/strategies/test_ramp.cppm is found by the build alone.
  BOOST_TEST(kvlab::check_data_spec("test_ramp(16)") == 4u * 16 * 8);
  const auto data = kvlab::load_data("test_ramp(16)");
  BOOST_TEST(data.tokens() == 16u);
  BOOST_TEST(data.q_heads() == 2u);
  BOOST_TEST(data.keys.row(0, 0, 10)[0] == static_cast<float>(std::sin(1.0)));
  BOOST_TEST(load_error("test_ramp(1)").find("'1' is outside 2..4096") != std::string::npos);
}
#endif

BOOST_AUTO_TEST_CASE(bad_specs_name_the_problem) {
  // The allowed sources come from data_sources/, so a new source file needs no edit here.
  std::string allowed;
  for (const auto& source : kvlab::builtin_data_sources()) allowed += (allowed.empty() ? "" : ", ") + source.info.usage;
  BOOST_TEST(allowed.find("synthetic:gaussian(") != std::string::npos);
  for (const std::string spec : {"gaussian", "real:gaussian()", "synthetic:uniform()", "synthetic"})
    BOOST_TEST(load_error(spec) == "data spec '" + spec + "': unknown source; allowed: " + allowed);
  BOOST_TEST(load_error("npy:").find("nothing after 'npy:'") != std::string::npos);
  BOOST_TEST(load_error("npy").find("nothing after 'npy:'") != std::string::npos);
  BOOST_TEST(kvlab::load_data("synthetic:gaussian").tokens() == 1024u); // every parameter at its default
  BOOST_TEST(load_error("npy:/no/such/dir").find("/no/such/dir") != std::string::npos);
  BOOST_TEST(load_error("synthetic:gaussian(X=1)")
                 .find("unknown parameter 'X'; allowed: L (default 2), H (default 2), Q (default 8), T (default 1024), "
                       "D (default 128), seed (default 1)") != std::string::npos);
  BOOST_TEST(load_error("synthetic:gaussian(T=1)").find("T = 1 must be a whole number in 2..1000000000") !=
             std::string::npos);
  BOOST_TEST(load_error("synthetic:gaussian(D=2.5)").find("D = 2.5 must be a whole number") != std::string::npos);
  BOOST_TEST(load_error("synthetic:gaussian(H=0)").find("H = 0 must be a whole number in 1..1000000000") !=
             std::string::npos);
  BOOST_TEST(load_error("synthetic:gaussian(T=4,T=5)").find("'T' is given twice") != std::string::npos);
  BOOST_TEST(load_error("synthetic:gaussian(L)").find("'L' is not key=value") != std::string::npos);
  BOOST_TEST(load_error("synthetic:gaussian(H=4,Q=6)").find("not a multiple of H = 4") != std::string::npos);
  BOOST_TEST(load_error("synthetic:gaussian(L=1000,T=1000000)").find("4194304 MiB of float32), the limit") !=
             std::string::npos);
  // A product that would wrap around 2^64 is caught before it wraps.
  BOOST_TEST(load_error("synthetic:gaussian(L=268435456,H=1,Q=1,T=268435456,D=256)").find("the limit") !=
             std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
