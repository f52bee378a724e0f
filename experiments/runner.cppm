// kvlab.runner: runs a sweep cell by cell into a results folder (see :results_folder for its
// layout and what makes a cell complete). A cell is computed in a staging folder and renamed
// into place, so re-running skips complete cells, recomputes incomplete ones (naming them),
// and an interrupted run loses at most the cells in flight. Cells run in parallel, each on
// one thread, so results are bit-identical whatever the thread count. `--shard i/N` runs
// every N-th cell.
module;
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <ranges>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include <range/v3/view/cartesian_product.hpp>

#include "git_revision.hpp"
export module kvlab.runner;
export import :results_folder;
import kvlab;

export namespace kvlab {

struct sweep_cell {
  any_recipe value;
  std::string data; // with the seed substituted
  std::uint64_t seed = 0;
  std::string folder; // the cell's folder name
};

// Every (data, seed, recipe) of the sweep, in that order.
inline std::vector<sweep_cell> expand_cells(const configs::sweep& s) {
  std::vector<sweep_cell> cells;
  for (const auto& [spec, seed, r] : ranges::views::cartesian_product(s.data, s.seeds, s.recipes)) {
    std::string data = spec;
    if (const auto at = data.find("{seed}"); at != std::string::npos) data.replace(at, 6, std::to_string(seed));
    cells.push_back({r, data, seed, cell_folder_name(canonical_name(r), data, seed)});
  }
  return cells;
}

// FNV-1a over the data's bytes: which exact data produced a result.
inline std::string data_digest(const kv_data& data) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (const kv_tensor* t : {&data.keys, &data.values, &data.queries})
    for (const float x : t->values()) {
      std::uint32_t bits;
      std::memcpy(&bits, &x, 4);
      for (int i = 0; i < 4; ++i) h = (h ^ ((bits >> (8 * i)) & 0xffu)) * 0x100000001b3ull;
    }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

inline std::string cpu_model() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);)
    if (line.starts_with("model name")) return line.substr(line.find(':') + 2);
  return "unknown";
}

inline std::string provenance_json(const sweep_cell& cell, const std::string& digest, const eval_result& result) {
  return json_object()
      .add("cell", cell.folder)
      .add("git_revision", KVLAB_GIT_REVISION)
      .add("compiler", "clang " __clang_version__)
      .add("flags", KVLAB_CXX_FLAGS)
      .add("cpu", cpu_model())
      .add("isa", result.isa)
      .add("seed", std::size_t{cell.seed})
      .add("data", cell.data)
      .add("data_digest", digest)
      .add("recipe", canonical_name(cell.value))
      .str();
}

// Writes `file` atomically unless it already holds exactly `text`.
inline void write_text_if_changed(const std::filesystem::path& file, const std::string& text) {
  if (std::filesystem::exists(file) && file_text(file) == text) return;
  write_text_atomically(file, text);
}

// The datasets of a run, loaded once and shared by the cells that use them, with the exact
// attention every recipe is compared with (a sweep evaluates many recipes on each dataset;
// regenerating the data and recomputing the exact reference per cell takes over half of a
// run's time). The first cell to need a dataset loads it while the others wait for it; it
// is dropped when its last cell is done, so memory holds only the datasets in use. The
// exact reference is shared only up to 1 GiB (bigger ones are computed per cell).
class shared_datasets {
public:
  struct dataset {
    kv_data data;
    std::string digest;                   // data_digest(data)
    std::optional<exact_attention> exact; // for the sweep's decode steps
  };

  shared_datasets(const std::vector<sweep_cell>& cells, std::size_t decode_steps) : decode_steps_(decode_steps) {
    for (const auto& cell : cells) ++entries_[cell.data].users;
  }

  std::shared_ptr<const dataset> acquire(const std::string& spec) {
    std::shared_future<std::shared_ptr<const dataset>> ready;
    std::promise<std::shared_ptr<const dataset>> loading;
    bool load = false;
    {
      const std::lock_guard lock(mutex_);
      entry& e = entries_.at(spec);
      if (!e.ready.valid()) {
        e.ready = loading.get_future().share();
        load = true;
      }
      ready = e.ready;
    }
    if (!load) return ready.get(); // loaded, or being loaded by another cell: wait for it
    try {
      auto loaded = std::make_shared<dataset>();
      loaded->data = load_data(spec);
      loaded->digest = data_digest(loaded->data);
      // Invalid decode steps are left for evaluate to report.
      if (decode_steps_ > 0 && decode_steps_ < loaded->data.tokens() &&
          exact_attention_bytes(loaded->data, decode_steps_) <= std::size_t{1} << 30)
        loaded->exact = compute_exact_attention(loaded->data, decode_steps_);
      loading.set_value(std::move(loaded));
    } catch (...) {
      loading.set_exception(std::current_exception()); // every cell of this dataset fails alike
    }
    return ready.get();
  }

  // One cell of `spec` is done with it.
  void release(const std::string& spec) {
    const std::lock_guard lock(mutex_);
    const auto found = entries_.find(spec);
    if (--found->second.users == 0) entries_.erase(found);
  }

private:
  struct entry {
    std::size_t users = 0;
    std::shared_future<std::shared_ptr<const dataset>> ready;
  };
  std::size_t decode_steps_;
  std::mutex mutex_;
  std::map<std::string, entry> entries_;
};

struct run_options {
  std::filesystem::path out;
  unsigned threads = 1;
  unsigned shard_index = 1; // 1-based
  unsigned shard_count = 1;
  bool progress = true;
};

struct run_summary {
  std::size_t cells = 0;   // in this shard
  std::size_t skipped = 0; // already complete
  std::size_t computed = 0;
};

