// The forward pass of a Llama-family decoder over a chunk of tokens (llama2.c's `forward`,
// karpathy/llama2.c run.c, batched): layer by layer, the projections and the MLP are matrix
// products over all tokens of the chunk, and attention is delegated to an
// `attention_backend` that sees each layer's post-RoPE queries, keys and values in causal
// order. Backends: exact dense attention (the uncompressed reference) and kvlab's compressed
// cache (model_attention.cppm).
module;
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>
export module kvlab.model:forward;
import kvlab.core;
import :config;

export namespace kvlab {

// Computes one layer's attention for a chunk: q is tokens x (heads * head_dim), k and v are
// tokens x (kv_heads * head_dim), all post-RoPE, in the chunk's order; out receives
// tokens x (heads * head_dim). Token t attends over everything before it and itself.
class attention_backend {
public:
  virtual ~attention_backend() = default;
  virtual void attend(std::size_t layer, std::span<const float> q, std::span<const float> k, std::span<const float> v,
                      std::size_t tokens, std::span<float> out) = 0;
  // The chunk's keys before RoPE rotates them (tokens x kv_heads * head_dim), its first
  // token at `first_position`, for backends that keep them; called just before `attend` for
  // the same layer.
  virtual void keys_before_rope(std::size_t /*layer*/, std::span<const float> /*k*/, std::size_t /*first_position*/) {}
};

// Where a forward pass spent its time (seconds, summed over calls).
struct forward_timing {
  double matrix_products = 0.0;
  double attention = 0.0;
  double other = 0.0; // embedding, norms, RoPE, activations
};

namespace detail {

// Output features per matrix-product block. Blocks are fixed whatever the thread count, so
// every output element comes from the same BLAS call shape: results are bit-identical for
// any number of threads.
inline constexpr std::size_t matmul_block_rows = 128;

inline void use_one_blas_thread() {
  static std::once_flag once;
  // kvlab threads over blocks itself; OpenBLAS's own threads would make the split depend on
  // its thread count.
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

} // namespace detail

// y[n][out] = x[n][in] . w^T with w [out][in] row-major (OpenBLAS sgemm per block of
// output features; blocks spread over `threads` threads).
inline void matmul(std::span<const float> x, std::span<const float> w, std::span<float> y, std::size_t n,
                   std::size_t in, std::size_t out, unsigned threads) {
  detail::use_one_blas_thread();
  const std::size_t blocks = (out + detail::matmul_block_rows - 1) / detail::matmul_block_rows;
  const auto run_block = [&](std::size_t b) {
    const std::size_t first = b * detail::matmul_block_rows;
    const std::size_t rows = std::min(detail::matmul_block_rows, out - first);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n), static_cast<int>(rows),
                static_cast<int>(in), 1.0f, x.data(), static_cast<int>(in), w.data() + first * in, static_cast<int>(in),
                0.0f, y.data() + first, static_cast<int>(out));
  };
  // Small products are not worth a thread.
  const std::size_t workers = n * in * out < (std::size_t{1} << 20) ? 1 : std::min<std::size_t>(threads, blocks);
  if (workers <= 1) {
    for (std::size_t b = 0; b < blocks; ++b) run_block(b);
    return;
  }
  std::vector<std::jthread> pool;
  for (std::size_t t = 0; t < workers; ++t)
    pool.emplace_back([&, t] {
      for (std::size_t b = t; b < blocks; b += workers) run_block(b);
    });
}

// RMSNorm (Zhang and Sennrich, arXiv 1910.07467): x / sqrt(mean(x^2) + eps) * weight, per row.
inline void rms_norm(std::span<const float> x, std::span<const float> weight, std::span<float> out, double eps) {
  const std::size_t width = weight.size();
  for (std::size_t row = 0; row < x.size() / width; ++row) {
    double squares = 0.0;
    for (std::size_t i = 0; i < width; ++i) squares += double{x[row * width + i]} * x[row * width + i];
    const auto inverse = static_cast<float>(1.0 / std::sqrt(squares / static_cast<double>(width) + eps));
    for (std::size_t i = 0; i < width; ++i) out[row * width + i] = x[row * width + i] * inverse * weight[i];
  }
}

