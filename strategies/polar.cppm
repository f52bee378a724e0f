// polar, polar(b1,...,bL): PolarQuant's code of groups of 2^L channels by the angles of a
// recursive polar transform. Level 1 pairs adjacent channels (x_2j, x_2j+1) into a radius
// and an angle atan2(x_2j+1, x_2j) in [0, 2pi); each level above pairs adjacent radii of the
// level below into a radius and an angle in [0, pi/2]. After L levels a block of 2^L
// channels is one radius (stored in fp16) and 2^L - 1 angles, each level's quantized to b_l
// bits with its own codebook: no scale or zero point is stored.
// Codebooks: for a Gaussian vector (what a random rotation makes of a token) the angles are
// independent, level 1 uniform and level l >= 2 with density proportional to
// sin^(2^(l-1) - 1)(2 psi) (the paper's Lemma 2); each level's codebook minimizes the
// expected squared angle error under that density (the paper's Eq. 4), computed here by
// Lloyd's iteration on the density, so level 1 is the uniform grid. For Gaussian input the
// expected relative error is E|x - x'|^2 / E|x|^2 = 2 (1 - prod_l E[cos(psi_l - Q(psi_l))])
// (the radius exact), which gaussian_relative_mse() computes.
// The default, polar = polar(4,2,2,2), is the paper's setting: 46 angle bits and a 16-bit
// radius per 16 channels, 3.875 bits per channel. rht(polar) is PolarQuant-R, the paper's
// method with random preconditioning (an orthogonal random rotation in its implementation;
// here the randomized Hadamard of rht); polar alone is its ablation without it.
// A group of channels may hold several blocks (group(32), or token, which holds head_dim/2^L):
// each is coded on its own. A block's code is its level-1 angle codes, then level 2's, ...,
// then the radius's 16 bits, least significant first; blocks follow one another.
// Not here: the paper's online codebooks (k-means on each prompt's own angles).
// Paper: PolarQuant, arXiv 2502.02617, sec. 3 (Definition 1, Lemma 2, Eq. 4, Algorithm 1)
// and sec. 4.1 (L = 4, 4 bits at level 1 and 2 at the others, 16-bit radii).
module;
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <numbers>
#include <span>
#include <string>
#include <vector>
export module kvlab.strategies.polar;
import kvlab.core;

