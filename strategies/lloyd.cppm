// lloyd<b>: the Lloyd-Max codebook of 2^b levels for a standard Gaussian source (b = 1..4),
// scaled by the group's RMS; each value takes the nearest level. The codebook is computed
// here by Lloyd's iteration with exact Gaussian integrals rather than copied from a table.
// Paper: Max, "Quantizing for minimum distortion", IRE Trans. Inf. Theory 6(1), 1960, table I;
// used for rotated KV caches by TurboQuant, arXiv 2504.19874, sec. 3.1.
module;
#include <array>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <span>
#include <string>
export module kvlab.strategies.lloyd;
import kvlab.core;

export namespace kvlab::strategies::lloyd {

struct gaussian_codebook {
  std::array<float, 16> levels{};
  std::array<float, 15> thresholds{};
  double mse = 0.0; // expected squared error for N(0,1) input
};

// Lloyd's iteration for N(0,1): thresholds at midpoints, levels at the conditional means
// E[X | t_i < X < t_{i+1}] = (pdf(t_i) - pdf(t_{i+1})) / (cdf(t_{i+1}) - cdf(t_i)).
inline gaussian_codebook lloyd_max_gaussian(unsigned bits) {
  const std::size_t n = std::size_t{1} << bits;
  const auto pdf = [](double t) {
    return std::isinf(t) ? 0.0 : std::exp(-t * t / 2) / std::sqrt(2 * std::numbers::pi);
  };
  const auto cdf = [](double t) { return 0.5 * std::erfc(-t / std::numbers::sqrt2); };
  std::array<double, 16> level{};
  std::array<double, 17> edge{};
  for (std::size_t i = 0; i < n; ++i) level[i] = -3.0 + 6.0 * (static_cast<double>(i) + 0.5) / static_cast<double>(n);
  for (int iteration = 0; iteration < 20000; ++iteration) {
    edge[0] = -INFINITY;
    edge[n] = INFINITY;
    for (std::size_t i = 1; i < n; ++i) edge[i] = (level[i - 1] + level[i]) / 2;
    double change = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      const double updated = (pdf(edge[i]) - pdf(edge[i + 1])) / (cdf(edge[i + 1]) - cdf(edge[i]));
      change = std::max(change, std::fabs(updated - level[i]));
      level[i] = updated;
    }
    if (change < 1e-13) break;
  }
  gaussian_codebook book;
  double second_moment = 0.0; // E[Q(X)^2]; at the optimum E[(X - Q(X))^2] = 1 - E[Q(X)^2]
  for (std::size_t i = 0; i < n; ++i) {
    book.levels[i] = static_cast<float>(level[i]);
    second_moment += level[i] * level[i] * (cdf(edge[i + 1]) - cdf(edge[i]));
  }
  for (std::size_t i = 0; i + 1 < n; ++i) book.thresholds[i] = (book.levels[i] + book.levels[i + 1]) / 2;
  book.mse = 1.0 - second_moment;
  return book;
}

inline const gaussian_codebook& codebook(unsigned bits) {
  static const std::array<gaussian_codebook, 4> books{lloyd_max_gaussian(1), lloyd_max_gaussian(2),
                                                      lloyd_max_gaussian(3), lloyd_max_gaussian(4)};
  return books.at(bits - 1);
}

class lloyd_max {
public:
  using component_concept = quantizer_tag;
  explicit lloyd_max(unsigned bits) : bits_(bits) {
    if (bits < 1 || bits > 4) throw error("lloyd<b>: b must be in 1..4, got " + std::to_string(bits));
    book_ = &codebook(bits);
  }
  std::string name() const { return "lloyd" + std::to_string(bits_); }
  unsigned bits() const { return bits_; }
  unsigned params_per_group() const { return 1; }
  element_format format() const { return element_format::codebook; }
  std::span<const float> levels() const { return std::span(book_->levels).first(std::size_t{1} << bits_); }
  std::span<const float> thresholds() const {
    return std::span(book_->thresholds).first((std::size_t{1} << bits_) - 1);
  }
  encoding_rule encoding() const {
    return {.kind = encoding_kind::nearest, .thresholds = thresholds(), .scale_fit = codebook_scale::root_mean_square};
  }
  group_params fit(std::span<const float> group) const { return {.scale = root_mean_square(group)}; }
  std::uint32_t encode(float x, group_params p) const {
    return count_below(thresholds(), p.scale == 0.0f ? 0.0f : x / p.scale);
  }
  float decode(std::uint32_t code, group_params p) const { return p.scale * book_->levels[code]; }

private:
  unsigned bits_;
  const gaussian_codebook* book_;
};
static_assert(Quantizer<lloyd_max>);

inline strategy_info info() {
  return {.name = "lloyd",
          .usage = "lloyd<b> (b = 1..4)",
          .summary = "Lloyd-Max Gaussian codebook, RMS scale",
          .paper = "Max 1960 table I; arXiv 2504.19874 sec. 3.1",
          .min_width = 1,
          .max_width = 4};
}

inline lloyd_max make(const strategy_args& args) { return lloyd_max{*args.width}; }

} // namespace kvlab::strategies::lloyd

// The typed name recipes use (kvlab.compose).
export namespace kvlab::parts {
using lloyd = strategies::lloyd::lloyd_max;
} // namespace kvlab::parts