// RoPE (arXiv 2104.09864, sec. 3.4.2): pair j of a head turns by position * theta^(-2j /
// head_dim), angles computed in double. The pairs are adjacent channels (interleaved) or j
// and j + head_dim / 2 (half_split).
inline std::vector<double> rope_frequencies(std::size_t head_dim, double theta) {
  std::vector<double> frequencies(head_dim / 2);
  for (std::size_t j = 0; j < frequencies.size(); ++j)
    frequencies[j] = std::pow(theta, -2.0 * static_cast<double>(j) / static_cast<double>(head_dim));
  return frequencies;
}
inline void rope_angles(std::span<const double> frequencies, std::size_t position, std::span<float> cosines,
                        std::span<float> sines) {
  for (std::size_t j = 0; j < frequencies.size(); ++j) {
    const double angle = static_cast<double>(position) * frequencies[j];
    cosines[j] = static_cast<float>(std::cos(angle));
    sines[j] = static_cast<float>(std::sin(angle));
  }
}
inline void rotate_pairs(std::span<float> head, std::span<const float> cosines, std::span<const float> sines,
                         rope_pairing pairing) {
  const std::size_t half = cosines.size();
  for (std::size_t j = 0; j < half; ++j) {
    const std::size_t a = pairing == rope_pairing::interleaved ? 2 * j : j;
    const std::size_t b = pairing == rope_pairing::interleaved ? 2 * j + 1 : j + half;
    const float x0 = head[a], x1 = head[b];
    head[a] = x0 * cosines[j] - x1 * sines[j];
    head[b] = x0 * sines[j] + x1 * cosines[j];
  }
}

// Rotates every head of every row in place, row r at position first_position + r.
inline void apply_rope(std::span<float> rows, std::size_t heads, std::size_t head_dim, std::size_t first_position,
                       double theta, rope_pairing pairing) {
  const std::size_t width = heads * head_dim;
  const std::vector<double> frequencies = rope_frequencies(head_dim, theta);
  std::vector<float> cosines(head_dim / 2), sines(head_dim / 2);
  for (std::size_t row = 0; row < rows.size() / width; ++row) {
    rope_angles(frequencies, first_position + row, cosines, sines);
    for (std::size_t h = 0; h < heads; ++h)
      rotate_pairs(rows.subspan(row * width + h * head_dim, head_dim), cosines, sines, pairing);
  }
}

// RoPE's cosines and sines for positions [0, positions()), kept for rotating one head at
// any of them (keys rotated after decoding, rope=pre): the same rotation as apply_rope.
class rotary_table {
public:
  rotary_table(std::size_t head_dim, double theta, rope_pairing pairing)
      : frequencies_(rope_frequencies(head_dim, theta)), pairing_(pairing) {}
  std::size_t positions() const noexcept { return frequencies_.empty() ? 0 : cosines_.size() / frequencies_.size(); }
  // Makes positions [0, count) available.
  void extend(std::size_t count) {
    const std::size_t half = frequencies_.size(), from = positions();
    if (count <= from) return;
    cosines_.resize(count * half), sines_.resize(count * half);
    for (std::size_t position = from; position < count; ++position)
      rope_angles(frequencies_, position, std::span(cosines_).subspan(position * half, half),
                  std::span(sines_).subspan(position * half, half));
  }
  // Rotates one head at `position` (< positions()).
  void rotate(std::span<float> head, std::size_t position) const {
    const std::size_t half = frequencies_.size();
    rotate_pairs(head, std::span(cosines_).subspan(position * half, half),
                 std::span(sines_).subspan(position * half, half), pairing_);
  }

private:
  std::vector<double> frequencies_;
  std::vector<float> cosines_, sines_; // positions x head_dim / 2
  rope_pairing pairing_;
};

