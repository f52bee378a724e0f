// Bit packing of codes: the one layout storage, kernels and tests share.
module;
#include "kernels_scalar.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
export module kvlab.cache:packing;

export namespace kvlab {

// Codes are packed little-endian at exactly `bits` bits (the kernels' own put_code and
// code_at for codes of up to 8 bits; whole 16- and 32-bit words for float formats): element i occupies bits
// [i*bits, (i+1)*bits) of `out`, least significant first (the kernels' layout).
inline void pack_codes(std::span<const std::uint32_t> codes, unsigned bits, std::span<std::uint8_t> out) {
  std::memset(out.data(), 0, out.size());
  if (bits == 32 || bits == 16) {
    for (std::size_t i = 0; i < codes.size(); ++i) std::memcpy(out.data() + i * bits / 8, &codes[i], bits / 8);
    return;
  }
  for (std::size_t i = 0; i < codes.size(); ++i) kernels::scalar::put_code(out.data(), i, bits, codes[i]);
}

inline std::uint32_t unpack_code(std::span<const std::uint8_t> packed, std::size_t index, unsigned bits) {
  if (bits == 32 || bits == 16) {
    std::uint32_t code = 0;
    std::memcpy(&code, packed.data() + index * bits / 8, bits / 8);
    return code;
  }
  return kernels::scalar::code_at(packed.data(), index, bits);
}

} // namespace kvlab
