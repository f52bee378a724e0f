// kvlab.npy: reads and writes NumPy .npy files (format 1.0/2.0/3.0, float16/32/64 in either byte order).
//   read_npy(file)                 -> shape and float32 values, C order; every malformed file is a kvlab::error
//   write_npy(file, shape, values) -> format 1.0 '<f4', byte-identical to np.save, written atomically
module;
#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>
export module kvlab.npy;
import kvlab.core;

export namespace kvlab {

// A dense array in C (row-major) order.
struct npy_array {
  std::vector<std::size_t> shape;
  std::vector<float> values;
};

namespace detail {

inline constexpr std::string_view npy_magic = "\x93NUMPY";
// Headers numpy writes are a few hundred bytes; this bound keeps a corrupted length field
// from making us read a multi-gigabyte "header".
inline constexpr std::size_t npy_max_header_bytes = std::size_t{1} << 20;
// np.save aligns the start of the data to this many bytes.
inline constexpr std::size_t npy_data_alignment = 64;
// np.save leaves room for the first dimension to grow to this many digits (format.py's
// GROWTH_AXIS_MAX_DIGITS), so headers can be rewritten in place when data is appended.
inline constexpr std::size_t npy_growth_axis_max_digits = 21;

enum class npy_element { float16, float32, float64 };

struct npy_dtype {
  std::string_view descr;
  npy_element element;
  std::size_t bytes;
  bool big_endian;
};

inline constexpr std::array<npy_dtype, 6> npy_supported_dtypes = {{
    {"<f4", npy_element::float32, 4, false},
    {"<f2", npy_element::float16, 2, false},
    {"<f8", npy_element::float64, 8, false},
    {">f4", npy_element::float32, 4, true},
    {">f2", npy_element::float16, 2, true},
    {">f8", npy_element::float64, 8, true},
}};

inline std::string supported_dtype_list() {
  std::string list;
  for (const auto& dtype : npy_supported_dtypes) list += (list.empty() ? "'" : ", '") + std::string(dtype.descr) + "'";
  return list + " (float32, float16, float64; little- or big-endian)";
}

// Python's repr of a shape tuple: (3,) for one dimension, (2, 3) for more.
inline std::string shape_repr(std::span<const std::size_t> shape) {
  std::string text = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i == 0 ? "" : ", ") + std::to_string(shape[i]);
  return text + (shape.size() == 1 ? ",)" : ")");
}

inline error npy_error(const std::filesystem::path& file, const std::string& problem) {
  return error("npy file '" + file.string() + "': " + problem);
}

// Product of the dimensions, or nothing if it does not fit in std::size_t.
inline std::optional<std::size_t> element_count(std::span<const std::size_t> shape) {
  std::size_t count = 1;
  for (const std::size_t dimension : shape) {
    if (dimension != 0 && count > std::numeric_limits<std::size_t>::max() / dimension) return std::nullopt;
    count *= dimension;
  }
  return count;
}

// What the header dict says, before any check of the values against what kvlab supports.
struct npy_header {
  std::string descr;
  bool fortran_order = false;
  std::vector<std::size_t> shape;
};

// Parses the header: a Python dict literal with exactly the keys 'descr' (a string),
// 'fortran_order' (True/False) and 'shape' (a tuple of ints), in any order, with either
// quote style, optional trailing commas and any whitespace, as ast.literal_eval would.
class npy_header_parser {
public:
  npy_header_parser(std::string_view text, const std::filesystem::path& file, bool allow_long_suffix)
      : text_(text), file_(file), allow_long_suffix_(allow_long_suffix) {}

