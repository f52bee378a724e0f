// The key=value arguments of a generator in a data spec (`synthetic:llm(T=512,seed=3)`),
// read and checked one parameter at a time against a list of known names and defaults.
module;
#include <cmath>
#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>
export module kvlab.core:arguments;
import :errors;
import :numeric;
import :registry;

export namespace kvlab {

class generator_arguments {
public:
  using defaults = std::vector<std::pair<std::string, double>>; // in the order errors list them

  generator_arguments(const term& generator, std::string_view spec, defaults known)
      : spec_(spec), known_(std::move(known)) {
    for (const auto& arg : generator.args) {
      const auto equals = arg.find('=');
      if (equals == std::string::npos) fail("argument '" + arg + "' is not key=value");
      const std::string key = arg.substr(0, equals);
      if (!is_known(key)) fail("unknown parameter '" + key + "'; allowed: " + allowed());
      if (given_.contains(key)) fail("parameter '" + key + "' is given twice");
      given_[key] = parse_number<double>(arg.substr(equals + 1), "data spec '" + spec_ + "', parameter " + key);
    }
  }

  double value(const std::string& key) const {
    if (const auto found = given_.find(key); found != given_.end()) return found->second;
    for (const auto& [name, fallback] : known_)
      if (name == key) return fallback;
    fail("internal: no parameter '" + key + "'");
  }
  std::size_t whole_number(const std::string& key, std::size_t min = 1) const {
    const double number = value(key);
    if (!(number == std::floor(number) && number >= static_cast<double>(min) && number <= 1e9))
      fail("parameter " + key + " = " + format_number(number) + " must be a whole number in " + std::to_string(min) +
           "..1000000000");
    return static_cast<std::size_t>(number);
  }
  // A real number in [min, max]; `meaning` says what the knob does, for the error.
  double real_in(const std::string& key, double min, double max, std::string_view meaning) const {
    const double number = value(key);
    if (!(number >= min && number <= max))
      fail("parameter " + key + " = " + format_number(number) + " must be in [" + format_number(min) + ", " +
           format_number(max) + "] (" + std::string(meaning) + ")");
    return number;
  }
  [[noreturn]] void fail(const std::string& what) const { throw error("data spec '" + spec_ + "': " + what); }

private:
  bool is_known(std::string_view key) const {
    for (const auto& [name, fallback] : known_)
      if (name == key) return true;
    return false;
  }
  std::string allowed() const {
    std::string out;
    for (const auto& [name, fallback] : known_)
      out += (out.empty() ? "" : ", ") + name + " (default " + format_number(fallback) + ")";
    return out;
  }
  std::string spec_;
  defaults known_;
  std::map<std::string, double> given_;
};

} // namespace kvlab
