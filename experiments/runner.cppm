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

#include "build_provenance.hpp"
export module kvlab.runner;
export import :results_folder;
export import :recipe_list;
export import :seed_table;
export import :fingerprint;
export import :figure;
import kvlab;

export namespace kvlab {

struct sweep_cell {
  any_recipe value;
  std::string data_spec; // as the sweep gives it
  std::string data;      // with the seed substituted
  std::uint64_t seed = 0;
  std::string folder;           // the cell's folder name
  code_fingerprint fingerprint; // of the code it runs
};

// Every (data, seed, recipe) of the sweep, in that order.
inline std::vector<sweep_cell> expand_cells(const configs::sweep& s) {
  std::vector<sweep_cell> cells;
  for (const auto& [spec, seed, r] : ranges::views::cartesian_product(s.data, s.seeds, s.recipes)) {
    std::string data = spec;
    if (const auto at = data.find("{seed}"); at != std::string::npos) data.replace(at, 6, std::to_string(seed));
    cells.push_back({r.value, spec, data, seed, cell_folder_name(canonical_name(r.value), data, seed),
                     fingerprint_of(sources_used(r.value, spec, builtin_registry()), this_build())});
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
  json_object sources;
  for (const auto& [file, sha] : cell.fingerprint.sources) sources.add(file, sha);
  return json_object()
      .add("cell", cell.folder)
      .add("git_revision", KVLAB_GIT_REVISION)
      .add("compiler", "clang " __clang_version__)
      .add("flags", KVLAB_CXX_FLAGS)
      .add("cpu", cpu_model())
      .add("isa", result.isa)
      .add("seed", std::size_t{cell.seed})
      .add("data", cell.data)
      .add("data_spec", cell.data_spec)
      .add("data_digest", digest)
      .add("recipe", canonical_name(cell.value))
      .add("code_digest", cell.fingerprint.digest)
      .raw("sources", sources.str(4, 2))
      .str();
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
  bool reuse = false; // keep complete cells made by other code
  bool force = false; // compute every cell again
};

struct run_summary {
  std::size_t cells = 0;      // in this shard
  std::size_t skipped = 0;    // already complete
  std::size_t superseded = 0; // complete, but made by other code: computed again
  std::size_t computed = 0;
};

// Moves a complete cell that is about to be computed again to DIR/.superseded/, so no result
// is lost: `CELL~DIGEST` (the old code's digest, or a number when that is taken).
inline void supersede_cell(const std::filesystem::path& dir, const std::filesystem::path& folder,
                           const std::string& old_digest) {
  const auto keep = dir / ".superseded";
  std::filesystem::create_directories(keep);
  auto target = keep / (folder.filename().string() + "~" + old_digest.substr(0, 12));
  for (int n = 2; std::filesystem::exists(target); ++n)
    target = keep / (folder.filename().string() + "~" + old_digest.substr(0, 12) + "." + std::to_string(n));
  std::filesystem::rename(folder, target);
}

// Runs the cells of this shard that have no complete folder yet.
inline run_summary run_sweep(const configs::sweep& s, const run_options& options) {
  if (options.shard_count == 0 || options.shard_index == 0 || options.shard_index > options.shard_count)
    throw error("--shard " + std::to_string(options.shard_index) + "/" + std::to_string(options.shard_count) +
                ": expected i/N with 1 <= i <= N");
  prepare_results_folder(options.out);
  add_to_recipe_manifest(options.out, manifest_entries(s.recipes));
  std::vector<sweep_cell> todo;
  run_summary summary;
  const auto cells = expand_cells(s);
  for (std::size_t i = 0; i < cells.size(); ++i) {
    if (i % options.shard_count != options.shard_index - 1) continue;
    ++summary.cells;
    const auto folder = options.out / cells[i].folder;
    if (std::filesystem::exists(folder)) {
      if (const auto reason = incomplete_cell_reason(folder)) {
        std::clog << "cell '" << cells[i].folder << "' in " << options.out.string() << " is incomplete (" << *reason
                  << "); computing it again\n";
        std::filesystem::remove_all(folder);
      } else {
        const json_value provenance = read_cell(folder).provenance;
        const auto* stored = provenance.find("code_digest");
        const std::string old_digest = stored && stored->is_string() ? stored->string() : "unknown";
        const bool other_code = old_digest != cells[i].fingerprint.digest;
        if (!options.force && (!other_code || options.reuse)) {
          ++summary.skipped;
          continue;
        }
        std::string why = "--force";
        if (!options.force) {
          why.clear();
          for (const auto& file : changed_sources(provenance, cells[i].fingerprint))
            why += (why.empty() ? "" : ", ") + file;
          why = "made by other code (changed: " + why + ")";
        }
        std::clog << "cell '" << cells[i].folder << "' " << why << ": computing it again; the old cell is kept in "
                  << (options.out / ".superseded").string() << "\n";
        supersede_cell(options.out, folder, old_digest);
        ++summary.superseded;
      }
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

} // namespace kvlab
