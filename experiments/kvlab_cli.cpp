// The `kvlab` command: evaluate a recipe, list strategies, run an experiment.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <initializer_list>
#include <iostream>
#include <map>
#include <optional>
#include <ranges>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>
import kvlab;
import kvlab.runner;

namespace {

constexpr std::string_view usage = R"(usage:
  kvlab eval --recipe RECIPE --data SPEC [--decode-steps N] [--json]
      Compress SPEC's keys and values with RECIPE and report attention fidelity and bytes.
  kvlab run NAME [--out DIR] [--threads N|all] [--shard i/N] [--reuse|--force] [--format md|tex|csv|json]
      Run the experiment NAME from configs/ ('kvlab list' shows names) and print its table.
      Sweeps store one folder per cell in DIR (default results/NAME) plus recipes.txt,
      table.md, table.tex, cells.csv, cells.jsonl and fidelity_vs_bytes.svg, skip finished
      cells when run again (computing again those made by other code, unless --reuse;
      --force computes every cell), and with --shard i/N run every N-th cell (array jobs).
  kvlab sweep (--recipe R ... | --recipes FILE) (--data SPEC ... | --data-file FILE) [--seeds 1..5]
              [--decode-steps N] [--out DIR] [--threads N|all] [--shard i/N] [--reuse|--force] [--format ...]
      The same for recipes and data given as text, no rebuild: FILE holds one recipe per line,
      optionally labelled ('KIVI-2 = k=uint2@channel(32),...'), '#' comments; a bad line is
      reported with its number and nothing runs. Data specs with {seed} run once per seed.
      Default DIR: results/sweep.
  kvlab table DIR [--by label|recipe] [--metric M[,M...]] [--format md|tex|csv]
      The tables of the cells stored in DIR, one per data spec: mean ± 95 % t-interval over
      seeds, best mean per column in bold.
  kvlab merge OUT SHARD_DIR...
      Join the results folders of shards into OUT (and write its tables and plot).
  kvlab plot DIR [--x bytes_per_token] [--y attn_rel_l2] [--group label|recipe] [--data SPEC]
             [--format svg|pdf|png|pgf] [--out FILE]
      A figure of the cells in DIR: one line and marker per label across its recipes, mean
      over seeds with 95 % error bars, log axes with decade ticks where the data spans a
      decade. The format follows FILE's extension (.svg, .pdf, .png, .tex for PGFPlots);
      PDF and PNG come from a matplotlib script written next to FILE with the points as CSV
      (needs python3-matplotlib). Default FILE: DIR/Y_vs_X.svg.
  kvlab codec --quantizer Q --granularity G --in X.npy --out Y.npy [--scale f16|f32] [--json]
      Quantize and dequantize a float .npy of shape [T, D], [H, T, D] or [L, H, T, D] (each
      head its own stream), write the result with the same shape, report MSE, SNR, max error
      and bits per element.
  kvlab export --data SPEC --out DIR
      Write SPEC's keys, values and queries as DIR/K.npy, V.npy, Q.npy ([L, H, T, D]).
  kvlab ppl --model PATH (--text FILE | --tokens FILE) --recipe R [--recipe R2 ...] [--ctx N] [--chunks N]
            [--base RECIPE] [--threads N|all] [--out DIR] [--tokenizer FILE] [--no-attention-metrics] [--json]
      Run the model (GGUF file, Hugging Face folder or llama2.c checkpoint) with each recipe's
      cache inside its attention and report perplexity and KL divergence against a base run
      (default k=f16@token,v=f16@token), llama.cpp's statistics: chunks of N tokens (default
      512, at most the model's context), the second half of each scored. The base run's
      log-probabilities are stored in DIR (default results/ppl) and reused.
  kvlab capture --model PATH --text FILE --out DIR [--tokens N] [--tokenizer FILE] [--threads N|all]
      Run the model over the text's first N tokens (default: up to its context) with exact
      attention and write every layer's K.npy, V.npy, Q.npy (post-RoPE) and K_pre_rope.npy
      in the layout npy:DIR reads. The data spec model:PATH,text=FILE[,tokens=N] gives the
      same keys, values and queries to eval and sweeps without writing them.
  kvlab data-report SPEC... [--per-head] [--probes N] [--format md|csv]
      The statistics that decide how compression behaves on each workload, averaged over
      layers and KV heads (--per-head: one row each), with its shape (L,H,Q,T,D as
      synthetic:llm takes them): attention entropy (nats, and over
      log n), the mass of the top 1/10/25 % of keys, the first token's mass, the mass of the
      last 64 tokens (from the last N queries, default 32), the key outlier-channel ratio and
      the value kurtosis (docs/data.md defines each).
  kvlab list
      Every registered strategy, baseline recipe and experiment.

RECIPE  k=Q@G,v=Q@G[,scale=f32][,sinks=S][,residual=R][,rope=pre][,evict=E][,budget=B]
        [,alloc=A][,gqa=G][,compress=C][,demote=Q@G][,store=flat|paged(P)]
        e.g. k=uint2@channel(32),v=uint2@group(32),residual=128
SPEC    synthetic:gaussian(L=2,H=2,Q=8,T=1024,D=128,seed=1)
--threads  worker threads, at most the CPUs this process may use (affinity and cgroup
        quota; more is capped with a note); 'all' uses every one, the default of run and ppl
A flag may be given once (ppl's --recipe: once per recipe).
)";

// --flag value pairs and bare --switches; anything else is an error naming the argument. A
// flag may be given twice only when it is `repeatable` (all() has every value); otherwise a
// second value is an error, not a silent override.
struct options {
  std::map<std::string, std::string> values;
  std::multimap<std::string, std::string> every;
  std::vector<std::string> positional;

