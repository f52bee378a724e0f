// Conformance: every quantizer the registry knows (every width of every family) at every
// granularity it offers, through the reference codec and through a real compressed
// stream on every ISA. A new strategy file is covered here without editing this file.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>
import kvlab;

namespace {

std::vector<float> gaussian_rows(std::size_t rows, std::size_t head_dim, std::uint64_t seed) {
  kvlab::random_stream random(seed, 0);
  std::vector<float> values(rows * head_dim);
  for (auto& x : values) x = static_cast<float>(random.normal());
  return values;
}

std::vector<kvlab::isa> every_isa() {
  std::vector<kvlab::isa> isas{kvlab::isa::scalar};
  for (const auto isa : {kvlab::isa::avx2, kvlab::isa::avx512, kvlab::isa::avx512_vnni})
    if (kvlab::cpu_supports(isa)) isas.push_back(isa);
  return isas;
}

// Relative precision of the raw float formats (half an ulp).
double float_format_tolerance(kvlab::element_format format) {
  switch (format) {
  case kvlab::element_format::f32: return 0.0;
  case kvlab::element_format::f16: return 0x1p-11;
  case kvlab::element_format::bf16: return 0x1p-8;
  case kvlab::element_format::codebook:
  case kvlab::element_format::group_code: break;
  }
  return 0.0;
}

// Whether a quantizer of whole groups (polar) codes groups of this shape: one token's
// channels, as many as its blocks tile.
bool codes_whole_groups_of(const kvlab::any_quantizer& quantizer, kvlab::group_shape shape) {
  if (shape.tokens != 1) return false;
  try {
    return quantizer.group_codec(shape.channels) != nullptr;
  } catch (const kvlab::error&) {
    return false;
  }
}

} // namespace

BOOST_AUTO_TEST_SUITE(conformance)

BOOST_AUTO_TEST_CASE(registry_offers_instances_of_every_kind) {
  for (const auto kind : {kvlab::component_kind::quantizer, kvlab::component_kind::granularity,
                          kvlab::component_kind::eviction, kvlab::component_kind::storage})
    BOOST_TEST(!kvlab::builtin_registry().instances(kind).empty(), kvlab::kind_name(kind));
#ifdef KVLAB_TEST_STRATEGIES
  // tests/strategies/test_sign.cppm is found by the build alone.
  const auto quantizers = kvlab::builtin_registry().instances(kvlab::component_kind::quantizer);
  BOOST_TEST(std::ranges::count(quantizers, "test_sign") == 1);
#endif
}

