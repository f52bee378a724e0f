// quantizer-distortion: the mean squared error of every quantizer at every bit width, on
// unit-norm vectors (D = 128, the error of a whole vector, as TurboQuant reports it) and on
// N(0,1) data (per element), next to the Shannon lower bound 4^-b of a b-bit code for a
// unit-variance Gaussian source. Groups are whole tokens (128 values, fp16 parameters).
// Paper: TurboQuant, arXiv 2504.19874, sec. 3 and table 1 (unit vectors vs the 4^-b bound);
// Shannon bound: Cover & Thomas, Elements of Information Theory, sec. 10.3.
module;
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>
export module kvlab.configs:quantizer_distortion;
import kvlab.core;
import kvlab.codec;
import kvlab.report;
import :recipe_table;

export namespace kvlab::configs {

// Rotated variants worth a row next to their plain codebooks.
inline const std::vector<std::string> distortion_extra_quantizers = {
    "rht(lloyd1)", "rht(lloyd2)", "rht(lloyd3)", "rht(lloyd4)", "rht(uint2)", "rht(uint4)", "rht(int4)", "rht(nf4)"};

inline experiment_output quantizer_distortion(const registry& components) {
  const std::size_t vectors = 4096, head_dim = 128;
  random_stream random(2504, 19874);
  std::vector<float> gaussian(vectors * head_dim), unit(vectors * head_dim);
  for (auto& x : gaussian) x = static_cast<float>(random.normal());
  for (std::size_t v = 0; v < vectors; ++v) {
    double norm = 0.0;
    for (std::size_t c = 0; c < head_dim; ++c) {
      unit[v * head_dim + c] = static_cast<float>(random.normal());
      norm += double{unit[v * head_dim + c]} * unit[v * head_dim + c];
    }
    for (std::size_t c = 0; c < head_dim; ++c) unit[v * head_dim + c] /= static_cast<float>(std::sqrt(norm));
  }
  auto names = components.instances(component_kind::quantizer);
  for (const auto& extra : distortion_extra_quantizers)
    if (std::ranges::find(names, extra) == names.end()) names.push_back(extra);
  const auto shape = components.make_granularity("token").group_shape(head_dim);

  text_table table{
      {"quantizer", "code bits", "bits/element", "unit-vector error", "N(0,1) MSE", "Shannon 4^-b", "MSE / bound"}, {}};
  std::string json = "[";
  for (const auto& name : names) {
    const auto q = components.make_quantizer(name);
    const auto on_unit = quantize_dequantize(q, shape, param_precision::f16, unit, vectors, head_dim);
    const auto on_gaussian = quantize_dequantize(q, shape, param_precision::f16, gaussian, vectors, head_dim);
    const double unit_error = on_unit.stats.mse * static_cast<double>(head_dim);
    const double bound = std::pow(4.0, -static_cast<double>(q.bits()));
    table.rows.push_back({name, std::to_string(q.bits()), format_significant(on_gaussian.stats.bits_per_element, 5),
                          format_significant(unit_error), format_significant(on_gaussian.stats.mse),
                          format_significant(bound), format_significant(on_gaussian.stats.mse / bound, 3)});
    json += (json.size() > 1 ? ",\n" : "\n") + json_object()
                                                   .add("quantizer", name)
                                                   .add("code_bits", std::size_t{q.bits()})
                                                   .add("bits_per_element", on_gaussian.stats.bits_per_element)
                                                   .add("unit_vector_error", unit_error)
                                                   .add("gaussian_mse", on_gaussian.stats.mse)
                                                   .add("shannon_bound", bound)
                                                   .str(0);
  }
  return {table, json + "\n]\n"};
}

} // namespace kvlab::configs