  options(int argc, char** argv, const std::vector<std::string>& with_value, const std::vector<std::string>& switches,
          const std::vector<std::string>& repeatable = {}) {
    for (int i = 2; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg.starts_with("--")) {
        const bool is_switch = std::ranges::find(switches, arg) != switches.end();
        const bool takes_value = std::ranges::find(with_value, arg) != with_value.end();
        if ((is_switch || takes_value) && values.contains(arg) &&
            std::ranges::find(repeatable, arg) == repeatable.end())
          throw kvlab::error(arg + " is given twice" + (takes_value ? " (first '" + values[arg] + "')" : ""));
        if (is_switch) {
          values[arg] = "";
        } else if (takes_value) {
          if (i + 1 >= argc) throw kvlab::error(arg + " needs a value");
          values[arg] = argv[++i];
          every.emplace(arg, values[arg]);
        } else {
          throw kvlab::error("unknown option '" + arg + "'");
        }
      } else {
        positional.push_back(arg);
      }
    }
  }
  bool has(const std::string& key) const { return values.contains(key); }
  std::vector<std::string> all(const std::string& key) const {
    std::vector<std::string> found;
    for (auto [at, end] = every.equal_range(key); at != end; ++at) found.push_back(at->second);
    return found;
  }
  const std::string& required(const std::string& key) const {
    const auto found = values.find(key);
    if (found == values.end()) throw kvlab::error("missing " + key);
    return found->second;
  }
  std::string value_or(const std::string& key, const std::string& fallback) const {
    return has(key) ? required(key) : fallback;
  }
  std::optional<std::filesystem::path> path_if_given(const std::string& key) const {
    return has(key) ? std::optional<std::filesystem::path>(required(key)) : std::nullopt;
  }
  // The value of `key` as a number of type T, or `fallback` when it is not given.
  template <class T>
  T number_or(const std::string& key, T fallback) const {
    return has(key) ? kvlab::parse_number<T>(required(key), key) : fallback;
  }
  // For subcommands that take options only.
  void no_positional() const {
    if (!positional.empty()) throw kvlab::error("unexpected argument '" + positional.front() + "'");
  }
};

// --threads N (capped at the CPUs this process may use, with a note) or --threads all.
unsigned threads(const options& opts, const std::string& fallback) {
  return kvlab::thread_count(opts.value_or("--threads", fallback), "--threads", std::clog);
}

int eval_command(int argc, char** argv) {
  const options opts(argc, argv, {"--recipe", "--data", "--decode-steps"}, {"--json"});
  opts.no_positional();
  const auto& components = kvlab::builtin_registry();
  const kvlab::any_recipe recipe = kvlab::parse_recipe(opts.required("--recipe"), components);
  const kvlab::kv_data data = kvlab::load_data(opts.required("--data"));
  kvlab::eval_options eval;
  eval.decode_steps = opts.number_or("--decode-steps", eval.decode_steps);
  const auto result = kvlab::evaluate(recipe, data, eval);
  if (opts.has("--json")) {
    std::cout << kvlab::to_json(result) << "\n";
  } else {
    std::cout << "data: " << result.data << " (" << result.decode_steps << " decode steps, " << result.isa
              << " kernels)\n\n"
              << kvlab::configs::eval_table({result}).markdown();
  }
  return 0;
}

