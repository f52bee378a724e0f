// Helpers the kernel and encoder tests share: the SIMD instruction sets this CPU runs and a
// seeded source of random bytes and floats. Include after `import kvlab;`.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvlab_test {

inline std::vector<kvlab::isa> simd_isas() {
  std::vector<kvlab::isa> isas;
  for (const auto candidate : {kvlab::isa::avx2, kvlab::isa::avx512, kvlab::isa::avx512_vnni})
    if (kvlab::cpu_supports(candidate)) isas.push_back(candidate);
  return isas;
}

struct random_bytes {
  kvlab::random_stream random{7, 11};
  std::vector<std::uint8_t> operator()(std::size_t n) {
    std::vector<std::uint8_t> out(n);
    for (auto& b : out) b = static_cast<std::uint8_t>(random.next());
    return out;
  }
  std::vector<float> floats(std::size_t n) {
    std::vector<float> out(n);
    for (auto& x : out) x = static_cast<float>(random.normal());
    return out;
  }
};

} // namespace kvlab_test
