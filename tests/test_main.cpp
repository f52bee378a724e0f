// The one Boost.Test module of kvlab (shared library); every other test file adds suites.
#define BOOST_TEST_MODULE kvlab
#include <boost/test/unit_test.hpp>
