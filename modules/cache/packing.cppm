// Bit packing of codes: the one layout storage, kernels and tests share.
module;
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
export module kvlab.cache:packing;

export namespace kvlab {

// Codes are packed little-endian at exactly `bits` bits: element i occupies bits
// [i*bits, (i+1)*bits) of `out`, least significant first (the kernels' layout).
inline void pack_codes(std::span<const std::uint32_t> codes, unsigned bits, std::span<std::uint8_t> out) {
  std::memset(out.data(), 0, out.size());
  if (bits == 32 || bits == 16) {
    for (std::size_t i = 0; i < codes.size(); ++i) std::memcpy(out.data() + i * bits / 8, &codes[i], bits / 8);
    return;
  }
  for (std::size_t i = 0; i < codes.size(); ++i) {
    const std::size_t bit = i * bits;
    const unsigned window = codes[i] << (bit % 8);
    out[bit / 8] |= static_cast<std::uint8_t>(window);
    if (bit % 8 + bits > 8) out[bit / 8 + 1] |= static_cast<std::uint8_t>(window >> 8);
  }
}

inline std::uint32_t unpack_code(std::span<const std::uint8_t> packed, std::size_t index, unsigned bits) {
  if (bits == 32 || bits == 16) {
    std::uint32_t code = 0;
    std::memcpy(&code, packed.data() + index * bits / 8, bits / 8);
    return code;
  }
  const std::size_t bit = index * bits;
  unsigned window = packed[bit / 8];
  if (bit % 8 + bits > 8) window |= unsigned{packed[bit / 8 + 1]} << 8;
  return (window >> (bit % 8)) & ((1u << bits) - 1u);
}

} // namespace kvlab
