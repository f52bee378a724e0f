// kvlab.metrics: attention-fidelity metrics and their aggregation over layers, heads and
// decode steps.
module;
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <iterator>
#include <span>
#include <utility>
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

// The exact attention weight on the keys the cache holds (`held` lists their positions).
inline double held_mass(std::span<const double> exact, std::span<const std::size_t> held) {
  double mass = 0.0;
  for (const std::size_t position : held) mass += exact[position];
  return mass;
}

// The exact attention weight on the keys the cache no longer holds: summed over those keys,
// so it is exactly 0 when nothing was dropped.
inline double dropped_mass(std::span<const double> exact, std::span<const std::size_t> held) {
  std::vector<bool> kept(exact.size());
  for (const std::size_t position : held) kept[position] = true;
  double mass = 0.0;
  for (std::size_t i = 0; i < exact.size(); ++i)
    if (!kept[i]) mass += exact[i];
  return mass;
}

// KL(p' || q) in nats over the held keys, p' the exact weights of the held keys renormalised
// to sum to 1 (q already sums to 1 over them): how well the cache attends among what it
// kept, whatever eviction dropped. q is floored at 1e-30 as in kl_divergence.
inline double kept_kl_divergence(std::span<const double> exact, std::span<const double> approx,
                                 std::span<const std::size_t> held) {
  const double kept = held_mass(exact, held);
  if (kept <= 0.0) return 0.0; // nothing of the exact distribution is left to compare
  double kl = 0.0;
  for (const std::size_t position : held)
    if (const double p = exact[position] / kept; p > 0) kl += p * std::log(p / std::max(approx[position], 1e-30));
  return kl;
}

// KL(p || q) in nats; q is floored at 1e-30 so a key the compressed cache gives no weight
// costs a large finite penalty instead of infinity.
inline double kl_divergence(std::span<const double> p, std::span<const double> q) {
  double kl = 0.0;
  for (std::size_t i = 0; i < p.size(); ++i)
    if (p[i] > 0) kl += p[i] * std::log(p[i] / std::max(q[i], 1e-30));
  return kl;
}

// Share of the k keys with the largest exact weight that are among the k largest
// compressed weights (ties broken by position, so the result is deterministic).
inline double topk_recall(std::span<const double> exact, std::span<const double> approx, std::size_t k) {
  k = std::min(k, exact.size());
  if (k == 0) return 1.0;
  const auto top = [k](auto weights) {
    std::vector<std::size_t> order(weights.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    // A total order, so selecting the first k fixes the set (sorted by position below).
    std::ranges::nth_element(order, order.begin() + static_cast<std::ptrdiff_t>(k), [&](std::size_t a, std::size_t b) {
      return weights[a] > weights[b] || (weights[a] == weights[b] && a < b);
    });
    order.resize(k);
    std::ranges::sort(order);
    return order;
  };
  const auto a = top(exact), b = top(approx);
  std::vector<std::size_t> common;
  std::ranges::set_intersection(a, b, std::back_inserter(common));
  return static_cast<double>(common.size()) / static_cast<double>(k);
}

// Mean and root mean square of q.k_hat - q.k over the held keys: approx[i] is the cache's
// q.k for the key at position positions[i]; exact_dots[p] is q.k for position p.
inline std::pair<double, double> inner_product_error(std::span<const double> exact_dots, std::span<const float> approx,
                                                     std::span<const std::size_t> positions) {
  const std::size_t n = approx.size();
  double sum = 0.0, squares = 0.0;
  for (std::size_t t = 0; t < n; ++t) {
    const double d = double{approx[t]} - exact_dots[positions[t]];
    sum += d, squares += d * d;
  }
  return {sum / static_cast<double>(n), std::sqrt(squares / static_cast<double>(n))};
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
