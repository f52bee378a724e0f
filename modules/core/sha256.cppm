// SHA-256 (FIPS 180-4, sec. 5.1.1 padding, 5.3.3 initial value, 6.2 computation): checksums of
// test data and model files, so a corrupt or substituted file is caught before it is used.
//   sha256_hex(bytes)     -> 64 lowercase hexadecimal digits
//   sha256_file_hex(file) -> the same for a whole file (memory-mapped; kvlab::error if unreadable)
module;
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
export module kvlab.core:sha256;
import :mapped_file;

namespace kvlab::detail {

// The first 32 bits of the fractional parts of the cube roots of the first 64 primes (sec. 4.2.2).
inline constexpr std::array<std::uint32_t, 64> sha256_round_constants = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

// The first 32 bits of the fractional parts of the square roots of the first 8 primes (sec. 5.3.3).
inline constexpr std::array<std::uint32_t, 8> sha256_initial_state = {
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
};

// Processes one 64-byte block (sec. 6.2.2).
inline void sha256_block(std::array<std::uint32_t, 8>& state, const std::byte* block) noexcept {
  std::array<std::uint32_t, 64> w{};
  for (std::size_t t = 0; t < 16; ++t) {
    // Message words are big-endian.
    w[t] = std::uint32_t{std::to_integer<std::uint8_t>(block[4 * t])} << 24 |
           std::uint32_t{std::to_integer<std::uint8_t>(block[4 * t + 1])} << 16 |
           std::uint32_t{std::to_integer<std::uint8_t>(block[4 * t + 2])} << 8 |
           std::uint32_t{std::to_integer<std::uint8_t>(block[4 * t + 3])};
  }
  for (std::size_t t = 16; t < 64; ++t) {
    const std::uint32_t s0 = std::rotr(w[t - 15], 7) ^ std::rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
    const std::uint32_t s1 = std::rotr(w[t - 2], 17) ^ std::rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
  auto [a, b, c, d, e, f, g, h] = state;
  for (std::size_t t = 0; t < 64; ++t) {
    const std::uint32_t sigma1 = std::rotr(e, 6) ^ std::rotr(e, 11) ^ std::rotr(e, 25);
    const std::uint32_t choose = (e & f) ^ (~e & g);
    const std::uint32_t t1 = h + sigma1 + choose + sha256_round_constants[t] + w[t];
    const std::uint32_t sigma0 = std::rotr(a, 2) ^ std::rotr(a, 13) ^ std::rotr(a, 22);
    const std::uint32_t majority = (a & b) ^ (a & c) ^ (b & c);
    const std::uint32_t t2 = sigma0 + majority;
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  const std::array<std::uint32_t, 8> working = {a, b, c, d, e, f, g, h};
  for (std::size_t i = 0; i < 8; ++i) state[i] += working[i];
}

} // namespace kvlab::detail

export namespace kvlab {

// The SHA-256 digest of `bytes` as 64 lowercase hexadecimal digits (as sha256sum prints it).
inline std::string sha256_hex(std::span<const std::byte> bytes) {
  std::array<std::uint32_t, 8> state = detail::sha256_initial_state;
  const std::size_t whole_blocks = bytes.size() / 64;
  for (std::size_t i = 0; i < whole_blocks; ++i) detail::sha256_block(state, bytes.data() + 64 * i);

  // Padding (sec. 5.1.1): the rest of the message, a 1 bit, zeros, and the length in bits as a
  // 64-bit big-endian number, filling one or two final blocks.
  std::array<std::byte, 128> tail{};
  const std::size_t rest = bytes.size() - 64 * whole_blocks;
  for (std::size_t i = 0; i < rest; ++i) tail[i] = bytes[64 * whole_blocks + i];
  tail[rest] = std::byte{0x80};
  const std::size_t tail_bytes = rest + 1 + 8 <= 64 ? 64 : 128;
  const std::uint64_t bit_length = static_cast<std::uint64_t>(bytes.size()) * 8;
  for (std::size_t i = 0; i < 8; ++i) tail[tail_bytes - 1 - i] = static_cast<std::byte>((bit_length >> (8 * i)) & 0xff);
  for (std::size_t offset = 0; offset < tail_bytes; offset += 64) detail::sha256_block(state, tail.data() + offset);

  constexpr char digits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(64);
  for (const std::uint32_t word : state)
    for (int shift = 28; shift >= 0; shift -= 4) hex += digits[(word >> shift) & 0xf];
  return hex;
}

// The SHA-256 digest of the whole file; kvlab::error naming the file if it cannot be read.
inline std::string sha256_file_hex(const std::filesystem::path& file) { return sha256_hex(mapped_file(file).bytes()); }

} // namespace kvlab
