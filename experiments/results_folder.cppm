// kvlab.runner:results_folder: a sweep's results folder and what keeps it trustworthy. It
// holds one folder per cell, named from the cell (cell_folder_name), with metrics.json,
// provenance.json and recipe.txt. A cell is complete when both JSON files parse and name the
// folder's cell; a folder that is not is reported by name and never counted as done. Cells
// are built in hidden staging folders (".staging-" for run, ".merging-" for merge) whose
// names hold the writer's process id and host, then synced and renamed into place.
module;
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <signal.h>
#include <unistd.h>
export module kvlab.runner:results_folder;
import kvlab;

export namespace kvlab {

// Folder names are the cell's identity: the canonical recipe, the data spec and the seed, with
// characters a file system cannot hold escaped.
inline std::string cell_folder_name(std::string_view recipe_name, std::string_view data, std::uint64_t seed) {
  const std::string name = std::string(recipe_name) + "__" + std::string(data) + "__seed=" + std::to_string(seed);
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

inline std::string file_text(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Writes `file` atomically unless it already holds exactly `text`.
inline void write_text_if_changed(const std::filesystem::path& file, const std::string& text) {
  if (std::filesystem::exists(file) && file_text(file) == text) return;
  write_text_atomically(file, text);
}

namespace detail {

// Throws kvlab::error when a file-system step failed, saying "no space left on device" for a
// full disk.
inline void check_io(const std::error_code& failure, const std::string& step) {
  if (failure) throw error(step + ": " + io_error_text(failure.value()));
}

inline std::string host_name() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) return "host";
  return host;
}

inline constexpr std::string_view staging_prefixes[] = {".staging-", ".merging-"};

// The text of `name` in `folder`, without trailing newlines.
inline std::string stored_text(const std::filesystem::path& folder, const std::string& name) {
  if (!std::filesystem::is_regular_file(folder / name)) throw error(name + " is missing");
  std::string text = file_text(folder / name);
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

// The cell a provenance.json names: its "cell", or for cells stored before that field, the
// folder name of its recipe, data and seed.
inline std::string cell_named_by(const json_value& provenance) {
  if (const auto* cell = provenance.find("cell"); cell && cell->is_string()) return cell->string();
  const auto* recipe = provenance.find("recipe");
  const auto* data = provenance.find("data");
  const auto* seed = provenance.find("seed");
  // Exactly: a seed past 2^53 has no double of its own.
  const auto whole_seed = seed ? seed->integer<std::uint64_t>() : std::nullopt;
  if (!recipe || !recipe->is_string() || !data || !data->is_string() || !whole_seed)
    throw error("provenance.json names no cell (no \"cell\", nor recipe, data and seed)");
  return cell_folder_name(recipe->string(), data->string(), *whole_seed);
}

} // namespace detail

// A staging folder name for `prefix`: it holds unique_name_part() (which starts with the
// process id) and the host, so a later run on the same host can tell whether its writer ended.
inline std::string staging_folder_name(std::string_view prefix) {
  return std::string(prefix) + unique_name_part() + "@" + detail::host_name();
}

// Removes the staging folders in `dir` left by processes of this host that ended (killed or
// crashed mid-cell). Folders of other hosts (a shared file system) and of live processes are
// left alone. A process id can be reused: a folder whose writer's id now belongs to another
// live process stays until that process ends, which only delays the cleanup, so the folder's
// age is not consulted.
inline void remove_stale_staging(const std::filesystem::path& dir) {
  const std::string host = detail::host_name();
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    const auto prefix = std::ranges::find_if(detail::staging_prefixes, [&](auto p) { return name.starts_with(p); });
    if (prefix == std::end(detail::staging_prefixes)) continue;
    const auto at = name.rfind('@');
    if (at == std::string::npos || at <= prefix->size() || name.substr(at + 1) != host) continue;
    long long pid = 0;
    const char* first = name.data() + prefix->size();
    const auto [end, problem] = std::from_chars(first, name.data() + at, pid);
    if (problem != std::errc{} || end == first || *end != '-' || pid <= 0 || pid > INT_MAX || pid == ::getpid())
      continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue; // alive, or not ours to signal
    std::error_code ignored;
    if (std::filesystem::remove_all(entry.path(), ignored) != static_cast<std::uintmax_t>(-1))
      std::clog << "removed " << entry.path().string() << ": the staging folder of process " << pid
                << ", which ended\n";
  }
}

// Creates the results folder `dir` if needed and removes the staging folders of ended
// processes from it.
inline void prepare_results_folder(const std::filesystem::path& dir) {
  std::error_code failure;
  std::filesystem::create_directories(dir, failure);
  detail::check_io(failure, "cannot create " + dir.string());
  remove_stale_staging(dir);
}

// A hidden folder a cell is built in, removed unless committed into place.
class staging_folder {
public:
  staging_folder(const std::filesystem::path& dir, std::string_view prefix) : path_(dir / staging_folder_name(prefix)) {
    std::error_code failure;
    std::filesystem::create_directory(path_, failure);
    detail::check_io(failure, "cannot create the staging folder " + path_.string());
  }
  ~staging_folder() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  staging_folder(const staging_folder&) = delete;
  staging_folder& operator=(const staging_folder&) = delete;