// Runs the cells of this shard that have no complete folder yet.
inline run_summary run_sweep(const configs::sweep& s, const run_options& options) {
  if (options.shard_count == 0 || options.shard_index == 0 || options.shard_index > options.shard_count)
    throw error("--shard " + std::to_string(options.shard_index) + "/" + std::to_string(options.shard_count) +
                ": expected i/N with 1 <= i <= N");
  prepare_results_folder(options.out);
  std::vector<sweep_cell> todo;
  run_summary summary;
  const auto cells = expand_cells(s);
  for (std::size_t i = 0; i < cells.size(); ++i) {
    if (i % options.shard_count != options.shard_index - 1) continue;
    ++summary.cells;
    const auto folder = options.out / cells[i].folder;
    if (std::filesystem::exists(folder)) {
      const auto reason = incomplete_cell_reason(folder);
      if (!reason) {
        ++summary.skipped;
        continue;
      }
      std::clog << "cell '" << cells[i].folder << "' in " << options.out.string() << " is incomplete (" << *reason
                << "); computing it again\n";
      std::filesystem::remove_all(folder);
    }
    todo.push_back(cells[i]);
  }

  std::mutex report;
  std::atomic<std::size_t> next{0}, done{0};
  std::exception_ptr failure;
  const auto start = std::chrono::steady_clock::now();
  const bool terminal = isatty(fileno(stderr));
  const auto show_progress = [&] {
    if (!options.progress) return;
    const std::size_t finished = done.load();
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double eta =
        finished ? elapsed / static_cast<double>(finished) * static_cast<double>(todo.size() - finished) : 0.0;
    const std::size_t width = 30, filled = todo.empty() ? width : width * finished / todo.size();
    std::clog << (terminal ? "\r" : "") << "[" << std::string(filled, '#') << std::string(width - filled, '.') << "] "
              << finished << "/" << todo.size() << " cells, ETA " << static_cast<long>(eta) << " s"
              << (terminal && finished < todo.size() ? "" : "\n") << std::flush;
  };
  shared_datasets datasets(todo, s.decode_steps);
  const auto worker = [&] {
    for (std::size_t i; (i = next++) < todo.size();) {
      try {
        const auto& cell = todo[i];
        const auto dataset = datasets.acquire(cell.data);
        const eval_result result = evaluate(cell.value, dataset->data, {.decode_steps = s.decode_steps},
                                            dataset->exact ? &*dataset->exact : nullptr);
        // Complete the cell in a staging folder, then rename it into place.
        staging_folder staging(options.out, ".staging-");
        write_file_durably(staging.path() / "metrics.json", to_json(result) + "\n");
        write_file_durably(staging.path() / "provenance.json", provenance_json(cell, dataset->digest, result) + "\n");
        write_file_durably(staging.path() / "recipe.txt", canonical_name(cell.value) + "\n");
        const auto target = options.out / cell.folder;
        // Only another run finishing the same cell first is fine; anything else loses it.
        if (const auto not_stored = staging.commit(target); not_stored && incomplete_cell_reason(target))
          throw error("cannot store cell " + cell.folder + " in " + options.out.string() + ": " +
                      io_error_text(not_stored.value()));
        datasets.release(cell.data);
        ++done;
        const std::lock_guard lock(report);
        show_progress();
      } catch (...) {
        const std::lock_guard lock(report);
        if (!failure) failure = std::current_exception();
        next = todo.size(); // stop handing out cells; finished ones stay
      }
    }
  };
  std::vector<std::jthread> pool;
  for (unsigned t = 0; t < std::max(1u, options.threads); ++t) pool.emplace_back(worker);
  pool.clear(); // join
  if (failure) std::rethrow_exception(failure);
  summary.computed = done;
  return summary;
}

// The table of the cells stored in a results folder (read_results): the mean of every
// metric of `components` the cells stored, and bytes per token, the best value of each
// column in bold (by the metric's direction).
inline text_table results_table(const std::vector<json_value>& results, const registry& components) {
  std::vector<std::string> metrics;
  std::vector<metric_direction> directions;
  for (const any_metric& m : components.every_metric())
    if (std::ranges::any_of(results, [&](const json_value& r) { return r.find(m.name()) != nullptr; })) {
      metrics.push_back(m.name());
      directions.push_back(m.direction());
    }
  metrics.push_back("bytes_per_token");
  directions.push_back(metric_direction::lower);
  text_table table{{"recipe", "data"}, {}, {}};
  table.header.insert(table.header.end(), metrics.begin(), metrics.end());
  std::vector<std::vector<double>> values(metrics.size());
  for (const auto& r : results) {
    const auto text = [&](const char* key) {
      const auto* v = r.find(key);
      return v && v->is_string() ? v->string() : std::string("?");
    };
    std::vector<std::string> row{text("recipe"), text("data")};
    for (std::size_t m = 0; m < metrics.size(); ++m) {
      const auto* v = r.find(metrics[m]);
      const double x = v && v->is_number() ? v->number() : std::nan("");
      values[m].push_back(x);
      row.push_back(format_significant(x, m + 1 == metrics.size() ? 6 : 4));
    }
    table.rows.push_back(row);
  }
  for (std::size_t m = 0; m < metrics.size() && !results.empty(); ++m) {
    const auto badness = [&](double x) {
      switch (directions[m]) {
      case metric_direction::lower: return x;
      case metric_direction::higher: return -x;
      case metric_direction::nearer_zero: return std::fabs(x);
      }
      return x;
    };
    const auto& column = values[m];
    const double best = std::ranges::min(column | std::views::transform(badness));
    for (std::size_t r = 0; r < column.size(); ++r)
      if (badness(column[r]) == best) table.best.emplace_back(r, m + 2);
  }
  return table;
}

} // namespace kvlab
