// kvlab.runner:recipe_list: the text files `kvlab sweep` reads, so a sweep needs no C++ edit.
// A recipes file holds one recipe string per line, optionally labelled (`KIVI-2 = k=uint2@...`);
// recipes sharing a label are one method across budgets or bit widths. A data file holds one
// data spec per line. `#` starts a comment and blank lines are skipped. Every line is checked
// before anything runs, and each bad line is reported with its number. A results folder's
// recipes.txt has the same format.
module;
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>
export module kvlab.runner:recipe_list;
import kvlab;
import :results_folder;

export namespace kvlab {

// One line of a recipes file, split but not yet parsed.
struct recipe_line {
  std::size_t line = 0;
  std::string label; // empty when the line has none
  std::string recipe;
};

namespace detail {

inline std::string_view trimmed(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return {};
  return text.substr(first, text.find_last_not_of(" \t\r") - first + 1);
}

// The non-blank lines of `text` with comments removed, with their 1-based numbers.
inline std::vector<std::pair<std::size_t, std::string>> content_lines(std::string_view text) {
  std::vector<std::pair<std::size_t, std::string>> lines;
  std::size_t number = 0;
  for (std::size_t at = 0; at <= text.size();) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    ++number;
    std::string_view line = text.substr(at, end - at);
    line = trimmed(line.substr(0, line.find('#')));
    if (!line.empty()) lines.emplace_back(number, std::string(line));
    at = end + 1;
  }
  return lines;
}

// A bad line: its number and what is wrong with it.
using line_problem = std::pair<std::size_t, std::string>;

// Throws one error listing every problem in line order, each as "FILE:LINE: ...".
inline void report_lines(std::vector<line_problem> problems, std::string_view file) {
  if (problems.empty()) return;
  std::ranges::sort(problems);
  std::string message = std::to_string(problems.size()) + " bad line" + (problems.size() == 1 ? "" : "s") + " in " +
                        std::string(file) + "; nothing was run:";
  for (const auto& [line, problem] : problems)
    message += "\n  " + std::string(file) + ":" + std::to_string(line) + ": " + problem;
  throw error(message);
}

} // namespace detail

// `LABEL = recipe` or `recipe`: the line is labelled when the text before its first '=' is not
// a recipe key (k, v, scale, ...).
inline recipe_line split_recipe_line(std::string_view line, std::size_t number = 0) {
  const auto equals = line.find('=');
  const std::string head(detail::trimmed(line.substr(0, equals)));
  const bool is_key = std::ranges::any_of(split_top_level(recipe_keys, "recipe keys"),
                                          [&](const std::string& key) { return detail::trimmed(key) == head; });
  if (equals == std::string_view::npos || is_key) return {number, "", std::string(detail::trimmed(line))};
  return {number, head, std::string(detail::trimmed(line.substr(equals + 1)))};
}

namespace detail {

// The lines of a recipes file, split; a label without a recipe is added to `problems`.
inline std::vector<recipe_line> split_lines(std::string_view text, std::vector<line_problem>& problems) {
  std::vector<recipe_line> lines;
  for (const auto& [number, content] : content_lines(text)) {
    recipe_line line = split_recipe_line(content, number);
    if (line.recipe.empty())
      problems.emplace_back(number, "label '" + line.label + "' has no recipe after '='");
    else
      lines.push_back(std::move(line));
  }
  return lines;
}

} // namespace detail

// The lines of a recipes file, split, without parsing the recipes (what reading a results
// folder's recipes.txt needs).
inline std::vector<recipe_line> split_recipe_lines(std::string_view text, std::string_view file) {
  std::vector<detail::line_problem> problems;
  auto lines = detail::split_lines(text, problems);
  detail::report_lines(std::move(problems), file);
  return lines;
}

// The recipes of `text` (a file's content, named `file` in errors), parsed with `components`:
// an unlabelled recipe is labelled by its canonical name. A recipe that does not parse, or
// that repeats an earlier line's recipe, or that needs a model (rope=pre), is reported with
// its line number.
inline std::vector<configs::named_recipe> parse_recipe_list(std::string_view text, std::string_view file,
                                                            const registry& components) {
  std::vector<configs::named_recipe> recipes;
  std::vector<detail::line_problem> problems;
  std::map<std::string, std::size_t> first_line; // by canonical name
  for (const recipe_line& line : detail::split_lines(text, problems)) {
    try {
      const any_recipe r = parse_recipe(line.recipe, components);
      const std::string name = canonical_name(r);
      if (r.keys_before_rope)
        throw error(name + ": rope=pre needs a model's RoPE, and sweeps run on data; use kvlab ppl");
      if (const auto [at, added] = first_line.try_emplace(name, line.line); !added) {
        problems.emplace_back(line.line,
                              "repeats the recipe of line " + std::to_string(at->second) + " (" + name + ")");
        continue;
      }
      recipes.emplace_back(line.label.empty() ? name : line.label, r);
    } catch (const error& e) {
      problems.emplace_back(line.line, e.what());
    }
  }
  detail::report_lines(std::move(problems), file);
  if (recipes.empty()) throw error(std::string(file) + " holds no recipe");
  return recipes;
}