std::string render(const kvlab::text_table& table, const std::string& format) {
  if (format == "md") return table.markdown();
  if (format == "tex") return table.latex();
  if (format == "csv") return table.csv();
  throw kvlab::error("--format must be md, tex, csv or json, not '" + format + "'");
}

int plot_command(int argc, char** argv) {
  const options opts(argc, argv, {"--out", "--x", "--y", "--group", "--data", "--format"}, {});
  if (opts.positional.size() != 1) throw kvlab::error("kvlab plot takes one results folder");
  const std::filesystem::path dir = opts.positional[0];
  kvlab::figure_choice choice;
  choice.x = opts.value_or("--x", choice.x);
  choice.y = opts.value_or("--y", choice.y);
  const std::string group = opts.value_or("--group", "label");
  if (group != "label" && group != "recipe") throw kvlab::error("--group must be label or recipe, not '" + group + "'");
  choice.by_label = group == "label";
  choice.data_spec = opts.value_or("--data", "");
  const std::string format = opts.value_or("--format", "");
  const std::string extension = format.empty() || format == "svg" ? "svg" : format == "pgf" ? "tex" : format;
  const std::filesystem::path file =
      opts.path_if_given("--out").value_or(dir / (choice.y + "_vs_" + choice.x + "." + extension));
  kvlab::figure_format(file, format); // a name and a format that disagree are an error before any work
  kvlab::write_figure(kvlab::figure_of(kvlab::read_labelled_cells(dir), choice, kvlab::builtin_registry()), file);
  std::cout << "wrote " << file.string() << "\n";
  return 0;
}

// Rows named by label (default) or recipe, and the metrics chosen with --metric (repeatable,
// or comma-separated).
kvlab::table_choice table_choice_of(const options& opts) {
  kvlab::table_choice choice;
  const std::string by = opts.value_or("--by", "label");
  if (by != "label" && by != "recipe") throw kvlab::error("--by must be label or recipe, not '" + by + "'");
  choice.by_label = by == "label";
  for (const auto& list : opts.all("--metric"))
    for (const std::string& name : kvlab::split_top_level(list, "--metric"))
      if (!name.empty()) choice.metrics.push_back(name);
  return choice;
}

std::string render(const std::vector<kvlab::captioned_table>& tables, const std::string& format) {
  std::string out;
  for (const auto& t : tables) {
    if (!out.empty()) out += "\n";
    if (format == "md")
      out += t.markdown();
    else if (format == "tex")
      out += t.latex();
    else if (format == "csv")
      out += t.table.csv();
    else
      throw kvlab::error("--format must be md, tex, csv or json, not '" + format + "'");
  }
  return out;
}

// The tables, the tidy files and the plot of a results folder, from what is stored, never
// from memory, written next to the cells (only when their content changes: a finished re-run
// changes nothing). Returns the tables.
std::vector<kvlab::captioned_table> write_sweep_outputs(const std::filesystem::path& dir) {
  const auto cells = kvlab::read_labelled_cells(dir);
  const auto tables = kvlab::seed_tables(cells, {}, kvlab::builtin_registry());
  kvlab::write_text_if_changed(dir / "table.md", render(tables, "md"));
  kvlab::write_text_if_changed(dir / "table.tex", render(tables, "tex"));
  kvlab::write_text_if_changed(dir / "cells.csv", kvlab::tidy_csv(cells));
  kvlab::write_text_if_changed(dir / "cells.jsonl", kvlab::tidy_jsonl(cells));
  // The first data spec's figure; `kvlab plot --data` draws the others.
  const auto figure =
      kvlab::figure_of(cells, {.data_spec = cells.empty() ? "" : cells.front().data_spec}, kvlab::builtin_registry());
  kvlab::write_text_if_changed(dir / "fidelity_vs_bytes.svg", kvlab::figure_svg(figure));
  return tables;
}

