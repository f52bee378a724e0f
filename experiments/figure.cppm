// kvlab.runner:figure: a results folder as a figure (`kvlab plot`). Each series is a label (or a
// recipe) and its points are the label's recipes, each the mean over seeds with the 95 %
// t-interval as its error bar. The output format follows the file name, never silently
// another: .svg is drawn by kvlab, .tex is PGFPlots, .pdf and .png are rendered by the
// matplotlib script written next to them with the points as CSV.
module;
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
export module kvlab.runner:figure;
import kvlab;
import :results_folder;
import :seed_table;

extern "C" char** environ;

export namespace kvlab {

// What a figure shows: metric names on x and y, series by label or recipe, and which data
// spec (needed only when the folder holds several).
struct figure_choice {
  std::string x = "bytes_per_token";
  std::string y = "attn_rel_l2";
  bool by_label = true;
  std::string data_spec;
};

// An axis title with units: the metric's name (with "(nats)" when its summary says nats), or
// the title of a quantity every cell stores.
inline std::string axis_title(const std::string& name, const registry& components) {
  if (name == "bytes_per_token") return "KV cache size (bytes per token, all layers and KV heads)";
  if (name == "bits_k") return "key bits per element";
  if (name == "bits_v") return "value bits per element";
  if (name == "compression_vs_fp16") return "compression vs fp16 (x)";
  if (name == "tokens_kept") return "tokens kept";
  for (const auto& info : components.list())
    if (info.kind == component_kind::metric && info.name == name)
      return info.summary.ends_with(", nats") ? name + " (nats)" : name;
  return name;
}

inline figure figure_of(const std::vector<labelled_cell>& cells, const figure_choice& choice,
                        const registry& components) {
  const auto rows = rows_over_seeds(cells);
  std::vector<std::string> specs;
  for (const auto& r : rows)
    if (std::ranges::find(specs, r.data_spec) == specs.end()) specs.push_back(r.data_spec);
  if (specs.empty()) throw error("plot: the results folder holds no cell");
  std::string spec = choice.data_spec;
  if (spec.empty()) {
    if (specs.size() > 1) {
      std::string all;
      for (const auto& s : specs) all += "\n  " + s;
      throw error("plot: the folder holds several data specs; choose one with --data:" + all);
    }
    spec = specs.front();
  } else if (std::ranges::find(specs, spec) == specs.end()) {
    throw error("plot: no cell has the data spec '" + spec + "'");
  }
  figure f{axis_title(choice.x, components), axis_title(choice.y, components), {}};
  for (const auto& r : rows) {
    if (r.data_spec != spec) continue;
    const auto x = r.metric(choice.x), y = r.metric(choice.y);
    if (!std::isfinite(x.mean) || !std::isfinite(y.mean))
      throw error("plot: " + r.recipe + " has no value of " + (std::isfinite(x.mean) ? choice.y : choice.x));
    const std::string name = choice.by_label ? r.label : r.recipe;
    auto series = std::ranges::find(f.series, name, &plot_series::label);
    if (series == f.series.end()) series = f.series.insert(f.series.end(), plot_series{name, {}});
    series->points.push_back({x.mean, y.mean, std::isfinite(y.half_width) ? y.half_width : 0.0});
  }
  for (auto& s : f.series) std::ranges::sort(s.points, {}, &plot_point::x);
  return f;
}

namespace detail {

// Runs `program` with `arguments` (no shell) and returns its exit status, or -1 when it
// could not be started. `quiet`: its standard error goes to /dev/null.
inline int run_program(const std::string& program, const std::vector<std::string>& arguments, bool quiet = false) {
  std::vector<std::string> all{program};
  all.insert(all.end(), arguments.begin(), arguments.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  ::posix_spawn_file_actions_init(&actions);
  if (quiet) ::posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  const int started = ::posix_spawnp(&pid, program.c_str(), &actions, nullptr, argv.data(), environ);
  ::posix_spawn_file_actions_destroy(&actions);
  if (started != 0) return -1;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// A Python that has matplotlib: $KVLAB_PYTHON, else python3 on the PATH, else Debian's
// /usr/bin/python3 (where python3-matplotlib installs it). Empty when there is none.
inline std::string python_with_matplotlib() {
  std::vector<std::string> candidates;
  if (const char* chosen = std::getenv("KVLAB_PYTHON"); chosen && *chosen) candidates.push_back(chosen);
  candidates.push_back("python3");
  candidates.push_back("/usr/bin/python3");
  for (const auto& python : candidates)
    if (run_program(python, {"-c", "import matplotlib"}, true) == 0) return python;
  return {};
}

} // namespace detail

// The format a figure file's name asks for ("svg", "pgf", "pdf" or "png"); `format`, when
// given, must agree with it.
inline std::string figure_format(const std::filesystem::path& file, const std::string& format) {
  const std::string extension = file.extension().string();
  std::string from_name;
  if (extension == ".svg")
    from_name = "svg";
  else if (extension == ".tex" || extension == ".pgf")
    from_name = "pgf";
  else if (extension == ".pdf")
    from_name = "pdf";
  else if (extension == ".png")
    from_name = "png";
  else
    throw error("--out " + file.string() + ": a figure is written as .svg, .tex (PGFPlots), .pdf or .png");
  if (!format.empty() && format != from_name)
    throw error("--out " + file.string() + " is a " + from_name + " file but --format is " + format);
  return from_name;
}

// Writes `f` to `file` in the format its name asks for. PGFPlots and matplotlib also get the
// points as FILE-STEM.csv; PDF and PNG the script FILE-STEM.py, which is then run.
inline void write_figure(const figure& f, const std::filesystem::path& file) {
  const std::string format = figure_format(file, "");
  if (format == "svg") {
    write_text_atomically(file, figure_svg(f));
    return;
  }
  auto csv = file;
  csv.replace_extension(".csv");
  write_text_atomically(csv, figure_csv(f));
  if (format == "pgf") {
    write_text_atomically(file, figure_pgfplots(f));
    return;
  }
  auto script = file;
  script.replace_extension(".py");
  write_text_atomically(script, figure_matplotlib(f, csv.filename().string()));
  const std::string python = detail::python_with_matplotlib();
  const std::string by_hand = "; the points (" + csv.string() + ") and the script (" + script.string() +
                              ") are written: run python3 " + script.string() + " " + file.string();
  if (python.empty())
    throw error("rendering " + file.string() +
                " needs python3 with matplotlib (Debian: apt-get install python3-matplotlib)" + by_hand);
  // Rendered under another name and renamed: a failed run leaves no half-written or stale file.
  auto partial = file;
  partial.replace_filename("." + file.stem().string() + "." + unique_name_part() + file.extension().string());
  if (detail::run_program(python, {script.string(), partial.string()}) != 0 || !std::filesystem::exists(partial)) {
    std::error_code ignored;
    std::filesystem::remove(partial, ignored);
    throw error(python + " " + script.string() + " did not write " + file.string() + by_hand);
  }
  std::filesystem::rename(partial, file);
}

} // namespace kvlab
