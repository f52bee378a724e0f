// kvlab.data.llm: synthetic KV data that imitates what real LLM KV caches show.
//
// Spec: synthetic:llm(L=2,H=2,Q=8,T=1024,D=128,seed=1, knob=value, ...)
//   L layers, H KV heads, Q query heads (a multiple of H), T tokens, head_dim D (even:
//   RoPE rotates channel pairs), seed. Same seed, same knobs: bit-identical data.
//
// How one (layer, KV head) is built, before RoPE (every "noise" is N(0, 1) per channel):
//   key k_t     = noise_t, plus a fixed offset in a few outlier channels, plus the sink
//                 direction for the first `sinks` tokens, plus the positional direction;
//   value v_t   = independent Student-t entries scaled to unit variance;
//   query q_t   = sharpness x (sqrt(locality) x (normalized sum of the key noise of the
//                 last 4 tokens) + sqrt(1 - locality) x (a part the group's query heads
//                 share, mixed by group_correlation with a part of the head's own))
//               + the sink direction (when sinks > 0) + the positional direction;
//   then keys and queries are rotated by RoPE at their position t.
//
// Knobs (default in parentheses):
//   outlier_channels (4)  how many key channels per (layer, KV head) are outliers; which
//                         ones is drawn per (layer, KV head), each with a fixed sign.
//   outlier_scale (8)     an outlier channel holds outlier_scale x its sign + noise, so
//                         its magnitude is about outlier_scale times the other channels'.
//   rope_base (10000)     RoPE base: pair (i, i + D/2) turns by t x rope_base^(-2i/D) at
//                         position t; 0 switches RoPE off.
//   sinks (4)             the first `sinks` tokens get keys aligned with every query
//                         (about +5 in every attention logit q.k/sqrt(D)); 0: no sinks.
//   locality (0.5)        in [0, 1]: the fraction of each query's variance built from the
//                         keys of the last 4 tokens, so recent tokens draw attention.
//   value_dof (4)         degrees of freedom of the Student-t values, > 2 (finite
//                         variance); small is heavy-tailed, large is nearly Gaussian.
//   group_correlation (0.5) in [0, 1]: how much of the non-local query part the query
//                         heads of one GQA group share.
//   sharpness (1)         multiplies the content part of every query (not the sink and
//                         positional parts): the spread of the logits, so how few keys
//                         take the attention.
//   sharpness_spread (0)  query head j's sharpness is sharpness x exp(sharpness_spread x z_j),
//                         z_j ~ N(0, 1) drawn per head: real heads range from nearly uniform
//                         to nearly one-hot.
//   sink_logit (5)        the logit q.k/sqrt(D) every query adds to a sink token.
//   position_logit (0)    a positional component (below) adds this logit at distance 0,
//                         falling with distance over position_span tokens.
//   position_span (64)    tokens over which the positional logit falls.
//   like (none)           a preset: like=stories260K, like=tinystories-656k or
//                         like=shakespeare-hd64 sets the model's shape and the knobs fitted
//                         to its real capture (docs/data.md); knobs given with it win.
//
// The positional component (Barbero et al., arXiv 2410.06205 sec. 5: trained models build
// positional attention from the RoPE frequencies): keys and queries share one fixed vector u
// before RoPE, spread evenly over the pairs that turn by at most pi over position_span tokens
// (the sink pairs excluded). After RoPE, q_t.k_s gains |u|^2 x mean_i cos((t - s) theta_i),
// the largest at t = s and falling over the span, without any key noise. It lets a small
// head_dim (8 in stories260K) prefer recent tokens, which content cannot do there: 8 random
// channels do not tell hundreds of keys apart.
//
// Why per-channel quantization of keys wins at 2 bits here (the KIVI finding): the
// outlier channels. Every token holds the same few values near +-outlier_scale next to
// ~N(0, 1) entries, so a per-token group's min-max range is at least outlier_scale (twice
// that when both signs occur) and a 2-bit grid of 4 levels over it leaves the ordinary
// entries with errors of order their whole size. A per-channel group spans one channel over 32 tokens: an outlier
// channel is an offset plus ordinary noise, which RoPE barely turns within 32 tokens in the slower pairs, so the
// group's range stays close to an ordinary channel's and the 4 levels fit it. In a fast pair the offset swings over
// +-outlier_scale, but that costs only the pair's two channels, where per-token groups pay in every channel of every
// token.
module;
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <numbers>
#include <string>
#include <string_view>
#include <utility>
#include <vector>
export module kvlab.data.llm;
import kvlab.core;