BOOST_AUTO_TEST_CASE(every_quantizer_at_every_granularity_encodes_to_the_nearest_level) {
  const std::size_t tokens = 40; // not a multiple of channel(32): the last block is short
  for (const auto& q_name : kvlab::builtin_registry().instances(kvlab::component_kind::quantizer)) {
    for (const auto& g_name : kvlab::builtin_registry().instances(kvlab::component_kind::granularity)) {
      for (const std::size_t head_dim : {64u, 128u}) {
        BOOST_TEST_CONTEXT(q_name << "@" << g_name << " head_dim " << head_dim) {
          const auto quantizer = kvlab::builtin_registry().make_quantizer(q_name);
          // Groups tile the rows the body stores (a sketch's M values).
          const std::size_t width = quantizer.stored_dim(head_dim);
          const auto shape = kvlab::builtin_registry().make_granularity(g_name).group_shape(width);
          const auto values = gaussian_rows(tokens, head_dim, head_dim);
          // A sketch's scale is its own token's norm; a residual is encoded per token; a
          // code of whole groups needs groups its blocks tile.
          const bool whole_groups = quantizer.format() == kvlab::element_format::group_code;
          if (((!quantizer.invertible() || quantizer.residual()) && shape.tokens != 1) ||
              (whole_groups && !codes_whole_groups_of(quantizer, shape))) {
            BOOST_CHECK_THROW(
                kvlab::quantize_dequantize(quantizer, shape, kvlab::param_precision::f16, values, tokens, head_dim),
                kvlab::error);
            continue;
          }
          const auto out =
              kvlab::quantize_dequantize(quantizer, shape, kvlab::param_precision::f16, values, tokens, head_dim);
          if (quantizer.residual()) continue; // two quantizers' sum: residual_tests

          // Exact bits: codes plus one fp16 value per parameter per group.
          const std::size_t block = shape.tokens == 0 ? tokens : shape.tokens;
          const std::size_t groups = (tokens + block - 1) / block * (width / shape.channels);
          BOOST_TEST(out.stats.groups == groups);
          BOOST_TEST(out.stats.bits_per_element ==
                     static_cast<double>(quantizer.row_code_bits(width, shape.channels)) /
                             static_cast<double>(head_dim) +
                         8.0 *
                             static_cast<double>(kvlab::param_bytes(quantizer, kvlab::param_precision::f16) * groups *
                                                 quantizer.params_per_group()) /
                             static_cast<double>(tokens * head_dim));
          // A sketch's stored rows are not its decoded rows mapped again (qjl_tests checks them).
          if (!quantizer.invertible()) continue;
          // A code of whole groups has no level per value (polar_tests checks its angles).
          if (whole_groups) continue;

          // Compare in the quantizer's own (rotated) space.
          auto x = values, y = out.decoded;
          for (std::size_t t = 0; t < tokens; ++t) {
            quantizer.rotate(std::span(x).subspan(t * head_dim, head_dim));
            quantizer.rotate(std::span(y).subspan(t * head_dim, head_dim));
          }
          if (quantizer.format() != kvlab::element_format::codebook) {
            for (std::size_t i = 0; i < x.size(); ++i)
              BOOST_TEST_REQUIRE(std::fabs(y[i] - x[i]) <=
                                 float_format_tolerance(quantizer.format()) * std::fabs(x[i]));
            continue;
          }
          // Every value decodes to the level nearest to it among those its group's stored
          // parameters can represent. (Rotation changes y by a float rounding, hence 1e-5.)
          for (std::size_t t0 = 0; t0 < tokens; t0 += block) {
            for (std::size_t c0 = 0; c0 < head_dim; c0 += shape.channels) {
              std::vector<float> group;
              for (std::size_t t = t0; t < std::min(tokens, t0 + block); ++t)
                for (std::size_t c = c0; c < c0 + shape.channels; ++c) group.push_back(x[t * head_dim + c]);
              const auto p = kvlab::stored_params(quantizer, group, kvlab::param_precision::f16);
              // Quantizers that choose codes against the fitted parameters (ggml's formats)
              // may pick a neighbour of the nearest stored level, by at most the parameters'
              // fp16 rounding (2^-11 relative) at the extreme levels; iq4_nl chooses them
              // against its first scale d0 = (signed largest magnitude) / -127 and stores
              // another, so its levels are checked against d0's choice.
              float slack = 0.0f, first_scale = 0.0f;
              if (quantizer.encodes_groups())
                for (const float level : quantizer.levels())
                  slack = std::max(slack, 0x1p-10f * (std::fabs(p.scale * level) + std::fabs(p.zero)));
              if (q_name == "iq4_nl")
                for (const float v : group)
                  if (std::fabs(v) > std::fabs(first_scale)) first_scale = v;
              first_scale /= -127.0f;
              for (std::size_t t = t0; t < std::min(tokens, t0 + block); ++t) {
                for (std::size_t c = c0; c < c0 + shape.channels; ++c) {
                  const float xi = x[t * head_dim + c], yi = y[t * head_dim + c];
                  if (q_name == "iq4_nl" && first_scale != 0.0f) {
                    float chosen = 0.0f, best = INFINITY; // the nearest level to x / d0, the upper on a tie
                    for (const float level : quantizer.levels())
                      if (std::fabs(level - xi / first_scale) <= best)
                        best = std::fabs(level - xi / first_scale), chosen = level;
                    BOOST_TEST_REQUIRE(std::fabs(yi - p.scale * chosen) <= 1e-5f * (1.0f + std::fabs(xi)),
                                       "token " << t << " channel " << c << ": " << xi << " -> " << yi);
                    continue;
                  }
                  float best = INFINITY;
                  for (const float level : quantizer.levels())
                    if (std::isfinite(level)) best = std::min(best, std::fabs(p.scale * level + p.zero - xi));
                  BOOST_TEST_REQUIRE(std::fabs(yi - xi) <= best + slack + 1e-5f * (1.0f + std::fabs(xi)),
                                     "token " << t << " channel " << c << ": " << xi << " -> " << yi);
                }
              }
            }
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(cache_streams_on_every_isa_store_exactly_what_the_reference_codec_decodes) {
  const std::size_t head_dim = 128, tokens = 37; // more than two blocks of 16
  const auto values = gaussian_rows(tokens, head_dim, 5);
  const auto query = gaussian_rows(1, head_dim, 6);
  const auto weights = gaussian_rows(1, tokens, 7);
  for (const auto& q_name : kvlab::builtin_registry().instances(kvlab::component_kind::quantizer)) {
    for (const auto& g_name : kvlab::builtin_registry().instances(kvlab::component_kind::granularity)) {
      const auto quantizer = kvlab::builtin_registry().make_quantizer(q_name);
      const std::size_t width = quantizer.stored_dim(head_dim);
      const auto shape = kvlab::builtin_registry().make_granularity(g_name).group_shape(width);
      if (shape.tokens != 1) {
        // Token-spanning groups are the residual window's job; until then, a clear error.
        if (shape.tokens == 0)
          BOOST_CHECK_EXCEPTION(kvlab::kv_stream(quantizer, shape, head_dim, kvlab::param_precision::f16,
                                                 kvlab::builtin_registry().make_storage("flat"), {}),
                                kvlab::error, [](const kvlab::error& e) {
                                  return std::string(e.what()).find("use them with kvlab codec") != std::string::npos;
                                });
        // Per token: a scale byte per block of a token's values, a sketch's norm, a residual,
        // a code of whole groups.
        else if (!quantizer.scale_levels().empty() || !quantizer.invertible() || quantizer.residual() ||
                 quantizer.format() == kvlab::element_format::group_code)
          BOOST_CHECK_THROW(kvlab::kv_stream(quantizer, shape, head_dim, kvlab::param_precision::f16,
                                             kvlab::builtin_registry().make_storage("flat"), {}),
                            kvlab::error);
        continue; // token-spanning groups: see the tier tests
      }
      if (quantizer.format() == kvlab::element_format::group_code && !codes_whole_groups_of(quantizer, shape)) {
        BOOST_CHECK_THROW(kvlab::kv_stream(quantizer, shape, head_dim, kvlab::param_precision::f16,
                                           kvlab::builtin_registry().make_storage("flat"), {}),
                          kvlab::error);
        continue;
      }
      const auto reference =
          kvlab::quantize_dequantize(quantizer, shape, kvlab::param_precision::f16, values, tokens, head_dim);
      for (const auto isa : every_isa()) {
        BOOST_TEST_CONTEXT(q_name << "@" << g_name << " " << kvlab::isa_name(isa)) {
          const auto& kernels = kvlab::kernels_for(isa);
          kvlab::kv_stream stream(quantizer, shape, head_dim, kvlab::param_precision::f16,
                                  kvlab::builtin_registry().make_storage("flat"), {});
          for (std::size_t t = 0; t < tokens; ++t)
            stream.append(std::span(values).subspan(t * head_dim, head_dim), kernels);

          // Exact byte count: packed codes plus fp16 parameters (or scale bytes), per token.
          const std::size_t record = (quantizer.row_code_bits(width, shape.channels) + 7) / 8 +
                                     width / shape.channels * quantizer.params_per_group() *
                                         kvlab::param_bytes(quantizer, kvlab::param_precision::f16);
          BOOST_TEST(stream.body().layout().bytes() == record);
          if (!quantizer.residual()) BOOST_TEST(stream.bytes() == tokens * record); // else residual_tests

          // Kernel encoding chose the reference's codes: decoding them gives the reference
          // codec's output bit for bit. The decode kernel agrees to rounding.
          const auto map = quantizer.projection(head_dim);
          std::vector<float> decoded(head_dim), by_kernel(head_dim), stored(width);
          std::vector<double> ref_scores(tokens), ref_acc(head_dim, 0.0);
          for (std::size_t t = 0; t < tokens; ++t) {
            stream.decode(t, decoded);
            stream.body().decode(t, stored, kernels);
            if (map)
              map->adjoint(stored, by_kernel);
            else
              by_kernel = stored;
            for (std::size_t c = 0; c < head_dim; ++c) {
              BOOST_TEST_REQUIRE(decoded[c] == reference.decoded[t * head_dim + c], "token " << t << " channel " << c);
              if (!quantizer.residual()) // the body's own records: a residual tier adds to them
                BOOST_TEST_REQUIRE(std::fabs(by_kernel[c] - decoded[c]) <= 1e-5f * (1.0f + std::fabs(decoded[c])));
              ref_scores[t] += double{query[c]} * decoded[c];
              ref_acc[c] += double{weights[t]} * decoded[c];
            }
          }
          // Fused dot and axpy equal dequantize-then-compute.
          std::vector<float> scores(tokens), acc(head_dim, 0.0f);
          stream.dot_all(kernels, query, 1, scores);
          stream.axpy_all(kernels, weights, 1, acc);
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
  const auto quantizer = kvlab::builtin_registry().make_quantizer("int8");
  const auto& kernels = kvlab::active_kernels();
  kvlab::kv_stream stream(quantizer, {.tokens = 1, .channels = 4}, 4, kvlab::param_precision::f16,
                          kvlab::builtin_registry().make_storage("flat"), {});
  const std::vector<float> huge{1e9f, -2e9f, 3.0f, 0.0f};
  BOOST_CHECK_THROW(stream.append(huge, kernels), kvlab::error);
  kvlab::kv_stream wide(quantizer, {.tokens = 1, .channels = 4}, 4, kvlab::param_precision::f32,
                        kvlab::builtin_registry().make_storage("flat"), {});
  wide.append(huge, kernels);
  std::vector<float> decoded(4);
  wide.decode(0, decoded);
  BOOST_TEST(std::fabs(decoded[1] - huge[1]) <= 2e9f / 127.0f);
}

BOOST_AUTO_TEST_CASE(storage_stores_compact_on_erase_and_release_memory) {
  for (const auto& s_name : kvlab::builtin_registry().instances(kvlab::component_kind::storage)) {
    BOOST_TEST_CONTEXT(s_name) {
      const auto store = kvlab::builtin_registry().make_storage(s_name).make_store(3);
      for (std::uint8_t i = 0; i < 10; ++i) store->append(std::vector<std::uint8_t>{i, i, i});
      BOOST_TEST(store->bytes_reserved() >= 30u);
      const std::size_t before = store->bytes_reserved();
      const std::vector<std::size_t> victims{0, 4, 5, 9};
      store->erase(victims);
      BOOST_TEST(store->size() == 6u);
      BOOST_TEST(store->bytes_reserved() <= before); // strictly less once whole pages empty (tier tests)
      const std::uint8_t expected[] = {1, 2, 3, 6, 7, 8};
      for (std::size_t i = 0; i < 6; ++i) BOOST_TEST(store->record(i)[0] == expected[i]);
      BOOST_CHECK_THROW(store->append(std::vector<std::uint8_t>{1, 2}), kvlab::error);
      const std::vector<std::size_t> unsorted{3, 1}, out_of_range{6};
      BOOST_CHECK_THROW(store->erase(unsorted), kvlab::error);
      BOOST_CHECK_THROW(store->erase(out_of_range), kvlab::error);
    }
  }
}

// An evicting cache's pattern: append one record, erase one to three near the front, the
// middle, the end or scattered, for many steps. Every store keeps exactly the records a plain list
// keeps, in order, on cache lines, whichever side of the victims it moves.
BOOST_AUTO_TEST_CASE(storage_stores_follow_a_reference_list_through_an_eviction_pattern) {
  for (const auto& s_name : kvlab::builtin_registry().instances(kvlab::component_kind::storage))
    for (const std::size_t record_bytes : {std::size_t{64}, std::size_t{40}}) {
      BOOST_TEST_CONTEXT(s_name << ", records of " << record_bytes << " bytes") {
        const auto store = kvlab::builtin_registry().make_storage(s_name).make_store(record_bytes);
        std::vector<std::uint32_t> reference; // the id of every live record, in order
        const auto append = [&](std::uint32_t id) {
          std::vector<std::uint8_t> record(record_bytes);
          std::memcpy(record.data(), &id, sizeof id);
          store->append(record);
          reference.push_back(id);
        };
        for (std::uint32_t id = 0; id < 300; ++id) append(id);
        for (std::uint32_t step = 0; step < 2000; ++step) {
          append(300 + step);
          const std::size_t n = reference.size();
          std::vector<std::size_t> victims;
          switch (step % 6) {
          case 0: victims = {4}; break;                                   // behind 4 sinks
          case 1: victims = {0, 1}; break;                                // the oldest two
          case 2: victims = {n / 2}; break;                               // the middle
          case 3: victims = {3, n - 2}; break;                            // both ends
          case 4: victims = {n - 40}; break;                              // the edge of a recent window
          default: victims = {step % 97, 100 + step % 89, n - 41}; break; // scattered
          }
          store->erase(victims);
          for (std::size_t v = victims.size(); v-- > 0;)
            reference.erase(reference.begin() + static_cast<std::ptrdiff_t>(victims[v]));
          for (std::uint32_t extra = 1; extra < victims.size(); ++extra) append(100000 + 4 * step + extra); // near 300
          BOOST_TEST_REQUIRE(store->size() == reference.size());
          BOOST_TEST_REQUIRE(reinterpret_cast<std::uintptr_t>(store->run(0).data()) % kvlab::cache_line_bytes == 0u);
          for (const std::size_t i : {std::size_t{0}, reference.size() / 3, reference.size() - 1}) {
            std::uint32_t id = 0;
            std::memcpy(&id, store->record(i).data(), sizeof id);
            BOOST_TEST_REQUIRE(id == reference[i], "record " << i << " after step " << step);
          }
          // Walked run by run, as the kernels walk it, the store holds the same records.
          for (std::size_t i = 0; i < reference.size();) {
            const auto run = store->run(i);
            BOOST_TEST_REQUIRE((!run.empty() && run.size() % record_bytes == 0u));
            for (std::size_t r = 0; r < run.size() / record_bytes; ++r, ++i) {
              std::uint32_t id = 0;
              std::memcpy(&id, run.data() + r * record_bytes, sizeof id);
              BOOST_TEST_REQUIRE((i < reference.size() && id == reference[i]),
                                 "run record " << i << " after step " << step);
            }
          }
        }
        for (std::size_t i = 0; i < reference.size(); ++i) {
          std::uint32_t id = 0;
          std::memcpy(&id, store->record(i).data(), sizeof id);
          BOOST_TEST_REQUIRE(id == reference[i], "record " << i);
        }
        BOOST_TEST(store->bytes_reserved() >= reference.size() * record_bytes);
      }
    }
}

BOOST_AUTO_TEST_CASE(storage_runs_start_on_cache_lines) {
  // Every store's runs start on a 64-byte line, however large the buffer and after it grew
  // or was compacted: the kernels' vector loads of a run then never straddle two lines.
  for (const auto& s_name : kvlab::builtin_registry().instances(kvlab::component_kind::storage)) {
    BOOST_TEST_CONTEXT(s_name) {
      const auto store = kvlab::builtin_registry().make_storage(s_name).make_store(32);
      const auto aligned = [](std::span<const std::uint8_t> run) {
        return reinterpret_cast<std::uintptr_t>(run.data()) % kvlab::cache_line_bytes == 0;
      };
      for (std::size_t i = 0; i < 70000; ++i) {
        store->append(std::vector<std::uint8_t>(32, static_cast<std::uint8_t>(i)));
        if (i % 9999 == 0) BOOST_TEST(aligned(store->run(0)));
      }
      BOOST_TEST(aligned(store->run(0)));
      const std::vector<std::size_t> victims{0, 1, 2};
      store->erase(victims);
      BOOST_TEST(aligned(store->run(0)));
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
