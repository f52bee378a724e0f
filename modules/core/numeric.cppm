// Numeric helpers shared by strategies and storage: half/bfloat16 conversions (from the
// kernel header, so kernels and framework agree bit for bit) and number parsing.
module;
#include "half.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
export module kvlab.core:numeric;
import :errors;

export namespace kvlab {

using kernels::bf16_bits_to_float;
using kernels::float_to_bf16_bits;
using kernels::float_to_half_bits;
using kernels::half_bits_to_float;

// Rounds to the nearest fp16 value (ties to even), as stored.
inline float round_to_half(float value) noexcept { return half_bits_to_float(float_to_half_bits(value)); }

// The low `bits` bits (at most 32) of `value` written at bit `offset` of `bytes`, least
// significant first, the other bits untouched (codes of whole groups: polar); read_bits
// reads them back. A byte at a time.
inline void write_bits(std::span<std::uint8_t> bytes, std::size_t offset, unsigned bits, std::uint32_t value) {
  while (bits > 0) {
    const unsigned shift = offset % 8, take = std::min(bits, 8 - shift);
    const auto mask = static_cast<std::uint8_t>(((1u << take) - 1) << shift);
    std::uint8_t& byte = bytes[offset / 8];
    byte = static_cast<std::uint8_t>((byte & ~mask) | ((value << shift) & mask));
    value >>= take, bits -= take, offset += take;
  }
}
inline std::uint32_t read_bits(std::span<const std::uint8_t> bytes, std::size_t offset, unsigned bits) {
  std::uint32_t value = 0;
  for (unsigned done = 0; done < bits;) {
    const unsigned shift = offset % 8, take = std::min(bits - done, 8 - shift);
    value |= ((std::uint32_t{bytes[offset / 8]} >> shift) & ((1u << take) - 1)) << done;
    done += take, offset += take;
  }
  return value;
}

// Shortest decimal text that parses back to the same value.
template <class T>
std::string format_number(T value) {
  char buffer[64];
  const auto [ptr, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, ptr);
}

// The longest sequence kvlab holds, in tokens (2^30). Token counts a user writes (budgets,
// sinks, residual windows, data lengths) are checked against it, so sums of a few such
// counts never wrap a 64-bit size.
inline constexpr std::size_t max_tokens = std::size_t{1} << 30;
// The most tokens or channels one quantization group spans.
inline constexpr std::size_t max_group_length = 65536;

// Parses all of `text` as a finite number of type T, or throws naming `what`.
template <class T>
T parse_number(std::string_view text, std::string_view what) {
  T value{};
  const auto* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (!text.empty() && ec == std::errc::result_out_of_range && ptr == end)
    throw error(std::string(what) + ": '" + std::string(text) + "' is out of range (the largest is " +
                format_number(std::numeric_limits<T>::max()) + ")");
  if (text.empty() || ec != std::errc{} || ptr != end)
    throw error(std::string(what) + ": '" + std::string(text) + "' is not a valid number");
  if constexpr (std::is_floating_point_v<T>)
    if (!std::isfinite(value)) throw error(std::string(what) + ": '" + std::string(text) + "' is not a finite number");
  return value;
}

// parse_number, and the value must lie in [lo, hi]; the message gives the range.
template <class T>
T parse_number_in(std::string_view text, std::string_view what, T lo, T hi) {
  const T value = parse_number<T>(text, what);
  if (!(value >= lo && value <= hi))
    throw error(std::string(what) + ": '" + std::string(text) + "' is outside " + format_number(lo) + ".." +
                format_number(hi));
  return value;
}

} // namespace kvlab