export namespace kvlab {

namespace detail::llm {

// Every parameter the spec accepts, with its default, in the order errors list them.
inline const generator_arguments::defaults parameter_defaults{{"L", 2},
                                                              {"H", 2},
                                                              {"Q", 8},
                                                              {"T", 1024},
                                                              {"D", 128},
                                                              {"seed", 1},
                                                              {"outlier_channels", 4},
                                                              {"outlier_scale", 8},
                                                              {"rope_base", 10000},
                                                              {"sinks", 4},
                                                              {"locality", 0.5},
                                                              {"value_dof", 4},
                                                              {"group_correlation", 0.5},
                                                              {"sharpness", 1},
                                                              {"sharpness_spread", 0},
                                                              {"sink_logit", 5},
                                                              {"position_logit", 0},
                                                              {"position_span", 64}};

// Queries are built from the keys of this many most recent tokens (the token itself included).
inline constexpr std::size_t recent_window = 4;

// Every parameter of one llm(...) spec, validated.
struct parameters {
  std::size_t layers = 0, kv_heads = 0, q_heads = 0, tokens = 0, head_dim = 0;
  std::uint64_t seed = 0;
  std::size_t outlier_channels = 0;
  double outlier_scale = 0;
  double rope_base = 0; // 0: no RoPE
  std::size_t sinks = 0;
  double locality = 0;
  double value_dof = 0;
  double group_correlation = 0;
  double sharpness = 0, sharpness_spread = 0;
  double sink_logit = 0;
  double position_logit = 0;
  std::size_t position_span = 0;
};

// A model the knobs were fitted to: its shape and the fitted knobs (scripts/fit-synthetic-llm
// against its capture in docs/data.md); `like=name` puts them in place of the defaults.
struct preset {
  std::string_view name;
  generator_arguments::defaults values;
};

inline const std::vector<preset>& presets() {
  static const std::vector<preset> all{
      {"stories260K",
       {{"L", 5},
        {"H", 4},
        {"Q", 8},
        {"T", 512},
        {"D", 8},
        {"outlier_channels", 2},
        {"outlier_scale", 1},
        {"value_dof", 25},
        {"sinks", 1},
        {"sink_logit", 1},
        {"sharpness", 0.5},
        {"sharpness_spread", 1.25},
        {"locality", 0.8},
        {"position_logit", 12},
        {"position_span", 32}}},
      {"tinystories-656k",
       {{"L", 2},
        {"H", 4},
        {"Q", 8},
        {"T", 512},
        {"D", 16},
        {"outlier_channels", 2},
        {"outlier_scale", 1},
        {"value_dof", 25},
        {"sinks", 4},
        {"sink_logit", 2.5},
        {"sharpness", 0.35},
        {"sharpness_spread", 2},
        {"locality", 0},
        {"position_logit", 4},
        {"position_span", 128}}},
      {"shakespeare-hd64",
       {{"L", 4},
        {"H", 2},
        {"Q", 4},
        {"T", 256},
        {"D", 64},
        {"outlier_channels", 1},
        {"outlier_scale", 2},
        {"value_dof", 25},
        {"sinks", 0},
        {"sharpness", 0.85},
        {"sharpness_spread", 1.25},
        {"locality", 0.5},
        {"position_logit", 2},
        {"position_span", 64}}},
  };
  return all;
}

// The defaults a spec starts from: parameter_defaults, or with like=NAME the preset's values
// in their place. `rest` receives the other arguments.
inline generator_arguments::defaults defaults_for(const term& generator, std::string_view spec, term& rest) {
  rest = term{generator.name, {}};
  const preset* chosen = nullptr;
  for (const auto& arg : generator.args) {
    if (!arg.starts_with("like=")) {
      rest.args.push_back(arg);
      continue;
    }
    const std::string_view name = std::string_view(arg).substr(5);
    if (chosen != nullptr) throw error("data spec '" + std::string(spec) + "': parameter 'like' is given twice");
    for (const auto& candidate : presets())
      if (candidate.name == name) chosen = &candidate;
    if (chosen == nullptr) {
      std::string known;
      for (const auto& candidate : presets()) known += (known.empty() ? "" : ", ") + std::string(candidate.name);
      throw error("data spec '" + std::string(spec) + "': unknown preset like=" + std::string(name) +
                  "; presets: " + known);
    }
  }
  generator_arguments::defaults defaults = parameter_defaults;
  if (chosen != nullptr)
    for (const auto& [name, value] : chosen->values) {
      const auto entry = std::ranges::find_if(defaults, [&](const auto& known) { return known.first == name; });
      if (entry == defaults.end())
        throw error("internal: preset " + std::string(chosen->name) + " sets an unknown parameter '" + name + "'");
      entry->second = value;
    }
  return defaults;
}

inline parameters read_parameters(const term& generator, std::string_view spec) {
  term knobs;
  auto defaults = defaults_for(generator, spec, knobs);
  const generator_arguments args(knobs, spec, std::move(defaults));
  parameters p;
  p.layers = args.whole_number("L");
  p.kv_heads = args.whole_number("H");
  p.q_heads = args.whole_number("Q");
  p.tokens = args.whole_number("T", 2);
  p.head_dim = args.whole_number("D", 2);
  p.seed = args.whole_number("seed", 0);
  if (p.q_heads % p.kv_heads != 0)
    args.fail("Q = " + std::to_string(p.q_heads) + " query heads is not a multiple of H = " +
              std::to_string(p.kv_heads) + " KV heads (grouped-query attention)");
  if (p.head_dim % 2 != 0)
    args.fail("parameter D = " + std::to_string(p.head_dim) + " must be even: RoPE rotates channel pairs (i, i+D/2)");
  // Refuse workloads that would not fit this machine's memory, before allocating them.
  checked_workload_elements({2 * p.kv_heads + p.q_heads, p.layers, p.tokens, p.head_dim},
                            "data spec '" + std::string(spec) + "'");

  p.outlier_channels = args.whole_number("outlier_channels", 0);
  if (p.outlier_channels > p.head_dim)
    args.fail("parameter outlier_channels = " + std::to_string(p.outlier_channels) +
              " must be at most D = " + std::to_string(p.head_dim) + " (it counts key channels)");
  p.outlier_scale = args.real_in("outlier_scale", 0, 1e4, "offset of an outlier key channel, in units of noise");
  p.rope_base = args.value("rope_base");
  if (!(p.rope_base == 0 || (p.rope_base > 1 && p.rope_base <= 1e12)))
    args.fail("parameter rope_base = " + format_number(p.rope_base) +
              " must be 0 (RoPE off) or in (1, 1e12] (RoPE base, 10000 in Llama)");
  p.sinks = args.whole_number("sinks", 0);
  if (p.sinks > p.tokens)
    args.fail("parameter sinks = " + std::to_string(p.sinks) + " must be at most T = " + std::to_string(p.tokens) +
              " (it counts the first tokens)");
  p.locality = args.real_in("locality", 0, 1, "fraction of each query built from the keys of recent tokens");
  p.value_dof = args.value("value_dof");
  if (!(p.value_dof > 2 && p.value_dof <= 1e6))
    args.fail("parameter value_dof = " + format_number(p.value_dof) +
              " must be > 2 (Student-t values need a finite variance) and at most 1e6");
  p.group_correlation =
      args.real_in("group_correlation", 0, 1, "share of the query heads of one GQA group in a common part");
  p.sharpness = args.real_in("sharpness", 0, 100, "scale of the content part of every query");
  p.sharpness_spread = args.real_in("sharpness_spread", 0, 3, "spread of the per-head sharpness, exp(spread x z)");
  p.sink_logit = args.real_in("sink_logit", 0, 50, "logit every query adds to a sink token");
  p.position_logit = args.real_in("position_logit", 0, 100, "logit of the positional component at distance 0");
  p.position_span = args.whole_number("position_span");
  if (p.position_logit > 0 && p.rope_base == 0)
    args.fail("parameter position_logit = " + format_number(p.position_logit) +
              " needs RoPE (rope_base > 0): the positional component is built from its rotations");
  if (p.position_logit > 0 && p.head_dim < 4)
    args.fail("parameter position_logit = " + format_number(p.position_logit) +
              " needs D >= 4: D = 2 holds only the sink's RoPE pair");
  return p;
}

// One independent random stream per (tensor, layer, head): generation order never matters.
enum class stream_kind : std::uint64_t {
  key_noise = 1,     // per KV head
  values = 2,        // per KV head
  query_own = 3,     // per query head
  query_shared = 4,  // per KV head: the part its group's query heads share
  head_structure = 5 // per KV head: outlier channels, their signs, the sink direction
};

inline random_stream stream_for(std::uint64_t seed, stream_kind kind, std::size_t layer, std::size_t head) {
  return random_stream(seed, (static_cast<std::uint64_t>(kind) << 48) ^ (std::uint64_t{layer} << 24) ^ head);
}

// Gamma(shape, 1) for shape >= 1 by Marsaglia and Tsang, "A simple method for generating
// gamma variables", ACM TOMS 26(3), 2000.
inline double gamma_sample(random_stream& random, double shape) {
  const double d = shape - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    const double x = random.normal();
    double v = 1.0 + c * x;
    if (v <= 0.0) continue;
    v = v * v * v;
    if (std::log(random.uniform()) < 0.5 * x * x + d - d * v + d * std::log(v)) return d * v;
  }
}

// Student-t with `dof` > 2 degrees of freedom, scaled to unit variance: z / sqrt(chi2/dof)
// has variance dof / (dof - 2), and chi2 with dof degrees of freedom is 2 Gamma(dof / 2).
inline double unit_student_t(random_stream& random, double dof) {
  const double z = random.normal();
  return z * std::sqrt((dof - 2.0) / (2.0 * gamma_sample(random, dof / 2.0)));
}

// What one (layer, KV head) shares across its tokens: which key channels are outliers
// (and the sign of each), and the unit direction sink keys and all queries share.
struct head_structure {
  std::vector<std::size_t> outlier_channels;
  std::vector<double> outlier_signs;
  std::vector<double> sink_direction;     // D entries, non-zero only in the slowest RoPE pairs
  std::vector<double> position_direction; // D entries, scaled so q.k/sqrt(D) adds position_logit at distance 0
  std::vector<double> head_sharpness;     // per query head of the group
};

// The slowest-turning RoPE pairs, (i, i+D/2) for the last D/16 (at least one) i: the sink
// direction lives there so RoPE barely turns it over the whole context, as trained models
// keep position-independent ("semantic") signals in the lowest RoPE frequencies (Barbero
// et al., "Round and round we go! What makes rotary positional encodings useful?", arXiv
// 2410.06205).
inline std::size_t slow_pairs(std::size_t head_dim) { return std::max<std::size_t>(1, head_dim / 16); }

// The RoPE pairs of the positional component: those that turn by at most pi over
// position_span tokens, so cos((t - s) theta_i) falls over the whole span, without the sink
// pairs; the fastest non-sink pair that is slower than the span if none is that fast.
inline std::vector<std::size_t> position_pairs(const parameters& p) {
  const std::size_t half = p.head_dim / 2, usable = half - std::min(half, slow_pairs(p.head_dim));
  std::vector<std::size_t> pairs;
  for (std::size_t i = 0; i < usable; ++i) {
    const double theta = std::pow(p.rope_base, -2.0 * static_cast<double>(i) / static_cast<double>(p.head_dim));
    if (theta * static_cast<double>(p.position_span) <= std::numbers::pi) pairs.push_back(i);
  }
  if (pairs.empty() && usable > 0) pairs.push_back(usable - 1);
  return pairs;
}

inline head_structure draw_head_structure(const parameters& p, std::size_t layer, std::size_t kv_head) {
  random_stream random = stream_for(p.seed, stream_kind::head_structure, layer, kv_head);
  head_structure s;
  // Outlier channels: a partial Fisher-Yates shuffle picks distinct channels.
  std::vector<std::size_t> channels(p.head_dim);
  for (std::size_t c = 0; c < p.head_dim; ++c) channels[c] = c;
  for (std::size_t i = 0; i < p.outlier_channels; ++i) {
    const std::size_t pick = i + static_cast<std::size_t>(random.next() % (p.head_dim - i));
    std::swap(channels[i], channels[pick]);
    s.outlier_channels.push_back(channels[i]);
    s.outlier_signs.push_back(random.next() & 1 ? 1.0 : -1.0);
  }
  s.sink_direction.assign(p.head_dim, 0.0);
  const std::size_t half = p.head_dim / 2;
  double norm = 0;
  for (std::size_t i = half - slow_pairs(p.head_dim); i < half; ++i)
    for (const std::size_t c : {i, i + half}) {
      s.sink_direction[c] = random.normal();
      norm += s.sink_direction[c] * s.sink_direction[c];
    }
  for (double& x : s.sink_direction) x /= std::sqrt(norm);
  // Each positional pair holds |u_i|^2 = c^2 / P at a random phase, so that q.k/sqrt(D)
  // gains c^2 / sqrt(D) x mean_i cos((t - s) theta_i), which is position_logit at t = s.
  s.position_direction.assign(p.head_dim, 0.0);
  if (p.position_logit > 0) {
    const auto pairs = position_pairs(p);
    const double length =
        std::sqrt(p.position_logit * std::sqrt(static_cast<double>(p.head_dim)) / static_cast<double>(pairs.size()));
    for (const std::size_t i : pairs) {
      const double phase = 2.0 * std::numbers::pi * random.uniform();
      s.position_direction[i] = length * std::cos(phase);
      s.position_direction[i + half] = length * std::sin(phase);
    }
  }
  for (std::size_t j = 0; j < p.q_heads / p.kv_heads; ++j)
    s.head_sharpness.push_back(p.sharpness * std::exp(p.sharpness_spread * random.normal()));
  return s;
}

// Keys of one (layer, KV head) before RoPE, and their noise part (what queries copy).
//   Outlier channels (KIVI arXiv 2402.02750 sec. 3.1 and KVQuant arXiv 2401.18079 sec. 3.1
//   report a few fixed key channels with consistently large magnitude): noise + sign x
//   outlier_scale, so per-token groups see a huge range and per-channel groups do not.
//   Attention sinks (StreamingLLM arXiv 2309.17453 sec. 3.1: the first tokens draw large
//   attention mass whatever the query): the first `sinks` keys get a large component along
//   the sink direction that every query also holds.
inline void fill_keys(const parameters& p, const head_structure& s, std::size_t layer, std::size_t kv_head,
                      kv_tensor& keys, std::vector<float>& noise) {
  random_stream random = stream_for(p.seed, stream_kind::key_noise, layer, kv_head);
  const std::size_t d = p.head_dim;
  noise.resize(p.tokens * d);
  for (float& x : noise) x = static_cast<float>(random.normal());
  // Query holds sqrt(2 * slow_pairs) along the sink direction (unit extra variance in those
  // channels); the key's length along it makes the logit q.k / sqrt(D) equal sink_logit.
  const double sink_key_length = p.sink_logit * std::sqrt(static_cast<double>(d)) / std::sqrt(2.0 * slow_pairs(d));
  for (std::size_t t = 0; t < p.tokens; ++t) {
    auto row = keys.row(layer, kv_head, t);
    for (std::size_t c = 0; c < d; ++c) row[c] = noise[t * d + c];
    for (std::size_t i = 0; i < s.outlier_channels.size(); ++i)
      row[s.outlier_channels[i]] += static_cast<float>(s.outlier_signs[i] * p.outlier_scale);
    if (t < p.sinks)
      for (std::size_t c = 0; c < d; ++c) row[c] += static_cast<float>(sink_key_length * s.sink_direction[c]);
    if (p.position_logit > 0)
      for (std::size_t c = 0; c < d; ++c) row[c] += static_cast<float>(s.position_direction[c]);
  }
}

// Heavy-tailed values: KIVI (sec. 3.1) finds no fixed outlier channels in values, but their
// entries do take occasional large values; independent Student-t entries model that.
inline void fill_values(const parameters& p, std::size_t layer, std::size_t kv_head, kv_tensor& values) {
  random_stream random = stream_for(p.seed, stream_kind::values, layer, kv_head);
  for (std::size_t t = 0; t < p.tokens; ++t)
    for (float& x : values.row(layer, kv_head, t)) x = static_cast<float>(unit_student_t(random, p.value_dof));
}

// Queries of the query heads of one GQA group (Ainslie et al., arXiv 2305.13245: Q query
// heads share H KV heads; heads of a group are correlated variants) before RoPE.
//   Local attention (H2O arXiv 2306.14048 sec. 3 and StreamingLLM's window: recent tokens
//   take a large share of attention): sqrt(locality) of each query is the normalized sum
//   of the key noise of the last recent_window tokens, so q.k is large for those tokens.
//   The rest mixes a part the group shares with a part of the head's own.
inline void fill_group_queries(const parameters& p, const head_structure& s, std::size_t layer, std::size_t kv_head,
                               const std::vector<float>& key_noise, kv_tensor& queries) {
  const std::size_t d = p.head_dim, group = p.q_heads / p.kv_heads;
  const double local_weight = std::sqrt(p.locality);
  const double shared_weight = std::sqrt((1.0 - p.locality) * p.group_correlation);
  const double own_weight = std::sqrt((1.0 - p.locality) * (1.0 - p.group_correlation));
  const double sink_weight = p.sinks > 0 ? std::sqrt(2.0 * slow_pairs(d)) : 0.0;
  random_stream shared_random = stream_for(p.seed, stream_kind::query_shared, layer, kv_head);
  std::vector<random_stream> own_random;
  for (std::size_t j = 0; j < group; ++j)
    own_random.push_back(stream_for(p.seed, stream_kind::query_own, layer, kv_head * group + j));
  std::vector<double> content(d), sink(d);
  for (std::size_t t = 0; t < p.tokens; ++t) {
    const std::size_t first_recent = t + 1 > recent_window ? t + 1 - recent_window : 0;
    const double recent_norm = 1.0 / std::sqrt(static_cast<double>(t + 1 - first_recent));
    for (std::size_t c = 0; c < d; ++c) {
      double recent = 0;
      for (std::size_t r = first_recent; r <= t; ++r) recent += key_noise[r * d + c];
      content[c] = local_weight * recent_norm * recent + shared_weight * shared_random.normal();
      sink[c] = sink_weight * s.sink_direction[c];
    }
    for (std::size_t j = 0; j < group; ++j) {
      const double sharpness = s.head_sharpness[j];
      auto row = queries.row(layer, kv_head * group + j, t);
      for (std::size_t c = 0; c < d; ++c)
        row[c] = static_cast<float>(sharpness * content[c] + sink[c] + s.position_direction[c] +
                                    sharpness * own_weight * own_random[j].normal());
    }
  }
}

// RoPE (RoFormer, arXiv 2104.09864 sec. 3.4) in the GPT-NeoX / Llama layout: channel i and
// channel i + D/2 form a pair, turned by the angle t * base^(-2i/D) at position t, so q.k
// depends on the positions only through their difference.
inline void apply_rope(kv_tensor& tensor, double base) {
  const auto& shape = tensor.shape();
  const std::size_t half = shape.head_dim / 2;
  std::vector<double> frequency(half), cosine(half), sine(half);
  for (std::size_t i = 0; i < half; ++i)
    frequency[i] = std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(shape.head_dim));
  for (std::size_t t = 0; t < shape.tokens; ++t) {
    for (std::size_t i = 0; i < half; ++i) {
      cosine[i] = std::cos(static_cast<double>(t) * frequency[i]);
      sine[i] = std::sin(static_cast<double>(t) * frequency[i]);
    }
    for (std::size_t layer = 0; layer < shape.layers; ++layer)
      for (std::size_t head = 0; head < shape.heads; ++head) {
        auto row = tensor.row(layer, head, t);
        for (std::size_t i = 0; i < half; ++i) {
          const double x = row[i], y = row[i + half];
          row[i] = static_cast<float>(x * cosine[i] - y * sine[i]);
          row[i + half] = static_cast<float>(x * sine[i] + y * cosine[i]);
        }
      }
  }
}

} // namespace detail::llm

