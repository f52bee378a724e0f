// The strategy registry: every strategy file registers its names here (through the
// generated module kvlab.registry_builtin), and every lookup by name goes through it, so
// names, usage lines and factories live in exactly one place: the strategy's own file.
module;
#include <algorithm>
#include <cctype>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <variant>
#include <vector>
export module kvlab.core:registry;
import :errors;
import :numeric;
import :erased;
import :schedule;
import :metric;
import :tags;

export namespace kvlab {

enum class component_kind { quantizer, granularity, eviction, storage, allocation, schedule, aggregation, metric };

inline std::string kind_name(component_kind kind) {
  switch (kind) {
  case component_kind::quantizer: return "quantizer";
  case component_kind::granularity: return "granularity";
  case component_kind::eviction: return "eviction";
  case component_kind::storage: return "storage";
  case component_kind::allocation: return "allocation";
  case component_kind::schedule: return "schedule";
  case component_kind::aggregation: return "aggregation";
  case component_kind::metric: return "metric";
  }
  return "component";
}

// The kind and the type-erased handle of a component, from its tag.
template <class Tag>
struct kind_of;
template <>
struct kind_of<quantizer_tag> {
  static constexpr component_kind kind = component_kind::quantizer;
  using handle = any_quantizer;
};
template <>
struct kind_of<granularity_tag> {
  static constexpr component_kind kind = component_kind::granularity;
  using handle = any_granularity;
};
template <>
struct kind_of<eviction_tag> {
  static constexpr component_kind kind = component_kind::eviction;
  using handle = any_eviction;
};
template <>
struct kind_of<storage_tag> {
  static constexpr component_kind kind = component_kind::storage;
  using handle = any_storage;
};
template <>
struct kind_of<allocation_tag> {
  static constexpr component_kind kind = component_kind::allocation;
  using handle = any_allocation;
};
template <>
struct kind_of<schedule_tag> {
  static constexpr component_kind kind = component_kind::schedule;
  using handle = any_schedule;
};
template <>
struct kind_of<aggregation_tag> {
  static constexpr component_kind kind = component_kind::aggregation;
  using handle = any_aggregation;
};
template <>
struct kind_of<metric_tag> {
  static constexpr component_kind kind = component_kind::metric;
  using handle = any_metric;
};

// A component as written in a recipe: `name` or `name(arg, arg, ...)`; arguments may
// themselves be terms (`rht(lloyd3)`).
struct term {
  std::string name;
  std::vector<std::string> args;