export namespace kvlab::strategies::polar {

// One level's angle codebook: ascending centroids and the thresholds between them.
struct angle_codebook {
  std::vector<float> centroids, thresholds, cosines, sines;
  double mean_cosine = 1.0; // E[cos(psi - Q(psi))] under the level's density
};

// Lloyd's iteration for the density proportional to sin^(n - 1)(2 psi) on [0, pi/2] (a
// level-l angle, n = 2^(l-1)), or the uniform density on [0, 2pi) (level 1, n = 0), with
// 2^bits centroids. Integrals are sums over `cells` equal cells (midpoint rule), kept as
// prefix sums so each interval's mass and mean cost two lookups.
inline angle_codebook lloyd_angle_codebook(unsigned level, unsigned bits) {
  const std::size_t count = std::size_t{1} << bits;
  angle_codebook book;
  const auto finish = [&](const std::vector<double>& centroids, double mean_cosine) {
    for (std::size_t i = 0; i < count; ++i) {
      book.centroids.push_back(static_cast<float>(centroids[i]));
      book.cosines.push_back(static_cast<float>(std::cos(centroids[i])));
      book.sines.push_back(static_cast<float>(std::sin(centroids[i])));
    }
    for (std::size_t i = 0; i + 1 < count; ++i)
      book.thresholds.push_back((book.centroids[i] + book.centroids[i + 1]) / 2);
    book.mean_cosine = mean_cosine;
    return book;
  };
  if (level == 1) { // uniform: centroids mid-cell; the error is uniform on +-pi/count
    const double cell = 2 * std::numbers::pi / static_cast<double>(count), half = cell / 2;
    std::vector<double> centroids(count);
    for (std::size_t i = 0; i < count; ++i) centroids[i] = (static_cast<double>(i) + 0.5) * cell;
    return finish(centroids, std::sin(half) / half);
  }
  constexpr std::size_t cells = 1 << 16;
  const double width = std::numbers::pi / 2 / cells, power = std::ldexp(1.0, static_cast<int>(level) - 1) - 1;
  std::vector<double> mass(cells + 1, 0.0), moment(cells + 1, 0.0); // prefix sums of f and psi f
  for (std::size_t c = 0; c < cells; ++c) {
    const double psi = (static_cast<double>(c) + 0.5) * width, f = std::pow(std::sin(2 * psi), power);
    mass[c + 1] = mass[c] + f;
    moment[c + 1] = moment[c] + psi * f;
  }
  // The prefix sum up to psi, linear within a cell, so intervals move continuously with their edges.
  const auto up_to = [&](const std::vector<double>& sums, double psi) {
    const double at = std::clamp(psi / width, 0.0, static_cast<double>(cells));
    const auto cell = std::min(static_cast<std::size_t>(at), cells - 1);
    return sums[cell] + (at - static_cast<double>(cell)) * (sums[cell + 1] - sums[cell]);
  };
  std::vector<double> centroids(count), edges(count + 1);
  for (std::size_t i = 0; i < count; ++i) // start at the quantiles' midpoints
    centroids[i] = (static_cast<double>(
                       std::lower_bound(mass.begin(), mass.end(),
                                        mass[cells] * (static_cast<double>(i) + 0.5) / static_cast<double>(count)) -
                       mass.begin())) *
                   width;
  for (int iteration = 0; iteration < 10000; ++iteration) {
    edges[0] = 0.0, edges[count] = std::numbers::pi / 2;
    for (std::size_t i = 1; i < count; ++i) edges[i] = (centroids[i - 1] + centroids[i]) / 2;
    double change = 0.0;
    for (std::size_t i = 0; i < count; ++i) {
      const double m = up_to(mass, edges[i + 1]) - up_to(mass, edges[i]);
      const double updated =
          m > 0.0 ? (up_to(moment, edges[i + 1]) - up_to(moment, edges[i])) / m : (edges[i] + edges[i + 1]) / 2;
      change = std::max(change, std::fabs(updated - centroids[i]));
      centroids[i] = updated;
    }
    if (change < 1e-12) break;
  }
  double mean_cosine = 0.0;
  for (std::size_t c = 0, i = 0; c < cells; ++c) {
    const double psi = (static_cast<double>(c) + 0.5) * width;
    while (i + 1 < count && psi > (centroids[i] + centroids[i + 1]) / 2) ++i;
    mean_cosine += (mass[c + 1] - mass[c]) * std::cos(psi - centroids[i]);
  }
  return finish(centroids, mean_cosine / mass[cells]);
}

} // namespace kvlab::strategies::polar

namespace kvlab::strategies::polar {

// The codec of groups of `blocks` blocks of 2^L channels (made by polar_angles, which
// checks the levels: at most max_levels, a codebook each).
class polar_codec final : public group_codec {
public:
  polar_codec(std::shared_ptr<const std::vector<angle_codebook>> books, std::vector<unsigned> level_bits,
              std::size_t blocks, std::string name)
      : books_(std::move(books)), level_bits_(std::move(level_bits)), blocks_(blocks), name_(std::move(name)) {
    const std::size_t levels = level_bits_.size();
    block_ = std::size_t{1} << levels;
    for (std::size_t l = 0; l < levels; ++l) block_bits_ += (block_ >> (l + 1)) * level_bits_[l];
    block_bits_ += radius_bits;
  }
  std::size_t channels() const override { return blocks_ * block_; }
  std::size_t code_bits() const override { return blocks_ * block_bits_; }

