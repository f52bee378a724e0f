// What the machine lets this process use: memory (cgroup v2 memory.max less what the
// cgroup already uses, and the kernel's MemAvailable) and CPUs (the affinity mask and the
// cgroup's cpu.max quota). Work is checked against these before it starts, so a request
// too large fails with both numbers instead of meeting the OOM killer.
module;
#include <sched.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>
export module kvlab.core:resources;
import :errors;
import :numeric;

namespace kvlab::detail {

// The first whitespace-separated word of a small file, or nothing when it is unreadable.
inline std::optional<std::string> first_word(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::string word;
  if (!(in >> word)) return std::nullopt;
  return word;
}

inline std::optional<std::uint64_t> whole_number(std::string_view text) {
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// A file holding one number ("max" or unreadable: nothing).
inline std::optional<std::uint64_t> whole_number_in(const std::filesystem::path& file) {
  const auto word = first_word(file);
  return word ? whole_number(*word) : std::nullopt;
}

// The cgroup v2 folders of this process, innermost first (limits of every ancestor apply).
inline std::vector<std::filesystem::path> cgroup_folders() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  std::vector<std::filesystem::path> folders;
  while (std::getline(in, line)) {
    if (!line.starts_with("0::")) continue;
    std::filesystem::path folder = std::filesystem::path("/sys/fs/cgroup") / line.substr(4);
    for (; folder != "/sys/fs" && folder.has_relative_path(); folder = folder.parent_path()) {
      folders.push_back(folder);
      if (folder == "/sys/fs/cgroup") break;
    }
  }
  return folders;
}

} // namespace kvlab::detail

export namespace kvlab {

inline std::string format_bytes(double bytes) {
  char text[32];
  if (bytes >= double(1 << 30))
    std::snprintf(text, sizeof text, "%.1f GiB", bytes / double(1 << 30));
  else
    std::snprintf(text, sizeof text, "%.0f MiB", std::ceil(bytes / double(1 << 20)));
  return text;
}

struct memory_allowance {
  std::uint64_t bytes = 0;
  std::string source; // where the number comes from, for messages
};

// The memory this process may still allocate: the smallest of (cgroup memory.max less the
// cgroup's memory.current) over its cgroup and ancestors, and MemAvailable.
inline memory_allowance usable_memory() {
  std::optional<memory_allowance> best;
  const auto consider = [&](std::uint64_t bytes, std::string source) {
    if (!best || bytes < best->bytes) best = memory_allowance{bytes, std::move(source)};
  };
  for (const auto& folder : detail::cgroup_folders()) {
    const auto limit = detail::whole_number_in(folder / "memory.max");
    if (!limit) continue;
    const std::uint64_t used = detail::whole_number_in(folder / "memory.current").value_or(0);
    consider(*limit > used ? *limit - used : 0, "cgroup memory.max " + format_bytes(double(*limit)) + " less " +
                                                    format_bytes(double(used)) + " in use (" + folder.string() + ")");
  }
  std::ifstream meminfo("/proc/meminfo");
  for (std::string key; meminfo >> key;) {
    std::uint64_t kib = 0;
    std::string unit;
    meminfo >> kib >> unit;
    if (key == "MemAvailable:") consider(kib * 1024, "MemAvailable in /proc/meminfo");
  }
  return best.value_or(memory_allowance{UINT64_MAX, "no limit found"});
}

// Refuses work that needs more memory than the process may use. `what` names the work and
// its parts ("eval: inputs 1.2 GiB, exact reference 3.4 GiB, cache 0.8 GiB"), `advice`
// says what to change.
inline void require_memory(double needed_bytes, const std::string& what, const std::string& advice) {
  const memory_allowance allowed = usable_memory();
  if (needed_bytes <= double(allowed.bytes)) return;
  throw error(what + " needs about " + format_bytes(needed_bytes) + " of memory, but this process may use " +
              format_bytes(double(allowed.bytes)) + " (" + allowed.source + "); " + advice);
}

// CPUs this process may run on: its affinity mask, capped by the cgroup's cpu.max quota.
inline unsigned usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  unsigned cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? static_cast<unsigned>(CPU_COUNT(&set)) : 1u;
  for (const auto& folder : detail::cgroup_folders()) {
    std::ifstream in(folder / "cpu.max");
    std::string quota;
    std::uint64_t period = 0;
    if (!(in >> quota >> period) || period == 0) continue;
    if (const auto q = detail::whole_number(quota)) // "max": no quota
      cpus = std::min(cpus, static_cast<unsigned>(std::max<std::uint64_t>(1, (*q + period - 1) / period)));
  }
  return std::max(cpus, 1u);
}

// A --threads value: "all" or 0 < N; more than usable_cpus() is capped with a note on `note`.
inline unsigned thread_count(const std::string& text, const std::string& flag, std::ostream& note) {
  const unsigned cpus = usable_cpus();
  if (text == "all") return cpus;
  const auto asked = parse_number<std::uint64_t>(text, flag);
  if (asked == 0) throw error(flag + " 0: give a number of threads from 1, or 'all' (" + std::to_string(cpus) + ")");
  if (asked <= cpus) return static_cast<unsigned>(asked);
  note << flag << " " << text << ": this process may use " << cpus << " CPU" << (cpus == 1 ? "" : "s") << "; running "
       << cpus << " threads\n";
  return cpus;
}

} // namespace kvlab