// Runs `sweep` into --out (default `default_out`) with --threads and --shard, prints the
// summary and the table in --format.
int run_and_report(const kvlab::configs::sweep& sweep, const options& opts, const std::string& default_out) {
  const std::string format = opts.value_or("--format", "md");
  if (format != "json") render(kvlab::text_table{}, format); // reject a bad format before the run, not after
  if (opts.has("--reuse") && opts.has("--force")) throw kvlab::error("give --reuse or --force, not both");
  kvlab::run_options run{.out = opts.value_or("--out", default_out),
                         .threads = threads(opts, "all"),
                         .reuse = opts.has("--reuse"),
                         .force = opts.has("--force")};
  if (opts.has("--shard")) {
    const std::string shard = opts.required("--shard");
    const auto slash = shard.find('/');
    if (slash == std::string::npos) throw kvlab::error("--shard " + shard + ": expected i/N, for example 1/4");
    run.shard_index = kvlab::parse_number<unsigned>(shard.substr(0, slash), "--shard index");
    run.shard_count = kvlab::parse_number<unsigned>(shard.substr(slash + 1), "--shard count");
  }
  const auto summary = kvlab::run_sweep(sweep, run);
  std::clog << summary.cells << " cells in this shard: " << summary.computed << " computed, " << summary.skipped
            << " already done";
  if (summary.superseded)
    std::clog << " (" << summary.superseded << " computed again, made by other code or --force; the old cells are in "
              << (run.out / ".superseded").string() << ")";
  std::clog << "; results in " << run.out.string() << "\n";
  const auto tables = write_sweep_outputs(run.out);
  if (format == "json") {
    const auto texts = kvlab::stored_metrics(run.out);
    std::cout << "[";
    for (std::size_t i = 0; i < texts.size(); ++i) std::cout << (i ? ",\n" : "\n") << texts[i];
    std::cout << "]\n";
    return 0;
  }
  std::cout << render(tables, format);
  return 0;
}

int run_command(int argc, char** argv) {
  const options opts(argc, argv, {"--format", "--out", "--threads", "--shard"}, {"--reuse", "--force"});
  if (opts.positional.size() != 1) throw kvlab::error("kvlab run takes one experiment name");
  const auto& all = kvlab::builtin_experiments();
  const auto found = std::ranges::find(all, opts.positional[0], &kvlab::configs::experiment::name);
  if (found == all.end()) {
    std::string names;
    for (const auto& e : all) names += (names.empty() ? "" : ", ") + e.name;
    throw kvlab::error("unknown experiment '" + opts.positional[0] + "'; allowed: " + names);
  }
  std::clog << "experiment " << found->name << ": " << found->description << "\n";
  if (!found->cells) {
    const std::string format = opts.value_or("--format", "md");
    if (format != "json") render(kvlab::text_table{}, format);
    const auto output = found->run(kvlab::builtin_registry());
    std::cout << (format == "json" ? output.json : render(output.table, format));
    return 0;
  }
  return run_and_report(*found->cells, opts, "results/" + found->name);
}

// Text given either as values of --flag (one line each) or as the content of --file-flag.
std::pair<std::string, std::string> lines_from(const options& opts, const std::string& flag,
                                               const std::string& file_flag) {
  if (opts.has(flag) == opts.has(file_flag)) throw kvlab::error("give " + flag + " (repeatable) or " + file_flag);
  if (opts.has(file_flag)) return {kvlab::read_whole_file(opts.required(file_flag)), opts.required(file_flag)};
  std::string text;
  for (const auto& value : opts.all(flag)) text += value + "\n";
  return {text, flag};
}

int sweep_command(int argc, char** argv) {
  const options opts(argc, argv,
                     {"--recipe", "--recipes", "--data", "--data-file", "--seeds", "--decode-steps", "--out",
                      "--threads", "--shard", "--format"},
                     {"--reuse", "--force"}, {"--recipe", "--data"});
  opts.no_positional();
  kvlab::configs::sweep sweep;
  const auto [recipes, recipes_source] = lines_from(opts, "--recipe", "--recipes");
  sweep.recipes = kvlab::parse_recipe_list(recipes, recipes_source, kvlab::builtin_registry());
  const auto [specs, specs_source] = lines_from(opts, "--data", "--data-file");
  sweep.data = kvlab::parse_data_list(specs, specs_source);
  sweep.seeds = kvlab::parse_seeds(opts.value_or("--seeds", "1"));
  sweep.decode_steps = opts.number_or("--decode-steps", sweep.decode_steps);
  if (sweep.seeds.size() > 1)
    for (const auto& spec : sweep.data)
      if (spec.find("{seed}") == std::string::npos)
        throw kvlab::error("data spec '" + spec + "' has no {seed}, so every seed would run on the same data; write " +
                           "seed={seed} in a synthetic spec, or give one seed");
  return run_and_report(sweep, opts, "results/sweep");
}

