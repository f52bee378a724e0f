// Every SIMD kernel the CPU can run equals the scalar reference: odd sizes, tails, every
// code width, misaligned rows and groups starting mid-byte.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>
import kvlab;

namespace {

std::vector<kvlab::isa> simd_isas() {
  std::vector<kvlab::isa> isas;
  for (const auto candidate : {kvlab::isa::avx2, kvlab::isa::avx512})
    if (kvlab::cpu_supports(candidate)) isas.push_back(candidate);
  return isas;
}

// Sums of up to a few hundred products of O(1) values: summation order changes the result
// by a few ulps of the sum of magnitudes.
void check_close(float simd, float reference, float magnitude) {
  BOOST_TEST(std::fabs(simd - reference) <= 1e-5f * (magnitude + 1.0f));
}

struct random_bytes {
  kvlab::random_stream random{7, 11};
  std::vector<std::uint8_t> operator()(std::size_t n) {
    std::vector<std::uint8_t> out(n);
    for (auto &b : out) b = static_cast<std::uint8_t>(random.next());
    return out;
  }
  std::vector<float> floats(std::size_t n) {
    std::vector<float> out(n);
    for (auto &x : out) x = static_cast<float>(random.normal());
    return out;
  }
};

} // namespace

BOOST_AUTO_TEST_SUITE(kernels)

BOOST_AUTO_TEST_CASE(simd_code_kernels_match_scalar_reference) {
  const auto &scalar = kvlab::kernels_for(kvlab::isa::scalar);
  random_bytes random;
  for (const auto isa : simd_isas()) {
    const auto &simd = kvlab::kernels_for(isa);
    for (unsigned bits = 1; bits <= 8; ++bits) {
      const auto levels = random.floats(std::size_t{1} << bits);
      for (const std::size_t n : {1u, 7u, 15u, 16u, 17u, 31u, 33u, 64u, 100u, 129u}) {
        for (const std::size_t first : {0u, 1u, 2u, 3u, 32u}) {
          BOOST_TEST_CONTEXT(kvlab::isa_name(isa) << " bits " << bits << " n " << n << " first " << first) {
            const auto packed = random((first + n) * bits / 8 + 2);
            const auto query = random.floats(n);
            float magnitude = 0.0f;
            for (std::size_t i = 0; i < n; ++i) magnitude += std::fabs(query[i]) * 4.0f;
            check_close(simd.dot_codes(query.data(), packed.data(), first, n, bits, levels.data()),
                        scalar.dot_codes(query.data(), packed.data(), first, n, bits, levels.data()), magnitude);
            auto acc_simd = random.floats(n);
            auto acc_scalar = acc_simd;
            simd.axpy_codes(0.37f, packed.data(), first, n, bits, levels.data(), acc_simd.data());
            scalar.axpy_codes(0.37f, packed.data(), first, n, bits, levels.data(), acc_scalar.data());
            for (std::size_t i = 0; i < n; ++i) check_close(acc_simd[i], acc_scalar[i], 4.0f);
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(simd_float_row_kernels_match_scalar_on_misaligned_rows) {
  const auto &scalar = kvlab::kernels_for(kvlab::isa::scalar);
  random_bytes random;
  for (const auto isa : simd_isas()) {
    const auto &simd = kvlab::kernels_for(isa);
    for (const std::size_t n : {1u, 5u, 8u, 15u, 16u, 17u, 63u, 128u, 131u}) {
      for (const std::size_t misalign : {0u, 1u, 2u, 3u}) {
        // Rows hold valid, finite values of each format at an odd byte offset.
        const auto values = random.floats(n);
        std::vector<std::uint8_t> f32(4 * n + misalign), f16(2 * n + misalign), bf16(2 * n + misalign);
        for (std::size_t i = 0; i < n; ++i) {
          std::memcpy(f32.data() + misalign + 4 * i, &values[i], 4);
          const std::uint16_t h = kvlab::float_to_half_bits(values[i]), b = kvlab::float_to_bf16_bits(values[i]);
          std::memcpy(f16.data() + misalign + 2 * i, &h, 2);
          std::memcpy(bf16.data() + misalign + 2 * i, &b, 2);
        }
        const auto query = random.floats(n);
        float magnitude = 0.0f;
        for (std::size_t i = 0; i < n; ++i) magnitude += std::fabs(query[i] * values[i]);
        BOOST_TEST_CONTEXT(kvlab::isa_name(isa) << " n " << n << " misaligned by " << misalign) {
          const std::uint8_t *rows[] = {f32.data() + misalign, f16.data() + misalign, bf16.data() + misalign};
          using dot_fn = float (*)(const float *, const std::uint8_t *, std::size_t);
          using axpy_fn = void (*)(float, const std::uint8_t *, std::size_t, float *);
          const dot_fn simd_dots[] = {simd.dot_f32, simd.dot_f16, simd.dot_bf16};
          const dot_fn scalar_dots[] = {scalar.dot_f32, scalar.dot_f16, scalar.dot_bf16};
          const axpy_fn simd_axpys[] = {simd.axpy_f32, simd.axpy_f16, simd.axpy_bf16};
          const axpy_fn scalar_axpys[] = {scalar.axpy_f32, scalar.axpy_f16, scalar.axpy_bf16};
          for (int format = 0; format < 3; ++format) {
            check_close(simd_dots[format](query.data(), rows[format], n),
                        scalar_dots[format](query.data(), rows[format], n), magnitude);
            auto acc_simd = random.floats(n);
            auto acc_scalar = acc_simd;
            simd_axpys[format](-1.25f, rows[format], n, acc_simd.data());
            scalar_axpys[format](-1.25f, rows[format], n, acc_scalar.data());
            for (std::size_t i = 0; i < n; ++i) check_close(acc_simd[i], acc_scalar[i], 4.0f);
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(scalar_reference_decodes_packed_codes_exactly) {
  // Codes 0..2^bits-1 packed by the cache's packer come back from the kernel as levels.
  for (unsigned bits = 1; bits <= 8; ++bits) {
    const std::size_t n = 37;
    std::vector<std::uint32_t> codes(n);
    std::vector<float> levels(std::size_t{1} << bits), query(n, 0.0f);
    for (std::size_t i = 0; i < levels.size(); ++i) levels[i] = static_cast<float>(i);
    for (std::size_t i = 0; i < n; ++i) codes[i] = static_cast<std::uint32_t>((i * 5 + 3) % levels.size());
    std::vector<std::uint8_t> packed((n * bits + 7) / 8);
    kvlab::pack_codes(codes, bits, packed);
    std::vector<float> decoded(n, 0.0f);
    kvlab::kernels_for(kvlab::isa::scalar).axpy_codes(1.0f, packed.data(), 0, n, bits, levels.data(), decoded.data());
    for (std::size_t i = 0; i < n; ++i) {
      BOOST_TEST(decoded[i] == static_cast<float>(codes[i]));
      BOOST_TEST(kvlab::unpack_code(packed, i, bits) == codes[i]);
    }
  }
}

BOOST_AUTO_TEST_CASE(unknown_or_unavailable_isa_is_an_error) {
  BOOST_CHECK_THROW(kvlab::parse_isa("sse9"), kvlab::error);
  BOOST_TEST((kvlab::parse_isa("avx2") == kvlab::isa::avx2));
}

BOOST_AUTO_TEST_SUITE_END()
