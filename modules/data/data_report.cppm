// kvlab.data.report: the statistics of a workload that decide how compression behaves on it
// (`kvlab data-report SPEC`), per layer and KV head, so synthetic data can be compared with
// real captures:
//   attention, from the last `probes` queries of each of the head's query heads, each
//   attending causally (softmax of q.k / sqrt(D) over positions 0..t):
//     entropy            nats; normalized_entropy divides by log(t + 1) (1: uniform)
//     top1/top10/top25   mass of the largest 1 / 10 / 25 % of the weights (at least one key)
//     sink_mass          weight of the first token
//     local_mass         weight of the last `local_window` tokens (the query's own included)
//   key_outlier_ratio    the largest channel RMS of the keys over the median channel RMS
//                        (KIVI, arXiv 2402.02750 sec. 3.1: a few key channels are outliers)
//   value_kurtosis       E[(v - mean)^4] / var^2 over the head's value entries (3: Gaussian)
// Each attention statistic is a mean over the probes and query heads.
module;
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>
export module kvlab.data.report;
import kvlab.core;

export namespace kvlab {

struct head_statistics {
  std::size_t layer = 0, head = 0;
  double entropy = 0, normalized_entropy = 0;
  double top1 = 0, top10 = 0, top25 = 0;
  double sink_mass = 0, local_mass = 0;
  double key_outlier_ratio = 0, value_kurtosis = 0;
};

struct data_report_options {
  std::size_t probes = 32;
  std::size_t local_window = 64;
};

namespace detail {

// The mass of the largest ceil(share x n) weights (at least one); `weights` is reordered.
inline double top_mass(std::vector<double>& weights, double share) {
  const auto k =
      std::max<std::size_t>(1, static_cast<std::size_t>(std::ceil(share * static_cast<double>(weights.size()))));
  std::ranges::nth_element(weights, weights.begin() + static_cast<std::ptrdiff_t>(k - 1), std::greater<>());
  double mass = 0.0;
  for (std::size_t i = 0; i < k; ++i) mass += weights[i];
  return mass;
}

} // namespace detail

inline std::vector<head_statistics> data_report(const kv_data& data, const data_report_options& options = {}) {
  const std::size_t layers = data.layers(), heads = data.kv_heads(), tokens = data.tokens(), dim = data.head_dim();
  const std::size_t group = data.q_heads() / heads;
  if (tokens == 0 || dim == 0) throw error("data-report: " + data.source + " holds no tokens");
  const std::size_t probes = std::min(options.probes, tokens);
  const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
  std::vector<head_statistics> report;
  std::vector<double> logits, weights;
  for (std::size_t l = 0; l < layers; ++l)
    for (std::size_t h = 0; h < heads; ++h) {
      head_statistics s{.layer = l, .head = h};
      const auto keys = data.keys.stream(l, h), values = data.values.stream(l, h);
      std::size_t measured = 0;
      for (std::size_t qh = h * group; qh < (h + 1) * group; ++qh) {
        const auto queries = data.queries.stream(l, qh);
        for (std::size_t t = tokens - probes; t < tokens; ++t) {
          const std::size_t n = t + 1;
          logits.assign(n, 0.0);
          double top = -INFINITY;
          for (std::size_t j = 0; j < n; ++j) {
            double dot = 0.0;
            for (std::size_t c = 0; c < dim; ++c) dot += double{queries[t * dim + c]} * double{keys[j * dim + c]};
            logits[j] = dot * scale;
            top = std::max(top, logits[j]);
          }
          double sum = 0.0;
          weights.resize(n);
          for (std::size_t j = 0; j < n; ++j) sum += weights[j] = std::exp(logits[j] - top);
          double entropy = 0.0, local = 0.0;
          for (std::size_t j = 0; j < n; ++j) {
            weights[j] /= sum;
            if (weights[j] > 0) entropy -= weights[j] * std::log(weights[j]);
            if (j + options.local_window > t) local += weights[j];
          }
          s.entropy += entropy;
          s.normalized_entropy += n > 1 ? entropy / std::log(static_cast<double>(n)) : 0.0;
          s.sink_mass += weights[0];
          s.local_mass += local;
          s.top1 += detail::top_mass(weights, 0.01);
          s.top10 += detail::top_mass(weights, 0.10);
          s.top25 += detail::top_mass(weights, 0.25);
          ++measured;
        }
      }
      for (double* x : {&s.entropy, &s.normalized_entropy, &s.sink_mass, &s.local_mass, &s.top1, &s.top10, &s.top25})
        *x /= static_cast<double>(measured);

      std::vector<double> channel_rms(dim, 0.0);
      for (std::size_t t = 0; t < tokens; ++t)
        for (std::size_t c = 0; c < dim; ++c) channel_rms[c] += double{keys[t * dim + c]} * double{keys[t * dim + c]};
      for (double& r : channel_rms) r = std::sqrt(r / static_cast<double>(tokens));
      const double largest = std::ranges::max(channel_rms);
      std::ranges::nth_element(channel_rms, channel_rms.begin() + static_cast<std::ptrdiff_t>(dim / 2));
      const double median = channel_rms[dim / 2];
      s.key_outlier_ratio = median > 0 ? largest / median : INFINITY;

      double mean = 0.0;
      for (const float v : values) mean += v;
      mean /= static_cast<double>(values.size());
      double m2 = 0.0, m4 = 0.0;
      for (const float v : values) {
        const double d2 = (v - mean) * (v - mean);
        m2 += d2, m4 += d2 * d2;
      }
      m2 /= static_cast<double>(values.size()), m4 /= static_cast<double>(values.size());
      s.value_kurtosis = m2 > 0 ? m4 / (m2 * m2) : 0.0;
      report.push_back(s);
    }
  return report;
}

// The shape of `data` as synthetic:llm's arguments ("L=5,H=4,Q=8,T=512,D=8"), so a generator
// can be asked for the shape of a real capture.
inline std::string shape_arguments(const kv_data& data) {
  return "L=" + std::to_string(data.layers()) + ",H=" + std::to_string(data.kv_heads()) +
         ",Q=" + std::to_string(data.q_heads()) + ",T=" + std::to_string(data.tokens()) +
         ",D=" + std::to_string(data.head_dim());
}

// The mean of every statistic over the heads (layer and head are those of the first).
inline head_statistics mean_over_heads(const std::vector<head_statistics>& heads) {
  head_statistics m;
  if (heads.empty()) return m;
  for (const auto& s : heads) {
    m.entropy += s.entropy, m.normalized_entropy += s.normalized_entropy;
    m.top1 += s.top1, m.top10 += s.top10, m.top25 += s.top25;
    m.sink_mass += s.sink_mass, m.local_mass += s.local_mass;
    m.key_outlier_ratio += s.key_outlier_ratio, m.value_kurtosis += s.value_kurtosis;
  }
  const double n = static_cast<double>(heads.size());
  for (double* x : {&m.entropy, &m.normalized_entropy, &m.top1, &m.top10, &m.top25, &m.sink_mass, &m.local_mass,
                    &m.key_outlier_ratio, &m.value_kurtosis})
    *x /= n;
  return m;
}

} // namespace kvlab