  npy_header parse() {
    npy_header header;
    bool seen_descr = false, seen_fortran_order = false, seen_shape = false;
    skip_whitespace();
    expect('{', "'{' opening the dict");
    skip_whitespace();
    while (!at('}')) {
      const std::size_t key_position = position_;
      if (!at('\'') && !at('"')) fail("expected a quoted key or '}'");
      const std::string key = parse_string();
      skip_whitespace();
      expect(':', "':' after key '" + key + "'");
      skip_whitespace();
      const auto first_time = [&](bool& seen) {
        if (seen) fail_at(key_position, "key '" + key + "' appears twice");
        seen = true;
      };
      if (key == "descr") {
        first_time(seen_descr);
        header.descr = parse_descr();
      } else if (key == "fortran_order") {
        first_time(seen_fortran_order);
        header.fortran_order = parse_bool(key);
      } else if (key == "shape") {
        first_time(seen_shape);
        header.shape = parse_shape();
      } else {
        fail_at(key_position, "unexpected key '" + key + "'");
      }
      skip_whitespace();
      if (at(',')) {
        ++position_;
        skip_whitespace();
      } else if (!at('}')) {
        fail("expected ',' or '}' after the value of '" + key + "'");
      }
    }
    ++position_; // the closing '}'
    skip_whitespace();
    if (position_ != text_.size()) fail("unexpected text after the closing '}'");
    if (!seen_descr) fail_missing("descr");
    if (!seen_fortran_order) fail_missing("fortran_order");
    if (!seen_shape) fail_missing("shape");
    return header;
  }

private:
  bool at(char c) const { return position_ < text_.size() && text_[position_] == c; }
  bool at_digit() const { return position_ < text_.size() && text_[position_] >= '0' && text_[position_] <= '9'; }

  // Whitespace the Python tokenizer accepts inside brackets (np.save pads with spaces and '\n').
  void skip_whitespace() {
    while (position_ < text_.size() && std::string_view(" \t\n\r\f").find(text_[position_]) != std::string_view::npos)
      ++position_;
  }

  void expect(char c, const std::string& what) {
    if (!at(c)) fail("expected " + what);
    ++position_;
  }

  // A quoted string without escapes (header keys and dtype strings never need them).
  std::string parse_string() {
    const char quote = text_[position_];
    const std::size_t start = ++position_;
    while (position_ < text_.size() && text_[position_] != quote) {
      if (text_[position_] == '\\') fail("escape sequences in strings are not supported");
      if (text_[position_] == '\n') break;
      ++position_;
    }
    if (!at(quote)) fail_at(start - 1, "unterminated string");
    ++position_;
    return std::string(text_.substr(start, position_ - 1 - start));
  }

  std::string parse_descr() {
    if (at('[') || at('('))
      throw npy_error(file_, "unsupported dtype: the header describes a structured (record) dtype; supported: " +
                                 supported_dtype_list());
    if (!at('\'') && !at('"')) fail("expected the value of 'descr' to be a quoted dtype string such as '<f4'");
    return parse_string();
  }

  bool parse_bool(const std::string& key) {
    if (consume_word("True")) return true;
    if (consume_word("False")) return false;
    fail("expected True or False as the value of '" + key + "'");
  }

