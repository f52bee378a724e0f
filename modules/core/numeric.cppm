// Numeric helpers shared by strategies and storage: half/bfloat16 conversions (from the
// kernel header, so kernels and framework agree bit for bit) and number parsing.
module;
#include "half.hpp"

#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>
export module kvlab.core:numeric;
import :errors;

export namespace kvlab {

using kernels::bf16_bits_to_float;
using kernels::float_to_bf16_bits;
using kernels::float_to_half_bits;
using kernels::half_bits_to_float;

// Rounds to the nearest fp16 value (ties to even), as stored.
inline float round_to_half(float value) noexcept { return half_bits_to_float(float_to_half_bits(value)); }

// Parses all of `text` as a number of type T, or throws naming `what`.
template <class T>
T parse_number(std::string_view text, std::string_view what) {
  T value{};
  const auto* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc{} || ptr != end)
    throw error(std::string(what) + ": '" + std::string(text) + "' is not a valid number");
  return value;
}

// Shortest decimal text that parses back to the same value.
template <class T>
std::string format_number(T value) {
  char buffer[64];
  const auto [ptr, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, ptr);
}

} // namespace kvlab
