// Helpers of the tests that check estimators statistically (qjl_tests, residual_tests):
// seeded Gaussian vectors, dot products in double, a sample's mean and deviation. Include
// after `import kvlab;`.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace kvlab_test {

inline std::vector<float> gaussian(std::size_t n, std::uint64_t seed, std::uint64_t stream = 0) {
  kvlab::random_stream random(seed, stream);
  std::vector<float> x(n);
  for (auto& v : x) v = static_cast<float>(random.normal());
  return x;
}

inline double dot(std::span<const float> a, std::span<const float> b) {
  double sum = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) sum += double{a[i]} * b[i];
  return sum;
}

// Mean and standard deviation of a sample.
inline std::pair<double, double> mean_sd(const std::vector<double>& x) {
  double sum = 0.0, squares = 0.0;
  for (const double v : x) sum += v;
  const double mean = sum / static_cast<double>(x.size());
  for (const double v : x) squares += (v - mean) * (v - mean);
  return {mean, std::sqrt(squares / static_cast<double>(x.size() - 1))};
}

} // namespace kvlab_test