  // Consumes `word` only as a whole name: "Truex" is another name, not True followed by x.
  bool consume_word(std::string_view word) {
    if (text_.substr(position_, word.size()) != word) return false;
    const std::size_t end = position_ + word.size();
    if (end < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[end])) || text_[end] == '_')) return false;
    position_ = end;
    return true;
  }

  std::size_t parse_dimension() {
    const std::size_t start = position_;
    if (at('-')) fail("dimension must not be negative");
    if (!at_digit()) fail("expected a dimension (a non-negative integer) or ')'");
    std::size_t value = 0;
    bool overflow = false;
    for (; at_digit(); ++position_) {
      const auto digit = static_cast<std::size_t>(text_[position_] - '0');
      if (value > (std::numeric_limits<std::size_t>::max() - digit) / 10) overflow = true;
      value = value * 10 + digit;
    }
    if (overflow)
      throw npy_error(file_, "absurd shape: dimension " + std::string(text_.substr(start, position_ - start)) +
                                 " does not fit in 64 bits");
    // Python 2 wrote long integers as 3L; numpy strips the suffix for format 1.0 and 2.0.
    if (allow_long_suffix_ && (at('L') || at('l'))) ++position_;
    return value;
  }

  std::vector<std::size_t> parse_shape() {
    expect('(', "a tuple such as (2, 3) as the value of 'shape'");
    skip_whitespace();
    std::vector<std::size_t> shape;
    bool saw_comma = false;
    while (!at(')')) {
      shape.push_back(parse_dimension());
      skip_whitespace();
      if (at(',')) {
        saw_comma = true;
        ++position_;
        skip_whitespace();
      } else if (!at(')')) {
        fail("expected ',' or ')' in the shape tuple");
      }
    }
    // In Python (3) is the integer 3, not a tuple.
    if (shape.size() == 1 && !saw_comma)
      fail("shape (" + std::to_string(shape[0]) + ") is an integer in parentheses, not a tuple; a 1-D shape is (" +
           std::to_string(shape[0]) + ",)");
    ++position_; // the closing ')'
    return shape;
  }

  [[noreturn]] void fail_missing(const std::string& key) const {
    throw npy_error(file_, "header is not a valid Python dict literal of the keys 'descr', 'fortran_order', 'shape': "
                           "key '" +
                               key + "' is missing; header: \"" + printable(text_) + "\"");
  }
  [[noreturn]] void fail(const std::string& problem) const { fail_at(position_, problem); }
  [[noreturn]] void fail_at(std::size_t position, const std::string& problem) const {
    throw npy_error(
        file_, "header is not a valid Python dict literal of the keys 'descr', 'fortran_order', 'shape': " + problem +
                   " at byte " + std::to_string(position) + " of the header \"" + printable(text_) + "\"");
  }

  std::string_view text_;
  const std::filesystem::path& file_;
  bool allow_long_suffix_;
  std::size_t position_ = 0;
};

// Loads an unsigned integer stored in sizeof(Bits) bytes with the given byte order.
// Written byte by byte so it is correct on any host; compilers turn it into a load (+ bswap).
template <class Bits, bool BigEndian>
inline Bits load_bits(const unsigned char* bytes) noexcept {
  Bits bits = 0;
  for (std::size_t i = 0; i < sizeof(Bits); ++i) {
    const std::size_t shift = 8 * (BigEndian ? sizeof(Bits) - 1 - i : i);
    bits = static_cast<Bits>(bits | static_cast<Bits>(static_cast<Bits>(bytes[i]) << shift));
  }
  return bits;
}

template <bool BigEndian>
inline void decode_float16(const unsigned char* bytes, std::span<float> out) noexcept {
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = half_bits_to_float(load_bits<std::uint16_t, BigEndian>(bytes + 2 * i));
}

template <bool BigEndian>
inline void decode_float32(const unsigned char* bytes, std::span<float> out) noexcept {
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = std::bit_cast<float>(load_bits<std::uint32_t, BigEndian>(bytes + 4 * i));
}

// Returns the index of the first finite value beyond the float range (out.size() if none):
// such a value has no float32 counterpart, and turning it into infinity would be silently wrong.
template <bool BigEndian>
inline std::size_t decode_float64(const unsigned char* bytes, std::span<float> out) noexcept {
  for (std::size_t i = 0; i < out.size(); ++i) {
    const double value = std::bit_cast<double>(load_bits<std::uint64_t, BigEndian>(bytes + 8 * i));
    const double magnitude = value < 0 ? -value : value;
    if (magnitude > static_cast<double>(std::numeric_limits<float>::max()) &&
        magnitude != std::numeric_limits<double>::infinity())
      return i;
    out[i] = static_cast<float>(value);
  }
  return out.size();
}