  const std::filesystem::path& path() const { return path_; }

  // Renames the folder (its files already synced) to `target` and syncs both folder entries
  // to the disk. Fails, returning the reason, when `target` exists.
  std::error_code commit(const std::filesystem::path& target) {
    sync_to_disk(path_);
    std::error_code failure;
    std::filesystem::rename(path_, target, failure);
    if (failure) return failure;
    path_.clear();
    sync_to_disk(target.parent_path());
    return {};
  }

private:
  std::filesystem::path path_;
};

// The metrics and provenance of a complete cell.
struct stored_cell {
  std::string metrics_text; // without trailing newlines
  json_value metrics;
  json_value provenance;
};

// Reads the cell in `folder`. Throws kvlab::error saying why it is not complete: a JSON file
// is missing or does not parse, the two name different recipes, or provenance.json names
// another cell than the folder's.
inline stored_cell read_cell(const std::filesystem::path& folder) {
  stored_cell cell{.metrics_text = detail::stored_text(folder, "metrics.json")};
  cell.metrics = parse_json(cell.metrics_text, "metrics.json");
  cell.provenance = parse_json(detail::stored_text(folder, "provenance.json"), "provenance.json");
  const json_value& provenance = cell.provenance;
  const auto* recipe = cell.metrics.find("recipe");
  const auto* provenance_recipe = provenance.find("recipe");
  if (!recipe || !recipe->is_string()) throw error("metrics.json names no recipe");
  if (!provenance_recipe || !provenance_recipe->is_string() || provenance_recipe->string() != recipe->string())
    throw error("metrics.json and provenance.json name different recipes");
  if (const std::string named = detail::cell_named_by(provenance); named != folder.filename().string())
    throw error("provenance.json names the cell '" + named + "'");
  return cell;
}

// Why the cell in `folder` is not complete, or nothing if it is.
inline std::optional<std::string> incomplete_cell_reason(const std::filesystem::path& folder) {
  try {
    read_cell(folder);
    return std::nullopt;
  } catch (const error& e) {
    return e.what();
  }
}

// read_cell, with an error naming the cell and its results folder `dir`.
inline stored_cell read_cell_in(const std::filesystem::path& dir, const std::filesystem::path& folder) {
  try {
    return read_cell(folder);
  } catch (const error& e) {
    throw error("cell '" + folder.filename().string() + "' in " + dir.string() + " is incomplete: " + e.what());
  }
}

// The cell folders of `dir` (every folder whose name does not start with '.'), sorted.
inline std::vector<std::filesystem::path> cell_folders(const std::filesystem::path& dir) {
  if (!std::filesystem::is_directory(dir)) throw error(dir.string() + " is not a results folder");
  std::vector<std::filesystem::path> folders;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.is_directory() && !entry.path().filename().string().starts_with(".")) folders.push_back(entry.path());
  std::ranges::sort(folders);
  return folders;
}