// The whole model over `tokens` at positions [first_position, first_position + n): returns
// the logits of rows [logits_from, n), (n - logits_from) x vocab. `attention` is called once
// per layer with the chunk's queries, keys and values.
inline std::vector<float> forward(const model_config& c, const model_weights& w, std::span<const std::int32_t> tokens,
                                  std::size_t first_position, attention_backend& attention, std::size_t logits_from,
                                  unsigned threads = 1, forward_timing* timing = nullptr) {
  using clock = std::chrono::steady_clock;
  const std::size_t n = tokens.size(), hidden = c.hidden;
  const std::size_t q_width = c.heads * c.head_dim, kv_width = c.kv_heads * c.head_dim;
  if (logits_from > n)
    throw error("forward: logits from row " + std::to_string(logits_from) + " of " + std::to_string(n));
  forward_timing local;
  forward_timing& time = timing ? *timing : local;
  auto mark = clock::now();
  const auto charge = [&](double& bucket) {
    const auto now = clock::now();
    bucket += std::chrono::duration<double>(now - mark).count();
    mark = now;
  };
  const auto product = [&](std::span<const float> x, const std::vector<float>& weight, std::span<float> y,
                           std::size_t rows, std::size_t in, std::size_t out) {
    charge(time.other);
    matmul(x, weight, y, rows, in, out, threads);
    charge(time.matrix_products);
  };

  std::vector<float> x(n * hidden), normed(n * hidden);
  for (std::size_t t = 0; t < n; ++t) {
    if (tokens[t] < 0 || static_cast<std::size_t>(tokens[t]) >= c.vocab)
      throw error("forward: token id " + std::to_string(tokens[t]) + " at position " + std::to_string(t) +
                  " is outside the vocabulary of " + std::to_string(c.vocab));
    std::copy_n(w.embedding.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(tokens[t]) * hidden), hidden,
                x.begin() + static_cast<std::ptrdiff_t>(t * hidden));
  }
  std::vector<float> q(n * q_width), k(n * kv_width), v(n * kv_width), attended(n * q_width);
  std::vector<float> gate(n * c.ffn), up(n * c.ffn), delta(n * hidden);
  const auto add_bias = [n](std::vector<float>& rows, const std::vector<float>& bias) {
    if (bias.empty()) return;
    for (std::size_t t = 0; t < n; ++t)
      for (std::size_t i = 0; i < bias.size(); ++i) rows[t * bias.size() + i] += bias[i];
  };
  for (std::size_t layer = 0; layer < c.layers; ++layer) {
    const layer_weights& l = w.layers[layer];
    rms_norm(x, l.attention_norm, normed, c.norm_eps);
    product(normed, l.wq, q, n, hidden, q_width);
    product(normed, l.wk, k, n, hidden, kv_width);
    product(normed, l.wv, v, n, hidden, kv_width);
    add_bias(q, l.bq), add_bias(k, l.bk), add_bias(v, l.bv);
    attention.keys_before_rope(layer, k, first_position);
    apply_rope(q, c.heads, c.head_dim, first_position, c.rope_theta, c.rope);
    apply_rope(k, c.kv_heads, c.head_dim, first_position, c.rope_theta, c.rope);
    charge(time.other);
    attention.attend(layer, q, k, v, n, attended);
    charge(time.attention);
    product(attended, l.wo, delta, n, q_width, hidden);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] += delta[i];

    rms_norm(x, l.ffn_norm, normed, c.norm_eps);
    product(normed, l.w_gate, gate, n, hidden, c.ffn);
    product(normed, l.w_up, up, n, hidden, c.ffn);
    // SwiGLU (Shazeer, arXiv 2002.05202): silu(gate) * up.
    for (std::size_t i = 0; i < gate.size(); ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
    product(gate, l.w_down, delta, n, c.ffn, hidden);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] += delta[i];
  }
  const std::size_t rows = n - logits_from;
  if (rows == 0) return {};
  const auto last = std::span(x).subspan(logits_from * hidden);
  rms_norm(last, w.final_norm, std::span(normed).first(rows * hidden), c.norm_eps);
  std::vector<float> logits(rows * c.vocab);
  product(std::span(normed).first(rows * hidden), c.tied_output ? w.embedding : w.output, logits, rows, hidden,
          c.vocab);
  return logits;
}

// Exact dense attention over every key so far (double precision): the uncompressed model.
// Keeps the keys and values of earlier calls, so a sequence may arrive in several chunks.
class dense_attention final : public attention_backend {
public:
  explicit dense_attention(const model_config& c)
      : heads_(c.heads), kv_heads_(c.kv_heads), head_dim_(c.head_dim), keys_(c.layers), values_(c.layers) {}

  void attend(std::size_t layer, std::span<const float> q, std::span<const float> k, std::span<const float> v,
              std::size_t tokens, std::span<float> out) override {
    const std::size_t kv_width = kv_heads_ * head_dim_, q_width = heads_ * head_dim_, group = heads_ / kv_heads_;
    auto& keys = keys_.at(layer);
    auto& values = values_.at(layer);
    const std::size_t before = keys.size() / kv_width;
    keys.insert(keys.end(), k.begin(), k.end());
    values.insert(values.end(), v.begin(), v.end());
    const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim_));
    std::vector<double> weights, sum(head_dim_);
    for (std::size_t t = 0; t < tokens; ++t) {
      const std::size_t visible = before + t + 1;
      weights.resize(visible);
      for (std::size_t h = 0; h < heads_; ++h) {
        const float* query = q.data() + t * q_width + h * head_dim_;
        const std::size_t offset = (h / group) * head_dim_;
        double largest = -INFINITY;
        for (std::size_t s = 0; s < visible; ++s) {
          double dot = 0.0;
          for (std::size_t i = 0; i < head_dim_; ++i) dot += double{query[i]} * keys[s * kv_width + offset + i];
          weights[s] = dot * scale;
          largest = std::max(largest, weights[s]);
        }
        double total = 0.0;
        for (auto& weight : weights) total += (weight = std::exp(weight - largest));
        std::ranges::fill(sum, 0.0);
        for (std::size_t s = 0; s < visible; ++s)
          for (std::size_t i = 0; i < head_dim_; ++i) sum[i] += weights[s] * values[s * kv_width + offset + i];
        for (std::size_t i = 0; i < head_dim_; ++i)
          out[t * q_width + h * head_dim_ + i] = static_cast<float>(sum[i] / total);
      }
    }
  }

private:
  std::size_t heads_, kv_heads_, head_dim_;
  std::vector<std::vector<float>> keys_, values_; // per layer: tokens x kv_heads x head_dim
};

} // namespace kvlab
