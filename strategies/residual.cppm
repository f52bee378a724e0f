// residual(P,R): quantizer P, then quantizer R on what P leaves of each token (the token
// minus P's decoded token); a token decodes as the sum of both, and a score as the sum of
// both scores. The body holds P's records and a second body R's, one record per token each;
// R's groups are whole stored rows (one per token). With R a sketch (qjl) the sum is an
// unbiased inner-product quantizer: residual(rht(lloyd<b-1>),qjl) is TurboQuant's
// inner-product variant at b bits per channel (plus P's scales and R's norm).
// P's codec is the body's: P's element codes are chosen against its stored parameters, as
// under rht(...) (ggml's group encoders are not forwarded); a code of whole groups (polar)
// is P's own.
// Paper: TurboQuant, arXiv 2504.19874, sec. 3.2 (Algorithm 2, TurboQuant_prod).
module;
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
export module kvlab.strategies.residual;
import kvlab.core;

export namespace kvlab::strategies::residual {

class residual_sum {
public:
  using component_concept = quantizer_tag;
  residual_sum(any_quantizer primary, any_quantizer residual)
      : primary_(std::move(primary)), residual_(std::move(residual)) {
    // The body encodes with P's element codec only, which would drop P's own residual.
    if (primary_.residual())
      throw error(name() + ": the first quantizer has a residual of its own; write residual(P,residual(R1,R2))");
  }
  // Typed recipes: `residual{rht{lloyd{2}}, qjl{}}`.
  template <Quantizer P, Quantizer R>
    requires(!std::same_as<P, any_quantizer>)
  residual_sum(P primary, R residual)
      : residual_sum(any_quantizer(std::move(primary)), any_quantizer(std::move(residual))) {}

  std::string name() const { return "residual(" + primary_.name() + "," + residual_.name() + ")"; }
  unsigned bits() const { return primary_.bits(); }
  unsigned params_per_group() const { return primary_.params_per_group(); }
  element_format format() const { return primary_.format(); }
  std::span<const float> levels() const { return primary_.levels(); }
  encoding_rule encoding() const { return primary_.encoding(); }
  group_params fit(std::span<const float> group) const { return primary_.fit(group); }
  std::uint32_t encode(float x, group_params p) const { return primary_.encode(x, p); }
  float decode(std::uint32_t code, group_params p) const { return primary_.decode(code, p); }
  std::span<const float> scale_levels() const { return primary_.scale_levels(); }
  std::uint8_t scale_code(float scale) const { return primary_.scale_code(scale); }
  std::shared_ptr<const kvlab::group_codec> group_codec(std::size_t channels) const {
    return primary_.group_codec(channels);
  }

  // P's map (its rotation, say); R maps the residual itself.
  std::shared_ptr<const token_projection> projection(std::size_t head_dim) const {
    return primary_.projection(head_dim);
  }
  bool invertible() const { return primary_.invertible() && residual_.invertible(); }
  any_quantizer residual() const { return residual_; }

private:
  any_quantizer primary_, residual_;
};
static_assert(Quantizer<residual_sum>);
static_assert(projects_tokens<residual_sum>);

inline strategy_info info() {
  return {.name = "residual",
          .usage = "residual(P,R)",
          .summary = "quantizer P, then quantizer R on each token's residual; scores and tokens add",
          .paper = "arXiv 2504.19874 sec. 3.2",
          .examples = {"residual(rht(lloyd2),qjl)", "residual(int4,int2)"}};
}

inline residual_sum make(const strategy_args& args) {
  args.expect_arguments(2, "residual(P,R)");
  return residual_sum{args.components->make_quantizer(args.args[0]), args.components->make_quantizer(args.args[1])};
}

} // namespace kvlab::strategies::residual

// The typed name recipes use (kvlab.compose).
export namespace kvlab::parts {
using residual = strategies::residual::residual_sum;
} // namespace kvlab::parts
