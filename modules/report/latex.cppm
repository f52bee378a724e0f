// kvlab.report:latex: text and numbers for LaTeX, shared by tables and PGFPlots figures.
module;
#include <charconv>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
export module kvlab.report:latex;

export namespace kvlab {

// `text` for LaTeX's text mode: its special characters escaped, "±" in math mode.
inline std::string latex_escape(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    switch (c) {
    case '_':
    case '%':
    case '&':
    case '#':
    case '$':
    case '{':
    case '}':
      out += '\\';
      out += c;
      break;
    case '<': out += "$<$"; break;
    case '>': out += "$>$"; break;
    case '^': out += "\\^{}"; break;
    case '~': out += "\\~{}"; break;
    case '|': out += "\\textbar{}"; break;
    case '\\': out += "\\textbackslash{}"; break;
    default:
      if (text.substr(i).starts_with("±")) {
        out += "$\\pm$";
        i += std::string_view("±").size() - 1;
      } else {
        out += c;
      }
    }
  }
  return out;
}

// A number as tables write it ("1456", "1.2e-05", "0.0123 ± 0.0004", "(1.23 ± 0.04)e-07") in
// LaTeX math mode ("$1.2\\times10^{-5}$"), or nothing when `cell` is not one.
inline std::optional<std::string> latex_number(std::string_view cell, bool bold = false) {
  const auto number = [](std::string_view& text) -> std::optional<std::string> {
    double ignored;
    const auto [end, failure] = std::from_chars(text.data(), text.data() + text.size(), ignored);
    if (failure != std::errc{} || end == text.data()) return std::nullopt;
    std::string written(text.data(), end);
    text.remove_prefix(static_cast<std::size_t>(end - text.data()));
    if (const auto e = written.find_first_of("eE"); e != std::string::npos) // 1.2e-05 -> 1.2\times10^{-5}
      written = written.substr(0, e) + "\\times10^{" + std::to_string(std::stoi(written.substr(e + 1))) + "}";
    return written;
  };
  std::string_view text = cell;
  const bool grouped = text.starts_with("(");
  if (grouped) text.remove_prefix(1);
  auto first = number(text);
  if (!first) return std::nullopt;
  std::string math = *first;
  if (text.starts_with(" ± ")) {
    text.remove_prefix(std::string_view(" ± ").size());
    const auto second = number(text);
    if (!second) return std::nullopt;
    math += " \\pm " + *second;
  }
  if (grouped) {
    if (!text.starts_with(")e")) return std::nullopt;
    text.remove_prefix(2);
    int exponent = 0;
    const auto [end, failure] =
        std::from_chars(text.data() + (text.starts_with("+") ? 1 : 0), text.data() + text.size(), exponent);
    if (failure != std::errc{} || end != text.data() + text.size()) return std::nullopt;
    return "$" + std::string(bold ? "\\boldsymbol{" : "") + "(" + math + ")\\times10^{" + std::to_string(exponent) +
           "}" + (bold ? "}" : "") + "$";
  }
  if (!text.empty()) return std::nullopt;
  return "$" + (bold ? "\\boldsymbol{" + math + "}" : math) + "$";
}

} // namespace kvlab