// Every cell of `dir`, sorted by folder name; an incomplete one is an error naming it.
inline std::vector<stored_cell> read_cells(const std::filesystem::path& dir) {
  std::vector<stored_cell> cells;
  for (const auto& folder : cell_folders(dir)) cells.push_back(read_cell_in(dir, folder));
  return cells;
}

// The metrics.json text of every cell of `dir`, sorted by folder name.
inline std::vector<std::string> stored_metrics(const std::filesystem::path& dir) {
  std::vector<std::string> texts;
  for (auto& cell : read_cells(dir)) texts.push_back(std::move(cell.metrics_text));
  return texts;
}

// Every cell of `dir`, parsed from its metrics.json, sorted by folder name.
inline std::vector<json_value> read_results(const std::filesystem::path& dir) {
  std::vector<json_value> results;
  for (auto& cell : read_cells(dir)) results.push_back(std::move(cell.metrics));
  return results;
}

// Copies the cells of `shards` into `out`. Every input is checked before anything is written:
// each cell of each shard and of `out` must be complete, and a cell present more than once
// must have the same metrics.json (the same recipe, data and seed give bit-identical results).
// Otherwise nothing is written, and the error names the cell and the folders. Several merges
// into one `out` may run at once. Returns the number of cells copied.
inline std::size_t merge_results(const std::filesystem::path& out, const std::vector<std::filesystem::path>& shards) {
  struct source {
    std::filesystem::path results; // the shard
    std::string metrics_text;
  };
  const auto conflict = [](const std::string& cell, const std::filesystem::path& a, const std::filesystem::path& b) {
    std::string first = a.string(), second = b.string();
    if (second < first) std::swap(first, second); // the same message whatever the argument order
    return error("cell '" + cell + "' differs between " + first + " and " + second + "; nothing was merged");
  };
  const auto checked_cell = [](const std::filesystem::path& dir, const std::filesystem::path& folder) {
    try {
      return read_cell_in(dir, folder);
    } catch (const error& e) {
      throw error(e.what() + std::string("; nothing was merged"));
    }
  };
  std::map<std::string, source> wanted; // by cell folder name
  for (const auto& shard : shards)
    for (const auto& folder : cell_folders(shard)) {
      const std::string name = folder.filename().string();
      std::string metrics = checked_cell(shard, folder).metrics_text;
      const auto [found, added] = wanted.try_emplace(name, source{shard, metrics});
      if (!added && found->second.metrics_text != metrics) throw conflict(name, found->second.results, shard);
    }
  if (std::filesystem::exists(out))
    for (const auto& folder : cell_folders(out)) {
      const std::string present = checked_cell(out, folder).metrics_text;
      const auto found = wanted.find(folder.filename().string());
      if (found == wanted.end()) continue;
      if (found->second.metrics_text != present) throw conflict(found->first, found->second.results, out);
      wanted.erase(found);
    }

  prepare_results_folder(out);
  std::size_t copied = 0;
  for (const auto& [name, from] : wanted) {
    staging_folder staging(out, ".merging-");
    std::error_code not_copied;
    std::filesystem::copy(from.results / name, staging.path(), std::filesystem::copy_options::recursive, not_copied);
    detail::check_io(not_copied,
                     "cannot copy cell '" + name + "' from " + from.results.string() + " to " + out.string());
    for (const auto& entry : std::filesystem::recursive_directory_iterator(staging.path())) sync_to_disk(entry.path());
    const auto target = out / name;
    const auto not_stored = staging.commit(target);
    if (!not_stored) {
      ++copied;
      continue;
    }
    // Only another merge or run storing the same cell first is fine.
    if (incomplete_cell_reason(target))
      throw error("cannot store cell '" + name + "' in " + out.string() + ": " + io_error_text(not_stored.value()));
    if (read_cell(target).metrics_text != from.metrics_text)
      throw error("cell '" + name + "' was stored in " + out.string() + " by another process with metrics other than " +
                  from.results.string() + "'s");
  }
  return copied;
}

} // namespace kvlab
