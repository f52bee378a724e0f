// kvlab.compose: typed recipes. Components are values of concrete types (kvlab::parts, one
// per strategy file) checked by the concepts when the recipe is written, with their
// parameters as typed fields:
//
//   using namespace kvlab::parts;
//   const kvlab::recipe kivi2{.keys = kvlab::stream{uint_q{2}, channel{32}},
//                             .values = kvlab::stream{uint_q{2}, group{32}}, .residual = 128};
//
// A typed recipe converts to the any_recipe that recipe strings parse into, so evaluation,
// sweeps and tables take either. A combination that cannot work does not compile: a type
// that is not a Quantizer in the quantizer slot, a granularity spanning the whole tensor in
// a cache, demotion to groups that span several tokens, an allocation, aggregation,
// schedule or demotion without an eviction policy.
module;
#include <concepts>
#include <cstddef>
#include <string>
export module kvlab.compose;
import kvlab.core;
import kvlab.strategies.f16;
import kvlab.strategies.token;
import kvlab.strategies.none;
import kvlab.strategies.uniform;
import kvlab.strategies.gqa_mean;
import kvlab.strategies.flat;

export namespace kvlab {

// One stream's codec: quantizer and granularity. The parts are checked in the body rather
// than as template constraints, so a wrong part is reported by name with its concept.
template <class Q, class G>
struct stream {
  static_assert(Quantizer<Q>, "kvlab::stream{quantizer, granularity}: the first part is not a Quantizer (see "
                              "modules/core/concepts.cppm; types opt in with `using component_concept = "
                              "kvlab::quantizer_tag;`)");
  static_assert(Granularity<G>, "kvlab::stream{quantizer, granularity}: the second part is not a Granularity");
  Q quantizer;
  G granularity;
  operator any_stream() const { return {any_quantizer(quantizer), any_granularity(granularity)}; }
};

template <class S>
inline constexpr bool is_stream = false;
template <class Q, class G>
inline constexpr bool is_stream<stream<Q, G>> = Quantizer<Q> && Granularity<G>;

// Granularities a cache can stream: groups complete after a bounded number of tokens.
template <class S>
concept CacheStream = is_stream<S> && (decltype(S::granularity)::spans != token_span::all);
// Demoted tokens arrive one at a time, so their groups must be per token.
template <class S>
concept DemotionStream = is_stream<S> && (decltype(S::granularity)::spans == token_span::one);

// The defaults of the optional parts: the policy's own schedule, and no demotion.
struct own_schedule {};
struct no_demotion {};

template <class S>
concept ScheduleSlot = std::same_as<S, own_schedule> || Schedule<S>;
template <class D>
concept DemotionSlot = std::same_as<D, no_demotion> || DemotionStream<D>;

// Allocation, aggregation, schedule and demotion act on what an eviction policy scores, so
// with a policy that keeps every token (none) they must stay at their defaults.
template <class E, class A, class G, class S, class D>
concept EvictionPartsHaveAPolicy =
    !keeps_every_token<E> || (std::same_as<A, parts::uniform> && std::same_as<G, parts::gqa_mean> &&
                              std::same_as<S, own_schedule> && std::same_as<D, no_demotion>);

template <class K = stream<parts::f16, parts::token>, class V = stream<parts::f16, parts::token>, class E = parts::none,
          class A = parts::uniform, class G = parts::gqa_mean, class S = own_schedule, class D = no_demotion,
          class P = parts::flat>
struct recipe {
  static_assert(CacheStream<K>, "recipe .keys: expected kvlab::stream{Quantizer, Granularity} whose groups complete "
                                "after a bounded number of tokens (tensor spans the whole stream)");
  static_assert(CacheStream<V>, "recipe .values: expected kvlab::stream{Quantizer, Granularity} whose groups "
                                "complete after a bounded number of tokens (tensor spans the whole stream)");
  static_assert(Eviction<E>, "recipe .eviction: expected an Eviction policy");
  static_assert(Allocation<A>, "recipe .allocation: expected an Allocation rule");
  static_assert(Aggregation<G>, "recipe .gqa: expected an Aggregation");
  static_assert(ScheduleSlot<S>, "recipe .compress: expected a Schedule");
  static_assert(DemotionSlot<D>, "recipe .demote: expected kvlab::stream{Quantizer, Granularity} with per-token "
                                 "groups (token or group): demoted tokens arrive one at a time");
  static_assert(Storage<P>, "recipe .storage: expected a Storage");
  static_assert(EvictionPartsHaveAPolicy<E, A, G, S, D>,
                "recipe: .allocation, .gqa, .compress and .demote act on what an eviction policy scores; "
                "set .eviction");

  K keys{};
  V values{};
  param_precision scale = param_precision::f16; // storage of scales and zeros
  std::size_t sinks = 0;                        // first tokens kept in fp16
  std::size_t residual = 0;                     // most recent tokens kept in fp16
  bool keys_before_rope = false;                // rope=pre: keys stored before RoPE
  E eviction{};
  A allocation{};
  G gqa{};
  S compress{};
  D demote{};
  P storage{};

  // The type-erased recipe, checked as parse_recipe checks one.
  operator any_recipe() const {
    any_recipe erased{.keys = keys,
                      .values = values,
                      .scale = scale,
                      .sinks = sinks,
                      .residual = residual,
                      .keys_before_rope = keys_before_rope,
                      .eviction = any_eviction(eviction),
                      .allocation = any_allocation(allocation),
                      .gqa = any_aggregation(gqa),
                      .storage = any_storage(storage)};
    if constexpr (!std::same_as<S, own_schedule>) erased.compress = any_schedule(compress);
    if constexpr (!std::same_as<D, no_demotion>) erased.demote = any_stream(demote);
    check_recipe(erased);
    return erased;
  }
};

// The canonical name of a typed recipe: that of the recipe it erases into.
template <class... Parts>
std::string canonical_name(const recipe<Parts...>& r) {
  return canonical_name(any_recipe(r));
}

} // namespace kvlab
