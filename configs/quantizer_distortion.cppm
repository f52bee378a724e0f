// quantizer-distortion (`kvlab run quantizer-distortion`): the mean squared error of every quantizer at every bit
// width, on unit-norm vectors (D = 128, the error of a whole vector, as TurboQuant reports it) and on N(0,1) data (per
// element), next to the Shannon lower bound 4^-b of a b-bit code for a unit-variance Gaussian source. Groups are whole
// tokens (128 values, fp16 parameters). Paper: TurboQuant, arXiv 2504.19874, sec. 3 and table 1 (unit vectors vs the
// 4^-b bound); Shannon bound: Cover & Thomas, Elements of Information Theory, sec. 10.3.
module;
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>
export module kvlab.experiments.quantizer_distortion;
import kvlab.core;
import kvlab.codec;
import kvlab.report;
import kvlab.compose;
import kvlab.configs;
import kvlab.registry_builtin;

export namespace kvlab::experiments::quantizer_distortion {

// Rotated variants worth a row next to their plain codebooks.
inline std::vector<any_quantizer> rotated_variants() {
  using namespace parts;
  return {any_quantizer(rht{lloyd{1}}), any_quantizer(rht{lloyd{2}}),  any_quantizer(rht{lloyd{3}}),
          any_quantizer(rht{lloyd{4}}), any_quantizer(rht{uint_q{2}}), any_quantizer(rht{uint_q{4}}),
          any_quantizer(rht{int_q{4}}), any_quantizer(rht{nf4{}})};
}

inline configs::experiment_output run(const registry& components) {
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
  std::vector<any_quantizer> quantizers;
  // Sketches and residual sums are not b-bit codes of the vector: residual_tests and
  // qjl_tests judge them by their inner products.
  for (const auto& name : components.instances(component_kind::quantizer))
    if (const auto q = components.make_quantizer(name); q.invertible() && !q.residual()) quantizers.push_back(q);
  for (const auto& extra : rotated_variants())
    if (std::ranges::none_of(quantizers, [&](const any_quantizer& q) { return q.name() == extra.name(); }))
      quantizers.push_back(extra);
  const auto shape = parts::token{}.group_shape(head_dim);

  text_table table{
      {"quantizer", "code bits", "bits/element", "unit-vector error", "N(0,1) MSE", "Shannon 4^-b", "MSE / bound"}, {}};
  std::string json = "[";
  for (const auto& q : quantizers) {
    const std::string name = q.name();
    const auto on_unit = quantize_dequantize(q, shape, param_precision::f16, unit, vectors, head_dim);
    const auto on_gaussian = quantize_dequantize(q, shape, param_precision::f16, gaussian, vectors, head_dim);
    const double unit_error = on_unit.stats.mse * static_cast<double>(head_dim);
    // Bits of code per element: a code of whole groups (polar, outliers) holds all of its
    // bits, its side data (radii, Q's scale, outlier indices and values) included.
    const double code_bits = static_cast<double>(q.row_code_bits(head_dim, shape.channels)) / head_dim;
    const double bound = std::pow(4.0, -code_bits);
    table.rows.push_back({name, format_significant(code_bits, 5),
                          format_significant(on_gaussian.stats.bits_per_element, 5), format_significant(unit_error),
                          format_significant(on_gaussian.stats.mse), format_significant(bound),
                          format_significant(on_gaussian.stats.mse / bound, 3)});
    json += (json.size() > 1 ? ",\n" : "\n") + json_object()
                                                   .add("quantizer", name)
                                                   .add("code_bits", code_bits)
                                                   .add("bits_per_element", on_gaussian.stats.bits_per_element)
                                                   .add("unit_vector_error", unit_error)
                                                   .add("gaussian_mse", on_gaussian.stats.mse)
                                                   .add("shannon_bound", bound)
                                                   .str(0);
  }
  return {table, json + "\n]\n"};
}

inline configs::experiment make() {
  return {.name = "quantizer-distortion",
          .description = "MSE of every quantizer and bit width (token groups, D = 128) on unit vectors and N(0,1) "
                         "data, next to the Shannon bound 4^-b",
          .run = [](const registry& components) { return run(components); }};
}

} // namespace kvlab::experiments::quantizer_distortion
