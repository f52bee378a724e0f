// The component concepts: Quantizer, Granularity, Eviction and Storage, and the eviction
// extensions Allocation and Aggregation (Schedule is in :schedule). A type opts in with a
// tag (see :tags).
module;
#include <algorithm>
#include <bit>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>
export module kvlab.core:concepts;
import :codebook;
import :errors;
import :numeric;
import :eviction;
import :tags;

export namespace kvlab {

// How stored elements are turned back into floats.
enum class element_format {
  f32,       // raw IEEE binary32, no parameters
  f16,       // raw IEEE binary16, no parameters
  bf16,      // raw bfloat16, no parameters
  codebook,  // value = scale * levels[code] + zero, codes of 1..8 bits
  group_code // a whole group decodes from one code (group_codec, below): no code per element
};

// Precision in which scales and zeros are stored.
enum class param_precision { f16, f32 };

// Parameters shared by one group of elements. Codebook formats decode as
// scale * levels[code] + zero.
struct group_params {
  float scale = 1.0f;
  float zero = 0.0f;
  bool operator==(const group_params&) const = default;
};

// Optional part of a Quantizer with one parameter per group:
//   scale_levels(), scale_code(scale) the quantizer stores its scale as one byte: byte b
//                       decodes to scale_levels()[b] (256 entries; empty: fp16 or f32 as the
//                       recipe says), and scale_code gives the byte of a scale fit()
//                       returned (mxfp4's E8M0, nvfp4's UE4M3 scales)
template <class Q>
concept stores_scale_bytes = requires(const Q q, float scale) {
  { q.scale_levels() } -> std::same_as<std::span<const float>>;
  { q.scale_code(scale) } -> std::same_as<std::uint8_t>;
};
template <class Q>
std::span<const float> scale_levels_of(const Q& quantizer) {
  if constexpr (stores_scale_bytes<Q>) return quantizer.scale_levels();
  return {};
}
// Bytes storage spends on each parameter of a group.
template <class Q>
std::size_t param_bytes(const Q& quantizer, param_precision precision) {
  if (!scale_levels_of(quantizer).empty()) return 1;
  return precision == param_precision::f32 ? 4 : 2;
}

// The fitted parameters of one group exactly as storage holds them (rounded to fp16 unless
// f32 is asked for, or to the quantizer's own scale bytes): codes are chosen against what
// decoding will see (except by quantizers with encode_group, such as ggml's formats). A group value, a
// parameter, or the decoded value of the group's extremes that is not finite in that
// precision is an error naming the value; the caller adds which tensor and group.
template <class Q>
group_params stored_params(const Q& quantizer, std::span<const float> group, param_precision precision) {
  // An infinity or NaN by its exponent bits, in a loop the compiler vectorizes (a branch
  // per value made this check most of an fp8 append); then min and max by the kernels.
  std::uint32_t specials = 0;
  for (const float x : group) specials |= (std::bit_cast<std::uint32_t>(x) & 0x7f800000u) == 0x7f800000u;
  if (specials != 0)
    for (const float x : group)
      if (!std::isfinite(x))
        throw error(quantizer.name() + ": value " + format_number(x) +
                    " is not finite (the quantizer's rotation overflows float for values this large)");
  const auto [lowest, highest] = group.empty() ? std::pair{0.0f, 0.0f} : min_max(group);
  const group_params fitted = quantizer.fit(group);
  const group_params p = [&] {
    if constexpr (stores_scale_bytes<Q>)
      if (const auto scales = quantizer.scale_levels(); !scales.empty())
        return group_params{scales[quantizer.scale_code(fitted.scale)], 0.0f};
    return precision == param_precision::f32 ? fitted
                                             : group_params{round_to_half(fitted.scale), round_to_half(fitted.zero)};
  }();
  const bool finite = std::isfinite(p.scale) && std::isfinite(p.zero) &&
                      std::isfinite(quantizer.decode(quantizer.encode(lowest, p), p)) &&
                      std::isfinite(quantizer.decode(quantizer.encode(highest, p), p));
  if (finite) return p;
  const std::string range = "values in [" + format_number(lowest) + ", " + format_number(highest) + "]";
  if (quantizer.params_per_group() == 0)
    throw error(quantizer.name() + ": " + range + " are beyond the format's range; scale the data down");
  throw error(quantizer.name() + ": " + range + " give scale " + format_number(fitted.scale) + " and zero " +
              format_number(fitted.zero) +
              (precision == param_precision::f16
                   ? ", beyond the fp16 range (65504); use scale=f32 in the recipe or scale the data down"
                   : ", whose codes do not decode to finite floats; scale the data down"));
}

// The element codec of a Quantizer, and the rule that fits its parameters to one group.
//   bits()             code width in bits (exactly what storage packs per element)
//   params_per_group() 0 (none), 1 (scale) or 2 (scale and zero point)
//   format(), levels() how codes decode; levels() has 2^bits entries for codebooks
//   fit(group)         parameters for a group of values
//   encode(x, params)  code of one value under (already stored, rounded) parameters
//   decode(code, params) the reference decoder; fused kernels must agree with it
template <class Q>
concept codes_elements =
    requires(const Q q, std::span<const float> group, float x, std::uint32_t code, group_params p) {
      { q.bits() } -> std::same_as<unsigned>;
      { q.params_per_group() } -> std::same_as<unsigned>;
      { q.format() } -> std::same_as<element_format>;
      { q.levels() } -> std::same_as<std::span<const float>>;
      { q.fit(group) } -> std::same_as<group_params>;
      { q.encode(x, p) } -> std::same_as<std::uint32_t>;
      { q.decode(code, p) } -> std::same_as<float>;
    };

// A codec of whole groups of one token's values for quantizers whose code is not one code
// per element (PolarQuant's angles, which each decode into many channels): a group of
// channels() values becomes code_bits() bits, written at a bit offset of a record and read
// back from there. Shared read-only by threads.
class group_codec {
public:
  virtual ~group_codec() = default;
  virtual std::size_t channels() const = 0;
  virtual std::size_t code_bits() const = 0;
  // Writes the group's code to bits [bit_offset, bit_offset + code_bits()) of `record`
  // (least significant first, other bits untouched); a value it cannot code (not finite,
  // beyond its range) is a kvlab::error naming the value.
  virtual void encode(std::span<const float> group, std::span<std::uint8_t> record, std::size_t bit_offset) const = 0;
  virtual void decode(std::span<const std::uint8_t> record, std::size_t bit_offset,
                      std::span<float> group) const noexcept = 0;
};
//   group_codec(channels) the codec of groups of `channels` values (a kvlab::error naming
//                         the quantizer when it cannot code groups of that width)
template <class Q>
concept codes_groups = requires(const Q q, std::size_t channels) {
  { q.group_codec(channels) } -> std::same_as<std::shared_ptr<const group_codec>>;
};

// Quantizer: an element codec (codes_elements) or a codec of whole groups (codes_groups).
template <class Q>
concept Quantizer = opts_into<Q, quantizer_tag> && std::copyable<Q> && requires(const Q q) {
  { q.name() } -> std::convertible_to<std::string>;
} && (codes_elements<Q> || codes_groups<Q>);

// Optional parts of a Quantizer.
//   encoding()          an encoding_rule, so kernels encode whole groups (else encode() per element)
//   encode_group(values, stored, codes) the codes of a whole group where they depend on more
//                       than its stored parameters (ggml's formats choose codes against the
//                       scale before fp16 rounding); encode() then serves single values
//   rotate(v)/unrotate(v) an orthogonal transform of each token vector applied before fitting
//                       (adaptors such as rht); attention then rotates the query instead of
//                       decoding keys, and un-rotates the value sum once
//   projection(head_dim) a token_projection (below): a sketch of each token vector that
//                       the body stores in place of the vector (QJL)
template <class Q>
concept has_encoding_rule = requires(const Q q) {
  { q.encoding() } -> std::same_as<encoding_rule>;
};
template <class Q>
concept encodes_groups = requires(const Q q, std::span<const float> values, group_params p,
                                  std::span<std::uint32_t> codes) { q.encode_group(values, p, codes); };
template <class Q>
concept rotates_tokens = requires(const Q q, std::span<float> v) {
  q.rotate(v);
  q.unrotate(v);
};

// A linear map A of each token vector into the space a body stores (head_dim d to
// stored_dim() m), for quantizers whose stored keys are not the keys themselves (QJL's
// sign sketch). Scores are read as <query(q), stored key>, so query() must be A; what is
// stored is key(k), which need not be linear (QJL stores c sign(Ak)); a stored row y is
// decoded as adjoint(y) = A^T y, and a weighted sum of rows likewise once. A rotation is
// the case m = d, key = query = R, adjoint = R^T. Shared read-only by threads.
class token_projection {
public:
  virtual ~token_projection() = default;
  virtual std::size_t stored_dim() const = 0;
  virtual void key(std::span<const float> token, std::span<float> stored) const = 0;
  virtual void query(std::span<const float> token, std::span<float> stored) const = 0;
  virtual void adjoint(std::span<const float> stored, std::span<float> token) const = 0;
};
//   projection(head_dim) the quantizer's token_projection for tokens of head_dim channels
//   invertible()         whether adjoint(key(x)) == x: only then may the quantizer hold
//                        values (attention sums their decoded rows) or demoted tokens
template <class Q>
concept projects_tokens = requires(const Q q, std::size_t head_dim) {
  { q.projection(head_dim) } -> std::same_as<std::shared_ptr<const token_projection>>;
  { q.invertible() } -> std::same_as<bool>;
};

// The elements of one (layer, KV head) stream that share parameters: `tokens` consecutive
// tokens times `channels` consecutive channels. Per-token groups have tokens == 1 and are
// complete as soon as their token arrives; per-channel groups (tokens > 1) complete only
// when `tokens` tokens have arrived.
struct group_shape {
  std::size_t tokens = 1;
  std::size_t channels = 0;
  bool operator==(const group_shape&) const = default;
};

// How many tokens one parameter group spans, known from the type: typed recipes reject
// at compile time a granularity that cannot work where it is used (`all` in a cache,
// `several` for demoted tokens, which arrive one at a time).
enum class token_span { one, several, all };

// Granularity: which elements share parameters.
//   spans                 the token_span of its groups (a static member)
//   group_shape(head_dim) the shape of one group; throws kvlab::error if the granularity
//                         does not fit head_dim (no silent truncation)
template <class G>
concept Granularity = opts_into<G, granularity_tag> && std::copyable<G> && requires(const G g, std::size_t head_dim) {
  { g.name() } -> std::convertible_to<std::string>;
  { g.group_shape(head_dim) } -> std::same_as<kvlab::group_shape>;
  { G::spans } -> std::convertible_to<token_span>;
};

// Index of the parameter group holding (token, channel) inside a block of
// shape.tokens tokens: groups are numbered token-group-major, then by channel group.
inline std::size_t param_index(const group_shape& shape, std::size_t head_dim, std::size_t token,
                               std::size_t channel) noexcept {
  return (token / shape.tokens) * (head_dim / shape.channels) + channel / shape.channels;
}

// Eviction: scores the tokens of one (layer, KV head); the cache keeps the highest scores
// within the budget (see :eviction for budgets, allocation and schedules).
//   needs()       what the cache must collect (attention, keys) and the default schedule
//   budget(seen)  tokens one head keeps once `seen` tokens have arrived
//   scores(view)  one score per held token; protected_score for tokens that must stay
template <class E>
concept Eviction =
    opts_into<E, eviction_tag> && std::copyable<E> && requires(const E e, const eviction_view& view, std::size_t seen) {
      { e.name() } -> std::convertible_to<std::string>;
      { e.needs() } -> std::same_as<eviction_needs>;
      { e.budget(seen) } -> std::same_as<std::size_t>;
      { e.scores(view) } -> std::same_as<std::vector<double>>;
    };

// A policy that declares `static constexpr bool keeps_every_token = true` (none) makes a
// cache that never scores or compresses.
template <class E>
concept keeps_every_token = Eviction<E> && requires { requires E::keeps_every_token; };

// Allocation: spreads the policy's budget over layers and the KV heads of a layer.
//   keep(layer, layers, budget, scores) the tokens each KV head of `layer` keeps (ascending
//       indices, one list per head), given the budget one head has under uniform
//       allocation and the scores of each head's evictable tokens
template <class A>
concept Allocation = opts_into<A, allocation_tag> && std::copyable<A> &&
                     requires(const A a, std::size_t n, std::span<const std::vector<double>> scores) {
                       { a.name() } -> std::convertible_to<std::string>;
                       { a.keep(n, n, n, scores) } -> std::same_as<std::vector<std::vector<std::size_t>>>;
                     };

// Aggregation (GQA): one score per key from the attention of a KV head's query group.
//   combine(probabilities, group, scores) probabilities is group x held (held order);
//       scores[t] for t < scores.size() (the evictable tokens) is the group's aggregate
template <class G>
concept Aggregation =
    opts_into<G, aggregation_tag> && std::copyable<G> &&
    requires(const G g, std::span<const float> probabilities, std::size_t group, std::span<double> scores) {
      { g.name() } -> std::convertible_to<std::string>;
      g.combine(probabilities, group, scores);
    };

// Fixed-size records (one per stored block of tokens) for one stream. Implementations
// decide the memory layout; bytes_reserved() is everything they hold, padding included.
class record_store {
public:
  virtual ~record_store() = default;
  // Adds between one and `records` records at the end, contiguous in memory, and returns
  // their bytes for the caller to fill: encoders write records where they are stored, a run
  // of them per kernel call, with no copy through a scratch record. The new bytes are
  // unspecified.
  virtual std::span<std::uint8_t> append_slots(std::size_t records) = 0;
  // Removes the last record (one whose encoding failed after append_slots()).
  virtual void pop_back() = 0;
  // Makes room for `records` more records, so that appending them allocates nothing.
  virtual void reserve(std::size_t records) = 0;
  void append(std::span<const std::uint8_t> record) {
    if (record.size() != record_bytes())
      throw error("storage: record of " + std::to_string(record.size()) + " bytes, expected " +
                  std::to_string(record_bytes()));
    std::memcpy(append_slots(1).data(), record.data(), record.size());
  }
  virtual std::span<const std::uint8_t> record(std::size_t index) const = 0;
  // Records first, first + 1, ... that lie contiguously in memory, as one span of whole
  // records (at least one): kernels stream through a run without per-record calls.
  virtual std::span<const std::uint8_t> run(std::size_t first) const = 0;
  virtual std::size_t size() const noexcept = 0;
  virtual std::size_t record_bytes() const noexcept = 0;
  virtual std::size_t bytes_reserved() const noexcept = 0;
  // Removes the records at `sorted_indices` (ascending, unique), keeping the order of the rest.
  virtual void erase(std::span<const std::size_t> sorted_indices) = 0;
};

// Storage: makes the record store of one stream.
template <class S>
concept Storage = opts_into<S, storage_tag> && std::copyable<S> && requires(const S s, std::size_t record_bytes) {
  { s.name() } -> std::convertible_to<std::string>;
  { s.make_store(record_bytes) } -> std::same_as<std::unique_ptr<record_store>>;
};

} // namespace kvlab