  std::string text() const {
    if (args.empty()) return name;
    std::string out = name + "(";
    for (std::size_t i = 0; i < args.size(); ++i) out += (i ? "," : "") + args[i];
    return out + ")";
  }
};

// The deepest nesting of parentheses a term may have. Adaptors wrap components by
// recursion (`rht(rht(...))`), so an unbounded depth would exhaust the stack.
inline constexpr int max_term_nesting = 16;

// Splits `text` at commas that are not inside parentheses.
inline std::vector<std::string> split_top_level(std::string_view text, std::string_view what) {
  std::vector<std::string> parts;
  int depth = 0;
  std::string current;
  for (const char c : text) {
    if (c == '(' && ++depth > max_term_nesting)
      throw error(std::string(what) + ": parentheses nest deeper than " + std::to_string(max_term_nesting) + " levels");
    if (c == ')' && --depth < 0) throw error(std::string(what) + ": unbalanced ')' in '" + std::string(text) + "'");
    if (c == ',' && depth == 0) {
      parts.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  if (depth != 0) throw error(std::string(what) + ": missing ')' in '" + std::string(text) + "'");
  parts.push_back(current);
  return parts;
}

// Parses `name(args)` ignoring blanks; `what` says where the text came from, for errors.
inline term parse_term(std::string_view text, std::string_view what) {
  std::string compact;
  for (const char c : text)
    if (c != ' ' && c != '\t') compact += c;
  const auto open = compact.find('(');
  term parsed;
  parsed.name = compact.substr(0, open);
  if (parsed.name.empty()) throw error(std::string(what) + ": empty name in '" + std::string(text) + "'");
  for (const char c : parsed.name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_'))
      throw error(std::string(what) + ": '" + parsed.name + "' is not a valid name (letters, digits, '_')");
  if (open == std::string::npos) return parsed;
  if (compact.back() != ')') throw error(std::string(what) + ": '" + std::string(text) + "' must end with ')'");
  const std::string inside = compact.substr(open + 1, compact.size() - open - 2);
  if (inside.empty()) return parsed; // `name()` is `name`: every argument at its default
  parsed.args = split_top_level(inside, what);
  for (const auto& arg : parsed.args)
    if (arg.empty()) throw error(std::string(what) + ": empty argument in '" + std::string(text) + "'");
  return parsed;
}

class registry;

// What a factory receives: the numeric suffix of a family name (`int8` -> 8), the
// arguments, and the registry (for adaptors that wrap another component).
struct strategy_args {
  std::string text;              // the whole term, for error messages
  std::optional<unsigned> width; // numeric suffix of a family name
  std::vector<std::string> args;
  const registry* components = nullptr;

  void expect_arguments(std::size_t count, std::string_view usage) const {
    if (args.size() != count)
      throw error("'" + text + "' takes " + std::to_string(count) + " argument" + (count == 1 ? "" : "s") +
                  " (usage: " + std::string(usage) + ")");
  }
  template <class T>
  T number(std::size_t index, std::string_view meaning) const {
    return parse_number<T>(args.at(index), "'" + text + "', " + std::string(meaning));
  }
  template <class T>
  T number_in(std::size_t index, std::string_view meaning, T lo, T hi) const {
    return parse_number_in<T>(args.at(index), "'" + text + "', " + std::string(meaning), lo, hi);
  }
};

// One name (or family of names) a strategy file registers.
struct strategy_info {
  component_kind kind = component_kind::quantizer;
  std::string name;    // exact name, or the prefix of a family (`int` for int<b>)
  std::string usage;   // how to write it: "int<b>, b = 2..8", "group(G)"
  std::string summary; // one line: what it is
  std::string paper;   // reference (arXiv id and section), "-" for plain formats
  unsigned min_width = 0;
  unsigned max_width = 0; // > 0: a family whose names end in a number in [min, max]
  // Concrete names the generic tests and benchmarks instantiate; when empty: the name
  // itself, or every width of a family.
  std::vector<std::string> examples;
  // Eviction policies: the policy keeping a ratio of the tokens seen, so budget sweeps
  // (configs/eviction_budget.cppm) cover every policy that sets it.
  std::function<any_eviction(double ratio)> at_budget;
  // The strategy file that registered it (empty for strategies registered in code).
  std::string source;

  bool is_family() const noexcept { return max_width > 0; }
};

class registry {
public:
  // Registers the component that `make` builds from a term's arguments: the component's
  // tag gives its kind, and the registry erases it behind that kind's handle.
  template <class Make>
    requires requires { typename std::invoke_result_t<const Make&, const strategy_args&>::component_concept; }
  void add(strategy_info info, Make make) {
    using component = std::invoke_result_t<const Make&, const strategy_args&>;
    using traits = kind_of<typename component::component_concept>;
    using handle = typename traits::handle;
    insert(std::move(info), traits::kind,
           std::function<handle(const strategy_args&)>(
               [make = std::move(make)](const strategy_args& args) { return handle(make(args)); }));
  }
  // A strategy file whose one factory builds several names (fp8_e4m3, fp8_e5m2, ...).
  template <class Make>
  void add(std::string_view file, const std::vector<strategy_info>& infos, const Make& make) {
    for (const strategy_info& info : infos) add(file, info, make);
  }
  // The same for a strategy file (what the generated registry calls): a mistake in it, such
  // as a name another file has registered, names the file (and the other file).
  template <class Make>
  void add(std::string_view file, strategy_info info, Make make) {
    info.source = file;
    try {
      add(std::move(info), std::move(make));
    } catch (const error& e) {
      throw error(std::string(file) + ": " + e.what());
    }
  }

  any_quantizer make_quantizer(std::string_view text) const {
    return make<any_quantizer>(component_kind::quantizer, text);
  }
  any_granularity make_granularity(std::string_view text) const {
    return make<any_granularity>(component_kind::granularity, text);
  }
  any_eviction make_eviction(std::string_view text) const { return make<any_eviction>(component_kind::eviction, text); }
  // The policy `name` (a bare name: h2o, snapkv) as a function of the ratio of tokens it
  // keeps: what `evict=NAME,budget=B` recipes resolve once the cache knows its shape.
  std::function<any_eviction(double ratio)> eviction_at_budget(std::string_view name) const {
    std::string with_budget;
    for (const auto& entry : entries_) {
      if (entry.info.kind != component_kind::eviction || !entry.info.at_budget) continue;
      if (entry.info.name == name) return entry.info.at_budget;
      with_budget += (with_budget.empty() ? "" : ", ") + entry.info.name;
    }
    throw error("eviction '" + std::string(name) +
                "' cannot take a budget in bytes (budget=): write the policy's bare name, one of " + with_budget);
  }
  any_storage make_storage(std::string_view text) const { return make<any_storage>(component_kind::storage, text); }
  any_allocation make_allocation(std::string_view text) const {
    return make<any_allocation>(component_kind::allocation, text);
  }
  any_schedule make_schedule(std::string_view text) const { return make<any_schedule>(component_kind::schedule, text); }
  any_aggregation make_aggregation(std::string_view text) const {
    return make<any_aggregation>(component_kind::aggregation, text);
  }
  any_metric make_metric(std::string_view text) const { return make<any_metric>(component_kind::metric, text); }
  // One of every registered metric, as its name (or first example) builds it: what an
  // evaluation measures.
  std::vector<any_metric> every_metric() const {
    std::vector<any_metric> metrics;
    for (const auto& info : list())
      if (info.kind == component_kind::metric)
        metrics.push_back(make_metric(info.examples.empty() ? info.name : info.examples.front()));
    return metrics;
  }

  // Every registered name, ordered by kind then name.
  std::vector<strategy_info> list() const {
    std::vector<strategy_info> infos;
    for (const auto& entry : entries_) infos.push_back(entry.info);
    std::ranges::sort(infos, {}, [](const strategy_info& i) { return std::tie(i.kind, i.name); });
    return infos;
  }

  // "f32, f16, int<b> (b = 2..8), ..." for error messages.
  std::string allowed(component_kind kind) const {
    std::string out;
    for (const auto& info : list())
      if (info.kind == kind) out += (out.empty() ? "" : ", ") + info.usage;
    return out;
  }

  // Concrete names covering every entry of a kind (see strategy_info::examples).
  // Conformance tests iterate this, so a new strategy file is covered with no test edit.
  std::vector<std::string> instances(component_kind kind) const {
    std::vector<std::string> names;
    for (const auto& info : list()) {
      if (info.kind != kind) continue;
      if (!info.examples.empty()) {
        names.insert(names.end(), info.examples.begin(), info.examples.end());
      } else if (info.is_family()) {
        for (unsigned w = info.min_width; w <= info.max_width; ++w) names.push_back(info.name + std::to_string(w));
      } else {
        names.push_back(info.name);
      }
    }
    return names;
  }

private:
  template <class Handle>
  using factory_of = std::function<Handle(const strategy_args&)>;
  using factory = std::variant<factory_of<any_quantizer>, factory_of<any_granularity>, factory_of<any_eviction>,
                               factory_of<any_storage>, factory_of<any_allocation>, factory_of<any_schedule>,
                               factory_of<any_aggregation>, factory_of<any_metric>>;
  struct entry {
    strategy_info info;
    factory make;
  };

  void insert(strategy_info info, component_kind kind, factory make) {
    info.kind = kind;
    for (const auto& existing : entries_)
      if (existing.info.kind == kind && existing.info.name == info.name)
        throw error(kind_name(kind) + " '" + info.name + "' is registered twice" +
                    (existing.info.source.empty() ? "" : " (first by " + existing.info.source + ")"));
    entries_.push_back({std::move(info), std::move(make)});
  }

  template <class Handle>
  Handle make(component_kind kind, std::string_view text) const {
    const term parsed = parse_term(text, kind_name(kind) + " '" + std::string(text) + "'");
    strategy_args args{parsed.text(), std::nullopt, parsed.args, this};
    for (const auto& entry : entries_)
      if (entry.info.kind == kind && !entry.info.is_family() && entry.info.name == parsed.name)
        return call<Handle>(entry, args);
    // A family name: prefix followed by a number (int8 -> int, 8).
    const auto digits = parsed.name.find_last_not_of("0123456789") + 1;
    if (digits < parsed.name.size()) {
      const std::string prefix = parsed.name.substr(0, digits);
      for (const auto& entry : entries_) {
        if (entry.info.kind != kind || !entry.info.is_family() || entry.info.name != prefix) continue;
        const auto width =
            parse_number<unsigned>(parsed.name.substr(digits), kind_name(kind) + " '" + parsed.name + "'");
        if (width < entry.info.min_width || width > entry.info.max_width)
          throw error(kind_name(kind) + " '" + parsed.name + "': width " + std::to_string(width) + " is outside " +
                      std::to_string(entry.info.min_width) + ".." + std::to_string(entry.info.max_width) +
                      " (usage: " + entry.info.usage + ")");
        args.width = width;
        return call<Handle>(entry, args);
      }
    }
    throw error("unknown " + kind_name(kind) + " '" + parsed.text() + "'; allowed: " + allowed(kind));
  }

  template <class Handle>
  static Handle call(const entry& e, const strategy_args& args) {
    return std::get<factory_of<Handle>>(e.make)(args);
  }

  std::vector<entry> entries_;
};

} // namespace kvlab