// Builds synthetic:llm(...) data; `generator` is the parsed llm(...) term of `spec`.
// Throws kvlab::error naming the bad parameter.
inline kv_data synthetic_llm(const term& generator, std::string_view spec) {
  const detail::llm::parameters p = detail::llm::read_parameters(generator, spec);
  const kv_shape kv{p.layers, p.kv_heads, p.tokens, p.head_dim};
  kv_data data{kv_tensor(kv), kv_tensor(kv), kv_tensor({p.layers, p.q_heads, p.tokens, p.head_dim}), std::string(spec)};
  std::vector<float> key_noise;
  for (std::size_t layer = 0; layer < p.layers; ++layer)
    for (std::size_t kv_head = 0; kv_head < p.kv_heads; ++kv_head) {
      const auto structure = detail::llm::draw_head_structure(p, layer, kv_head);
      detail::llm::fill_keys(p, structure, layer, kv_head, data.keys, key_noise);
      detail::llm::fill_values(p, layer, kv_head, data.values);
      detail::llm::fill_group_queries(p, structure, layer, kv_head, key_noise, data.queries);
    }
  if (p.rope_base != 0) {
    detail::llm::apply_rope(data.keys, p.rope_base);
    detail::llm::apply_rope(data.queries, p.rope_base);
  }
  check_consistent(data);
  return data;
}

} // namespace kvlab
