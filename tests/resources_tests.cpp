// What the process may use: memory and CPUs read from cgroup v2 and /proc, the refusal
// message, and the --threads rule.
#include <boost/test/unit_test.hpp>

#include "test_files.hpp"
#include <sstream>
#include <string>
#include <thread>
import kvlab;

namespace {

std::string error_of(auto&& action) { return kvlab_test::message_of<kvlab::error>(action); }

} // namespace

BOOST_AUTO_TEST_SUITE(resources)

BOOST_AUTO_TEST_CASE(memory_beyond_what_the_process_may_use_is_refused_with_both_numbers) {
  const auto allowed = kvlab::usable_memory();
  BOOST_TEST(allowed.bytes > 0u);
  BOOST_TEST(!allowed.source.empty());
  const std::string refused = error_of([&] {
    kvlab::require_memory(static_cast<double>(allowed.bytes) + 4.0 * (1 << 30), "a test workload", "ask for less");
  });
  BOOST_TEST(refused.find("a test workload needs about ") != std::string::npos, refused);
  BOOST_TEST(refused.find("but this process may use " + kvlab::format_bytes(static_cast<double>(allowed.bytes))) !=
                 std::string::npos,
             refused);
  BOOST_TEST(refused.find(allowed.source) != std::string::npos, refused);
  BOOST_TEST(refused.find("; ask for less") != std::string::npos, refused);
  BOOST_TEST(error_of([] { kvlab::require_memory(1 << 20, "a megabyte", ""); }).empty());
}

BOOST_AUTO_TEST_CASE(a_synthetic_workload_larger_than_memory_is_refused_before_allocation) {
  const std::string refused = error_of([] { kvlab::load_data("synthetic:gaussian(L=64,H=64,Q=64,T=100000,D=128)"); });
  BOOST_TEST(refused.find("157286400000 float32 values) needs about 585.9 GiB of memory") != std::string::npos,
             refused);
}

BOOST_AUTO_TEST_CASE(threads_are_capped_at_the_usable_cpus_with_a_note) {
  const unsigned cpus = kvlab::usable_cpus();
  BOOST_TEST(cpus >= 1u);
  BOOST_TEST(cpus <= std::max(1u, std::thread::hardware_concurrency()));
  std::ostringstream note;
  BOOST_TEST(kvlab::thread_count("1", "--threads", note) == 1u);
  BOOST_TEST(kvlab::thread_count("all", "--threads", note) == cpus);
  BOOST_TEST(note.str().empty());
  BOOST_TEST(kvlab::thread_count("1000000", "--threads", note) == cpus);
  BOOST_TEST(note.str().find("--threads 1000000: this process may use " + std::to_string(cpus) + " CPU") !=
                 std::string::npos,
             note.str());
  BOOST_TEST(error_of([&] { kvlab::thread_count("0", "--threads", note); }).find("--threads 0: give a number") !=
             std::string::npos);
  BOOST_TEST(error_of([&] { kvlab::thread_count("-3", "--threads", note); }).find("is not a valid number") !=
             std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
