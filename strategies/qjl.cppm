// qjl, qjl(M), qjl(M,seed): QJL, the quantized Johnson-Lindenstrauss sketch of a key. A key
// k of d channels is stored as the signs of S k, S an M x d matrix of i.i.d. N(0,1) entries
// (M sketch bits; M = 0 or absent: M = d), and its norm. A score is the paper's unbiased
// estimator sqrt(pi/2)/M * |k| * <S q, sign(S k)>, read from the projected query S q: no key
// is dequantized. Its variance is ((pi/2)|q|^2|k|^2 - <q,k>^2)/M.
// Storage: the sign bits, and c = sqrt(pi/2)/M * |k| as the group's one scale (fp16, or f32
// with scale=f32): a sketch row holds +c or -c, which the 1-bit codebook {-1, +1} with an
// absmax scale stores exactly up to the scale's rounding. Keys only: decoding gives
// S^T c sign(S k), an unbiased but noisy key (E|decoded - k|^2 = |k|^2 (pi d/2 - 1)/M), so
// a recipe refuses it for values and demoted tokens, and groups hold one token.
// Row i of S is drawn from random_stream(seed, 2^56 + i), so S for a smaller d is a column
// prefix of S for a larger one, the same seed gives the same sketch on every machine, and S
// is independent of rht's signs (streams below 2^56) under one seed, as TurboQuant's
// inner-product variant needs.
// Not here: the paper's split of outlier channels (sketched apart, with their own norms),
// which picks the channels per layer and head from the prompt's keys.
// Paper: QJL, arXiv 2406.03482, sec. 3 (the QJL transform and its inner-product estimator).
module;
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <numbers>
#include <span>
#include <string>
#include <vector>
export module kvlab.strategies.qjl;
import kvlab.core;

export namespace kvlab::strategies::qjl {

// S for one head_dim: M rows of d Gaussian entries.
class gaussian_sketch final : public token_projection {
public:
  gaussian_sketch(std::size_t head_dim, std::size_t sketch_bits, std::uint64_t seed)
      : head_dim_(head_dim), sketch_bits_(sketch_bits), rows_(sketch_bits * head_dim),
        norm_factor_(std::sqrt(std::numbers::pi / 2.0) / static_cast<double>(sketch_bits)) {
    for (std::size_t i = 0; i < sketch_bits; ++i) {
      random_stream draws(seed, first_stream + i);
      for (std::size_t j = 0; j < head_dim; ++j) rows_[i * head_dim + j] = static_cast<float>(draws.normal());
    }
  }
  std::size_t stored_dim() const override { return sketch_bits_; }
  // c sign(S k), sign(0) = +1.
  void key(std::span<const float> token, std::span<float> stored) const override {
    double squares = 0.0;
    for (const float x : token) squares += double{x} * x;
    const auto c = static_cast<float>(norm_factor_ * std::sqrt(squares));
    for (std::size_t i = 0; i < sketch_bits_; ++i) stored[i] = row_dot(i, token) >= 0.0f ? c : -c;
  }
  void query(std::span<const float> token, std::span<float> stored) const override {
    for (std::size_t i = 0; i < sketch_bits_; ++i) stored[i] = row_dot(i, token);
  }
  void adjoint(std::span<const float> stored, std::span<float> token) const override {
    std::fill_n(token.begin(), head_dim_, 0.0f);
    for (std::size_t i = 0; i < sketch_bits_; ++i) {
      const float* row = rows_.data() + i * head_dim_;
      for (std::size_t j = 0; j < head_dim_; ++j) token[j] += stored[i] * row[j];
    }
  }

  static constexpr std::uint64_t first_stream = std::uint64_t{1} << 56; // of S's rows

private:
  // Eight partial sums in a fixed order: vectorized by the compiler, the same bits everywhere.
  float row_dot(std::size_t i, std::span<const float> token) const {
    const float* row = rows_.data() + i * head_dim_;
    std::array<float, 8> lanes{};
    std::size_t j = 0;
    for (; j + 8 <= head_dim_; j += 8)
      for (std::size_t l = 0; l < 8; ++l) lanes[l] += row[j + l] * token[j + l];
    for (; j < head_dim_; ++j) lanes[j % 8] += row[j] * token[j];
    return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
  }

