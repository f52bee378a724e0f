// test_ramp(T): one layer, one KV head, two query heads, head_dim 8, T tokens of values
// that rise smoothly with the token and the channel (x = sin(0.1 t + c)). Exists only in
// the test build, to show that a data source added as one file reaches load_data, `kvlab
// eval`, sweeps and `kvlab list` with no other edit.
// Paper: - (a test fixture)
module;
#include <cmath>
#include <cstddef>
#include <string>
#include <string_view>
export module kvlab.data_sources.test_ramp;
import kvlab.core;
import kvlab.data;

export namespace kvlab::data_sources::test_ramp {

inline std::size_t tokens(std::string_view spec) {
  const term t = parse_term(spec, "data spec '" + std::string(spec) + "'");
  if (t.args.size() != 1) throw error("data spec '" + std::string(spec) + "': expected test_ramp(T)");
  return parse_number_in<std::size_t>(t.args[0], "data spec '" + std::string(spec) + "', T", 2, 4096);
}

inline data_source_info info() {
  return {
      .name = "test_ramp", .usage = "test_ramp(T)", .summary = "smooth ramps, 1 layer, head_dim 8 (test build only)"};
}

inline std::size_t check(std::string_view spec) { return 4 * tokens(spec) * 8; }

inline kv_data load(std::string_view spec) {
  const std::size_t n = tokens(spec);
  kv_data data{kv_tensor({1, 1, n, 8}), kv_tensor({1, 1, n, 8}), kv_tensor({1, 2, n, 8}), std::string(spec)};
  for (kv_tensor* tensor : {&data.keys, &data.values, &data.queries})
    for (std::size_t h = 0; h < tensor->shape().heads; ++h)
      for (std::size_t t = 0; t < n; ++t)
        for (std::size_t c = 0; c < 8; ++c)
          tensor->row(0, h, t)[c] =
              static_cast<float>(std::sin(0.1 * static_cast<double>(t) + static_cast<double>(c + h)));
  check_consistent(data);
  return data;
}

} // namespace kvlab::data_sources::test_ramp
