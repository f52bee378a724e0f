// synthetic:llm(like=MODEL) against the real capture of MODEL (docs/data.md, "Calibrated on
// real models"): every statistic of kvlab data-report within its stated tolerance. The
// captures need ../shared/models; without it these tests say they were skipped.
#include "shared_models.hpp"
#include "test_files.hpp"

#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstddef>
#include <string>
#include <vector>
import kvlab;

namespace {

// One statistic, how to read it from a report, and how far the preset may be from the real
// capture: absolute, or relative to the real value for the outlier ratio (a scale-free ratio).
struct tolerance {
  const char* name;
  double kvlab::head_statistics::* field;
  double allowed;
  bool relative = false;
};

const std::vector<tolerance> tolerances{
    {"entropy", &kvlab::head_statistics::entropy, 0.35},
    {"H/log n", &kvlab::head_statistics::normalized_entropy, 0.06},
    {"top 1 %", &kvlab::head_statistics::top1, 0.06},
    {"top 10 %", &kvlab::head_statistics::top10, 0.06},
    {"top 25 %", &kvlab::head_statistics::top25, 0.06},
    {"sink", &kvlab::head_statistics::sink_mass, 0.01},
    {"last 64", &kvlab::head_statistics::local_mass, 0.06},
    {"key outlier ratio", &kvlab::head_statistics::key_outlier_ratio, 0.30, true},
    {"value kurtosis", &kvlab::head_statistics::value_kurtosis, 0.5},
};

kvlab::head_statistics mean_report(const std::string& spec) {
  return kvlab::mean_over_heads(kvlab::data_report(kvlab::load_data(spec)));
}

// The statistics of `synthetic` outside their tolerance around `real`, by name.
std::vector<std::string> outside_tolerance(const kvlab::head_statistics& real,
                                           const kvlab::head_statistics& synthetic) {
  std::vector<std::string> outside;
  for (const auto& t : tolerances) {
    const double allowed = t.relative ? t.allowed * real.*t.field : t.allowed;
    if (!(std::fabs(synthetic.*t.field - real.*t.field) <= allowed)) outside.push_back(t.name);
  }
  return outside;
}

struct capture {
  const char* preset;
  std::string model, text, tokenizer; // relative to ../shared/models, except a text in tests/data
};

void check_preset_matches_capture(const capture& c) {
  const auto model = kvlab_test::shared_model_file(c.model);
  const auto tokenizer = c.tokenizer.empty() ? std::optional<std::filesystem::path>(std::filesystem::path())
                                             : kvlab_test::shared_model_file(c.tokenizer);
  auto text = std::optional<std::filesystem::path>(std::filesystem::path(KVLAB_TEST_DATA) / c.text);
  if (c.text.starts_with("shared:")) text = kvlab_test::shared_model_file(c.text.substr(7));
  if (!model || !tokenizer || !text) return;
  // A Hugging Face model is its folder.
  const auto model_path = model->extension() == ".safetensors" ? model->parent_path() : *model;
  std::string real_spec = "model:" + model_path.string() + ",text=" + text->string();
  if (!c.tokenizer.empty()) real_spec += ",tokenizer=" + tokenizer->string();
  const auto real_data = kvlab::load_data(real_spec);
  const auto real = kvlab::mean_over_heads(kvlab::data_report(real_data));

  const std::string preset = std::string("synthetic:llm(like=") + c.preset + ")";
  const auto synthetic_data = kvlab::load_data(preset);
  // The preset has the model's shape, at the capture's length.
  BOOST_TEST(synthetic_data.layers() == real_data.layers());
  BOOST_TEST(synthetic_data.kv_heads() == real_data.kv_heads());
  BOOST_TEST(synthetic_data.q_heads() == real_data.q_heads());
  BOOST_TEST(synthetic_data.tokens() == real_data.tokens());
  BOOST_TEST(synthetic_data.head_dim() == real_data.head_dim());
  const auto synthetic = kvlab::mean_over_heads(kvlab::data_report(synthetic_data));
  for (const auto& t : tolerances)
    BOOST_TEST_MESSAGE(c.preset << " " << t.name << ": real " << real.*t.field << ", preset " << synthetic.*t.field);
  for (const auto& name : outside_tolerance(real, synthetic))
    BOOST_ERROR(preset << " is outside the tolerance of the real capture in " << name);

  // The tolerances discriminate: the uncalibrated generator at the same shape misses them.
  BOOST_TEST(outside_tolerance(real, mean_report("synthetic:llm(" + kvlab::shape_arguments(real_data) + ")")).size() >=
             3u);
}

} // namespace

BOOST_AUTO_TEST_SUITE(calibration)

BOOST_AUTO_TEST_CASE(stories260k_preset_matches_its_capture) {
  check_preset_matches_capture({"stories260K", "stories260K/stories260K.bin", "story.txt", "stories260K/tok512.bin"});
}

BOOST_AUTO_TEST_CASE(tinystories_656k_preset_matches_its_capture) {
  check_preset_matches_capture({"tinystories-656k", "tinystories-656k/model.safetensors", "story.txt", ""});
}

BOOST_AUTO_TEST_CASE(shakespeare_hd64_preset_matches_its_capture) {
  check_preset_matches_capture({"shakespeare-hd64", "shakespeare-hd64/shakespeare-hd64.bin",
                                "shared:shakespeare-hd64/heldout.txt", "shakespeare-hd64/tok260.bin"});
}

// A preset is the defaults a spec starts from: knobs given with it win, and it keeps the
// seed, so like=X,seed=2 is another draw of the same workload.
BOOST_AUTO_TEST_CASE(knobs_given_with_a_preset_win) {
  const auto preset = kvlab::load_data("synthetic:llm(like=stories260K)");
  BOOST_TEST((preset.keys.shape() == kvlab::kv_shape{5, 4, 512, 8}));
  const auto longer = kvlab::load_data("synthetic:llm(like=stories260K,T=1024,seed=2)");
  BOOST_TEST((longer.keys.shape() == kvlab::kv_shape{5, 4, 1024, 8}));
  const auto explicit_knobs = kvlab::load_data("synthetic:llm(like=stories260K,D=16)");
  BOOST_TEST(explicit_knobs.head_dim() == 16u);
}

BOOST_AUTO_TEST_CASE(a_bad_preset_is_named) {
  const auto message_of = [](const std::string& spec) {
    return kvlab_test::message_of<kvlab::error>([&] { kvlab::load_data(spec); });
  };
  BOOST_TEST(message_of("synthetic:llm(like=gpt5)")
                 .find("data spec 'synthetic:llm(like=gpt5)': unknown preset like=gpt5; presets: stories260K, "
                       "tinystories-656k, shakespeare-hd64") != std::string::npos);
  BOOST_TEST(message_of("synthetic:llm(like=stories260K,like=stories260K)").find("parameter 'like' is given twice") !=
             std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
