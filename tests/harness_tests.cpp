// The sweep harness's pieces: recipes and data files, seeds, the t-interval over seeds, the
// numbers tables print, and the code fingerprint that ties a cell to its sources.
#include <boost/test/unit_test.hpp>

#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>
import kvlab;
import kvlab.runner;

namespace {

// The error message of `f()`, or "" when it does not throw.
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const kvlab::error& e) {
    return e.what();
  }
  return "";
}

} // namespace

BOOST_AUTO_TEST_SUITE(harness)

BOOST_AUTO_TEST_CASE(a_recipes_file_has_labels_comments_and_the_given_order) {
  const auto recipes = kvlab::parse_recipe_list("# two methods\n"
                                                "KIVI-2 = k=uint2@channel(32),v=uint2@group(32),residual=128  # 2 bit\n"
                                                "\n"
                                                "  k=int8@group(32) ,v=int8@group(32)\n"
                                                "H2O 25% = evict=h2o(0.125,0.125)\n",
                                                "r.txt", kvlab::builtin_registry());
  BOOST_TEST_REQUIRE(recipes.size() == 3u);
  BOOST_TEST(recipes[0].label == "KIVI-2");
  BOOST_TEST(kvlab::canonical_name(recipes[0].value) == "k=uint2@channel(32),v=uint2@group(32),residual=128");
  BOOST_TEST(recipes[1].label == "k=int8@group(32),v=int8@group(32)"); // unlabelled: its canonical name
  BOOST_TEST(recipes[2].label == "H2O 25%");
  BOOST_TEST(kvlab::canonical_name(recipes[2].value) == "k=f16@token,v=f16@token,evict=h2o(0.125,0.125)");
}

BOOST_AUTO_TEST_CASE(every_bad_line_of_a_recipes_file_is_reported_with_its_number) {
  const std::string message = error_of([] {
    kvlab::parse_recipe_list("a = k=int4@group(32)\nb = k=int9@token\n# fine\nc = k=int4@token,evict=foo(3)\nd =\n"
                             "e = k=int4@group(32),v=f16@token\nf = k=int4@token,rope=pre\n",
                             "r.txt", kvlab::builtin_registry());
  });
  BOOST_TEST(message.find("5 bad lines in r.txt; nothing was run") != std::string::npos, message);
  BOOST_TEST(message.find("r.txt:2: recipe part 'k=int9@token'") != std::string::npos, message);
  BOOST_TEST(message.find("r.txt:4: recipe part 'evict=foo(3)'") != std::string::npos, message);
  BOOST_TEST(message.find("r.txt:5: label 'd' has no recipe") != std::string::npos, message);
  BOOST_TEST(message.find("r.txt:6: repeats the recipe of line 1") != std::string::npos, message);
  // Sweeps run on data, which has no RoPE to rotate keys kept before it by.
  BOOST_TEST(message.find("r.txt:7: k=int4@token,v=f16@token,rope=pre: rope=pre needs a model's RoPE") !=
                 std::string::npos,
             message);
  BOOST_TEST(message.find("r.txt:2") < message.find("r.txt:4")); // in line order
  BOOST_TEST(error_of([] { kvlab::parse_recipe_list("# nothing\n", "r.txt", kvlab::builtin_registry()); }) ==
             "r.txt holds no recipe");
}