// Decodes out.size() elements; the float64 case reports where a value is out of range.
inline std::size_t decode_elements(const npy_dtype& dtype, const unsigned char* bytes, std::span<float> out) {
  switch (dtype.element) {
  case npy_element::float16:
    dtype.big_endian ? decode_float16<true>(bytes, out) : decode_float16<false>(bytes, out);
    return out.size();
  case npy_element::float32:
    dtype.big_endian ? decode_float32<true>(bytes, out) : decode_float32<false>(bytes, out);
    return out.size();
  case npy_element::float64:
    return dtype.big_endian ? decode_float64<true>(bytes, out) : decode_float64<false>(bytes, out);
  }
  return out.size();
}

// Reads exactly `count` bytes at the current position or says what was missing.
inline void read_exactly(std::ifstream& in, char* destination, std::size_t count, const std::filesystem::path& file,
                         const std::string& what) {
  in.read(destination, static_cast<std::streamsize>(count));
  if (static_cast<std::size_t>(in.gcount()) != count)
    throw npy_error(file, "read error in " + what + ": expected " + std::to_string(count) + " bytes, got " +
                              std::to_string(in.gcount()) + " (was the file changed while it was read?)");
}

// The header np.save writes for a C-order '<f4' array of this shape, magic to '\n', in the
// oldest format version that can hold it (1.0 unless the header exceeds 65535 bytes).
inline std::string npy_float32_header(std::span<const std::size_t> shape) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape_repr(shape) + ", }";
  const std::size_t first_digits = std::to_string(shape[0]).size();
  if (first_digits < npy_growth_axis_max_digits) dict.append(npy_growth_axis_max_digits - first_digits, ' ');
  for (const unsigned major : {1u, 2u}) {
    const std::size_t length_field_bytes = major == 1 ? 2 : 4;
    const std::size_t prefix_bytes = npy_magic.size() + 2 + length_field_bytes;
    // Like numpy: at least one space, even when the dict and '\n' already end on the boundary.
    const std::size_t padding = npy_data_alignment - (prefix_bytes + dict.size() + 1) % npy_data_alignment;
    const std::size_t header_length = dict.size() + padding + 1;
    if (major == 1 && header_length > 0xffff) continue;
    std::string bytes(npy_magic);
    bytes += static_cast<char>(major);
    bytes += '\0';
    for (std::size_t i = 0; i < length_field_bytes; ++i) bytes += static_cast<char>((header_length >> (8 * i)) & 0xff);
    bytes += dict;
    bytes.append(padding, ' ');
    bytes += '\n';
    return bytes;
  }
  throw error("npy header of shape " + shape_repr(shape) + " is too large for format 2.0");
}

// Writes float32 values little-endian whatever the host's byte order; false on a failed write.
inline bool write_float32_little_endian(file_output& out, std::span<const float> values) {
  if constexpr (std::endian::native == std::endian::little) {
    return out.write(std::as_bytes(values));
  } else {
    constexpr std::size_t chunk_elements = std::size_t{1} << 18;
    std::vector<std::byte> chunk;
    for (std::size_t first = 0; first < values.size() && out.ok(); first += chunk_elements) {
      chunk.clear();
      for (const float value : values.subspan(first, std::min(chunk_elements, values.size() - first)))
        for (std::size_t i = 0; i < 4; ++i)
          chunk.push_back(static_cast<std::byte>(std::bit_cast<std::uint32_t>(value) >> (8 * i)));
      out.write(chunk);
    }
    return out.ok();
  }
}

} // namespace detail

