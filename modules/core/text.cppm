// Text helpers shared by kvlab's readers (JSON, npy and GGUF headers, tokenizers): hexadecimal
// digits, UTF-8 (RFC 3629 sec. 3) encoding and validation, and bytes quoted in messages.
module;
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
export module kvlab.core:text;

export namespace kvlab {

// The value of a hexadecimal digit (either case), or -1 for any other character.
inline int hex_digit_value(char digit) noexcept {
  if (digit >= '0' && digit <= '9') return digit - '0';
  if (digit >= 'a' && digit <= 'f') return digit - 'a' + 10;
  if (digit >= 'A' && digit <= 'F') return digit - 'A' + 10;
  return -1;
}

// Appends code point `code` (at most U+10FFFF, not a surrogate: the callers check) as UTF-8.
inline void append_utf8(std::string& out, std::uint32_t code) {
  if (code < 0x80) {
    out += static_cast<char>(code);
  } else if (code < 0x800) {
    out += static_cast<char>(0xc0 | code >> 6);
    out += static_cast<char>(0x80 | (code & 0x3f));
  } else if (code < 0x10000) {
    out += static_cast<char>(0xe0 | code >> 12);
    out += static_cast<char>(0x80 | (code >> 6 & 0x3f));
    out += static_cast<char>(0x80 | (code & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | code >> 18);
    out += static_cast<char>(0x80 | (code >> 12 & 0x3f));
    out += static_cast<char>(0x80 | (code >> 6 & 0x3f));
    out += static_cast<char>(0x80 | (code & 0x3f));
  }
}

// Position of the first byte that does not start well-formed UTF-8 (RFC 3629: no overlong
// forms, no surrogates, nothing above U+10FFFF), or nothing if all of `text` is UTF-8.
inline std::optional<std::size_t> first_invalid_utf8(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto lead = static_cast<unsigned char>(text[i]);
    if (lead < 0x80) {
      ++i;
      continue;
    }
    std::size_t length = 0;
    unsigned char second_low = 0x80, second_high = 0xbf; // the range the byte after `lead` may take
    if (lead >= 0xc2 && lead <= 0xdf) {
      length = 2;
    } else if (lead == 0xe0) {
      length = 3, second_low = 0xa0;
    } else if (lead == 0xed) {
      length = 3, second_high = 0x9f;
    } else if (lead >= 0xe1 && lead <= 0xef) {
      length = 3;
    } else if (lead == 0xf0) {
      length = 4, second_low = 0x90;
    } else if (lead >= 0xf1 && lead <= 0xf3) {
      length = 4;
    } else if (lead == 0xf4) {
      length = 4, second_high = 0x8f;
    } else {
      return i;
    }
    if (text.size() - i < length) return i;
    const auto second = static_cast<unsigned char>(text[i + 1]);
    if (second < second_low || second > second_high) return i;
    for (std::size_t k = 2; k < length; ++k) {
      const auto continuation = static_cast<unsigned char>(text[i + k]);
      if (continuation < 0x80 || continuation > 0xbf) return i;
    }
    i += length;
  }
  return std::nullopt;
}

namespace detail {

// Bytes shown in messages: printable ASCII as is, the rest as \xNN, cut after `limit` bytes.
inline std::string printable(std::string_view bytes, std::size_t limit = 160) {
  std::string text;
  for (std::size_t i = 0; i < bytes.size() && i < limit; ++i) {
    const auto byte = static_cast<unsigned char>(bytes[i]);
    if (byte >= 0x20 && byte < 0x7f && byte != '\\') {
      text += static_cast<char>(byte);
    } else {
      constexpr std::string_view hex = "0123456789abcdef";
      text += "\\x";
      text += hex[byte >> 4];
      text += hex[byte & 0xf];
    }
  }
  if (bytes.size() > limit) text += "...";
  return text;
}

} // namespace detail

} // namespace kvlab
