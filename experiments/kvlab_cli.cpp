// The `kvlab` command: evaluate a recipe, list strategies, run an experiment.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <string>
#include <string_view>
#include <vector>
import kvlab;

namespace {

constexpr std::string_view usage = R"(usage:
  kvlab eval --recipe RECIPE --data SPEC [--decode-steps N] [--json]
      Compress SPEC's keys and values with RECIPE and report attention fidelity and bytes.
  kvlab run NAME [--json]
      Run the experiment NAME from configs/ and print its table ('kvlab list' shows names).
  kvlab list
      Every registered strategy, baseline recipe and experiment.

RECIPE  k=Q@G,v=Q@G[,scale=f32][,store=S]   e.g. k=int8@token,v=int8@group(32)
SPEC    synthetic:gaussian(L=2,H=2,Q=8,T=1024,D=128,seed=1)
)";

// --flag value pairs and bare --switches; anything else is an error naming the argument.
struct options {
  std::map<std::string, std::string> values;
  std::vector<std::string> positional;

  options(int argc, char** argv, const std::vector<std::string>& with_value, const std::vector<std::string>& switches) {
    for (int i = 2; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg.starts_with("--")) {
        if (std::ranges::find(switches, arg) != switches.end()) {
          values[arg] = "";
        } else if (std::ranges::find(with_value, arg) != with_value.end()) {
          if (i + 1 >= argc) throw kvlab::error(arg + " needs a value");
          values[arg] = argv[++i];
        } else {
          throw kvlab::error("unknown option '" + arg + "'");
        }
      } else {
        positional.push_back(arg);
      }
    }
  }
  bool has(const std::string& key) const { return values.contains(key); }
  const std::string& required(const std::string& key) const {
    const auto found = values.find(key);
    if (found == values.end()) throw kvlab::error("missing " + key);
    return found->second;
  }
};

std::vector<std::string> result_row(const kvlab::eval_result& r) {
  using kvlab::format_significant;
  return {r.recipe, format_significant(r.attn_rel_l2.mean), format_significant(r.attn_rel_l2.p99),
          format_significant(r.attn_cosine.mean), format_significant(r.bytes_per_token, 6)};
}

kvlab::text_table results_table(const std::vector<kvlab::eval_result>& results) {
  kvlab::text_table table{{"recipe", "attn_rel_l2", "attn_rel_l2_p99", "attn_cosine", "bytes_per_token"}, {}};
  for (const auto& r : results) table.rows.push_back(result_row(r));
  return table;
}

int eval_command(int argc, char** argv) {
  const options opts(argc, argv, {"--recipe", "--data", "--decode-steps"}, {"--json"});
  if (!opts.positional.empty()) throw kvlab::error("unexpected argument '" + opts.positional.front() + "'");
  const auto& components = kvlab::builtin_registry();
  const kvlab::recipe recipe = kvlab::parse_recipe(opts.required("--recipe"), components);
  const kvlab::kv_data data = kvlab::load_data(opts.required("--data"));
  kvlab::eval_options eval;
  if (opts.has("--decode-steps"))
    eval.decode_steps = kvlab::parse_number<std::size_t>(opts.required("--decode-steps"), "--decode-steps");
  const auto result = kvlab::evaluate(recipe, data, components, eval);
  if (opts.has("--json")) {
    std::cout << kvlab::to_json(result) << "\n";
  } else {
    std::cout << "data: " << result.data << " (" << result.decode_steps << " decode steps, " << result.isa
              << " kernels)\n\n"
              << results_table({result}).markdown();
  }
  return 0;
}

int run_command(int argc, char** argv) {
  const options opts(argc, argv, {}, {"--json"});
  if (opts.positional.size() != 1) throw kvlab::error("kvlab run takes one experiment name");
  const auto& all = kvlab::configs::experiments();
  const auto found = std::ranges::find(all, opts.positional[0], &kvlab::configs::experiment::name);
  if (found == all.end()) {
    std::string names;
    for (const auto& e : all) names += (names.empty() ? "" : ", ") + e.name;
    throw kvlab::error("unknown experiment '" + opts.positional[0] + "'; allowed: " + names);
  }
  const auto& components = kvlab::builtin_registry();
  const kvlab::kv_data data = kvlab::load_data(found->data);
  std::vector<kvlab::eval_result> results;
  for (const auto& recipe : found->recipes) {
    std::cerr << "  evaluating " << kvlab::canonical_name(recipe) << "\n";
    results.push_back(kvlab::evaluate(kvlab::normalized(recipe, components), data, components,
                                      {.decode_steps = found->decode_steps}));
  }
  if (opts.has("--json")) {
    std::cout << "[";
    for (std::size_t i = 0; i < results.size(); ++i) std::cout << (i ? ",\n" : "\n") << kvlab::to_json(results[i]);
    std::cout << "\n]\n";
  } else {
    std::cout << "experiment " << found->name << ": " << found->description << "\n"
              << "data: " << found->data << " (" << found->decode_steps << " decode steps, " << results.front().isa
              << " kernels)\n\n"
              << results_table(results).markdown();
  }
  return 0;
}

int list_command(int argc, char** argv) {
  const options opts(argc, argv, {}, {});
  if (!opts.positional.empty()) throw kvlab::error("kvlab list takes no arguments");
  kvlab::text_table table{{"kind", "name", "what it is", "paper"}, {}};
  for (const auto& info : kvlab::builtin_registry().list())
    table.rows.push_back({kvlab::kind_name(info.kind), info.usage, info.summary, info.paper});
  std::cout << "Strategies\n\n" << table.markdown();
  kvlab::text_table recipes{{"recipe", "canonical name", "reference"}, {}};
  for (const auto& b : kvlab::configs::baselines())
    recipes.rows.push_back({b.label, kvlab::canonical_name(b.value), b.reference});
  std::cout << "\nRecipes\n\n" << recipes.markdown();
  kvlab::text_table experiments{{"experiment", "recipes", "data", "what it is"}, {}};
  for (const auto& e : kvlab::configs::experiments())
    experiments.rows.push_back({e.name, std::to_string(e.recipes.size()), e.data, e.description});
  std::cout << "\nExperiments\n\n" << experiments.markdown();
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  const std::string command = argc > 1 ? argv[1] : "";
  try {
    if (command == "eval") return eval_command(argc, argv);
    if (command == "run") return run_command(argc, argv);
    if (command == "list") return list_command(argc, argv);
    if (command == "help" || command == "--help" || command == "-h") {
      std::cout << usage;
      return 0;
    }
    std::cerr << "kvlab: " << (command.empty() ? "no command given" : "unknown command '" + command + "'") << "\n"
              << usage;
    return 2;
  } catch (const kvlab::error& e) {
    std::cerr << "kvlab " << command << ": error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "kvlab " << command << ": internal error: " << e.what() << "\n";
    return 3;
  }
}