  std::size_t head_dim_, sketch_bits_;
  std::vector<float> rows_; // row-major, M x d
  double norm_factor_;      // sqrt(pi/2) / M
};

class quantized_jl {
public:
  using component_concept = quantizer_tag;
  static constexpr std::uint64_t default_seed = 0;
  static constexpr std::size_t max_sketch_bits = 65536;

  explicit quantized_jl(std::size_t sketch_bits = 0, std::uint64_t seed = default_seed)
      : sketch_bits_(sketch_bits), seed_(seed), sketches_(std::make_shared<sketch_store>()) {
    if (sketch_bits > max_sketch_bits)
      throw error("qjl(M): M must be at most " + std::to_string(max_sketch_bits) + " (0: M = head_dim), got " +
                  std::to_string(sketch_bits));
  }

  std::string name() const {
    if (sketch_bits_ == 0 && seed_ == default_seed) return "qjl";
    return "qjl(" + std::to_string(sketch_bits_) + (seed_ == default_seed ? "" : "," + std::to_string(seed_)) + ")";
  }
  unsigned bits() const { return 1; }
  unsigned params_per_group() const { return 1; }
  element_format format() const { return element_format::codebook; }
  std::span<const float> levels() const { return sign_levels; }
  encoding_rule encoding() const {
    return {.kind = encoding_kind::nearest, .thresholds = midpoint, .scale_fit = codebook_scale::absmax};
  }
  group_params fit(std::span<const float> group) const { return {.scale = absmax(group)}; }
  std::uint32_t encode(float x, group_params p) const {
    return count_below(midpoint, p.scale == 0.0f ? 0.0f : x / p.scale);
  }
  float decode(std::uint32_t code, group_params p) const { return p.scale * sign_levels[code]; }

  // Built once per head_dim and shared by the quantizer's copies (read-only afterwards).
  std::shared_ptr<const token_projection> projection(std::size_t head_dim) const {
    const std::lock_guard lock(sketches_->mutex);
    auto& sketch = sketches_->by_head_dim[head_dim];
    if (!sketch)
      sketch = std::make_shared<const gaussian_sketch>(head_dim, sketch_bits_ == 0 ? head_dim : sketch_bits_, seed_);
    return sketch;
  }
  bool invertible() const { return false; }

private:
  static constexpr std::array<float, 2> sign_levels{-1.0f, 1.0f};
  static constexpr std::array<float, 1> midpoint{0.0f};
  struct sketch_store {
    std::mutex mutex;
    std::map<std::size_t, std::shared_ptr<const gaussian_sketch>> by_head_dim;
  };

  std::size_t sketch_bits_; // 0: head_dim
  std::uint64_t seed_;
  std::shared_ptr<sketch_store> sketches_;
};
static_assert(Quantizer<quantized_jl>);
static_assert(projects_tokens<quantized_jl>);

inline strategy_info info() {
  return {.name = "qjl",
          .usage = "qjl, qjl(M) or qjl(M,seed) (M sketch bits per key, 0: head_dim; keys only)",
          .summary = "QJL: sign bits of a Gaussian projection plus the key's norm, unbiased scores",
          .paper = "arXiv 2406.03482 sec. 3",
          .examples = {"qjl", "qjl(256)"}};
}

inline quantized_jl make(const strategy_args& args) {
  if (args.args.size() > 2)
    throw error("'" + args.text + "' takes at most a sketch size and a seed (usage: qjl, qjl(M) or qjl(M,seed))");
  const std::size_t sketch_bits =
      args.args.empty() ? 0 : args.number_in<std::size_t>(0, "sketch size M", 0, quantized_jl::max_sketch_bits);
  const std::uint64_t seed = args.args.size() == 2 ? args.number<std::uint64_t>(1, "seed") : quantized_jl::default_seed;
  return quantized_jl{sketch_bits, seed};
}

} // namespace kvlab::strategies::qjl

// The typed name recipes use (kvlab.compose).
export namespace kvlab::parts {
using qjl = strategies::qjl::quantized_jl;
} // namespace kvlab::parts