  void encode(std::span<const float> group, std::span<std::uint8_t> record, std::size_t bit_offset) const override {
    for (std::size_t b = 0; b < blocks_; ++b)
      encode_block(group.subspan(b * block_, block_), record, bit_offset + b * block_bits_);
  }
  void decode(std::span<const std::uint8_t> record, std::size_t bit_offset,
              std::span<float> group) const noexcept override {
    for (std::size_t b = 0; b < blocks_; ++b)
      decode_block(record, bit_offset + b * block_bits_, group.subspan(b * block_, block_));
  }

  static constexpr unsigned radius_bits = 16;
  static constexpr std::size_t max_levels = 7;

private:
  void encode_block(std::span<const float> values, std::span<std::uint8_t> record, std::size_t at) const {
    double radii[std::size_t{1} << max_levels];
    for (std::size_t i = 0; i < block_; ++i) {
      if (!std::isfinite(values[i])) throw error(name_ + ": value " + format_number(values[i]) + " is not finite");
      radii[i] = values[i];
    }
    for (std::size_t l = 0, n = block_ / 2; l < level_bits_.size(); ++l, n /= 2) {
      const angle_codebook& book = (*books_)[l];
      for (std::size_t j = 0; j < n; ++j) {
        const double first = radii[2 * j], second = radii[2 * j + 1];
        double angle = std::atan2(second, first); // level 1: (-pi, pi]; above: [0, pi/2]
        if (angle < 0.0) angle += 2 * std::numbers::pi;
        write_bits(record, at, level_bits_[l], code_of(book, l, angle));
        at += level_bits_[l];
        radii[j] = std::hypot(first, second);
      }
    }
    const float radius = round_to_half(static_cast<float>(radii[0]));
    if (!std::isfinite(radius))
      throw error(name_ + ": a block of " + std::to_string(block_) + " channels has norm " + format_number(radii[0]) +
                  ", beyond the fp16 range (65504) of its stored radius; scale the data down");
    write_bits(record, at, radius_bits, float_to_half_bits(radius));
  }

  // The nearest centroid: level 1's are the uniform grid's cells, the others' by threshold.
  static std::uint32_t code_of(const angle_codebook& book, std::size_t level, double angle) {
    if (level == 0) {
      const auto count = static_cast<std::uint32_t>(book.centroids.size());
      const auto cell = static_cast<std::uint32_t>(angle / (2 * std::numbers::pi) * count);
      return std::min(cell, count - 1);
    }
    return count_below(book.thresholds, static_cast<float>(angle));
  }

  // Down the levels from the radius: a radius r with angle theta becomes the pair
  // (r cos theta, r sin theta) of the level below.
  void decode_block(std::span<const std::uint8_t> record, std::size_t at, std::span<float> out) const noexcept {
    const std::size_t levels = level_bits_.size();
    std::size_t level_start[max_levels] = {};
    for (std::size_t l = 1, offset = at; l <= levels; ++l) {
      level_start[l - 1] = offset;
      offset += (block_ >> l) * level_bits_[l - 1];
    }
    float radii[std::size_t{1} << max_levels];
    radii[0] = half_bits_to_float(static_cast<std::uint16_t>(read_bits(record, at + block_bits_ - radius_bits, 16)));
    for (std::size_t l = levels, n = 1; l >= 1; --l, n *= 2) {
      const angle_codebook& book = (*books_)[l - 1];
      for (std::size_t j = n; j-- > 0;) { // from the last, so radii[j] is read before it is overwritten
        const std::uint32_t code = read_bits(record, level_start[l - 1] + j * level_bits_[l - 1], level_bits_[l - 1]);
        const float r = radii[j];
        radii[2 * j] = r * book.cosines[code];
        radii[2 * j + 1] = r * book.sines[code];
      }
    }
    std::copy_n(radii, block_, out.begin());
  }

  std::shared_ptr<const std::vector<angle_codebook>> books_;
  std::vector<unsigned> level_bits_;
  std::size_t blocks_, block_ = 0, block_bits_ = 0;
  std::string name_;
};

} // namespace kvlab::strategies::polar

