// Kernel entry points: one table of function pointers per instruction set.
// The scalar table is the reference; the AVX2 and AVX-512 tables are built from the same
// templates in their own translation units with their own -m flags (see kernels_simd.hpp).
// Plain header, not a module: ISA-flagged code must never be in a module target.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kvlab::kernels {

enum class isa { scalar, avx2, avx512 };

// Codes are bit-packed little-endian: element i occupies bits [i*bits, (i+1)*bits) of the
// byte stream, least significant bit first. `levels` maps a code to its unscaled value
// (2^bits entries). `first` is the index of the first element used, so a group inside a
// packed row can be addressed without re-aligning it.
struct kernel_table {
  isa instruction_set;
  // sum over i < n of query[i] * levels[code(first + i)]
  float (*dot_codes)(const float *query, const std::uint8_t *packed, std::size_t first, std::size_t n, unsigned bits,
                     const float *levels);
  // acc[i] += alpha * levels[code(first + i)] for i < n
  void (*axpy_codes)(float alpha, const std::uint8_t *packed, std::size_t first, std::size_t n, unsigned bits,
                     const float *levels, float *acc);
  // Raw float rows, possibly unaligned: f32, IEEE f16 and bf16 bit patterns.
  float (*dot_f32)(const float *query, const std::uint8_t *row, std::size_t n);
  void (*axpy_f32)(float alpha, const std::uint8_t *row, std::size_t n, float *acc);
  float (*dot_f16)(const float *query, const std::uint8_t *row, std::size_t n);
  void (*axpy_f16)(float alpha, const std::uint8_t *row, std::size_t n, float *acc);
  float (*dot_bf16)(const float *query, const std::uint8_t *row, std::size_t n);
  void (*axpy_bf16)(float alpha, const std::uint8_t *row, std::size_t n, float *acc);
};

const kernel_table &scalar_kernels() noexcept;
const kernel_table &avx2_kernels() noexcept;
const kernel_table &avx512_kernels() noexcept;

// What this CPU can run (checked once, with cpuid).
bool cpu_supports(isa instruction_set) noexcept;
std::string_view isa_name(isa instruction_set) noexcept;

} // namespace kvlab::kernels