int table_command(int argc, char** argv) {
  const options opts(argc, argv, {"--format", "--by", "--metric"}, {}, {"--metric"});
  if (opts.positional.size() != 1) throw kvlab::error("kvlab table takes one results folder");
  const std::string format = opts.value_or("--format", "md");
  if (format == "json") throw kvlab::error("kvlab table renders md, tex or csv; the cells' metrics.json are the JSON");
  const auto cells = kvlab::read_labelled_cells(opts.positional[0]);
  std::cout << render(kvlab::seed_tables(cells, table_choice_of(opts), kvlab::builtin_registry()), format);
  return 0;
}

int merge_command(int argc, char** argv) {
  const options opts(argc, argv, {}, {});
  if (opts.positional.size() < 2) throw kvlab::error("kvlab merge takes OUT and at least one shard folder");
  const std::vector<std::filesystem::path> shards(opts.positional.begin() + 1, opts.positional.end());
  const auto copied = kvlab::merge_results(opts.positional[0], shards);
  for (const auto& shard : shards | std::views::reverse) // the first shard's order first
    kvlab::add_to_recipe_manifest(opts.positional[0], kvlab::read_recipe_manifest(shard));
  write_sweep_outputs(opts.positional[0]);
  std::cout << "merged " << copied << " cells into " << opts.positional[0] << "\n";
  return 0;
}

int codec_command(int argc, char** argv) {
  const options opts(argc, argv, {"--quantizer", "--granularity", "--in", "--out", "--scale"}, {"--json"});
  opts.no_positional();
  const auto& components = kvlab::builtin_registry();
  const auto quantizer = components.make_quantizer(opts.required("--quantizer"));
  const auto granularity = components.make_granularity(opts.required("--granularity"));
  const std::string scale = opts.value_or("--scale", "f16");
  if (scale != "f16" && scale != "f32") throw kvlab::error("--scale must be f16 or f32");
  const std::string in = opts.required("--in"), out = opts.required("--out");
  const kvlab::npy_array array = kvlab::read_npy(in);
  if (array.shape.size() < 2 || array.shape.size() > 4) {
    std::string shape;
    for (const auto d : array.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    throw kvlab::error(in + ": expected shape [T, D], [H, T, D] or [L, H, T, D], found [" + shape + "]");
  }
  std::size_t heads = 1; // every leading dimension is a separate stream
  for (std::size_t d = 0; d + 2 < array.shape.size(); ++d) heads *= array.shape[d];
  const std::size_t tokens = array.shape[array.shape.size() - 2], head_dim = array.shape.back();
  kvlab::group_shape shape;
  try {
    shape = granularity.group_shape(quantizer.stored_dim(head_dim)); // rows as a cache body stores them
  } catch (const kvlab::error& e) {
    throw kvlab::error(in + " (head_dim " + std::to_string(head_dim) + "): " + e.what());
  }
  const auto result = kvlab::quantize_dequantize(
      quantizer, shape, scale == "f32" ? kvlab::param_precision::f32 : kvlab::param_precision::f16, array.values,
      tokens, head_dim, heads);
  kvlab::write_npy(out, array.shape, result.decoded);
  const auto& st = result.stats;
  if (opts.has("--json")) {
    std::cout << kvlab::json_object()
                     .add("quantizer", quantizer.name())
                     .add("granularity", granularity.name())
                     .add("in", in)
                     .add("out", out)
                     .add("mse", st.mse)
                     .add("snr_db", st.snr_db)
                     .add("max_abs_error", st.max_abs_error)
                     .add("relative_rmse", st.relative_rmse)
                     .add("bits_per_element", st.bits_per_element)
                     .str()
              << "\n";
  } else {
    kvlab::text_table table{{"quantizer", "granularity", "MSE", "SNR (dB)", "max abs error", "bits/element"}, {}};
    table.rows.push_back({quantizer.name(), granularity.name(), kvlab::format_significant(st.mse),
                          kvlab::format_significant(st.snr_db), kvlab::format_significant(st.max_abs_error),
                          kvlab::format_significant(st.bits_per_element, 6)});
    std::cout << table.markdown();
  }
  return 0;
}

// Writes each tensor as DIR/<name> in the npy:DIR layout ([layers, heads, tokens, head_dim]).
void write_kv_npy(const std::filesystem::path& dir,
                  std::initializer_list<std::pair<const char*, const kvlab::kv_tensor*>> tensors) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw kvlab::error("cannot create directory " + dir.string() + ": " + ec.message());
  std::string names;
  for (const auto& [name, tensor] : tensors) {
    const auto& s = tensor->shape();
    const std::size_t shape[] = {s.layers, s.heads, s.tokens, s.head_dim};
    kvlab::write_npy(dir / name, shape, tensor->values());
    names += (names.empty() ? "" : ", ") + std::string(name);
  }
  std::cout << "wrote " << names << " to " << dir.string() << "\n";
}

