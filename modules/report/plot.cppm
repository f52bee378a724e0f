// SVG scatter plots with a Pareto front: what a reader would rather see than read, such as
// attention error against bytes per token. Plain SVG 1.1, no dependencies.
module;
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>
export module kvlab.report:plot;
import kvlab.core;

export namespace kvlab {

struct plot_point {
  double x = 0.0;
  double y = 0.0;
  std::string label;
};

// Points not dominated by any other (another point with x <= and y <= that is better in one),
// for "lower is better" on both axes; sorted by x.
inline std::vector<plot_point> pareto_front(std::vector<plot_point> points) {
  std::ranges::sort(points,
                    [](const plot_point& a, const plot_point& b) { return a.x < b.x || (a.x == b.x && a.y < b.y); });
  std::vector<plot_point> front;
  for (const auto& p : points)
    if (front.empty() || p.y < front.back().y) front.push_back(p);
  return front;
}

// A scatter plot of `points` (log-scaled y when every y is positive) with the Pareto front
// drawn as a line and each point labelled.
inline std::string scatter_svg(const std::vector<plot_point>& points, const std::string& x_label,
                               const std::string& y_label, const std::string& title) {
  if (points.empty()) throw error("plot: no points");
  const double width = 1000, height = 480, left = 80, right = 440, top = 40, bottom = 60;
  const bool log_y = std::ranges::all_of(points, [](const plot_point& p) { return p.y > 0; });
  const auto y_of = [&](double y) { return log_y ? std::log10(y) : y; };
  double x0 = points[0].x, x1 = points[0].x, y0 = y_of(points[0].y), y1 = y0;
  for (const auto& p : points) {
    x0 = std::min(x0, p.x), x1 = std::max(x1, p.x);
    y0 = std::min(y0, y_of(p.y)), y1 = std::max(y1, y_of(p.y));
  }
  if (x1 == x0) x0 -= 1, x1 += 1;
  if (y1 == y0) y0 -= 1, y1 += 1;
  const auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * (width - left - right); };
  const auto py = [&](double y) { return height - bottom - (y_of(y) - y0) / (y1 - y0) * (height - top - bottom); };
  const auto escape = [](const std::string& text) {
    std::string out;
    for (const char c : text) {
      if (c == '<')
        out += "&lt;";
      else if (c == '>')
        out += "&gt;";
      else if (c == '&')
        out += "&amp;";
      else
        out += c;
    }
    return out;
  };
  char buffer[512];
  std::string svg =
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(static_cast<int>(width)) + "\" height=\"" +
      std::to_string(static_cast<int>(height)) +
      "\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  std::snprintf(buffer, sizeof buffer,
                "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"black\"/>\n"
                "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"black\"/>\n",
                left, height - bottom, width - right, height - bottom, left, top, left, height - bottom);
  svg += buffer;
  for (int tick = 0; tick <= 4; ++tick) {
    const double x = x0 + (x1 - x0) * tick / 4, y = y0 + (y1 - y0) * tick / 4;
    const double shown_y = log_y ? std::pow(10.0, y) : y;
    std::snprintf(buffer, sizeof buffer,
                  "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">%.4g</text>\n"
                  "<text x=\"%g\" y=\"%g\" text-anchor=\"end\">%.3g</text>\n",
                  px(x), height - bottom + 16, x, left - 6, py(shown_y) + 4, shown_y);
    svg += buffer;
  }
  svg += "<text x=\"" + std::to_string(left + (width - left - right) / 2) + "\" y=\"" + std::to_string(height - 16) +
         "\" text-anchor=\"middle\">" + escape(x_label) + "</text>\n";
  svg += "<text x=\"16\" y=\"" + std::to_string(top + (height - top - bottom) / 2) + "\" transform=\"rotate(-90 16 " +
         std::to_string(top + (height - top - bottom) / 2) + ")\" text-anchor=\"middle\">" + escape(y_label) +
         (log_y ? " (log scale)" : "") + "</text>\n";
  svg += "<text x=\"" + std::to_string(left) + "\" y=\"24\" font-size=\"14\">" + escape(title) + "</text>\n";
  std::string front_path;
  for (const auto& p : pareto_front(points)) {
    std::snprintf(buffer, sizeof buffer, "%s%g,%g", front_path.empty() ? "" : " ", px(p.x), py(p.y));
    front_path += buffer;
  }
  svg += "<polyline points=\"" + front_path + "\" fill=\"none\" stroke=\"#d62728\" stroke-width=\"1.5\"/>\n";
  for (std::size_t i = 0; i < points.size(); ++i) {
    const auto& p = points[i];
    std::snprintf(buffer, sizeof buffer, "<circle cx=\"%g\" cy=\"%g\" r=\"4\" fill=\"#1f77b4\"/>\n", px(p.x), py(p.y));
    svg += buffer;
    std::snprintf(buffer, sizeof buffer, "<text x=\"%g\" y=\"%g\" font-size=\"9\">%zu</text>\n", px(p.x) + 6,
                  py(p.y) - 4, i + 1);
    svg += buffer;
    std::snprintf(buffer, sizeof buffer, "<text x=\"%g\" y=\"%g\" font-size=\"9\">%zu: ", width - right + 12,
                  top + 12.0 * static_cast<double>(i), i + 1);
    svg += buffer + escape(p.label) + "</text>\n";
  }
  return svg + "</svg>\n";
}

} // namespace kvlab
