// kvlab.runner:seed_table: a results folder as a paper's table. Cells that differ only in their
// seed form one row: each metric is shown as its mean ± the half-width of the 95 % Student-t
// interval over the seeds, with the number of seeds. Rows are labelled as the recipes were
// (recipes.txt) and ordered as they were given; each data spec gets its own table with the
// spec in its caption. The tidy files (cells.csv, cells.jsonl) keep every cell at full
// precision for pandas.
module;
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <ranges>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

export module kvlab.runner:seed_table;
import kvlab;
import :results_folder;
import :recipe_list;

namespace kvlab {
// The quantile at `probability` of Student's t distribution with `degrees_of_freedom`
// (student_t.cpp: Boost.Math, kept out of this interface).
extern "C++" double student_t_quantile(double degrees_of_freedom, double probability);
} // namespace kvlab

export namespace kvlab {

// Mean and 95 % confidence half-width (Student t, n - 1 degrees of freedom) of the finite
// values; the half-width is NaN for fewer than two.
struct seed_interval {
  double mean = std::numeric_limits<double>::quiet_NaN();
  double half_width = std::numeric_limits<double>::quiet_NaN();
  std::size_t n = 0;
};

inline seed_interval t_interval95(std::span<const double> values) {
  seed_interval r;
  double sum = 0.0;
  for (const double x : values)
    if (std::isfinite(x)) sum += x, ++r.n;
  if (r.n == 0) return r;
  r.mean = sum / static_cast<double>(r.n);
  if (r.n < 2) return r;
  double squares = 0.0;
  for (const double x : values)
    if (std::isfinite(x)) squares += (x - r.mean) * (x - r.mean);
  const double sd = std::sqrt(squares / static_cast<double>(r.n - 1));
  r.half_width = student_t_quantile(static_cast<double>(r.n - 1), 0.975) * sd / std::sqrt(static_cast<double>(r.n));
  return r;
}

// "0.01234 ± 0.00041": the half-width to two significant digits and the mean to the same
// decimal place; "(1.234 ± 0.041)e-07" for magnitudes below 1e-3 or from 1e6. Without an
// interval, six significant digits (0.99997 stays 0.99997).
inline std::string format_interval(const seed_interval& v) {
  if (!std::isfinite(v.mean)) return format_significant(v.mean);
  if (!std::isfinite(v.half_width)) return format_significant(v.mean, 6);
  if (v.half_width == 0.0) return format_significant(v.mean, 6) + " ± 0"; // every seed gave the same value
  const double magnitude = std::max(std::fabs(v.mean), v.half_width);
  const int exponent = magnitude == 0.0 || (magnitude >= 1e-3 && magnitude < 1e6)
                           ? 0
                           : static_cast<int>(std::floor(std::log10(magnitude)));
  const double scale = std::pow(10.0, exponent);
  const double half = v.half_width / scale;
  const int decimals = std::clamp(1 - static_cast<int>(std::floor(std::log10(half))), 0, 12);
  // A mean that rounds to zero prints as 0, not -0 (a sign the printed digits do not carry).
  const double step = std::pow(10.0, -decimals);
  const double mean = std::round(v.mean / scale / step) == 0.0 ? 0.0 : v.mean / scale;
  char buffer[96];
  std::snprintf(buffer, sizeof buffer, "%.*f ± %.*f", decimals, mean, decimals, half);
  if (exponent == 0) return buffer;
  char scaled[128];
  std::snprintf(scaled, sizeof scaled, "(%s)e%+03d", buffer, exponent);
  return scaled;
}

// A stored cell with what the tables need from its provenance and the folder's recipes.txt.
struct labelled_cell {
  std::string label;
  std::string recipe;
  std::string data_spec; // as the sweep gave it, "{seed}" unsubstituted
  std::uint64_t seed = 0;
  json_value metrics;
};

// Every cell of `dir`, ordered by recipe as recipes.txt lists them (recipes it does not list
// follow, labelled by their name), then by data spec and seed.
inline std::vector<labelled_cell> read_labelled_cells(const std::filesystem::path& dir) {
  const auto manifest = read_recipe_manifest(dir);
  std::vector<std::pair<std::size_t, labelled_cell>> ordered;
  for (auto& stored : read_cells(dir)) {
    labelled_cell cell;
    const auto text = [&](const json_value& from, const char* key) {
      const auto* v = from.find(key);
      return v && v->is_string() ? v->string() : std::string();
    };
    cell.recipe = text(stored.metrics, "recipe");
    cell.data_spec = text(stored.provenance, "data_spec");
    if (cell.data_spec.empty()) cell.data_spec = text(stored.provenance, "data");
    if (const auto* seed = stored.provenance.find("seed")) cell.seed = seed->integer<std::uint64_t>().value_or(0);
    const auto listed = std::ranges::find(manifest, cell.recipe, &recipe_line::recipe);
    cell.label = listed != manifest.end() && !listed->label.empty() ? listed->label : cell.recipe;
    cell.metrics = std::move(stored.metrics);
    ordered.emplace_back(static_cast<std::size_t>(listed - manifest.begin()), std::move(cell));
  }
  std::ranges::sort(ordered, [](const auto& a, const auto& b) { // no ties: a cell is one folder
    return std::tie(a.first, a.second.recipe, a.second.data_spec, a.second.seed) <
           std::tie(b.first, b.second.recipe, b.second.data_spec, b.second.seed);
  });
  std::vector<labelled_cell> cells;
  for (auto& [order, cell] : ordered) cells.push_back(std::move(cell));
  return cells;
}

// The cells of one recipe on one data spec, over their seeds.
struct seed_row {
  std::string label;
  std::string recipe;
  std::string data_spec;
  std::vector<const labelled_cell*> cells;