int export_command(int argc, char** argv) {
  const options opts(argc, argv, {"--data", "--out"}, {});
  opts.no_positional();
  const kvlab::kv_data data = kvlab::load_data(opts.required("--data"));
  write_kv_npy(opts.required("--out"), {{"K.npy", &data.keys}, {"V.npy", &data.values}, {"Q.npy", &data.queries}});
  return 0;
}

int capture_command(int argc, char** argv) {
  const options opts(argc, argv, {"--model", "--text", "--out", "--tokens", "--tokenizer", "--threads"}, {});
  opts.no_positional();
  const auto tokenizer_file = opts.path_if_given("--tokenizer");
  const kvlab::model model = kvlab::load_model(opts.required("--model"), tokenizer_file);
  const auto tokens =
      model.tokenizer->encode(kvlab::read_whole_file(opts.required("--text")), model.tokenizer->add_bos());
  std::size_t n = std::min<std::size_t>(tokens.size(), model.config.context != 0 ? model.config.context : 4096);
  n = opts.number_or("--tokens", n);
  if (n > tokens.size())
    throw kvlab::error("--tokens " + std::to_string(n) + ": the text gives " + std::to_string(tokens.size()));
  const auto captured = kvlab::capture_kv(model.config, model.weights, std::span(tokens).first(n),
                                          "capture of " + opts.required("--model"), threads(opts, "1"));
  write_kv_npy(opts.required("--out"), {{"K.npy", &captured.data.keys},
                                        {"V.npy", &captured.data.values},
                                        {"Q.npy", &captured.data.queries},
                                        {"K_pre_rope.npy", &captured.keys_before_rope}});
  return 0;
}

int data_report_command(int argc, char** argv) {
  const options opts(argc, argv, {"--probes", "--format"}, {"--per-head"});
  if (opts.positional.empty()) throw kvlab::error("kvlab data-report takes one or more data specs");
  kvlab::data_report_options report;
  report.probes = opts.number_or("--probes", report.probes);
  if (report.probes == 0) throw kvlab::error("--probes must be at least 1");
  const std::string format = opts.value_or("--format", "md");
  if (format != "md" && format != "csv") throw kvlab::error("--format must be md or csv, not '" + format + "'");
  const bool per_head = opts.has("--per-head");
  for (const auto& spec : opts.positional) kvlab::check_data_spec(spec); // every spec before any work
  kvlab::text_table table{{"data", "shape"}, {}, {}};
  if (per_head) table.header.insert(table.header.end(), {"layer", "head"});
  table.header.insert(table.header.end(), {"entropy", "H/log n", "top 1 %", "top 10 %", "top 25 %", "sink", "last 64",
                                           "key outlier ratio", "value kurtosis"});
  for (const auto& spec : opts.positional) {
    const auto data = kvlab::load_data(spec);
    const auto heads = kvlab::data_report(data, report);
    const std::string shape = kvlab::shape_arguments(data);
    std::vector<kvlab::head_statistics> rows = heads;
    if (!per_head) rows = {kvlab::mean_over_heads(heads)};
    for (const auto& s : rows) {
      std::vector<std::string> row{spec, shape};
      if (per_head) row.insert(row.end(), {std::to_string(s.layer), std::to_string(s.head)});
      for (const double x : {s.entropy, s.normalized_entropy, s.top1, s.top10, s.top25, s.sink_mass, s.local_mass,
                             s.key_outlier_ratio, s.value_kurtosis})
        row.push_back(kvlab::format_significant(x, 4));
      table.rows.push_back(std::move(row));
    }
  }
  std::cout << (format == "md" ? table.markdown() : table.csv());
  return 0;
}

