// 8-bit float codes (fp8_e4m3, fp8_e4m3fnuz, fp8_e5m2; arXiv 2209.05433, sec. 3) that a
// vector decoder reproduces bit for bit (fp8/half_bits.hpp), and the kernels that take
// them in pairs of 32 codes (fp8/pairs_avx512.hpp, AVX-512 only).
#pragma once
#include <cstdint>

namespace kvlab::kernels::simd {

enum class fp8_layout : std::uint8_t { none, e4m3, e4m3fnuz, e5m2 };

// The fp8 pair kernels of an architecture; defined for AVX-512 only (the coded-record
// kernels call them only where isa_ops<Arch>::fp8_pairs).
template <class Arch>
struct fp8_pair_kernels;

} // namespace kvlab::kernels::simd
