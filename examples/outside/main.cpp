// Registers the ternary quantizer next to kvlab's own strategies and evaluates it against
// built-in recipes on synthetic data, printing one line per recipe.
#include <cstdio>
#include <string>
import kvlab;
import outside.ternary;

int main() {
  kvlab::registry components = kvlab::builtin_registry();
  components.add(
      {.name = "ternary",
       .usage = "ternary",
       .summary = "{-s, 0, +s}, s = mean |x|",
       .paper = "arXiv 1605.04711 sec. 2.2"},
      kvlab::registry::quantizer_factory([](const kvlab::strategy_args&) { return kvlab::any_quantizer(ternary{}); }));
  const kvlab::kv_data data = kvlab::load_data("synthetic:gaussian(L=2,H=2,Q=8,T=256,D=64,seed=1)");
  for (const std::string text : {"k=int4@group(32),v=int4@group(32)", "k=ternary@group(32),v=ternary@group(32)"}) {
    const kvlab::recipe r = kvlab::parse_recipe(text, components);
    const kvlab::eval_result result = kvlab::evaluate(r, data, components, {.decode_steps = 4});
    std::printf("%s: %.0f bytes per token, attention relative L2 error %.4f\n", kvlab::canonical_name(r).c_str(),
                result.bytes_per_token, result.attn_rel_l2.mean);
  }
}
