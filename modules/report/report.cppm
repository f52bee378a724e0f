// kvlab.report: rendering results for people (aligned text and Markdown tables) and for
// programs (JSON).
module;
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

export module kvlab.report;
export import :latex;
export import :plot;
import kvlab.core;

export namespace kvlab {

inline std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
    case '"': out += "\\\""; break;
    case '\\': out += "\\\\"; break;
    case '\n': out += "\\n"; break;
    case '\t': out += "\\t"; break;
    default:
      if (static_cast<unsigned char>(c) < 0x20) {
        char escaped[8];
        std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
        out += escaped;
      } else {
        out += c;
      }
    }
  }
  return out + "\"";
}

// Shortest round-trip text; JSON has no NaN or Inf, so those become null.
inline std::string json_number(double value) { return std::isfinite(value) ? format_number(value) : "null"; }

// A flat JSON object, fields in insertion order.
class json_object {
public:
  json_object& add(std::string_view key, double value) { return raw(key, json_number(value)); }
  json_object& add(std::string_view key, std::size_t value) { return raw(key, std::to_string(value)); }
  json_object& add(std::string_view key, std::string_view value) { return raw(key, json_string(value)); }
  json_object& add(std::string_view key, const char* value) { return raw(key, json_string(value)); }
  json_object& raw(std::string_view key, std::string json) {
    fields_.emplace_back(std::string(key), std::move(json));
    return *this;
  }
  // Fields indented by `indent` spaces (0: one line); the closing brace by `outer`, for an
  // object nested in another.
  std::string str(int indent = 2, int outer = 0) const {
    const std::string pad(static_cast<std::size_t>(indent), ' ');
    std::string out = "{";
    for (std::size_t i = 0; i < fields_.size(); ++i)
      out += (i ? "," : "") + std::string(indent ? "\n" : "") + pad + json_string(fields_[i].first) + ": " +
             fields_[i].second;
    return out + (indent && !fields_.empty() ? "\n" + std::string(static_cast<std::size_t>(outer), ' ') + "}" : "}");
  }

private:
  std::vector<std::pair<std::string, std::string>> fields_;
};

// A table of text cells; numeric columns are right-aligned when rendered.
struct text_table {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  std::vector<std::pair<std::size_t, std::size_t>> best; // (row, column) cells to emphasize

  std::string markdown() const {
    const auto widths = column_widths();
    std::string out = line(header, widths) + "|";
    for (std::size_t c = 0; c < header.size(); ++c) out += std::string(widths[c] + 1, '-') + (numeric(c) ? ":|" : "-|");
    out += "\n";
    for (std::size_t r = 0; r < rows.size(); ++r) out += line(markdown_cells(r), widths);
    return out;
  }

  // booktabs LaTeX: numeric columns right-aligned, numbers in math mode, text escaped.
  std::string latex() const {
    std::string spec, out;
    for (std::size_t c = 0; c < header.size(); ++c) spec += numeric(c) ? "r" : "l";
    out = "\\begin{tabular}{" + spec + "}\n\\toprule\n" + latex_line(header) + "\\midrule\n";
    for (std::size_t r = 0; r < rows.size(); ++r) out += latex_line(rows[r], r);
    return out + "\\bottomrule\n\\end{tabular}\n";
  }

  std::string csv() const {
    std::string out = csv_line(header);
    for (const auto& row : rows) out += csv_line(row);
    return out;
  }

private:
  std::string latex_line(const std::vector<std::string>& cells, std::size_t row = SIZE_MAX) const {
    std::string out;
    for (std::size_t c = 0; c < cells.size(); ++c) {
      const bool bold = std::ranges::find(best, std::pair{row, c}) != best.end();
      const auto math = row == SIZE_MAX ? std::nullopt : latex_number(cells[c], bold);
      out += (c ? " & " : "") + (math   ? *math
                                 : bold ? "\\textbf{" + latex_escape(cells[c]) + "}"
                                        : latex_escape(cells[c]));
    }
    return out + " \\\\\n";
  }
  // The cells of a row with the best ones in Markdown bold.
  std::vector<std::string> markdown_cells(std::size_t row) const {
    auto cells = rows[row];
    for (const auto& [r, c] : best)
      if (r == row) cells[c] = "**" + cells[c] + "**";
    return cells;
  }
  static std::string csv_line(const std::vector<std::string>& cells) {
    std::string out;
    for (std::size_t c = 0; c < cells.size(); ++c) {
      const bool quote = cells[c].find_first_of(",\"\n") != std::string::npos;
      std::string cell;
      for (const char ch : cells[c]) cell += ch == '"' ? std::string("\"\"") : std::string(1, ch);
      out += (c ? "," : "") + (quote ? "\"" + cell + "\"" : cell);
    }
    return out + "\n";
  }

  // Characters as a terminal shows them: UTF-8 continuation bytes take no column.
  static std::size_t display_width(std::string_view text) {
    return static_cast<std::size_t>(std::ranges::count_if(text, [](char c) { return (c & 0xC0) != 0x80; }));
  }
  bool numeric(std::size_t column) const {
    return !rows.empty() && std::ranges::all_of(rows, [&](const auto& row) {
      return latex_number(row[column]).has_value() || row[column] == "nan";
    });
  }
  std::vector<std::size_t> column_widths() const {
    std::vector<std::size_t> widths(header.size());
    for (std::size_t c = 0; c < header.size(); ++c) widths[c] = display_width(header[c]);
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const auto cells = markdown_cells(r);
      for (std::size_t c = 0; c < header.size(); ++c) widths[c] = std::max(widths[c], display_width(cells[c]));
    }
    return widths;
  }
  std::string line(const std::vector<std::string>& cells, const std::vector<std::size_t>& widths) const {
    std::string out = "|";
    for (std::size_t c = 0; c < cells.size(); ++c) {
      const std::string fill(widths[c] - display_width(cells[c]), ' ');
      out += " " + (numeric(c) ? fill + cells[c] : cells[c] + fill) + " |";
    }
    return out + "\n";
  }
};

// Fixed significant digits for tables (JSON keeps full precision).
inline std::string format_significant(double value, int digits = 4) {
  if (!std::isfinite(value)) return std::isnan(value) ? "nan" : (value > 0 ? "inf" : "-inf");
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*g", digits, value);
  return buffer;
}

} // namespace kvlab
