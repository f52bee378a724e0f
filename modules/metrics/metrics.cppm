// kvlab.metrics: attention-fidelity metrics and their aggregation over layers, heads and
// decode steps.
module;
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <vector>
export module kvlab.metrics;
import kvlab.core;

export namespace kvlab {

// ||approx - exact|| / ||exact|| (0 when both are zero).
inline double relative_l2(std::span<const float> approx, std::span<const double> exact) {
  double error = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < exact.size(); ++i) {
    const double d = double{approx[i]} - exact[i];
    error += d * d;
    norm += exact[i] * exact[i];
  }
  if (norm == 0.0) return error == 0.0 ? 0.0 : INFINITY;
  return std::sqrt(error / norm);
}

// approx . exact / (||approx|| ||exact||); 1 when both are zero.
inline double cosine_similarity(std::span<const float> approx, std::span<const double> exact) {
  double dot = 0.0, a = 0.0, e = 0.0;
  for (std::size_t i = 0; i < exact.size(); ++i) {
    dot += double{approx[i]} * exact[i];
    a += double{approx[i]} * double{approx[i]};
    e += exact[i] * exact[i];
  }
  if (a == 0.0 && e == 0.0) return 1.0;
  if (a == 0.0 || e == 0.0) return 0.0;
  return dot / std::sqrt(a * e);
}

struct summary {
  double mean = 0.0;
  double min = 0.0;
  double p50 = 0.0;
  double p99 = 0.0;
  double max = 0.0;
  std::size_t count = 0;
};

// Mean, extremes and nearest-rank percentiles of `samples`.
inline summary summarize(std::vector<double> samples) {
  if (samples.empty()) throw error("summarize: no samples");
  std::ranges::sort(samples);
  summary s;
  s.count = samples.size();
  double total = 0.0;
  for (const double x : samples) total += x;
  s.mean = total / static_cast<double>(samples.size());
  const auto rank = [&](double p) {
    const auto r = static_cast<std::size_t>(std::ceil(p * static_cast<double>(samples.size())));
    return samples[std::clamp<std::size_t>(r, 1, samples.size()) - 1];
  };
  s.p50 = rank(0.50);
  s.p99 = rank(0.99);
  s.min = samples.front();
  s.max = samples.back();
  return s;
}

} // namespace kvlab
