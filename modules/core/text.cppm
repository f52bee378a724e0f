// Text helpers shared by kvlab's readers (the result files' JSON, safetensors headers):
// hexadecimal digits and UTF-8 encoding of one code point (RFC 3629 sec. 3).
module;
#include <cstdint>
#include <string>
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

} // namespace kvlab