// Reads a .npy file of float16, float32 or float64 (either byte order) in C order, converting
// to float32 (float64 values beyond the float32 range are an error). Throws kvlab::error
// naming the file and the problem for anything malformed.
inline npy_array read_npy(const std::filesystem::path& file) {
  using detail::npy_error;
  std::error_code status_error;
  const auto status = std::filesystem::status(file, status_error);
  if (status.type() == std::filesystem::file_type::not_found) throw npy_error(file, "cannot open: no such file");
  if (status_error) throw npy_error(file, "cannot open: " + status_error.message());
  if (std::filesystem::is_directory(status)) throw npy_error(file, "cannot open: it is a directory, not a file");
  std::ifstream in(file, std::ios::binary);
  if (!in) throw npy_error(file, "cannot open: " + std::generic_category().message(errno));

  // Everything below is checked against the size of the open file before it is read.
  in.seekg(0, std::ios::end);
  const std::streamoff end = in.tellg();
  in.seekg(0, std::ios::beg);
  if (end < 0 || !in) throw npy_error(file, "cannot open: the size of the file cannot be determined");
  const auto file_bytes = static_cast<std::uint64_t>(end);

  std::array<char, 12> prefix{};
  const std::size_t prefix_read = static_cast<std::size_t>(std::min<std::uint64_t>(file_bytes, prefix.size()));
  detail::read_exactly(in, prefix.data(), prefix_read, file, "the magic string");
  const std::string_view magic(prefix.data(), std::min(prefix_read, detail::npy_magic.size()));
  if (magic != detail::npy_magic)
    throw npy_error(file, "not an .npy file: expected the magic string \\x93NUMPY, found \"" +
                              detail::printable(magic) + "\"" +
                              (file_bytes < detail::npy_magic.size()
                                   ? " (the file has only " + std::to_string(file_bytes) + " bytes)"
                                   : ""));
  if (prefix_read < 8)
    throw npy_error(file, "truncated header: the file ends after " + std::to_string(file_bytes) +
                              " bytes, before the format version");
  const auto major = static_cast<unsigned char>(prefix[6]), minor = static_cast<unsigned char>(prefix[7]);
  if (minor != 0 || major < 1 || major > 3)
    throw npy_error(file, "unsupported .npy format version " + std::to_string(major) + "." + std::to_string(minor) +
                              "; supported: 1.0, 2.0, 3.0");

  const std::size_t length_field_bytes = major == 1 ? 2 : 4;
  const std::size_t header_start = 8 + length_field_bytes;
  if (file_bytes < header_start)
    throw npy_error(file, "truncated header: the file ends after " + std::to_string(file_bytes) +
                              " bytes, inside the " + std::to_string(length_field_bytes) + "-byte header length field");
  std::size_t header_bytes = 0;
  for (std::size_t i = 0; i < length_field_bytes; ++i)
    header_bytes |= std::size_t{static_cast<unsigned char>(prefix[8 + i])} << (8 * i);
  if (header_bytes > detail::npy_max_header_bytes)
    throw npy_error(file, "implausible header: the header length field says " + std::to_string(header_bytes) +
                              " bytes, more than the " + std::to_string(detail::npy_max_header_bytes) +
                              " kvlab accepts (numpy writes a few hundred); the length field is corrupt");
  if (file_bytes - header_start < header_bytes)
    throw npy_error(file, "truncated header: the header length field says " + std::to_string(header_bytes) +
                              " bytes, but only " + std::to_string(file_bytes - header_start) + " bytes follow the " +
                              std::to_string(header_start) + "-byte prefix");
  std::string header_text(header_bytes, '\0');
  in.seekg(static_cast<std::streamoff>(header_start));
  detail::read_exactly(in, header_text.data(), header_bytes, file, "the header");

  const detail::npy_header header = detail::npy_header_parser(header_text, file, major <= 2).parse();

  const auto dtype = std::ranges::find(detail::npy_supported_dtypes, header.descr, &detail::npy_dtype::descr);
  if (dtype == detail::npy_supported_dtypes.end())
    throw npy_error(file, "unsupported dtype '" + detail::printable(header.descr) +
                              "'; supported: " + detail::supported_dtype_list());
  if (header.fortran_order)
    throw npy_error(file, "fortran_order is True (column-major data); kvlab reads C-order arrays only: save "
                          "np.ascontiguousarray(a) instead");
  if (header.shape.empty())
    throw npy_error(file, "shape () is a scalar; kvlab reads arrays with at least one dimension");
  if (std::ranges::find(header.shape, std::size_t{0}) != header.shape.end())
    throw npy_error(file, "shape " + detail::shape_repr(header.shape) + " has a zero dimension (an empty array)");
  const auto count = detail::element_count(header.shape);
  if (!count || *count > std::numeric_limits<std::size_t>::max() / dtype->bytes)
    throw npy_error(file,
                    "absurd shape " + detail::shape_repr(header.shape) + ": its size in bytes does not fit in 64 bits");

  const std::uint64_t data_start = header_start + header_bytes;
  const std::uint64_t expected_bytes = *count * dtype->bytes, found_bytes = file_bytes - data_start;
  if (found_bytes != expected_bytes)
    throw npy_error(file, "expected " + std::to_string(expected_bytes) + " bytes of data (shape " +
                              detail::shape_repr(header.shape) + " of '" + std::string(dtype->descr) + "'), found " +
                              std::to_string(found_bytes) +
                              (found_bytes < expected_bytes ? " (the file is truncated)" : " (trailing bytes)"));

  require_memory(4.0 * static_cast<double>(*count),
                 "'" + file.string() + "' (" + std::to_string(*count) + " float32 values)", "use a smaller array");
  npy_array array{header.shape, std::vector<float>(*count)};
  // Read in chunks so float16/float64 files need no second full-size buffer.
  constexpr std::size_t chunk_bytes = std::size_t{1} << 20;
  const std::size_t chunk_elements = chunk_bytes / dtype->bytes;
  std::vector<unsigned char> chunk(std::min(*count, chunk_elements) * dtype->bytes);
  for (std::size_t first = 0; first < *count; first += chunk_elements) {
    const std::size_t elements = std::min(chunk_elements, *count - first);
    detail::read_exactly(in, reinterpret_cast<char*>(chunk.data()), elements * dtype->bytes, file, "the data");
    const std::span<float> out(array.values.data() + first, elements);
    const std::size_t bad = detail::decode_elements(*dtype, chunk.data(), out);
    if (bad != elements) {
      const double value = dtype->big_endian
                               ? std::bit_cast<double>(detail::load_bits<std::uint64_t, true>(chunk.data() + 8 * bad))
                               : std::bit_cast<double>(detail::load_bits<std::uint64_t, false>(chunk.data() + 8 * bad));
      throw npy_error(file, "element " + std::to_string(first + bad) + " = " + format_number(value) +
                                " is outside the float32 range (magnitude at most " +
                                format_number(std::numeric_limits<float>::max()) + ")");
    }
  }
  return array;
}

// Writes a C-order '<f4' array in format 1.0, byte-identical to np.save (header padded with
// spaces and '\n' so the data starts at a multiple of 64 bytes). The file is written to a
// temporary sibling and renamed over `file`, so readers never see a half-written file.
inline void write_npy(const std::filesystem::path& file, std::span<const std::size_t> shape,
                      std::span<const float> values) {
  using detail::npy_error;
  if (shape.empty()) throw npy_error(file, "cannot write shape (): kvlab writes arrays with at least one dimension");
  if (std::ranges::find(shape, std::size_t{0}) != shape.end())
    throw npy_error(file, "cannot write shape " + detail::shape_repr(shape) + ": it has a zero dimension");
  const auto count = detail::element_count(shape);
  if (!count || *count != values.size())
    throw npy_error(file, "cannot write: shape " + detail::shape_repr(shape) + " holds " +
                              (count ? std::to_string(*count) : std::string("more than 2^64")) + " values, but " +
                              std::to_string(values.size()) + " were given");

  const std::string header = detail::npy_float32_header(shape);
  write_file_atomically(file, "npy file '" + file.string() + "'", [&](file_output& out) {
    if (out.write(header)) detail::write_float32_little_endian(out, values);
  });
}

} // namespace kvlab