export namespace kvlab::strategies::polar {

class polar_angles {
public:
  using component_concept = quantizer_tag;
  static constexpr unsigned max_level_bits = 8;

  // Typed recipes: `polar{}` (4,2,2,2), `polar{{3,2,2}}`.
  explicit polar_angles(std::vector<unsigned> level_bits = default_bits()) : level_bits_(std::move(level_bits)) {
    if (level_bits_.empty() || level_bits_.size() > polar_codec::max_levels)
      throw error("polar: 1 to " + std::to_string(polar_codec::max_levels) + " levels, got " +
                  std::to_string(level_bits_.size()));
    for (const unsigned bits : level_bits_)
      if (bits < 1 || bits > max_level_bits)
        throw error("polar: bits per level must be 1.." + std::to_string(max_level_bits) + ", got " +
                    std::to_string(bits));
    auto books = std::make_shared<std::vector<angle_codebook>>();
    for (std::size_t l = 0; l < level_bits_.size(); ++l)
      books->push_back(lloyd_angle_codebook(static_cast<unsigned>(l + 1), level_bits_[l]));
    books_ = std::move(books);
  }

  std::string name() const {
    if (level_bits_ == default_bits()) return "polar";
    std::string listed;
    for (const unsigned bits : level_bits_) listed += (listed.empty() ? "" : ",") + std::to_string(bits);
    return "polar(" + listed + ")";
  }
  std::size_t block_channels() const { return std::size_t{1} << level_bits_.size(); }
  std::shared_ptr<const kvlab::group_codec> group_codec(std::size_t channels) const {
    const std::size_t block = block_channels();
    if (channels == 0 || channels % block != 0)
      throw error(name() + " codes blocks of " + std::to_string(block) + " channels (2^" +
                  std::to_string(level_bits_.size()) + " for " + std::to_string(level_bits_.size()) +
                  " levels); groups of " + std::to_string(channels) + " channels are not a multiple");
    return std::make_shared<const polar_codec>(books_, level_bits_, channels / block, name());
  }
  std::span<const angle_codebook> codebooks() const { return *books_; }
  // E|x - x'|^2 / E|x|^2 for Gaussian x, by the angles' independence (Lemma 2), the
  // radius exact: 2 (1 - prod over levels of E[cos(angle error)]).
  double gaussian_relative_mse() const {
    double product = 1.0;
    for (const angle_codebook& book : *books_) product *= book.mean_cosine;
    return 2.0 * (1.0 - product);
  }

  static std::vector<unsigned> default_bits() { return {4, 2, 2, 2}; }

private:
  std::vector<unsigned> level_bits_;
  std::shared_ptr<const std::vector<angle_codebook>> books_;
};
static_assert(Quantizer<polar_angles>);
static_assert(codes_groups<polar_angles>);

inline strategy_info info() {
  return {.name = "polar",
          .usage = "polar or polar(b1,...,bL) (bits of each level's angles, L levels coding blocks of 2^L "
                   "channels with a 16-bit radius; polar = polar(4,2,2,2)); rht(polar) is PolarQuant-R",
          .summary = "PolarQuant: angles of a recursive polar transform, per-level codebooks, no scales",
          .paper = "arXiv 2502.02617 sec. 3, 4.1",
          .examples = {"polar", "rht(polar)", "polar(3,2,2)"}};
}

inline polar_angles make(const strategy_args& args) {
  if (args.args.empty()) return polar_angles{};
  std::vector<unsigned> bits;
  for (std::size_t i = 0; i < args.args.size(); ++i)
    bits.push_back(
        args.number_in<unsigned>(i, "bits of level " + std::to_string(i + 1), 1, polar_angles::max_level_bits));
  return polar_angles{std::move(bits)};
}

} // namespace kvlab::strategies::polar

// The typed name recipes use (kvlab.compose).
export namespace kvlab::parts {
using polar = strategies::polar::polar_angles;
} // namespace kvlab::parts