int list_command(int argc, char** argv) {
  const options opts(argc, argv, {}, {});
  if (!opts.positional.empty()) throw kvlab::error("kvlab list takes no arguments");
  kvlab::text_table table{{"kind", "name", "what it is", "paper"}, {}};
  for (const auto& info : kvlab::builtin_registry().list())
    table.rows.push_back({kvlab::kind_name(info.kind), info.usage, info.summary, info.paper});
  std::cout << "Strategies and metrics\n\n" << table.markdown();
  kvlab::text_table sources{{"data source", "what it is"}, {}};
  for (const auto& s : kvlab::builtin_data_sources()) sources.rows.push_back({s.info.usage, s.info.summary});
  std::cout << "\nData sources\n\n" << sources.markdown();
  kvlab::text_table recipes{{"recipe", "canonical name", "reference"}, {}};
  for (const auto& b : kvlab::configs::baselines())
    recipes.rows.push_back({b.label, kvlab::canonical_name(b.value), b.reference});
  std::cout << "\nRecipes\n\n" << recipes.markdown();
  kvlab::text_table experiments{{"experiment", "what it is"}, {}};
  for (const auto& e : kvlab::builtin_experiments()) experiments.rows.push_back({e.name, e.description});
  std::cout << "\nExperiments\n\n" << experiments.markdown();
  return 0;
}

} // namespace

// Whitespace-separated token ids.
std::vector<std::int32_t> read_token_file(const std::filesystem::path& file) {
  const std::string text = kvlab::read_whole_file(file);
  std::vector<std::int32_t> tokens;
  std::size_t at = 0;
  while (true) {
    at = text.find_first_not_of(" \t\r\n", at);
    if (at == std::string::npos) break;
    const std::size_t end = std::min(text.find_first_of(" \t\r\n", at), text.size());
    tokens.push_back(kvlab::parse_number<std::int32_t>(
        text.substr(at, end - at), "token " + std::to_string(tokens.size()) + " of " + file.string()));
    at = end;
  }
  return tokens;
}

std::string with_error(const kvlab::estimate& e, int digits = 4) {
  return kvlab::format_significant(e.value, digits) + " ± " + kvlab::format_significant(e.error, 2);
}