  seed_interval metric(const std::string& name) const {
    std::vector<double> values;
    for (const auto* c : cells) {
      const auto* v = c->metrics.find(name);
      values.push_back(v && v->is_number() ? v->number() : std::numeric_limits<double>::quiet_NaN());
    }
    return t_interval95(values);
  }
};

// Rows in the cells' order (read_labelled_cells), one per recipe and data spec.
inline std::vector<seed_row> rows_over_seeds(const std::vector<labelled_cell>& cells) {
  std::vector<seed_row> rows;
  for (const auto& c : cells) {
    const auto found = std::ranges::find_if(
        rows, [&](const seed_row& r) { return r.recipe == c.recipe && r.data_spec == c.data_spec; });
    if (found == rows.end())
      rows.push_back({c.label, c.recipe, c.data_spec, {&c}});
    else
      found->cells.push_back(&c);
  }
  return rows;
}

// What a table shows: rows named by label or by canonical recipe, and which metrics (empty:
// every per-step metric the cells hold).
struct table_choice {
  bool by_label = true;
  std::vector<std::string> metrics;
};

struct captioned_table {
  std::string caption;
  text_table table;

  std::string markdown() const { return "Table: " + caption + "\n\n" + table.markdown(); }
  std::string latex() const {
    return "\\begin{table}\n\\centering\n\\caption{" + latex_escape(caption) + "}\n" + table.latex() + "\\end{table}\n";
  }
};

// One table per data spec. Columns: the row name, bits_k, bits_v, bytes per token, each chosen
// metric as mean ± 95 % CI, and the number of seeds; the best mean of each metric in bold.
inline std::vector<captioned_table> seed_tables(const std::vector<labelled_cell>& cells, const table_choice& choice,
                                                const registry& components) {
  const std::vector<any_metric> registered = components.every_metric();
  std::vector<std::string> metrics = choice.metrics;
  std::vector<metric_direction> directions;
  if (metrics.empty())
    for (const any_metric& m : registered)
      if (std::ranges::any_of(cells, [&](const labelled_cell& c) { return c.metrics.find(m.name()) != nullptr; }))
        metrics.push_back(m.name());
  for (const auto& name : metrics) {
    if (!std::ranges::any_of(cells, [&](const labelled_cell& c) { return c.metrics.find(name) != nullptr; }))
      throw error("--metric " + name + ": no cell holds it");
    const auto known = std::ranges::find(registered, name, &any_metric::name);
    directions.push_back(known != registered.end() ? known->direction() : metric_direction::lower);
  }
  const auto rows = rows_over_seeds(cells);
  std::vector<std::string> specs;
  for (const auto& r : rows)
    if (std::ranges::find(specs, r.data_spec) == specs.end()) specs.push_back(r.data_spec);
  std::vector<captioned_table> tables;
  for (const auto& spec : specs) {
    text_table table{{choice.by_label ? "method" : "recipe", "bits_k", "bits_v", "B/token"}, {}, {}};
    table.header.insert(table.header.end(), metrics.begin(), metrics.end());
    table.header.push_back("seeds");
    std::vector<std::vector<double>> means(metrics.size());
    std::size_t fewest = SIZE_MAX, most = 0;
    for (const auto& r : rows) {
      if (r.data_spec != spec) continue;
      std::vector<std::string> row_text{choice.by_label ? r.label : r.recipe};
      for (const char* fixed : {"bits_k", "bits_v", "bytes_per_token"})
        row_text.push_back(format_significant(r.metric(fixed).mean, 6));
      for (std::size_t m = 0; m < metrics.size(); ++m) {
        const auto v = r.metric(metrics[m]);
        means[m].push_back(v.mean);
        row_text.push_back(format_interval(v));
      }
      row_text.push_back(std::to_string(r.cells.size()));
      fewest = std::min(fewest, r.cells.size()), most = std::max(most, r.cells.size());
      table.rows.push_back(std::move(row_text));
    }
    for (std::size_t m = 0; m < metrics.size(); ++m) {
      const auto badness = [&](double x) {
        if (!std::isfinite(x)) return std::numeric_limits<double>::infinity();
        switch (directions[m]) {
        case metric_direction::lower: return x;
        case metric_direction::higher: return -x;
        case metric_direction::nearer_zero: return std::fabs(x);
        }
        return x;
      };
      const double best = std::ranges::min(means[m] | std::views::transform(badness));
      for (std::size_t r = 0; r < means[m].size(); ++r)
        if (std::isfinite(best) && badness(means[m][r]) == best) table.best.emplace_back(r, m + 4);
    }
    const std::string seeds =
        fewest == most ? std::to_string(most) : std::to_string(fewest) + "-" + std::to_string(most);
    tables.push_back({"data " + spec + "; mean ± 95 % t-interval over " + seeds + " seed" + (most == 1 ? "" : "s") +
                          " per row; best mean in bold",
                      std::move(table)});
  }
  return tables;
}

// Every cell as one CSV row at full precision (label, recipe, data spec, seed, then every
// number its metrics.json holds at the top level), for pandas.
inline std::string tidy_csv(const std::vector<labelled_cell>& cells) {
  std::vector<std::string> columns;
  for (const auto& c : cells)
    for (const auto& [key, value] : c.metrics.object())
      if (value.is_number() && std::ranges::find(columns, key) == columns.end()) columns.push_back(key);
  text_table table{{"label", "recipe", "data_spec", "seed"}, {}, {}};
  table.header.insert(table.header.end(), columns.begin(), columns.end());
  for (const auto& c : cells) {
    std::vector<std::string> row{c.label, c.recipe, c.data_spec, std::to_string(c.seed)};
    for (const auto& key : columns) {
      const auto* v = c.metrics.find(key);
      row.push_back(v && v->is_number() ? v->number_text() : "");
    }
    table.rows.push_back(std::move(row));
  }
  return table.csv();
}

// The same as JSON lines: one object per cell.
inline std::string tidy_jsonl(const std::vector<labelled_cell>& cells) {
  std::string out;
  for (const auto& c : cells) {
    json_object line;
    line.add("label", c.label).add("recipe", c.recipe).add("data_spec", c.data_spec).add("seed", std::size_t{c.seed});
    for (const auto& [key, value] : c.metrics.object())
      if (value.is_number()) line.raw(key, value.number_text());
    out += line.str(0) + "\n";
  }
  return out;
}

} // namespace kvlab
