// Figures for papers: one line and marker per method (series) across its budgets or bit widths,
// error bars, log axes with decade ticks where the data spans a decade or more, a light grid,
// a legend of short labels and axis titles with units. Three renderings of one figure: SVG
// (drawn here, no dependencies), a PGFPlots .tex (the paper's fonts), and a tidy CSV with a
// matplotlib script that renders PDF, PNG or SVG and that the researcher can edit.
module;
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>
export module kvlab.report:plot;
import kvlab.core;
import :latex;

export namespace kvlab {

struct plot_point {
  double x = 0.0;
  double y = 0.0;
  double y_error = 0.0; // half-width of the error bar (0: none)
};

struct plot_series {
  std::string label;
  std::vector<plot_point> points; // joined in order of x
};

struct figure {
  std::string x_title;
  std::string y_title;
  std::vector<plot_series> series;
};

// An axis: log (decades) when every value is positive and they span a factor of 10 or more,
// else linear with 1-2-5 steps; the range extends to whole ticks.
struct axis_scale {
  bool log = false;
  double low = 0.0, high = 1.0;
  std::vector<double> ticks;
};

inline axis_scale choose_axis(const std::vector<double>& values) {
  if (values.empty()) throw error("plot: no points");
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const double v : values)
    if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  if (!std::isfinite(lo)) throw error("plot: no finite value on an axis");
  axis_scale a;
  if (lo > 0 && hi / lo >= 10.0) {
    a.log = true;
    const int first = static_cast<int>(std::floor(std::log10(lo) + 1e-9));
    const int last = static_cast<int>(std::ceil(std::log10(hi) - 1e-9));
    a.low = std::pow(10.0, first), a.high = std::pow(10.0, last);
    for (int k = first; k <= last; ++k) a.ticks.push_back(std::pow(10.0, k));
    return a;
  }
  if (hi == lo) lo -= std::max(std::fabs(lo) * 0.1, 1e-12), hi += std::max(std::fabs(hi) * 0.1, 1e-12);
  const double raw = (hi - lo) / 5.0, decade = std::pow(10.0, std::floor(std::log10(raw)));
  double step = decade;
  for (const double m : {1.0, 2.0, 5.0, 10.0})
    if (m * decade >= raw) {
      step = m * decade;
      break;
    }
  a.low = std::floor(lo / step + 1e-9) * step, a.high = std::ceil(hi / step - 1e-9) * step;
  for (double t = a.low; t <= a.high + step * 1e-6; t += step) a.ticks.push_back(std::fabs(t) < step * 1e-9 ? 0.0 : t);
  return a;
}

// "0.01", "1000", "2.5", "1e-06": the shortest text of a tick value.
inline std::string tick_label(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.6g", value);
  return buffer;
}

