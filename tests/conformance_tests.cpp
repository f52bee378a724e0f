// Conformance: every quantizer the registry knows (every width of every family) at every
// granularity example, through a real compressed stream. A new strategy file is covered
// here without editing this file.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>
import kvlab;

namespace {

const kvlab::registry &components() { return kvlab::builtin_registry(); }

std::vector<float> gaussian_rows(std::size_t rows, std::size_t head_dim, std::uint64_t seed) {
  kvlab::random_stream random(seed, 0);
  std::vector<float> values(rows * head_dim);
  for (auto &x : values) x = static_cast<float>(random.normal());
  return values;
}

// Relative precision of the raw float formats (half an ulp).
double float_format_tolerance(kvlab::element_format format) {
  switch (format) {
  case kvlab::element_format::f32: return 0.0;
  case kvlab::element_format::f16: return 0x1p-11;
  case kvlab::element_format::bf16: return 0x1p-8;
  case kvlab::element_format::codebook: break;
  }
  return 0.0;
}

} // namespace

BOOST_AUTO_TEST_SUITE(conformance)

BOOST_AUTO_TEST_CASE(registry_offers_instances_of_every_kind) {
  for (const auto kind : {kvlab::component_kind::quantizer, kvlab::component_kind::granularity,
                          kvlab::component_kind::eviction, kvlab::component_kind::storage})
    BOOST_TEST(!components().instances(kind).empty(), kvlab::kind_name(kind));
#ifdef KVLAB_TEST_STRATEGIES
  // tests/strategies/test_sign.cppm is found by the build alone.
  const auto quantizers = components().instances(kvlab::component_kind::quantizer);
  BOOST_TEST(std::ranges::count(quantizers, "test_sign") == 1);
#endif
}