BOOST_AUTO_TEST_CASE(a_data_file_checks_every_spec_and_seeds_read_ranges_and_lists) {
  const auto specs =
      kvlab::parse_data_list("synthetic:llm(T=256,seed={seed})  # calibrated\nsynthetic:gaussian(T=64)\n", "d.txt");
  BOOST_TEST(specs == (std::vector<std::string>{"synthetic:llm(T=256,seed={seed})", "synthetic:gaussian(T=64)"}),
             boost::test_tools::per_element());
  const std::string message =
      error_of([] { kvlab::parse_data_list("synthetic:gaussian(T=64)\nsynthetic:gaussian(D=12x)\n", "d.txt"); });
  BOOST_TEST(message.find("d.txt:2: ") != std::string::npos, message);
  BOOST_TEST(kvlab::parse_seeds("1..5") == (std::vector<std::uint64_t>{1, 2, 3, 4, 5}),
             boost::test_tools::per_element());
  BOOST_TEST(kvlab::parse_seeds("7,3") == (std::vector<std::uint64_t>{7, 3}), boost::test_tools::per_element());
  BOOST_TEST(error_of([] { kvlab::parse_seeds("5..1"); }).find("FIRST <= LAST") != std::string::npos);
  BOOST_TEST(error_of([] { kvlab::parse_seeds("1,2,1"); }).find("seed 1 is given twice") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(the_interval_over_seeds_is_the_student_t_interval) {
  const std::array<double, 3> three{1, 2, 3}; // mean 2, sd 1, t(0.975; 2) = 0.95 / sqrt(2 0.975 0.025)
  const auto v = kvlab::t_interval95(three);
  BOOST_TEST(v.n == 3u);
  BOOST_TEST(v.mean == 2.0);
  BOOST_TEST(v.half_width == 0.95 / std::sqrt(2 * 0.975 * 0.025) / std::sqrt(3.0), boost::test_tools::tolerance(1e-12));
  const std::array<double, 2> two{0, 1}; // sd sqrt(1/2), t(0.975; 1) = tan(0.475 pi)
  BOOST_TEST(kvlab::t_interval95(two).half_width == std::tan(0.475 * M_PI) * std::sqrt(0.5) / std::sqrt(2.0),
             boost::test_tools::tolerance(1e-12));
  const std::array<double, 3> with_null{1, NAN, 3}; // a missing value does not count
  BOOST_TEST(kvlab::t_interval95(with_null).n == 2u);
  const std::array<double, 1> one{5};
  BOOST_TEST(std::isnan(kvlab::t_interval95(one).half_width));
}

BOOST_AUTO_TEST_CASE(numbers_keep_the_digits_their_interval_needs) {
  BOOST_TEST(kvlab::format_interval({0.99997, NAN, 1}) == "0.99997"); // not 1
  BOOST_TEST(kvlab::format_interval({0.012341, 0.00041, 3}) == "0.01234 ± 0.00041");
  BOOST_TEST(kvlab::format_interval({1456.3, 12.3, 3}) == "1456 ± 12");
  BOOST_TEST(kvlab::format_interval({1.2341e-7, 4.1e-9, 3}) == "(1.234 ± 0.041)e-07");
  BOOST_TEST(kvlab::format_interval({0.5, 0.0, 3}) == "0.5 ± 0");
  BOOST_TEST(kvlab::format_interval({-0.004, 0.31, 3}) == "0.00 ± 0.31"); // not -0.00
  BOOST_TEST(kvlab::format_interval({-0.3, 0.31, 3}) == "-0.30 ± 0.31");
  BOOST_TEST(kvlab::latex_number("0.01234 ± 0.00041").value() == "$0.01234 \\pm 0.00041$");
  BOOST_TEST(kvlab::latex_number("(1.234 ± 0.041)e-07", true).value() ==
             "$\\boldsymbol{(1.234 \\pm 0.041)\\times10^{-7}}$");
  BOOST_TEST(kvlab::latex_number("1.5e-05").value() == "$1.5\\times10^{-5}$");
  BOOST_TEST(!kvlab::latex_number("KIVI-2").has_value());
  BOOST_TEST(!kvlab::latex_number("12 apples").has_value());
}

BOOST_AUTO_TEST_CASE(a_cell_uses_the_files_of_the_strategies_its_recipe_names) {
  const auto files = kvlab::sources_used(
      kvlab::parse_recipe("k=int4@group(32),v=rht(lloyd3)@token,evict=h2o(0.1,0.1)", kvlab::builtin_registry()),
      "synthetic:llm(seed=1)", kvlab::builtin_registry());
  const auto has = [&](const std::string& f) { return std::ranges::find(files, f) != files.end(); };
  for (const char* used :
       {"strategies/int_symmetric.cppm", "strategies/group.cppm", "strategies/rht.cppm", "strategies/lloyd.cppm",
        "strategies/token.cppm", "strategies/h2o.cppm", "strategies/flat.cppm", "strategies/step.cppm",
        "metrics/score_kl.cppm", "data_sources/llm.cppm"})
    BOOST_TEST(has(used), used);
  for (const char* unused : {"strategies/tova.cppm", "strategies/uint_asymmetric.cppm", "strategies/channel.cppm",
                             "data_sources/gaussian.cppm"})
    BOOST_TEST(!has(unused), unused);
}

BOOST_AUTO_TEST_CASE(editing_a_used_file_changes_the_fingerprint_and_names_the_file) {
  const std::vector<std::string> files{"strategies/h2o.cppm", "strategies/token.cppm"};
  const std::array<kvlab::source_digest, 3> before{
      {{"strategies/h2o.cppm", "aa"}, {"strategies/token.cppm", "bb"}, {"strategies/tova.cppm", "cc"}}};
  auto after = before;
  const auto base = kvlab::fingerprint_of(files, {"ff", before});
  BOOST_TEST(kvlab::fingerprint_of(files, {"ff", before}).digest == base.digest); // deterministic
  after[2].sha256 = "c2";                                                         // a file the cell does not use
  BOOST_TEST(kvlab::fingerprint_of(files, {"ff", after}).digest == base.digest);
  after[0].sha256 = "a2";
  const auto edited = kvlab::fingerprint_of(files, {"ff", after});
  BOOST_TEST(edited.digest != base.digest);
  BOOST_TEST(kvlab::fingerprint_of(files, {"f2", before}).digest != base.digest); // the framework changed

  kvlab::json_object sources;
  for (const auto& [file, sha] : base.sources) sources.add(file, sha);
  const auto stored = kvlab::parse_json(kvlab::json_object().raw("sources", sources.str()).str(), "provenance");
  BOOST_TEST(kvlab::changed_sources(stored, edited) == (std::vector<std::string>{"strategies/h2o.cppm"}),
             boost::test_tools::per_element());
  BOOST_TEST(kvlab::changed_sources(stored, base).empty());
}

BOOST_AUTO_TEST_CASE(axes_are_log_with_decade_ticks_when_the_data_spans_a_decade) {
  const auto log = kvlab::choose_axis({0.0031, 0.08, 0.9});
  BOOST_TEST(log.log);
  BOOST_TEST(log.ticks == (std::vector<double>{0.001, 0.01, 0.1, 1}), boost::test_tools::per_element());
  const auto linear = kvlab::choose_axis({400, 576, 1088});
  BOOST_TEST(!linear.log);
  BOOST_TEST(linear.ticks == (std::vector<double>{400, 600, 800, 1000, 1200}), boost::test_tools::per_element());
  const auto negative = kvlab::choose_axis({-0.3, 0.2}); // a bias: linear through 0
  BOOST_TEST(!negative.log);
  const std::vector<double> expected{-0.3, -0.2, -0.1, 0, 0.1, 0.2};
  BOOST_TEST_REQUIRE(negative.ticks.size() == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) BOOST_TEST(std::fabs(negative.ticks[i] - expected[i]) < 1e-12);
  BOOST_CHECK_THROW(kvlab::choose_axis({}), kvlab::error);
}

BOOST_AUTO_TEST_CASE(a_figure_draws_one_series_per_method_with_error_bars) {
  const kvlab::figure f{"bytes per token",
                        "error",
                        {{"KIVI", {{200, 0.5, 0.05}, {400, 0.05, 0.01}}}, {"H2O", {{128, 1.2, 0.2}, {256, 0.4, 0}}}}};
  const std::string svg = kvlab::figure_svg(f);
  const auto count = [&](const std::string& text, const std::string& what) {
    std::size_t n = 0;
    for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  BOOST_TEST(count(svg, "<g class=\"series\"") == 2u);
  BOOST_TEST(count(svg, "<polyline") == 2u); // a line per series
  BOOST_TEST(count(svg, "V") >= 3u);         // three error bars
  BOOST_TEST(svg.find(">KIVI</text>") != std::string::npos);
  // y spans 0.05..1.4: decades 0.01, 0.1, 1, 10 as 10^k.
  for (const char* k : {"-2", "-1", "0", "1"})
    BOOST_TEST(svg.find(">10<tspan dy=\"-6\" font-size=\"9\">" + std::string(k) + "</tspan>") != std::string::npos, k);
  const std::string tex = kvlab::figure_pgfplots(f);
  BOOST_TEST(count(tex, "\\addplot+") == 2u);
  BOOST_TEST(tex.find("ymode=log") != std::string::npos);
  BOOST_TEST(tex.find("ytick={0.01,0.1,1,10}") != std::string::npos, tex);
  BOOST_TEST(kvlab::figure_csv(f) == "series,x,y,y_error\n\"KIVI\",200,0.5,0.05\n\"KIVI\",400,0.05,0.01\n"
                                     "\"H2O\",128,1.2,0.2\n\"H2O\",256,0.4,0\n");
  BOOST_TEST(kvlab::figure_format("fig.png", "") == "png");
  BOOST_TEST(error_of([] { kvlab::figure_format("fig.png", "pdf"); }) ==
             "--out fig.png is a png file but --format is pdf");
  BOOST_TEST(error_of([] { kvlab::figure_format("fig.jpg", ""); }).find(".svg, .tex (PGFPlots), .pdf or .png") !=
             std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
