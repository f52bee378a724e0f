// kvlab.runner: runs a sweep cell by cell into a results folder. One folder per cell, named
// from the canonical recipe, the data spec and the seed, holding metrics.json,
// provenance.json and recipe.txt. A cell is computed in a temporary folder and renamed into
// place, so a folder that exists is complete: re-running skips it, an interrupted run loses
// at most the cells in flight. Cells run in parallel, each on one thread, so results are
// bit-identical whatever the thread count. `--shard i/N` runs every N-th cell.
module;
#include <algorithm>
#include <atomic>
#include <chrono>
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
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "git_revision.hpp"
export module kvlab.runner;
import kvlab;

export namespace kvlab {

struct sweep_cell {
  recipe value;
  std::string data; // with the seed substituted
  std::uint64_t seed = 0;
  std::string folder; // the cell's folder name
};

// Folder names are the cell's identity; characters a file system cannot hold are escaped.
inline std::string cell_folder_name(const recipe& r, const std::string& data, std::uint64_t seed) {
  std::string name = canonical_name(r) + "__" + data + "__seed=" + std::to_string(seed);
  std::string safe;
  for (const char c : name) {
    if (c == '/' || c == '\\' || static_cast<unsigned char>(c) < 0x20) {
      char escaped[4];
      std::snprintf(escaped, sizeof escaped, "%%%02X", static_cast<unsigned char>(c));
      safe += escaped;
    } else {
      safe += c;
    }
  }
  if (safe.size() > 200) { // keep under NAME_MAX, still unique: a digest of the whole name
    std::uint64_t digest = 0xcbf29ce484222325ull;
    for (const char c : safe) digest = (digest ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(digest));
    safe = safe.substr(0, 180) + "~" + hex;
  }
  return safe;
}

inline std::vector<sweep_cell> expand_cells(const configs::sweep& s, const registry& components) {
  std::vector<sweep_cell> cells;
  for (const auto& spec : s.data)
    for (const auto seed : s.seeds)
      for (const auto& r : s.recipes) {
        std::string data = spec;
        if (const auto at = data.find("{seed}"); at != std::string::npos) data.replace(at, 6, std::to_string(seed));
        const recipe normal = normalized(r, components);
        cells.push_back({normal, data, seed, cell_folder_name(normal, data, seed)});
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

inline std::string file_text(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Writes `file` atomically unless it already holds exactly `text`.
inline void write_text_if_changed(const std::filesystem::path& file, const std::string& text);

inline void write_text_if_changed(const std::filesystem::path& file, const std::string& text) {
  if (std::filesystem::exists(file) && file_text(file) == text) return;
  write_text_atomically(file, text);
}

// The datasets of a run, loaded once and shared by the cells that use them, with the exact
// attention every recipe is compared with (a sweep evaluates many recipes on each dataset;
// regenerating the data and recomputing the exact reference per cell was over half of a
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
      loaded->data = load_workload(spec);
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

// Runs the cells of this shard that have no folder yet.
inline run_summary run_sweep(const configs::sweep& s, const registry& components, const run_options& options) {
  if (options.shard_count == 0 || options.shard_index == 0 || options.shard_index > options.shard_count)
    throw error("--shard " + std::to_string(options.shard_index) + "/" + std::to_string(options.shard_count) +
                ": expected i/N with 1 <= i <= N");
  std::filesystem::create_directories(options.out);
  std::vector<sweep_cell> todo;
  run_summary summary;
  const auto cells = expand_cells(s, components);
  for (std::size_t i = 0; i < cells.size(); ++i) {
    if (i % options.shard_count != options.shard_index - 1) continue;
    ++summary.cells;
    if (std::filesystem::exists(options.out / cells[i].folder / "metrics.json")) {
      ++summary.skipped;
      continue;
    }
    todo.push_back(cells[i]);
  }

  // Staging folders are named per run (host, process, time) so array jobs sharing a file
  // system never touch each other's cells in flight.
  char host[256] = "host";
  gethostname(host, sizeof host - 1);
  const std::string run_id = std::string(host) + "-" + std::to_string(getpid()) + "-" +
                             std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
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
        const eval_result result = evaluate(cell.value, dataset->data, components, {.decode_steps = s.decode_steps},
                                            dataset->exact ? &*dataset->exact : nullptr);
        // Complete the cell in a temporary folder, then rename it into place.
        const auto staging = options.out / (".staging-" + run_id + "-" + std::to_string(i));
        std::filesystem::create_directories(staging);
        write_file_durably(staging / "metrics.json", to_json(result) + "\n");
        write_file_durably(staging / "provenance.json", provenance_json(cell, dataset->digest, result) + "\n");
        write_file_durably(staging / "recipe.txt", canonical_name(cell.value) + "\n");
        sync_to_disk(staging);
        std::error_code ec;
        std::filesystem::rename(staging, options.out / cell.folder, ec);
        if (ec) {
          std::filesystem::remove_all(staging, ec);
          // Only another run finishing the same cell first is fine; anything else loses it.
          if (!std::filesystem::exists(options.out / cell.folder / "metrics.json"))
            throw error("cannot store cell " + cell.folder + " in " + options.out.string());
        }
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

// The metrics.json text of every cell folder of `dir`, sorted by folder name.
inline std::vector<std::string> stored_metrics(const std::filesystem::path& dir) {
  if (!std::filesystem::is_directory(dir)) throw error(dir.string() + " is not a results folder");
  std::vector<std::filesystem::path> folders;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.is_directory() && !entry.path().filename().string().starts_with(".") &&
        std::filesystem::exists(entry.path() / "metrics.json"))
      folders.push_back(entry.path());
  std::ranges::sort(folders);
  std::vector<std::string> texts;
  for (const auto& folder : folders) {
    std::string metrics = file_text(folder / "metrics.json");
    while (!metrics.empty() && metrics.back() == '\n') metrics.pop_back();
    texts.push_back(std::move(metrics));
  }
  return texts;
}

// Every cell of `dir`, parsed from its metrics.json, sorted by folder name.
inline std::vector<json_value> read_results(const std::filesystem::path& dir) {
  std::vector<json_value> results;
  for (const auto& text : stored_metrics(dir)) results.push_back(parse_json(text, dir.string() + " metrics.json"));
  return results;
}

// Copies the complete cell folders of `shards` into `out`. A cell present twice must have
// the same metrics (the same recipe, data and seed give bit-identical results).
inline std::size_t merge_results(const std::filesystem::path& out, const std::vector<std::filesystem::path>& shards) {
  std::filesystem::create_directories(out);
  std::size_t copied = 0;
  for (const auto& shard : shards) {
    if (!std::filesystem::is_directory(shard)) throw error(shard.string() + " is not a results folder");
    for (const auto& entry : std::filesystem::directory_iterator(shard)) {
      if (!entry.is_directory() || entry.path().filename().string().starts_with(".") ||
          !std::filesystem::exists(entry.path() / "metrics.json"))
        continue;
      const auto target = out / entry.path().filename();
      if (std::filesystem::exists(target / "metrics.json")) {
        if (file_text(target / "metrics.json") != file_text(entry.path() / "metrics.json"))
          throw error("cell " + entry.path().filename().string() + " differs between " + out.string() + " and " +
                      shard.string());
        continue;
      }
      const auto staging = out / (".merging-" + entry.path().filename().string());
      std::filesystem::remove_all(staging);
      std::filesystem::copy(entry.path(), staging, std::filesystem::copy_options::recursive);
      std::filesystem::rename(staging, target);
      ++copied;
    }
  }
  return copied;
}

} // namespace kvlab
