// The shape and weights of a decoder-only Llama-family transformer (Touvron et al., arXiv
// 2302.13971, sec. 2.2: RMSNorm, SwiGLU, RoPE; GQA, Ainslie et al., arXiv 2305.13245),
// independent of the file it came from. Weights are held as float32, row-major
// [out_features][in_features], whatever the file stored (converted once at load).
module;
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>
export module kvlab.model:config;
import kvlab.core;

export namespace kvlab {

// How RoPE pairs the channels of a head (Su et al., arXiv 2104.09864, sec. 3.4.2):
// interleaved pairs (2i, 2i+1) as llama2.c and GGUF `llama` store them, or half-split pairs
// (i, i + head_dim/2) as Hugging Face and GGUF `qwen2` do.
enum class rope_pairing { interleaved, half_split };

struct model_config {
  std::string architecture = "llama"; // "llama" or "qwen2" (q/k/v biases)
  std::size_t layers = 0;
  std::size_t hidden = 0;   // embedding width
  std::size_t heads = 0;    // query heads
  std::size_t kv_heads = 0; // key/value heads (GQA: heads is a multiple)
  std::size_t head_dim = 0;
  std::size_t ffn = 0; // SwiGLU hidden width
  std::size_t vocab = 0;
  std::size_t context = 0; // positions the model was trained on (0: unknown)
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;
  rope_pairing rope = rope_pairing::interleaved;
  bool qkv_bias = false;   // Qwen2
  bool tied_output = true; // the classifier is the token embedding
};

struct layer_weights {
  std::vector<float> attention_norm; // hidden
  std::vector<float> wq, wk, wv;     // [heads*head_dim][hidden], [kv_heads*head_dim][hidden] x 2
  std::vector<float> bq, bk, bv;     // empty unless qkv_bias
  std::vector<float> wo;             // [hidden][heads*head_dim]
  std::vector<float> ffn_norm;       // hidden
  std::vector<float> w_gate, w_up;   // [ffn][hidden]
  std::vector<float> w_down;         // [hidden][ffn]
};

struct model_weights {
  std::vector<float> embedding; // [vocab][hidden]
  std::vector<layer_weights> layers;
  std::vector<float> final_norm; // hidden
  std::vector<float> output;     // [vocab][hidden]; empty when tied to the embedding
};

// What a loader reads from a model file, before the tokenizer is attached.
struct model_parts {
  model_config config;
  model_weights weights;
};

namespace detail {

// a * b, or nullopt on overflow.
inline std::optional<std::size_t> checked_product(std::size_t a, std::size_t b) {
  if (a != 0 && b > std::numeric_limits<std::size_t>::max() / a) return std::nullopt;
  return a * b;
}

template <class Count>
Count parameter_count_as(const model_config& c) {
  const auto count = [](std::size_t size) { return static_cast<Count>(size); };
  const Count d = count(c.hidden), q = count(c.heads) * count(c.head_dim), kv = count(c.kv_heads) * count(c.head_dim);
  Count per_layer = 2 * d + q * d + 2 * kv * d + d * q + 3 * count(c.ffn) * d;
  if (c.qkv_bias) per_layer += q + 2 * kv;
  return count(c.vocab) * d * (c.tied_output ? 1 : 2) + count(c.layers) * per_layer + d;
}

} // namespace detail

// Checks a configuration a file declared before anything is allocated for it: every size
// positive, heads a multiple of kv_heads, head_dim even (RoPE rotates pairs), and the
// parameter count representable. `where` names the file for messages.
inline void check_model_config(const model_config& c, const std::string& where) {
  const auto fail = [&](const std::string& problem) { return error(where + ": " + problem); };
  const std::pair<const char*, std::size_t> sizes[] = {
      {"layers", c.layers},     {"hidden size", c.hidden}, {"heads", c.heads},          {"KV heads", c.kv_heads},
      {"head_dim", c.head_dim}, {"FFN size", c.ffn},       {"vocabulary size", c.vocab}};
  for (const auto& [name, value] : sizes)
    if (value == 0) throw fail(std::string(name) + " is 0; expected a positive number");
  if (c.heads % c.kv_heads != 0)
    throw fail(std::to_string(c.heads) + " query heads is not a multiple of " + std::to_string(c.kv_heads) +
               " KV heads");
  if (c.head_dim % 2 != 0) throw fail("head_dim " + std::to_string(c.head_dim) + " is odd; RoPE rotates pairs");
  if (!(c.rope_theta > 0.0) || !(c.norm_eps > 0.0)) throw fail("RoPE theta and the RMSNorm epsilon must be positive");
  // 2^40 parameters is far beyond any model a CPU runs; a larger claim is a corrupt header,
  // and the bound keeps every size computed from these fields far from overflow.
  constexpr std::size_t limit = std::size_t{1} << 40;
  for (const auto& [name, value] : sizes)
    if (value > limit) throw fail(std::string(name) + " " + std::to_string(value) + " is absurd (a corrupt header?)");
  const auto embedding = detail::checked_product(c.vocab, c.hidden);
  const auto q = detail::checked_product(c.heads, c.head_dim);
  if (!embedding || !q || *embedding > limit || *q > limit)
    throw fail("the declared sizes give more than 2^40 parameters per matrix (a corrupt header?)");
  // Counted in floating point, which cannot wrap around: in 64-bit integers, sizes a corrupt
  // header chose could wrap the count to the size of a tiny file that then passes for the model.
  if (detail::parameter_count_as<double>(c) > static_cast<double>(limit))
    throw fail("the declared sizes give more than 2^40 parameters in all (a corrupt header?)");
  require_memory(4.0 * detail::parameter_count_as<double>(c), where + ": the weights in float32",
                 "use a smaller model");
}

// Number of float parameters a checked configuration holds (for size checks against files).
inline std::size_t parameter_count(const model_config& c) { return detail::parameter_count_as<std::size_t>(c); }

// Checks that every weight has the size the configuration gives it (a loader's last step).
inline void check_model_weights(const model_config& c, const model_weights& w, const std::string& where) {
  const auto expect = [&](const std::vector<float>& v, std::size_t size, const std::string& name) {
    if (v.size() != size)
      throw error(where + ": weight '" + name + "' holds " + std::to_string(v.size()) + " values; expected " +
                  std::to_string(size));
  };
  const std::size_t q = c.heads * c.head_dim, kv = c.kv_heads * c.head_dim;
  expect(w.embedding, c.vocab * c.hidden, "token embedding");
  expect(w.final_norm, c.hidden, "final norm");
  expect(w.output, c.tied_output ? 0 : c.vocab * c.hidden, "output");
  if (w.layers.size() != c.layers)
    throw error(where + ": " + std::to_string(w.layers.size()) + " layers of weights; expected " +
                std::to_string(c.layers));
  for (std::size_t i = 0; i < c.layers; ++i) {
    const layer_weights& l = w.layers[i];
    const std::string at = "layer " + std::to_string(i) + " ";
    expect(l.attention_norm, c.hidden, at + "attention norm");
    expect(l.wq, q * c.hidden, at + "wq");
    expect(l.wk, kv * c.hidden, at + "wk");
    expect(l.wv, kv * c.hidden, at + "wv");
    expect(l.bq, c.qkv_bias ? q : 0, at + "q bias");
    expect(l.bk, c.qkv_bias ? kv : 0, at + "k bias");
    expect(l.bv, c.qkv_bias ? kv : 0, at + "v bias");
    expect(l.wo, c.hidden * q, at + "wo");
    expect(l.ffn_norm, c.hidden, at + "FFN norm");
    expect(l.w_gate, c.ffn * c.hidden, at + "gate");
    expect(l.w_up, c.ffn * c.hidden, at + "up");
    expect(l.w_down, c.hidden * c.ffn, at + "down");
  }
}

// Weights drawn uniformly with standard deviation 0.02 (GPT-2's initialisation, as
// Hugging Face's `initializer_range`), norms 1 and biases 0, deterministic in `seed`: a model
// of any shape for benchmarks, and the untrained baseline whose perplexity is near the
// vocabulary size.
inline model_weights random_weights(const model_config& c, std::uint64_t seed) {
  check_model_config(c, "random model");
  std::uint64_t stream = 0;
  const auto draw = [&](std::size_t count) {
    random_stream random(seed, stream++);
    const double half_width = 0.02 * std::sqrt(3.0);
    std::vector<float> values(count);
    for (auto& v : values) v = static_cast<float>((2.0 * random.uniform() - 1.0) * half_width);
    return values;
  };
  const auto ones = [](std::size_t count) { return std::vector<float>(count, 1.0f); };
  const std::size_t q = c.heads * c.head_dim, kv = c.kv_heads * c.head_dim, d = c.hidden;
  model_weights w;
  w.embedding = draw(c.vocab * d);
  for (std::size_t i = 0; i < c.layers; ++i) {
    layer_weights l{.attention_norm = ones(d), .wq = draw(q * d), .wk = draw(kv * d), .wv = draw(kv * d)};
    if (c.qkv_bias) l.bq.assign(q, 0.0f), l.bk.assign(kv, 0.0f), l.bv.assign(kv, 0.0f);
    l.wo = draw(d * q);
    l.ffn_norm = ones(d);
    l.w_gate = draw(c.ffn * d);
    l.w_up = draw(c.ffn * d);
    l.w_down = draw(d * c.ffn);
    w.layers.push_back(std::move(l));
  }
  w.final_norm = ones(d);
  if (!c.tied_output) w.output = draw(c.vocab * d);
  return w;
}

} // namespace kvlab
