// What an experiment is: `kvlab run NAME` runs one and prints its table. Each experiment is
// one file in configs/ (found by the build as strategies are; the generated module
// kvlab.experiments_builtin lists them), one per paper or table.
module;
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>
export module kvlab.configs:experiments;
import kvlab.core;
import :recipe_table;
import :baselines;

export namespace kvlab::configs {

// A grid of cells: every recipe on every data spec for every seed. Labels are what tables and
// figures show; a cell is identified by its canonical recipe, data and seed. A data spec may contain
// "{seed}", replaced by each seed (synthetic generators); specs without it run once per seed
// with the same data. Cells are what `kvlab run` stores, resumes and shards.
struct sweep {
  std::vector<named_recipe> recipes;
  std::vector<std::string> data;
  std::vector<std::uint64_t> seeds = {1};
  std::size_t decode_steps = 32;
};

// An experiment is either a sweep (run cell by cell into a results folder) or a function
// that computes its table directly (quick studies such as quantizer-distortion).
struct experiment {
  std::string name;
  std::string description;
  std::optional<sweep> cells;
  std::function<experiment_output(const registry&)> run;
  std::string file; // the file that defines it (set by add_experiment)
};

// Adds an experiment from `file`; a name another file has added is an error naming both.
inline void add_experiment(std::vector<experiment>& all, std::string_view file, experiment e) {
  for (const auto& existing : all)
    if (existing.name == e.name)
      throw error(std::string(file) + ": experiment '" + e.name + "' is defined twice (first by " + existing.file +
                  ")");
  e.file = file;
  all.push_back(std::move(e));
}

} // namespace kvlab::configs
