// rht(Q) / rht(Q,seed): randomized Hadamard rotation before quantizer Q. Each token vector
// is multiplied by random signs and by a normalized Walsh-Hadamard matrix, which spreads
// outlier channels over all coordinates and makes them close to Gaussian, so a Gaussian
// codebook (lloyd<b>) is near-optimal. Rotation is orthogonal: attention rotates the query
// instead of decoding the keys, and un-rotates the weighted value sum once.
// A head_dim that is not a power of two is split into power-of-two blocks (its binary
// expansion, largest first: 96 = 64 + 32), each rotated on its own; nothing is padded, so
// storage is unchanged, at the cost of no mixing across blocks.
// Paper: TurboQuant, arXiv 2504.19874, sec. 3 (random rotation then scalar codebook);
// QuaRot, arXiv 2404.00456, sec. 3 (randomized Hadamard for KV caches).
module;
#include <algorithm>
#include <bit>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>
export module kvlab.strategies.rht;
import kvlab.core;

export namespace kvlab::strategies::rht {

class randomized_hadamard {
public:
  using component_concept = quantizer_tag;
  randomized_hadamard(any_quantizer inner, std::uint64_t seed)
      : inner_(std::move(inner)), seed_(seed), signs_(std::make_shared<const std::vector<float>>(signs(seed))) {
    // A sketch's own projection is not a rotation rht could compose with; a Gaussian sketch
    // is rotation invariant anyway (S R has the law of S).
    if (!inner_.invertible())
      throw error("rht(" + inner_.name() + "): " + inner_.name() + " is a sketch; rotating before it changes nothing");
    if (inner_.residual())
      throw error("rht(" + inner_.name() + "): rotate inside the residual instead, as in residual(rht(P),R)");
  }
  // Typed recipes: `rht{lloyd{3}}`, `rht{int_q{4}, 7}`.
  template <class Q>
    requires(!std::same_as<Q, randomized_hadamard> && Quantizer<Q>) // not a copy
  explicit randomized_hadamard(Q inner, std::uint64_t seed = default_seed)
      : randomized_hadamard(any_quantizer(std::move(inner)), seed) {}

  std::string name() const {
    return "rht(" + inner_.name() + (seed_ == default_seed ? "" : "," + std::to_string(seed_)) + ")";
  }
  unsigned bits() const { return inner_.bits(); }
  unsigned params_per_group() const { return inner_.params_per_group(); }
  element_format format() const { return inner_.format(); }
  std::span<const float> levels() const { return inner_.levels(); }
  encoding_rule encoding() const { return inner_.encoding(); }
  group_params fit(std::span<const float> group) const { return inner_.fit(group); }
  std::uint32_t encode(float x, group_params p) const { return inner_.encode(x, p); }
  float decode(std::uint32_t code, group_params p) const { return inner_.decode(code, p); }
  std::span<const float> scale_levels() const { return inner_.scale_levels(); }
  std::uint8_t scale_code(float scale) const { return inner_.scale_code(scale); }
  // Q's codec of whole groups (rht(polar): PolarQuant's rotation, then its angles), if any.
  std::shared_ptr<const kvlab::group_codec> group_codec(std::size_t channels) const {
    return inner_.group_codec(channels);
  }

  void rotate(std::span<float> token) const {
    apply_signs(token);
    for_each_block(token, walsh_hadamard);
    inner_.rotate(token);
  }
  void unrotate(std::span<float> token) const {
    inner_.unrotate(token);
    for_each_block(token, walsh_hadamard);
    apply_signs(token);
  }

  static constexpr std::uint64_t default_seed = 0;

private:
  // Channel i's sign is the top bit of the first draw of stream i: the same for every token,
  // so the first signs_kept of them are drawn once, when the quantizer is made, and shared
  // by its copies (read-only, so threads may rotate at once).
  static constexpr std::size_t signs_kept = 1024;
  static float draw_sign(std::uint64_t seed, std::size_t index) {
    random_stream bits(seed, index);
    return (bits.next() >> 63) ? -1.0f : 1.0f;
  }
  static std::vector<float> signs(std::uint64_t seed) {
    std::vector<float> kept(signs_kept);
    for (std::size_t i = 0; i < signs_kept; ++i) kept[i] = draw_sign(seed, i);
    return kept;
  }
  // Channel i times its sign: the kept signs in a loop of plain multiplies, which the
  // compiler vectorizes (a branch per channel between kept and drawn signs kept it scalar:
  // 40 % of an rht(int4) append); channels past them draw theirs.
  void apply_signs(std::span<float> token) const {
    const std::size_t kept = std::min(token.size(), signs_kept);
    const float* signs = signs_->data();
    for (std::size_t i = 0; i < kept; ++i) token[i] *= signs[i];
    for (std::size_t i = kept; i < token.size(); ++i) token[i] *= draw_sign(seed_, i);
  }
  template <class F>
  static void for_each_block(std::span<float> token, F&& transform) {
    std::size_t start = 0;
    while (start < token.size()) {
      const std::size_t length = std::bit_floor(token.size() - start);
      transform(token.subspan(start, length));
      start += length;
    }
  }

  any_quantizer inner_;
  std::uint64_t seed_;
  std::shared_ptr<const std::vector<float>> signs_;
};
static_assert(Quantizer<randomized_hadamard>);
static_assert(rotates_tokens<randomized_hadamard>);

inline strategy_info info() {
  return {.name = "rht",
          .usage = "rht(Q) or rht(Q,seed)",
          .summary = "randomized Hadamard rotation before quantizer Q",
          .paper = "arXiv 2504.19874 sec. 3; arXiv 2404.00456 sec. 3",
          .examples = {"rht(lloyd2)", "rht(int4,7)"}};
}

inline randomized_hadamard make(const strategy_args& args) {
  if (args.args.empty() || args.args.size() > 2)
    throw error("'" + args.text + "' takes a quantizer and an optional seed (usage: rht(Q) or rht(Q,seed))");
  const std::uint64_t seed =
      args.args.size() == 2 ? args.number<std::uint64_t>(1, "seed") : randomized_hadamard::default_seed;
  return randomized_hadamard{args.components->make_quantizer(args.args[0]), seed};
}

} // namespace kvlab::strategies::rht

// The typed name recipes use (kvlab.compose).
export namespace kvlab::parts {
using rht = strategies::rht::randomized_hadamard;
} // namespace kvlab::parts
