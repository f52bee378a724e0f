// KV tensors: [layers][heads][tokens][head_dim], row-major, float32. Keys and values have
// kv_heads heads, queries have q_heads (GQA: q_heads is a multiple of kv_heads).
module;
#include <cmath>
#include <cstddef>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>
export module kvlab.core:tensor;
import :errors;
import :resources;

export namespace kvlab {

struct kv_shape {
  std::size_t layers = 0;
  std::size_t heads = 0;
  std::size_t tokens = 0;
  std::size_t head_dim = 0;

  std::size_t elements() const noexcept { return layers * heads * tokens * head_dim; }
  bool operator==(const kv_shape&) const = default;
};

// Synthetic workloads stop at 2^40 float32 values (4 TiB), so sizes never overflow; below
// that, what this process may use decides (checked_workload_elements).
inline constexpr std::size_t max_synthetic_elements = std::size_t{1} << 40;

// The product of `factors`, or an error naming `what` when it would overflow or exceed
// `limit` (checked before anything is allocated).
inline std::size_t checked_product(std::initializer_list<std::size_t> factors, std::size_t limit,
                                   const std::string& what) {
  std::size_t product = 1;
  for (const std::size_t f : factors) {
    if (f != 0 && product > limit / f)
      throw error(what + ": more than " + std::to_string(limit) + " elements (" + std::to_string(limit * 4 >> 20) +
                  " MiB of float32), the limit");
    product *= f;
  }
  return product;
}

// The float32 values of a synthetic workload (the product of `factors`), refused before
// anything is allocated when past the synthetic limit or the memory this process may use.
inline std::size_t checked_workload_elements(std::initializer_list<std::size_t> factors, const std::string& what) {
  const std::size_t elements = checked_product(factors, max_synthetic_elements, what);
  require_memory(4.0 * static_cast<double>(elements), what + " (" + std::to_string(elements) + " float32 values)",
                 "ask for fewer layers, heads or tokens");
  return elements;
}

inline std::string to_string(const kv_shape& shape) {
  return "[" + std::to_string(shape.layers) + ", " + std::to_string(shape.heads) + ", " + std::to_string(shape.tokens) +
         ", " + std::to_string(shape.head_dim) + "]";
}

class kv_tensor {
public:
  kv_tensor() = default;
  explicit kv_tensor(kv_shape shape) : shape_(shape), values_(shape.elements()) {}

  const kv_shape& shape() const noexcept { return shape_; }
  std::span<float> values() noexcept { return values_; }
  std::span<const float> values() const noexcept { return values_; }

  std::span<float> row(std::size_t layer, std::size_t head, std::size_t token) noexcept {
    return {values_.data() + offset(layer, head, token), shape_.head_dim};
  }
  std::span<const float> row(std::size_t layer, std::size_t head, std::size_t token) const noexcept {
    return {values_.data() + offset(layer, head, token), shape_.head_dim};
  }
  // All tokens of one (layer, head) stream: tokens x head_dim, contiguous.
  std::span<const float> stream(std::size_t layer, std::size_t head) const noexcept {
    return {values_.data() + offset(layer, head, 0), shape_.tokens * shape_.head_dim};
  }

private:
  std::size_t offset(std::size_t layer, std::size_t head, std::size_t token) const noexcept {
    return ((layer * shape_.heads + head) * shape_.tokens + token) * shape_.head_dim;
  }
  kv_shape shape_;
  std::vector<float> values_;
};

// One attention workload: keys, values and the queries that attend to them.
struct kv_data {
  kv_tensor keys;
  kv_tensor values;
  kv_tensor queries;
  std::string source; // the data spec it came from

  std::size_t layers() const noexcept { return keys.shape().layers; }
  std::size_t kv_heads() const noexcept { return keys.shape().heads; }
  std::size_t q_heads() const noexcept { return queries.shape().heads; }
  std::size_t tokens() const noexcept { return keys.shape().tokens; }
  std::size_t head_dim() const noexcept { return keys.shape().head_dim; }
};

// NaN/Inf policy: non-finite KV data is rejected before anything is compressed, with the
// tensor name and position, because no codec can represent it faithfully and a silently
// clamped value would make every fidelity number wrong.
inline void require_finite(const kv_tensor& tensor, const std::string& name) {
  const auto values = tensor.values();
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (std::isfinite(values[i])) continue;
    const auto& s = tensor.shape();
    const std::size_t channel = i % s.head_dim;
    const std::size_t token = i / s.head_dim % s.tokens;
    const std::size_t head = i / s.head_dim / s.tokens % s.heads;
    const std::size_t layer = i / s.head_dim / s.tokens / s.heads;
    throw error(name + " holds a non-finite value (" + std::to_string(values[i]) + ") at layer " +
                std::to_string(layer) + ", head " + std::to_string(head) + ", token " + std::to_string(token) +
                ", channel " + std::to_string(channel) + "; kvlab rejects NaN/Inf in KV data");
  }
}

// Shapes of a workload must agree: same K/V shape, queries over the same tokens and
// head_dim, and a whole number of query heads per KV head.
inline void check_consistent(const kv_data& data) {
  const auto& k = data.keys.shape();
  const auto& v = data.values.shape();
  const auto& q = data.queries.shape();
  if (k.elements() == 0) throw error("keys are empty: shape " + to_string(k));
  if (!(k == v)) throw error("keys " + to_string(k) + " and values " + to_string(v) + " differ in shape");
  if (q.layers != k.layers || q.tokens != k.tokens || q.head_dim != k.head_dim)
    throw error("queries " + to_string(q) + " do not match keys " + to_string(k) + " in layers, tokens or head_dim");
  if (q.heads == 0 || q.heads % k.heads != 0)
    throw error("query heads (" + std::to_string(q.heads) + ") must be a positive multiple of KV heads (" +
                std::to_string(k.heads) + ") for grouped-query attention");
}

} // namespace kvlab