BOOST_AUTO_TEST_CASE(every_quantizer_at_every_granularity_round_trips_to_the_nearest_level) {
  for (const auto &q_name : components().instances(kvlab::component_kind::quantizer)) {
    for (const auto &g_name : components().instances(kvlab::component_kind::granularity)) {
      for (const std::size_t head_dim : {64u, 128u}) {
        BOOST_TEST_CONTEXT(q_name << "@" << g_name << " head_dim " << head_dim) {
          const auto quantizer = components().make_quantizer(q_name);
          const auto shape = components().make_granularity(g_name).group_shape(head_dim);
          kvlab::compressed_stream stream(quantizer, shape, head_dim, kvlab::param_precision::f16,
                                          components().make_storage("flat"));
          const std::size_t tokens = 9;
          const auto values = gaussian_rows(tokens, head_dim, head_dim);
          for (std::size_t t = 0; t < tokens; ++t) stream.append(std::span(values).subspan(t * head_dim, head_dim));

          // Exact byte count: packed codes plus fp16 parameters, per token.
          const std::size_t groups = head_dim / shape.channels;
          const std::size_t record = (head_dim * quantizer.bits() + 7) / 8 + groups * quantizer.params_per_group() * 2;
          BOOST_TEST(stream.layout().bytes() == record);
          BOOST_TEST(stream.bytes() == tokens * record);

          std::vector<float> decoded(head_dim);
          for (std::size_t t = 0; t < tokens; ++t) {
            stream.decode(t, decoded);
            for (std::size_t c = 0; c < head_dim; ++c) {
              const float x = values[t * head_dim + c];
              if (quantizer.format() != kvlab::element_format::codebook) {
                BOOST_TEST(std::fabs(decoded[c] - x) <= float_format_tolerance(quantizer.format()) * std::fabs(x));
                continue;
              }
              // The code chosen is the nearest value the group's stored parameters can
              // represent (no level is closer).
              const auto group_begin =
                  values.begin() + static_cast<std::ptrdiff_t>(t * head_dim + c / shape.channels * shape.channels);
              const auto params = [&] {
                auto p = quantizer.fit(std::span(&*group_begin, shape.channels));
                return kvlab::group_params{kvlab::round_to_half(p.scale), kvlab::round_to_half(p.zero)};
              }();
              float best = INFINITY;
              for (const float level : quantizer.levels())
                best = std::min(best, std::fabs(params.scale * level + params.zero - x));
              BOOST_TEST_REQUIRE(std::fabs(decoded[c] - x) <= best + 1e-6f * std::fabs(x),
                                 "token " << t << " channel " << c);
            }
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(fused_kernels_of_every_isa_equal_the_reference_decoder) {
  std::vector<kvlab::isa> isas{kvlab::isa::scalar};
  for (const auto isa : {kvlab::isa::avx2, kvlab::isa::avx512})
    if (kvlab::cpu_supports(isa)) isas.push_back(isa);
  const std::size_t head_dim = 128, tokens = 13;
  const auto values = gaussian_rows(tokens, head_dim, 5);
  const auto query = gaussian_rows(1, head_dim, 6);
  const auto weights = gaussian_rows(1, tokens, 7);
  for (const auto &q_name : components().instances(kvlab::component_kind::quantizer)) {
    for (const auto &g_name : components().instances(kvlab::component_kind::granularity)) {
      const auto quantizer = components().make_quantizer(q_name);
      const auto shape = components().make_granularity(g_name).group_shape(head_dim);
      kvlab::compressed_stream stream(quantizer, shape, head_dim, kvlab::param_precision::f32,
                                      components().make_storage("flat"));
      for (std::size_t t = 0; t < tokens; ++t) stream.append(std::span(values).subspan(t * head_dim, head_dim));
      // Reference: decode every token, then dot and accumulate in double.
      std::vector<double> ref_scores(tokens), ref_acc(head_dim, 0.0);
      std::vector<float> decoded(head_dim);
      for (std::size_t t = 0; t < tokens; ++t) {
        stream.decode(t, decoded);
        for (std::size_t c = 0; c < head_dim; ++c) {
          ref_scores[t] += double{query[c]} * decoded[c];
          ref_acc[c] += double{weights[t]} * decoded[c];
        }
      }
      for (const auto isa : isas) {
        BOOST_TEST_CONTEXT(q_name << "@" << g_name << " " << kvlab::isa_name(isa)) {
          const auto &kernels = kvlab::kernels_for(isa);
          std::vector<float> scores(tokens), acc(head_dim, 0.0f);
          stream.dot_all(kernels, query, scores);
          stream.axpy_all(kernels, weights, acc);
          for (std::size_t t = 0; t < tokens; ++t)
            BOOST_TEST(std::fabs(scores[t] - ref_scores[t]) <= 1e-4 * (1 + std::fabs(ref_scores[t])));
          for (std::size_t c = 0; c < head_dim; ++c)
            BOOST_TEST(std::fabs(acc[c] - ref_acc[c]) <= 1e-4 * (1 + std::fabs(ref_acc[c])));
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(parameters_beyond_fp16_range_are_an_error_not_infinity) {
  const auto quantizer = components().make_quantizer("int8");
  kvlab::compressed_stream stream(quantizer, {.tokens = 1, .channels = 4}, 4, kvlab::param_precision::f16,
                                  components().make_storage("flat"));
  const std::vector<float> huge{1e9f, -2e9f, 3.0f, 0.0f};
  BOOST_CHECK_THROW(stream.append(huge), kvlab::error);
  kvlab::compressed_stream wide(quantizer, {.tokens = 1, .channels = 4}, 4, kvlab::param_precision::f32,
                                components().make_storage("flat"));
  wide.append(huge);
  std::vector<float> decoded(4);
  wide.decode(0, decoded);
  BOOST_TEST(std::fabs(decoded[1] - huge[1]) <= 2e9f / 127.0f);
}

BOOST_AUTO_TEST_CASE(storage_stores_compact_on_erase_and_release_memory) {
  for (const auto &s_name : components().instances(kvlab::component_kind::storage)) {
    BOOST_TEST_CONTEXT(s_name) {
      const auto store = components().make_storage(s_name).make_store(3);
      for (std::uint8_t i = 0; i < 10; ++i) store->append(std::vector<std::uint8_t>{i, i, i});
      BOOST_TEST(store->bytes_reserved() >= 30u);
      const std::size_t before = store->bytes_reserved();
      const std::vector<std::size_t> victims{0, 4, 5, 9};
      store->erase(victims);
      BOOST_TEST(store->size() == 6u);
      BOOST_TEST(store->bytes_reserved() < before);
      const std::uint8_t expected[] = {1, 2, 3, 6, 7, 8};
      for (std::size_t i = 0; i < 6; ++i) BOOST_TEST(store->record(i)[0] == expected[i]);
      BOOST_CHECK_THROW(store->append(std::vector<std::uint8_t>{1, 2}), kvlab::error);
      const std::vector<std::size_t> unsorted{3, 1}, out_of_range{6};
      BOOST_CHECK_THROW(store->erase(unsorted), kvlab::error);
      BOOST_CHECK_THROW(store->erase(out_of_range), kvlab::error);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
