// kvlab.data: KV workloads from data specs. Implemented: synthetic:gaussian(...).
//   synthetic:gaussian(L=2,H=2,Q=8,T=1024,D=128,seed=1): i.i.d. N(0,1) keys, values and
//   queries; L layers, H KV heads, Q query heads (a multiple of H), T tokens, head_dim D.
module;
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
export module kvlab.data;
import kvlab.core;

export namespace kvlab {

namespace detail {

// key=value arguments of a generator, each known key with its default.
class generator_args {
public:
  generator_args(const term& t, std::string_view spec, std::map<std::string, double> defaults)
      : spec_(spec), values_(std::move(defaults)) {
    for (const auto& arg : t.args) {
      const auto equals = arg.find('=');
      if (equals == std::string::npos) fail("argument '" + arg + "' is not key=value");
      const std::string key = arg.substr(0, equals);
      if (!values_.contains(key)) fail("unknown parameter '" + key + "'; allowed: " + allowed());
      if (!given_.insert({key, true}).second) fail("parameter '" + key + "' is given twice");
      values_[key] = parse_number<double>(arg.substr(equals + 1), "data spec '" + spec_ + "', parameter " + key);
    }
  }
  std::size_t count(const std::string& key, std::size_t min = 1) const {
    const double value = values_.at(key);
    if (value != std::floor(value) || value < static_cast<double>(min) || value > 1e9)
      fail("parameter " + key + " = " + format_number(value) + " must be a whole number >= " + std::to_string(min));
    return static_cast<std::size_t>(value);
  }
  [[noreturn]] void fail(const std::string& what) const { throw error("data spec '" + spec_ + "': " + what); }

private:
  std::string allowed() const {
    std::string out;
    for (const auto& [key, value] : values_)
      out += (out.empty() ? "" : ", ") + key + " (default " + format_number(value) + ")";
    return out;
  }
  std::string spec_;
  std::map<std::string, double> values_;
  std::map<std::string, bool> given_;
};

inline void fill_gaussian(kv_tensor& tensor, std::uint64_t seed, std::uint64_t tensor_id) {
  const auto& s = tensor.shape();
  for (std::size_t layer = 0; layer < s.layers; ++layer)
    for (std::size_t head = 0; head < s.heads; ++head) {
      random_stream random(seed, (tensor_id << 48) ^ (layer << 24) ^ head);
      for (std::size_t t = 0; t < s.tokens; ++t)
        for (float& x : tensor.row(layer, head, t)) x = static_cast<float>(random.normal());
    }
}

// Refuses workloads that would not fit this machine's memory, before allocating them.
inline void check_size(const generator_args& args, std::size_t elements) {
  constexpr std::size_t limit = std::size_t{4} << 30; // 16 GiB of float32
  if (elements > limit) args.fail("needs " + std::to_string(elements * 4 >> 20) + " MiB; the limit is 16384 MiB");
}

inline kv_data gaussian(const term& t, std::string_view spec) {
  const generator_args args(t, spec, {{"L", 2}, {"H", 2}, {"Q", 8}, {"T", 1024}, {"D", 128}, {"seed", 1}});
  const std::size_t layers = args.count("L"), kv_heads = args.count("H"), q_heads = args.count("Q");
  const std::size_t tokens = args.count("T", 2), head_dim = args.count("D");
  const auto seed = static_cast<std::uint64_t>(args.count("seed", 0));
  if (q_heads % kv_heads != 0)
    args.fail("Q = " + std::to_string(q_heads) + " query heads is not a multiple of H = " + std::to_string(kv_heads) +
              " KV heads (grouped-query attention)");
  check_size(args, (2 * kv_heads + q_heads) * layers * tokens * head_dim);
  kv_data data{kv_tensor({layers, kv_heads, tokens, head_dim}), kv_tensor({layers, kv_heads, tokens, head_dim}),
               kv_tensor({layers, q_heads, tokens, head_dim}), std::string(spec)};
  fill_gaussian(data.keys, seed, 1);
  fill_gaussian(data.values, seed, 2);
  fill_gaussian(data.queries, seed, 3);
  return data;
}

} // namespace detail

// Builds the workload a data spec names. Throws kvlab::error naming the bad part.
inline kv_data load_data(std::string_view spec) {
  const auto colon = spec.find(':');
  const std::string source(spec.substr(0, colon));
  if (colon == std::string_view::npos)
    throw error("data spec '" + std::string(spec) +
                "': expected source:arguments, for example "
                "synthetic:gaussian(L=2,H=2,Q=8,T=1024,D=128,seed=1)");
  if (source == "synthetic") {
    const term generator = parse_term(spec.substr(colon + 1), "data spec '" + std::string(spec) + "'");
    if (generator.name == "gaussian") {
      kv_data data = detail::gaussian(generator, spec);
      check_consistent(data);
      return data;
    }
    throw error("data spec '" + std::string(spec) + "': unknown synthetic generator '" + generator.name +
                "'; allowed: gaussian");
  }
  throw error("data spec '" + std::string(spec) + "': unknown source '" + source + "'; allowed: synthetic");
}

} // namespace kvlab