namespace detail {

// Okabe and Ito's colour-blind-safe palette (without yellow, too faint on white), then black.
inline constexpr const char* series_colours[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                                 "#E69F00", "#56B4E9", "#000000"};
inline constexpr std::size_t marker_count = 5; // circle, square, triangle, diamond, cross

inline std::string xml_escape(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

inline std::vector<double> all_values(const figure& f, bool x) {
  std::vector<double> values;
  for (const auto& s : f.series)
    for (const auto& p : s.points) {
      if (x) {
        values.push_back(p.x);
      } else {
        values.push_back(p.y);
        // Error bars stay inside the axis (a bar reaching 0 or below is cut on a log axis).
        if (p.y_error > 0 && p.y - p.y_error > 0) values.push_back(p.y - p.y_error);
        if (p.y_error > 0) values.push_back(p.y + p.y_error);
      }
    }
  return values;
}

inline std::string svg_marker(std::size_t kind, double x, double y, const char* colour) {
  char b[320];
  switch (kind % marker_count) {
  case 0: std::snprintf(b, sizeof b, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"4\" fill=\"%s\"/>", x, y, colour); break;
  case 1:
    std::snprintf(b, sizeof b, "<rect x=\"%.2f\" y=\"%.2f\" width=\"7\" height=\"7\" fill=\"%s\"/>", x - 3.5, y - 3.5,
                  colour);
    break;
  case 2:
    std::snprintf(b, sizeof b, "<polygon points=\"%.2f,%.2f %.2f,%.2f %.2f,%.2f\" fill=\"%s\"/>", x, y - 4.5, x - 4.5,
                  y + 3.5, x + 4.5, y + 3.5, colour);
    break;
  case 3:
    std::snprintf(b, sizeof b, "<polygon points=\"%.2f,%.2f %.2f,%.2f %.2f,%.2f %.2f,%.2f\" fill=\"%s\"/>", x, y - 5,
                  x + 5, y, x, y + 5, x - 5, y, colour);
    break;
  default:
    std::snprintf(b, sizeof b,
                  "<path d=\"M%.2f %.2fL%.2f %.2fM%.2f %.2fL%.2f %.2f\" stroke=\"%s\" stroke-width=\"2\"/>", x - 4,
                  y - 4, x + 4, y + 4, x - 4, y + 4, x + 4, y - 4, colour);
  }
  return b;
}

} // namespace detail

// The figure as SVG 1.1: one <g class="series"> per series (its line, markers and error bars).
inline std::string figure_svg(const figure& f) {
  const axis_scale ax = choose_axis(detail::all_values(f, true)), ay = choose_axis(detail::all_values(f, false));
  const double width = 640, height = 420, left = 78, right = 190, top = 20, bottom = 58;
  const double plot_w = width - left - right, plot_h = height - top - bottom;
  const auto frac = [](const axis_scale& a, double v) {
    return a.log ? (std::log10(v) - std::log10(a.low)) / (std::log10(a.high) - std::log10(a.low))
                 : (v - a.low) / (a.high - a.low);
  };
  const auto px = [&](double x) { return left + frac(ax, x) * plot_w; };
  const auto py = [&](double y) { return top + (1.0 - frac(ay, y)) * plot_h; };
  char b[512];
  std::snprintf(b, sizeof b,
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" viewBox=\"0 0 %g %g\" "
                "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"12\">\n"
                "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
                width, height, width, height);
  std::string svg = b;
  const auto tick_text = [&](const axis_scale& a, double v) {
    if (!a.log) return detail::xml_escape(tick_label(v));
    const int k = static_cast<int>(std::lround(std::log10(v)));
    return "10<tspan dy=\"-6\" font-size=\"9\">" + std::to_string(k) + "</tspan>";
  };
  svg += "<g class=\"grid\" stroke=\"#dddddd\" stroke-width=\"0.8\">\n";
  for (const double t : ax.ticks) {
    std::snprintf(b, sizeof b, "<line x1=\"%.2f\" y1=\"%g\" x2=\"%.2f\" y2=\"%g\"/>\n", px(t), top, px(t),
                  top + plot_h);
    svg += b;
  }
  for (const double t : ay.ticks) {
    std::snprintf(b, sizeof b, "<line x1=\"%g\" y1=\"%.2f\" x2=\"%g\" y2=\"%.2f\"/>\n", left, py(t), left + plot_w,
                  py(t));
    svg += b;
  }
  svg += "</g>\n";
  std::snprintf(b, sizeof b, "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" stroke=\"black\"/>\n",
                left, top, plot_w, plot_h);
  svg += b;
  for (const double t : ax.ticks) {
    std::snprintf(b, sizeof b, "<text class=\"xtick\" x=\"%.2f\" y=\"%g\" text-anchor=\"middle\">", px(t),
                  top + plot_h + 18);
    svg += b + tick_text(ax, t) + "</text>\n";
  }
  for (const double t : ay.ticks) {
    std::snprintf(b, sizeof b, "<text class=\"ytick\" x=\"%g\" y=\"%.2f\" text-anchor=\"end\">", left - 6, py(t) + 4);
    svg += b + tick_text(ay, t) + "</text>\n";
  }
  std::snprintf(b, sizeof b, "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">", left + plot_w / 2, height - 14);
  svg += b + detail::xml_escape(f.x_title) + "</text>\n";
  std::snprintf(b, sizeof b, "<text x=\"16\" y=\"%g\" transform=\"rotate(-90 16 %g)\" text-anchor=\"middle\">",
                top + plot_h / 2, top + plot_h / 2);
  svg += b + detail::xml_escape(f.y_title) + "</text>\n";
  for (std::size_t i = 0; i < f.series.size(); ++i) {
    const auto& s = f.series[i];
    const char* colour = detail::series_colours[i % std::size(detail::series_colours)];
    svg += "<g class=\"series\" stroke=\"" + std::string(colour) + "\">\n";
    std::string path;
    for (const auto& p : s.points) {
      std::snprintf(b, sizeof b, "%s%.2f,%.2f", path.empty() ? "" : " ", px(p.x), py(p.y));
      path += b;
    }
    if (s.points.size() > 1) svg += "<polyline points=\"" + path + "\" fill=\"none\" stroke-width=\"1.6\"/>\n";
    for (const auto& p : s.points) {
      if (p.y_error > 0) {
        const double low = ay.log ? std::max(p.y - p.y_error, ay.low) : p.y - p.y_error;
        std::snprintf(b, sizeof b,
                      "<path d=\"M%.2f %.2fV%.2fM%.2f %.2fH%.2fM%.2f %.2fH%.2f\" fill=\"none\" stroke-width=\"1\"/>\n",
                      px(p.x), py(low), py(p.y + p.y_error), px(p.x) - 3, py(low), px(p.x) + 3, px(p.x) - 3,
                      py(p.y + p.y_error), px(p.x) + 3);
        svg += b;
      }
      svg += detail::svg_marker(i, px(p.x), py(p.y), colour) + "\n";
    }
    const double ly = top + 10 + 18.0 * static_cast<double>(i);
    std::snprintf(b, sizeof b, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke-width=\"1.6\"/>",
                  width - right + 12, ly, width - right + 36, ly);
    svg += b + detail::svg_marker(i, width - right + 24, ly, colour);
    std::snprintf(b, sizeof b, "<text class=\"legend\" x=\"%g\" y=\"%g\" stroke=\"none\">", width - right + 42, ly + 4);
    svg += b + detail::xml_escape(s.label) + "</text>\n</g>\n";
  }
  return svg + "</svg>\n";
}

// The figure's points as a tidy CSV: series, x, y, y_error.
inline std::string figure_csv(const figure& f) {
  std::string csv = "series,x,y,y_error\n";
  for (const auto& s : f.series) {
    std::string label;
    for (const char c : s.label) label += c == '"' ? std::string("\"\"") : std::string(1, c);
    for (const auto& p : s.points)
      csv +=
          "\"" + label + "\"," + format_number(p.x) + "," + format_number(p.y) + "," + format_number(p.y_error) + "\n";
  }
  return csv;
}

// A PGFPlots picture with each series' points inline (\input it in a figure environment;
// needs \usepackage{pgfplots}). Axes and ticks as in the SVG.
inline std::string figure_pgfplots(const figure& f) {
  const axis_scale ax = choose_axis(detail::all_values(f, true)), ay = choose_axis(detail::all_values(f, false));
  const auto ticks = [](const axis_scale& a) {
    std::string out;
    for (const double t : a.ticks) out += (out.empty() ? "" : ",") + format_number(t);
    return out;
  };
  std::string tex = "% Generated by kvlab plot. Needs \\usepackage{pgfplots} and \\pgfplotsset{compat=1.17}.\n"
                    "\\begin{tikzpicture}\n\\begin{axis}[\n  width=0.95\\linewidth, height=0.62\\linewidth,\n";
  tex += std::string("  xmode=") + (ax.log ? "log" : "normal") + ", ymode=" + (ay.log ? "log" : "normal") + ",\n";
  tex += "  xmin=" + format_number(ax.low) + ", xmax=" + format_number(ax.high) + ", ymin=" + format_number(ay.low) +
         ", ymax=" + format_number(ay.high) + ",\n";
  tex += "  xtick={" + ticks(ax) + "}, ytick={" + ticks(ay) + "},\n";
  tex += "  grid=major, grid style={draw=gray!25},\n  xlabel={" + latex_escape(f.x_title) + "},\n  ylabel={" +
         latex_escape(f.y_title) +
         "},\n  legend pos=outer north east, legend cell align=left,\n  cycle list name=exotic,\n]\n";
  static constexpr const char* marks[] = {"*", "square*", "triangle*", "diamond*", "x"};
  for (std::size_t i = 0; i < f.series.size(); ++i) {
    const auto& s = f.series[i];
    tex += "\\addplot+[mark=" + std::string(marks[i % detail::marker_count]) +
           ", error bars/.cd, y dir=both, y explicit] table[x=x, y=y, y error=e] {\n  x y e\n";
    for (const auto& p : s.points)
      tex += "  " + format_number(p.x) + " " + format_number(p.y) + " " + format_number(p.y_error) + "\n";
    tex += "};\n\\addlegendentry{" + latex_escape(s.label) + "}\n";
  }
  return tex + "\\end{axis}\n\\end{tikzpicture}\n";
}

// A matplotlib script that reads `csv_name` (figure_csv, next to the script) and writes the
// figure to its first argument (PDF, PNG or SVG by the file's extension), with the axes, ticks
// and styles of the SVG. It is meant to be edited.
inline std::string figure_matplotlib(const figure& f, const std::string& csv_name) {
  const axis_scale ax = choose_axis(detail::all_values(f, true)), ay = choose_axis(detail::all_values(f, false));
  const auto python_string = [](const std::string& text) {
    std::string out = "'";
    for (const char c : text) out += c == '\'' || c == '\\' ? std::string("\\") + c : std::string(1, c);
    return out + "'";
  };
  std::string colours;
  for (const char* c : detail::series_colours) colours += (colours.empty() ? "" : ", ") + python_string(c);
  return "#!/usr/bin/env python3\n"
         "# Generated by kvlab plot: the figure of " +
         csv_name +
         ". Edit freely; run as\n"
         "#   python3 THIS_SCRIPT OUT.pdf   (or .png, .svg)\n"
         "import csv, sys, os\n"
         "import matplotlib\n"
         "matplotlib.use('Agg')\n"
         "import matplotlib.pyplot as plt\n"
         "from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator\n\n"
         "here = os.path.dirname(os.path.abspath(__file__))\n"
         "series = {}\n"
         "with open(os.path.join(here, " +
         python_string(csv_name) +
         "), newline='') as f:\n"
         "    for row in csv.DictReader(f):\n"
         "        series.setdefault(row['series'], []).append((float(row['x']), float(row['y']), "
         "float(row['y_error'])))\n\n"
         "colours = [" +
         colours +
         "]\n"
         "markers = ['o', 's', '^', 'D', 'x']\n"
         "fig, ax = plt.subplots(figsize=(6.4, 3.9))\n"
         "for i, (label, points) in enumerate(series.items()):\n"
         "    points.sort()\n"
         "    xs, ys, es = zip(*points)\n"
         "    ax.errorbar(xs, ys, yerr=[e if e > 0 else 0 for e in es], label=label, color=colours[i % len(colours)],\n"
         "                marker=markers[i % len(markers)], markersize=5, linewidth=1.6, capsize=3)\n"
         "ax.set_xscale(" +
         python_string(ax.log ? "log" : "linear") + ")\nax.set_yscale(" + python_string(ay.log ? "log" : "linear") +
         ")\n"
         "ax.set_xlim(" +
         format_number(ax.low) + ", " + format_number(ax.high) + ")\nax.set_ylim(" + format_number(ay.low) + ", " +
         format_number(ay.high) +
         ")\n"
         "def ticks(axis, values):\n"
         "    axis.set_major_locator(FixedLocator(values))\n"
         "    axis.set_major_formatter(FuncFormatter(lambda v, _: f'{v:g}'))\n"
         "    axis.set_minor_locator(NullLocator())\n"
         "ticks(ax.xaxis, [" +
         [&] {
           std::string out;
           for (const double t : ax.ticks) out += (out.empty() ? "" : ", ") + format_number(t);
           return out;
         }() +
         "])\nticks(ax.yaxis, [" +
         [&] {
           std::string out;
           for (const double t : ay.ticks) out += (out.empty() ? "" : ", ") + format_number(t);
           return out;
         }() +
         "])\n"
         "ax.grid(True, color='#dddddd', linewidth=0.8)\n"
         "ax.set_axisbelow(True)\n"
         "ax.set_xlabel(" +
         python_string(f.x_title) + ")\nax.set_ylabel(" + python_string(f.y_title) +
         ")\n"
         "ax.legend(loc='upper left', bbox_to_anchor=(1.02, 1.0), frameon=False, fontsize=9)\n"
         "fig.savefig(sys.argv[1], bbox_inches='tight')\n";
}

} // namespace kvlab