// The data specs of `text`, one per line, each checked by its source before anything is read.
inline std::vector<std::string> parse_data_list(std::string_view text, std::string_view file) {
  std::vector<std::string> specs;
  std::vector<detail::line_problem> problems;
  for (const auto& [number, spec] : detail::content_lines(text)) {
    try {
      std::string checked = spec;
      if (const auto at = checked.find("{seed}"); at != std::string::npos) checked.replace(at, 6, "1");
      check_data_spec(checked);
      specs.push_back(spec);
    } catch (const error& e) {
      problems.emplace_back(number, e.what());
    }
  }
  detail::report_lines(std::move(problems), file);
  if (specs.empty()) throw error(std::string(file) + " holds no data spec");
  return specs;
}

// "1..5", "1,2,7" or "3": the seeds of a sweep, each once.
inline std::vector<std::uint64_t> parse_seeds(std::string_view text) {
  std::vector<std::uint64_t> seeds;
  for (const std::string& part : split_top_level(text, "--seeds")) {
    const std::string_view item(part);
    if (const auto dots = item.find(".."); dots != std::string_view::npos) {
      const auto first = parse_number<std::uint64_t>(item.substr(0, dots), "--seeds range start");
      const auto last = parse_number<std::uint64_t>(item.substr(dots + 2), "--seeds range end");
      if (last < first || last - first >= 10000)
        throw error("--seeds " + std::string(item) + ": expected FIRST..LAST with FIRST <= LAST, at most 10000 seeds");
      for (std::uint64_t s = first; s <= last; ++s) seeds.push_back(s);
    } else {
      seeds.push_back(parse_number<std::uint64_t>(item, "--seeds"));
    }
  }
  for (std::size_t i = 0; i < seeds.size(); ++i)
    if (std::find(seeds.begin(), seeds.begin() + static_cast<std::ptrdiff_t>(i), seeds[i]) !=
        seeds.begin() + static_cast<std::ptrdiff_t>(i))
      throw error("--seeds " + std::string(text) + ": seed " + std::to_string(seeds[i]) + " is given twice");
  return seeds;
}

// A results folder's recipes.txt: every recipe of its cells, in the order they were given,
// each with its label, in the recipes-file format (so `kvlab sweep --recipes DIR/recipes.txt`
// runs them again). Empty when the folder has none.
inline std::vector<recipe_line> read_recipe_manifest(const std::filesystem::path& dir) {
  const auto file = dir / "recipes.txt";
  if (!std::filesystem::exists(file)) return {};
  return split_recipe_lines(file_text(file), file.string());
}

// Adds `entries` to the recipes.txt of `dir`: they come first, in their order (a recipe's
// label is the one given last), followed by the recipes the folder held before that
// `entries` does not name. Rewritten only when its content changes.
inline void add_to_recipe_manifest(const std::filesystem::path& dir, const std::vector<recipe_line>& entries) {
  std::vector<recipe_line> all = entries;
  for (auto& old : read_recipe_manifest(dir))
    if (std::ranges::find(all, old.recipe, &recipe_line::recipe) == all.end()) all.push_back(std::move(old));
  std::string text = "# The recipes of this results folder, labelled, in order: `kvlab sweep --recipes` reads it.\n";
  for (const auto& e : all) text += (e.label.empty() || e.label == e.recipe ? "" : e.label + " = ") + e.recipe + "\n";
  write_text_if_changed(dir / "recipes.txt", text);
}

// The manifest entries of a sweep's recipes.
inline std::vector<recipe_line> manifest_entries(const std::vector<configs::named_recipe>& recipes) {
  std::vector<recipe_line> entries;
  for (const auto& r : recipes) entries.push_back({0, r.label, canonical_name(r.value)});
  return entries;
}

} // namespace kvlab