int ppl_command(int argc, char** argv) {
  const options opts(
      argc, argv,
      {"--model", "--text", "--tokens", "--recipe", "--ctx", "--chunks", "--base", "--threads", "--out", "--tokenizer"},
      {"--json", "--no-attention-metrics"}, {"--recipe"});
  opts.no_positional();
  if (opts.has("--text") == opts.has("--tokens")) throw kvlab::error("give one of --text FILE or --tokens FILE");
  const auto& components = kvlab::builtin_registry();
  opts.required("--recipe");
  std::vector<kvlab::any_recipe> recipes;
  for (const auto& text : opts.all("--recipe")) recipes.push_back(kvlab::parse_recipe(text, components));
  const kvlab::any_recipe base = kvlab::parse_recipe(opts.value_or("--base", "k=f16@token,v=f16@token"), components);
  const std::filesystem::path model_path = opts.required("--model");
  const auto tokenizer_file = opts.path_if_given("--tokenizer");
  const kvlab::model model = kvlab::load_model(model_path, tokenizer_file);
  kvlab::perplexity_options o;
  o.context = model.config.context != 0 ? std::min<std::size_t>(512, model.config.context) : 512;
  o.context = opts.number_or("--ctx", o.context);
  o.chunks = opts.number_or("--chunks", o.chunks);
  o.threads = threads(opts, "all");
  o.attention_metrics = !opts.has("--no-attention-metrics");
  std::vector<std::int32_t> tokens;
  if (opts.has("--text")) {
    if (!model.tokenizer) throw kvlab::error("--text needs a tokenizer; the model has none (use --tokens)");
    tokens = model.tokenizer->encode(kvlab::read_whole_file(opts.required("--text")), model.tokenizer->add_bos());
    // llama.cpp's perplexity starts every chunk with BOS when the vocabulary adds one.
    if (model.tokenizer->add_bos() && model.tokenizer->bos()) o.chunk_bos = *model.tokenizer->bos();
  } else {
    tokens = read_token_file(opts.required("--tokens"));
  }
  const std::string digest = kvlab::model_sha256(model_path);
  const std::filesystem::path out = opts.value_or("--out", "results/ppl");
  const kvlab::scored_run base_run = kvlab::base_run(model.config, model.weights, tokens, base, o, digest, out);
  std::vector<kvlab::perplexity_result> results;
  for (const auto& r : recipes) {
    const auto run = kvlab::run_scored(model.config, model.weights, tokens, r, o);
    results.push_back(kvlab::compare_with_base(base_run, run, model.config, kvlab::canonical_name(r)));
  }
  const kvlab::model_config& c = model.config;
  const std::string tokenizer = model.tokenizer ? model.tokenizer->description() : "none (--tokens)";
  if (opts.has("--json")) {
    std::string list = "[";
    for (std::size_t i = 0; i < results.size(); ++i) list += (i ? ",\n" : "\n") + kvlab::to_json(results[i]);
    std::cout << kvlab::json_object()
                     .add("model", model_path.string())
                     .add("model_sha256", digest)
                     .add("format", model.format)
                     .add("architecture", c.architecture)
                     .add("tokenizer", tokenizer)
                     .add("layers", c.layers)
                     .add("heads", c.heads)
                     .add("kv_heads", c.kv_heads)
                     .add("head_dim", c.head_dim)
                     .add("context", o.context)
                     .add("chunks", base_run.targets.size() / (o.context - 1 - o.context / 2))
                     .add("tokens", tokens.size())
                     .add("base_recipe", kvlab::canonical_name(base))
                     .add("isa", kvlab::isa_name(kvlab::active_kernels().instruction_set))
                     .add("threads", std::size_t{o.threads})
                     .raw("results", list + "\n]")
                     .str()
              << "\n";
    return 0;
  }
  std::cout << "model: " << model_path.string() << " (" << model.format << ", " << c.architecture << ", " << c.layers
            << " layers, " << c.heads << "/" << c.kv_heads << " heads, head_dim " << c.head_dim << "; sha256 "
            << digest.substr(0, 16) << "...)\ntokenizer: " << tokenizer << "\nscored: " << base_run.targets.size()
            << " positions in chunks of " << o.context << "; base: " << kvlab::canonical_name(base) << ", PPL "
            << with_error(results.empty() ? kvlab::estimate{} : results.front().base_ppl) << "\n\n";
  kvlab::text_table table;
  table.header = {"recipe",     "PPL",         "ΔPPL",    "KLD",    "KLD p99", "RMS Δp %",
                  "same top %", "attn_rel_l2", "B/token", "x fp16", "tok/s"};
  for (const auto& r : results)
    table.rows.push_back(
        {r.recipe, with_error(r.ppl), with_error(r.delta_ppl), with_error(r.kld, 3),
         kvlab::format_significant(r.kld_p99, 3), with_error({100 * r.rms_delta_p.value, 100 * r.rms_delta_p.error}, 3),
         with_error({100 * r.same_top.value, 100 * r.same_top.error}, 4), kvlab::format_significant(r.attn_rel_l2, 3),
         kvlab::format_significant(r.bytes_per_token, 4), kvlab::format_significant(r.compression_vs_fp16, 3),
         kvlab::format_significant(r.tokens_per_second, 3)});
  std::cout << table.markdown();
  return 0;
}

int main(int argc, char** argv) {
  const std::string command = argc > 1 ? argv[1] : "";
  try {
    if (command == "help" || command == "--help" || command == "-h" ||
        std::ranges::any_of(std::span(argv, argc).subspan(1), [](std::string_view a) { return a == "--help"; })) {
      std::cout << usage;
      return 0;
    }
    if (command == "eval") return eval_command(argc, argv);
    if (command == "ppl") return ppl_command(argc, argv);
    if (command == "capture") return capture_command(argc, argv);
    if (command == "run") return run_command(argc, argv);
    if (command == "sweep") return sweep_command(argc, argv);
    if (command == "list") return list_command(argc, argv);
    if (command == "data-report") return data_report_command(argc, argv);
    if (command == "codec") return codec_command(argc, argv);
    if (command == "export") return export_command(argc, argv);
    if (command == "table") return table_command(argc, argv);
    if (command == "merge") return merge_command(argc, argv);
    if (command == "plot") return plot_command(argc, argv);
    std::cerr << "kvlab: " << (command.empty() ? "no command given" : "unknown command '" + command + "'") << "\n"
              << usage;
    return 2;
  } catch (const kvlab::error& e) {
    std::cerr << "kvlab " << command << ": error: " << e.what() << "\n";
    return 1;
  } catch (const std::filesystem::filesystem_error& e) { // names the path and the reason
    std::cerr << "kvlab " << command << ": error: " << e.what() << "\n";
    return 1;
  } catch (const std::bad_alloc&) { // a request past the memory checks' estimates
    std::cerr << "kvlab " << command << ": error: out of memory; ask for less data or fewer threads\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "kvlab " << command << ": internal error: " << e.what() << "\n";
    return 3;
  }
}
