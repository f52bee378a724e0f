// kvlab.gguf: reads GGUF files (ggml's docs/gguf.md, versions 2 and 3, little-endian) as
// llama.cpp writes them, and writes them for tests and benchmarks (:writer).
//   gguf_file(path)                -> memory-mapped, parsed and validated once: metadata and tensors
//   file.get_uint("llama.block_count"), file.get_string_array("tokenizer.ggml.tokens"), ...
//   dequantize(tensor, out)        -> float32 of an F32/F16/BF16/Q8_0/Q4_0/Q4_K/Q6_K tensor
// Layout: magic "GGUF", uint32 version, uint64 tensor count, uint64 metadata count, the
// metadata (key string, uint32 type, value), the tensor infos (name, uint32 n_dims, uint64
// dims in ggml order, uint32 type, uint64 offset), padding to general.alignment (default 32),
// the data section. Strings are a uint64 length and that many bytes (no terminator).
// Every size the file claims is checked against the file before it is used, and every
// malformed file is a kvlab::error naming the file, the key or tensor, and expected vs found.
module;
#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>
export module kvlab.gguf;
export import :format;
export import :writer;
import kvlab.core;
import kvlab.npy;

export namespace kvlab {

// A tensor of a GGUF file; `data` points into the file's mapping (valid while the gguf_file lives).
struct gguf_tensor {
  std::string name;
  std::vector<std::uint64_t> dims; // ggml order: dims[0] (ne[0]) varies fastest; a row is dims[0] elements
  ggml_type type = ggml_type::f32;
  std::uint64_t offset = 0; // from the start of the data section
  std::span<const std::byte> data;

  std::uint64_t element_count() const noexcept {
    std::uint64_t count = 1;
    for (const std::uint64_t dim : dims) count *= dim;
    return count;
  }
  std::uint64_t row_length() const noexcept { return dims.empty() ? 1 : dims[0]; }
  std::uint64_t row_count() const noexcept {
    std::uint64_t count = 1;
    for (std::size_t d = 1; d < dims.size(); ++d) count *= dims[d];
    return count;
  }
};

namespace detail {

inline constexpr std::string_view gguf_magic = "GGUF";
inline constexpr std::uint64_t gguf_default_alignment = 32;
inline constexpr std::size_t gguf_max_dims = 4;                 // GGML_MAX_DIMS
inline constexpr std::size_t gguf_max_array_nesting = 64;       // bounds recursion on nested arrays
inline constexpr std::size_t gguf_min_metadata_pair_bytes = 13; // key length 8, type 4, a 1-byte value
inline constexpr std::size_t gguf_min_tensor_info_bytes = 24;   // name length 8, n_dims 4, type 4, offset 8

inline error gguf_error(const std::filesystem::path& file, const std::string& problem) {
  return error("'" + file.string() + "': " + problem);
}

inline std::string quoted(std::string_view text) { return "'" + detail::printable(text) + "'"; }

// One metadata pair; values are decoded from the mapping when asked for (already validated).
struct gguf_entry {
  std::string_view key;
  gguf_value_type type;
  std::size_t value_offset;                              // file offset of the value
  gguf_value_type element_type = gguf_value_type::uint8; // arrays only
  std::uint64_t element_count = 0;                       // arrays only
  std::size_t elements_offset = 0;                       // arrays only: of the first element
};

// Reads little-endian fields in order, each checked against the end of the file. `what`
// arguments are callables returning the description, so messages cost nothing on success.
class gguf_cursor {
public:
  gguf_cursor(std::span<const std::byte> bytes, const std::filesystem::path& file) : bytes_(bytes), file_(file) {}

  std::size_t position() const noexcept { return position_; }
  std::size_t remaining() const noexcept { return bytes_.size() - position_; }

  template <class Describe>
  void need(std::uint64_t count, Describe&& what) const {
    if (count > remaining())
      throw gguf_error(file_, "truncated: " + what() + " needs " + std::to_string(count) + " bytes at offset " +
                                  std::to_string(position_) + ", but the file ends after " +
                                  std::to_string(bytes_.size()) + " bytes; is the file truncated?");
  }

  template <class Bits, class Describe>
  Bits read(Describe&& what) {
    need(sizeof(Bits), what);
    const Bits bits = detail::load_bits<Bits, false>(reinterpret_cast<const unsigned char*>(bytes_.data() + position_));
    position_ += sizeof(Bits);
    return bits;
  }

  template <class Describe>
  void skip(std::uint64_t count, Describe&& what) {
    need(count, what);
    position_ += static_cast<std::size_t>(count);
  }

  template <class Describe>
  std::string_view read_string(Describe&& what) {
    const std::size_t length_position = position_;
    const auto length = read<std::uint64_t>([&] { return "the length of " + what(); });
    if (length > remaining())
      throw gguf_error(file_, what() + ": string length " + std::to_string(length) + " (at offset " +
                                  std::to_string(length_position) + ") runs past the end of the file: only " +
                                  std::to_string(remaining()) + " bytes follow; is the file truncated?");
    const std::string_view text(reinterpret_cast<const char*>(bytes_.data() + position_), length);
    position_ += static_cast<std::size_t>(length);
    return text;
  }

private:
  std::span<const std::byte> bytes_;
  const std::filesystem::path& file_;
  std::size_t position_ = 0;
};

// `count` items of at least `min_bytes` each must fit in what is left: a corrupt count must not
// make the reader loop (or allocate) far beyond the file.
inline void check_count_fits(const std::filesystem::path& file, const gguf_cursor& cursor, std::uint64_t count,
                             std::size_t min_bytes, const std::string& what, const std::string& item) {
  const std::uint64_t most = cursor.remaining() / min_bytes;
  if (count > most)
    throw gguf_error(file, what + " is " + std::to_string(count) + ", but the " + std::to_string(cursor.remaining()) +
                               " bytes that follow (offset " + std::to_string(cursor.position()) + ") hold at most " +
                               std::to_string(most) + " " + item + " of at least " + std::to_string(min_bytes) +
                               " bytes each; the count is corrupt or the file is truncated");
}

} // namespace detail

class gguf_file {
public:
  explicit gguf_file(const std::filesystem::path& file) : mapping_(file) { parse(); }
  gguf_file(gguf_file&&) noexcept = default;
  gguf_file& operator=(gguf_file&&) noexcept = default;
  gguf_file(const gguf_file&) = delete;
  gguf_file& operator=(const gguf_file&) = delete;

  const std::filesystem::path& path() const noexcept { return mapping_.path(); }
  std::uint32_t version() const noexcept { return version_; }
  std::uint64_t alignment() const noexcept { return alignment_; }
  std::uint64_t data_offset() const noexcept { return data_offset_; } // file offset of the data section

  // ---- metadata ----------------------------------------------------------------------------

  // Every key, in file order.
  std::vector<std::string_view> keys() const {
    std::vector<std::string_view> keys;
    keys.reserve(entries_.size());
    for (const auto& entry : entries_) keys.push_back(entry.key);
    return keys;
  }
  bool has(std::string_view key) const { return key_index_.contains(key); }
  std::optional<gguf_value_type> type_of(std::string_view key) const {
    const auto* entry = find_entry(key);
    return entry ? std::optional(entry->type) : std::nullopt;
  }
  // "uint32", "string", "array of string", ...; for messages.
  std::string type_name_of(std::string_view key) const { return type_text(entry(key)); }

  std::string_view get_string(std::string_view key) const {
    const auto& e = expect(key, gguf_value_type::string, "a string");
    return string_at(e.value_offset);
  }
  // Any integer type whose value is at least 0.
  std::uint64_t get_uint(std::string_view key) const {
    const auto& e = expect_integer(key, "an unsigned integer");
    return to_unsigned(e.type, e.value_offset, [&] { return label(key); });
  }
  // Any integer type whose value fits in int64.
  std::int64_t get_int(std::string_view key) const {
    const auto& e = expect_integer(key, "a signed integer");
    return to_signed(e.type, e.value_offset, [&] { return label(key); });
  }
  // float32 or float64.
  double get_float(std::string_view key) const {
    const auto& e = entry(key);
    if (e.type != gguf_value_type::float32 && e.type != gguf_value_type::float64)
      throw mismatch(e, "a float32 or float64");
    return float_at(e.type, e.value_offset);
  }
  bool get_bool(std::string_view key) const {
    return bytes()[expect(key, gguf_value_type::boolean, "a bool").value_offset] != std::byte{0};
  }

  std::optional<std::string_view> find_string(std::string_view key) const {
    return has(key) ? std::optional(get_string(key)) : std::nullopt;
  }
  std::optional<std::uint64_t> find_uint(std::string_view key) const {
    return has(key) ? std::optional(get_uint(key)) : std::nullopt;
  }
  std::optional<std::int64_t> find_int(std::string_view key) const {
    return has(key) ? std::optional(get_int(key)) : std::nullopt;
  }
  std::optional<double> find_float(std::string_view key) const {
    return has(key) ? std::optional(get_float(key)) : std::nullopt;
  }
  std::optional<bool> find_bool(std::string_view key) const {
    return has(key) ? std::optional(get_bool(key)) : std::nullopt;
  }

  // The number of elements of an array value.
  std::uint64_t array_size(std::string_view key) const {
    const auto& e = entry(key);
    if (e.type != gguf_value_type::array) throw mismatch(e, "an array");
    return e.element_count;
  }
  // Views into the mapping (valid while this gguf_file lives).
  std::vector<std::string_view> get_string_array(std::string_view key) const {
    const auto& e =
        expect_array(key, "an array of string", [](gguf_value_type t) { return t == gguf_value_type::string; });
    std::vector<std::string_view> strings;
    strings.reserve(static_cast<std::size_t>(e.element_count)); // validated against the file size
    std::size_t position = e.elements_offset;
    for (std::uint64_t i = 0; i < e.element_count; ++i) {
      strings.push_back(string_at(position));
      position += 8 + strings.back().size();
    }
    return strings;
  }
  // float32 elements exactly, float64 rounded to float.
  std::vector<float> get_float_array(std::string_view key) const {
    const auto& e = expect_array(key, "an array of float32 or float64", [](gguf_value_type t) {
      return t == gguf_value_type::float32 || t == gguf_value_type::float64;
    });
    std::vector<float> values(static_cast<std::size_t>(e.element_count));
    const std::size_t size = gguf_value_bytes(e.element_type);
    for (std::size_t i = 0; i < values.size(); ++i)
      values[i] = static_cast<float>(float_at(e.element_type, e.elements_offset + i * size));
    return values;
  }
  // Elements of any integer type whose values fit in int64 (token types are int32).
  std::vector<std::int64_t> get_int_array(std::string_view key) const {
    const auto& e = expect_array(key, "an array of integers", gguf_is_integer);
    std::vector<std::int64_t> values(static_cast<std::size_t>(e.element_count));
    const std::size_t size = gguf_value_bytes(e.element_type);
    for (std::size_t i = 0; i < values.size(); ++i)
      values[i] = to_signed(e.element_type, e.elements_offset + i * size,
                            [&] { return label(key) + " element " + std::to_string(i); });
    return values;
  }

  // ---- tensors -----------------------------------------------------------------------------

  std::span<const gguf_tensor> tensors() const noexcept { return tensors_; }
  const gguf_tensor* find_tensor(std::string_view name) const {
    const auto found = tensor_index_.find(name);
    return found == tensor_index_.end() ? nullptr : &tensors_[found->second];
  }
  // The tensor, or kvlab::error naming the file and the tensor.
  const gguf_tensor& tensor(std::string_view name) const {
    if (const auto* found = find_tensor(name)) return *found;
    throw detail::gguf_error(path(), "no tensor named " + detail::quoted(name) + " (the file has " +
                                         std::to_string(tensors_.size()) + " tensors)");
  }

private:
  std::span<const std::byte> bytes() const noexcept { return mapping_.bytes(); }
  std::string label(std::string_view key) const { return "metadata key " + detail::quoted(key); }

  const detail::gguf_entry* find_entry(std::string_view key) const {
    const auto found = key_index_.find(key);
    return found == key_index_.end() ? nullptr : &entries_[found->second];
  }
  const detail::gguf_entry& entry(std::string_view key) const {
    if (const auto* found = find_entry(key)) return *found;
    std::string listed;
    constexpr std::size_t shown = 64;
    for (std::size_t i = 0; i < entries_.size() && i < shown; ++i)
      listed += (i == 0 ? "" : ", ") + detail::printable(entries_[i].key);
    if (entries_.size() > shown) listed += ", ...";
    throw detail::gguf_error(path(), label(key) + " is missing; the file has " + std::to_string(entries_.size()) +
                                         " keys" + (entries_.empty() ? "" : ": " + listed));
  }

  static std::string type_text(const detail::gguf_entry& e) {
    if (e.type != gguf_value_type::array) return std::string(gguf_value_type_name(e.type));
    return "array of " + std::string(gguf_value_type_name(e.element_type));
  }
  error mismatch(const detail::gguf_entry& e, const std::string& expected) const {
    return detail::gguf_error(path(), label(e.key) + ": expected " + expected + ", found " + type_text(e));
  }
  const detail::gguf_entry& expect(std::string_view key, gguf_value_type type, const std::string& expected) const {
    const auto& e = entry(key);
    if (e.type != type) throw mismatch(e, expected);
    return e;
  }
  const detail::gguf_entry& expect_integer(std::string_view key, const std::string& expected) const {
    const auto& e = entry(key);
    if (!gguf_is_integer(e.type)) throw mismatch(e, expected + " (any GGUF integer type)");
    return e;
  }
  template <class Accepts>
  const detail::gguf_entry& expect_array(std::string_view key, const std::string& expected, Accepts accepts) const {
    const auto& e = entry(key);
    if (e.type != gguf_value_type::array || !accepts(e.element_type)) throw mismatch(e, expected);
    return e;
  }

  const unsigned char* at(std::size_t offset) const noexcept {
    return reinterpret_cast<const unsigned char*>(bytes().data() + offset);
  }
  std::string_view string_at(std::size_t offset) const noexcept {
    return {reinterpret_cast<const char*>(at(offset + 8)),
            static_cast<std::size_t>(detail::load_bits<std::uint64_t, false>(at(offset)))};
  }
  double float_at(gguf_value_type type, std::size_t offset) const noexcept {
    if (type == gguf_value_type::float32)
      return std::bit_cast<float>(detail::load_bits<std::uint32_t, false>(at(offset)));
    return std::bit_cast<double>(detail::load_bits<std::uint64_t, false>(at(offset)));
  }
  // An integer of any GGUF integer type as (is negative, value as two's complement bits).
  std::pair<bool, std::uint64_t> integer_at(gguf_value_type type, std::size_t offset) const noexcept {
    const unsigned char* p = at(offset);
    switch (type) {
    case gguf_value_type::uint8: return {false, *p};
    case gguf_value_type::uint16: return {false, detail::load_bits<std::uint16_t, false>(p)};
    case gguf_value_type::uint32: return {false, detail::load_bits<std::uint32_t, false>(p)};
    case gguf_value_type::uint64: return {false, detail::load_bits<std::uint64_t, false>(p)};
    case gguf_value_type::int8: return signed_bits(static_cast<std::int8_t>(*p));
    case gguf_value_type::int16:
      return signed_bits(static_cast<std::int16_t>(detail::load_bits<std::uint16_t, false>(p)));
    case gguf_value_type::int32:
      return signed_bits(static_cast<std::int32_t>(detail::load_bits<std::uint32_t, false>(p)));
    case gguf_value_type::int64:
      return signed_bits(static_cast<std::int64_t>(detail::load_bits<std::uint64_t, false>(p)));
    default: return {false, 0};
    }
  }
  static std::pair<bool, std::uint64_t> signed_bits(std::int64_t value) noexcept {
    return {value < 0, static_cast<std::uint64_t>(value)};
  }
  template <class Describe>
  std::uint64_t to_unsigned(gguf_value_type type, std::size_t offset, Describe&& what) const {
    const auto [negative, bits] = integer_at(type, offset);
    if (negative)
      throw detail::gguf_error(path(), what() + ": expected a value of at least 0, found " +
                                           std::to_string(static_cast<std::int64_t>(bits)) + " (" +
                                           std::string(gguf_value_type_name(type)) + ")");
    return bits;
  }
  template <class Describe>
  std::int64_t to_signed(gguf_value_type type, std::size_t offset, Describe&& what) const {
    const auto [negative, bits] = integer_at(type, offset);
    if (!negative && bits > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      throw detail::gguf_error(path(), what() + ": expected a value that fits in int64, found " + std::to_string(bits) +
                                           " (" + std::string(gguf_value_type_name(type)) + ")");
    return static_cast<std::int64_t>(bits);
  }

  void parse();
  void parse_header(detail::gguf_cursor& cursor, std::uint64_t& tensor_count, std::uint64_t& metadata_count);
  void parse_metadata(detail::gguf_cursor& cursor, std::uint64_t metadata_count);
  void skip_value(detail::gguf_cursor& cursor, gguf_value_type type, std::size_t depth, const std::string& where);
  gguf_value_type read_value_type(detail::gguf_cursor& cursor, const std::string& where);
  void read_alignment();
  void parse_tensor_infos(detail::gguf_cursor& cursor, std::uint64_t tensor_count);
  void locate_tensor_data();

  mapped_file mapping_;
  std::uint32_t version_ = 0;
  std::uint64_t alignment_ = detail::gguf_default_alignment;
  std::uint64_t data_offset_ = 0;
  std::vector<detail::gguf_entry> entries_;
  std::unordered_map<std::string_view, std::size_t> key_index_;
  std::vector<gguf_tensor> tensors_;
  std::unordered_map<std::string_view, std::size_t> tensor_index_; // names viewed in the mapping
};

// ---- parsing -----------------------------------------------------------------------------------

inline void gguf_file::parse() {
  detail::gguf_cursor cursor(bytes(), path());
  std::uint64_t tensor_count = 0, metadata_count = 0;
  parse_header(cursor, tensor_count, metadata_count);
  parse_metadata(cursor, metadata_count);
  read_alignment();
  parse_tensor_infos(cursor, tensor_count);
  // The data section starts at the first multiple of the alignment after the tensor infos.
  const std::uint64_t end_of_infos = cursor.position();
  data_offset_ = end_of_infos + (alignment_ - end_of_infos % alignment_) % alignment_;
  locate_tensor_data();
}

inline void gguf_file::parse_header(detail::gguf_cursor& cursor, std::uint64_t& tensor_count,
                                    std::uint64_t& metadata_count) {
  using detail::gguf_error;
  const auto all = bytes();
  const std::string_view start(reinterpret_cast<const char*>(all.data()), std::min<std::size_t>(all.size(), 4));
  if (start != detail::gguf_magic)
    throw gguf_error(path(),
                     "not a GGUF file: expected the magic \"GGUF\", found \"" + detail::printable(start) + "\"" +
                         (all.size() < 4 ? " (the file has only " + std::to_string(all.size()) + " bytes)" : ""));
  cursor.skip(4, [] { return std::string("the magic"); });
  version_ = cursor.read<std::uint32_t>([] { return std::string("the version"); });
  if (version_ == 1)
    throw gguf_error(path(), "GGUF version 1 is not supported (it stored counts and lengths in 32 bits; convert the "
                             "file again with a current llama.cpp); supported: 2, 3");
  // A big-endian file (v3 allows them) has its version's bytes swapped: 3 reads as 0x03000000.
  if (version_ != 2 && version_ != 3 && (version_ == 0x02000000 || version_ == 0x03000000))
    throw gguf_error(path(), "big-endian GGUF file (version field " + std::to_string(version_) +
                                 "); kvlab reads little-endian GGUF files only");
  if (version_ != 2 && version_ != 3)
    throw gguf_error(path(), "unsupported GGUF version " + std::to_string(version_) + "; supported: 2, 3");
  tensor_count = cursor.read<std::uint64_t>([] { return std::string("the tensor count"); });
  metadata_count = cursor.read<std::uint64_t>([] { return std::string("the metadata key-value count"); });
  detail::check_count_fits(path(), cursor, metadata_count, detail::gguf_min_metadata_pair_bytes, "metadata_kv_count",
                           "key-value pairs");
  // The tensor infos follow the metadata: bound the count by what the metadata leaves at most.
  const std::uint64_t left = cursor.remaining() - metadata_count * detail::gguf_min_metadata_pair_bytes;
  if (tensor_count > left / detail::gguf_min_tensor_info_bytes)
    throw gguf_error(path(), "tensor_count is " + std::to_string(tensor_count) + ", but after at least " +
                                 std::to_string(metadata_count * detail::gguf_min_metadata_pair_bytes) +
                                 " bytes of metadata the file leaves " + std::to_string(left) +
                                 " bytes, room for at most " +
                                 std::to_string(left / detail::gguf_min_tensor_info_bytes) +
                                 " tensor infos of at least " + std::to_string(detail::gguf_min_tensor_info_bytes) +
                                 " bytes each; the count is corrupt or the file is truncated");
}

inline gguf_value_type gguf_file::read_value_type(detail::gguf_cursor& cursor, const std::string& where) {
  const std::size_t position = cursor.position();
  const auto id = cursor.read<std::uint32_t>([&] { return "the value type of " + where; });
  if (id >= gguf_value_type_count)
    throw detail::gguf_error(path(), where + ": unknown value type id " + std::to_string(id) + " at offset " +
                                         std::to_string(position) + "; GGUF value types are 0-" +
                                         std::to_string(gguf_value_type_count - 1));
  return static_cast<gguf_value_type>(id);
}

inline void gguf_file::parse_metadata(detail::gguf_cursor& cursor, std::uint64_t metadata_count) {
  entries_.reserve(static_cast<std::size_t>(metadata_count)); // bounded by the file size above
  for (std::uint64_t i = 0; i < metadata_count; ++i) {
    const std::string_view key = cursor.read_string([&] { return "the key of metadata pair #" + std::to_string(i); });
    const std::string where = "metadata key " + detail::quoted(key);
    if (const auto previous = key_index_.find(key); previous != key_index_.end())
      throw detail::gguf_error(path(), where + " appears twice (pairs #" + std::to_string(previous->second) + " and #" +
                                           std::to_string(i) + ")");
    detail::gguf_entry e{key, read_value_type(cursor, where), cursor.position()};
    skip_value(cursor, e.type, 0, where);
    if (e.type == gguf_value_type::array) {
      // skip_value has checked the array's element type, length and elements.
      e.element_type = static_cast<gguf_value_type>(detail::load_bits<std::uint32_t, false>(at(e.value_offset)));
      e.element_count = detail::load_bits<std::uint64_t, false>(at(e.value_offset + 4));
      e.elements_offset = e.value_offset + 12;
    }
    key_index_.emplace(key, entries_.size());
    entries_.push_back(e);
  }
}

// Checks one value of `type` at the cursor and moves past it; arrays element by element.
inline void gguf_file::skip_value(detail::gguf_cursor& cursor, gguf_value_type type, std::size_t depth,
                                  const std::string& where) {
  switch (type) {
  case gguf_value_type::string: cursor.read_string([&] { return "the value of " + where; }); return;
  case gguf_value_type::boolean: {
    const auto value = cursor.read<std::uint8_t>([&] { return "the value of " + where; });
    if (value > 1)
      throw detail::gguf_error(path(), where + ": a bool must be 0 or 1, found " + std::to_string(value) +
                                           " at offset " + std::to_string(cursor.position() - 1));
    return;
  }
  case gguf_value_type::array: {
    if (depth >= detail::gguf_max_array_nesting)
      throw detail::gguf_error(path(), where + ": arrays nested more than " +
                                           std::to_string(detail::gguf_max_array_nesting) + " levels deep");
    const gguf_value_type element = read_value_type(cursor, where + " (its array element type)");
    const auto count = cursor.read<std::uint64_t>([&] { return "the array length of " + where; });
    const std::size_t fixed = gguf_value_bytes(element);
    // The smallest element: a fixed-size value, a string's length, an array's type and length.
    const std::size_t min_bytes = fixed != 0 ? fixed : element == gguf_value_type::string ? 8 : 12;
    detail::check_count_fits(path(), cursor, count, min_bytes, where + ": the array length",
                             std::string(gguf_value_type_name(element)) + " elements");
    if (fixed != 0 && element != gguf_value_type::boolean) {
      cursor.skip(count * fixed, [&] { return "the elements of " + where; });
      return;
    }
    for (std::uint64_t i = 0; i < count; ++i) {
      if (element == gguf_value_type::array) {
        skip_value(cursor, element, depth + 1, where + " element " + std::to_string(i));
      } else {
        // Strings and bools: described lazily, since vocabularies hold tens of thousands.
        const std::size_t position = cursor.position();
        if (element == gguf_value_type::string) {
          cursor.read_string([&] { return where + " element " + std::to_string(i); });
        } else if (cursor.read<std::uint8_t>([&] { return where + " element " + std::to_string(i); }) > 1) {
          throw detail::gguf_error(path(), where + " element " + std::to_string(i) + ": a bool must be 0 or 1, found " +
                                               std::to_string(std::to_integer<int>(bytes()[position])) + " at offset " +
                                               std::to_string(position));
        }
      }
    }
    return;
  }
  default: cursor.skip(gguf_value_bytes(type), [&] { return "the value of " + where; }); return;
  }
}

inline void gguf_file::read_alignment() {
  const auto* e = find_entry("general.alignment");
  if (!e) return;
  const std::uint64_t alignment = get_uint("general.alignment");
  if (alignment == 0 || !std::has_single_bit(alignment))
    throw detail::gguf_error(path(), label(e->key) + " is " + std::to_string(alignment) +
                                         "; it must be a nonzero power of two");
  alignment_ = alignment;
}

inline void gguf_file::parse_tensor_infos(detail::gguf_cursor& cursor, std::uint64_t tensor_count) {
  using detail::gguf_error;
  detail::check_count_fits(path(), cursor, tensor_count, detail::gguf_min_tensor_info_bytes, "tensor_count",
                           "tensor infos");
  tensors_.reserve(static_cast<std::size_t>(tensor_count));
  for (std::uint64_t i = 0; i < tensor_count; ++i) {
    const std::string_view name = cursor.read_string([&] { return "the name of tensor #" + std::to_string(i); });
    const std::string where = "tensor " + detail::quoted(name);
    if (const auto previous = tensor_index_.find(name); previous != tensor_index_.end())
      throw gguf_error(path(), where + " appears twice (tensors #" + std::to_string(previous->second) + " and #" +
                                   std::to_string(i) + ")");
    const auto n_dims = cursor.read<std::uint32_t>([&] { return "n_dims of " + where; });
    if (n_dims > detail::gguf_max_dims)
      throw gguf_error(path(), where + ": n_dims is " + std::to_string(n_dims) + "; GGUF tensors have at most " +
                                   std::to_string(detail::gguf_max_dims) + " dimensions");
    gguf_tensor tensor;
    tensor.name = std::string(name);
    std::uint64_t elements = 1;
    for (std::uint32_t d = 0; d < n_dims; ++d) {
      const auto dim = cursor.read<std::uint64_t>([&] { return "dimension " + std::to_string(d) + " of " + where; });
      tensor.dims.push_back(dim);
      // ggml counts elements in int64.
      constexpr auto most = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
      if (dim > most || (dim != 0 && elements > most / dim)) {
        std::string dims_text;
        for (const auto value : tensor.dims) dims_text += (dims_text.empty() ? "" : ", ") + std::to_string(value);
        throw gguf_error(path(), where + ": the element count of dimensions [" + dims_text +
                                     (d + 1 < n_dims ? ", ..." : "") + "] overflows int64");
      }
      elements *= dim;
    }
    const std::size_t type_position = cursor.position();
    const auto type_id = cursor.read<std::uint32_t>([&] { return "the type of " + where; });
    const auto traits = find_ggml_type(type_id);
    if (!traits)
      throw gguf_error(path(), where + ": unknown ggml type id " + std::to_string(type_id) + " at offset " +
                                   std::to_string(type_position) + "; known ids: " + ggml_known_type_ids());
    tensor.type = traits->type;
    tensor.offset = cursor.read<std::uint64_t>([&] { return "the data offset of " + where; });
    tensor_index_.emplace(name, tensors_.size());
    tensors_.push_back(std::move(tensor));
  }
}

// Checks each tensor's shape against its type and its bytes against the file, then points
// `data` at them.
inline void gguf_file::locate_tensor_data() {
  using detail::gguf_error;
  const std::uint64_t file_bytes = bytes().size();
  for (auto& tensor : tensors_) {
    const std::string where = "tensor " + detail::quoted(tensor.name);
    const auto& traits = ggml_traits(tensor.type);
    if (tensor.row_length() % traits.block_size != 0)
      throw gguf_error(path(), where + ": ne[0] = " + std::to_string(tensor.row_length()) + " is not a multiple of " +
                                   std::string(traits.name) + "'s block size " + std::to_string(traits.block_size));
    const std::uint64_t blocks = tensor.element_count() / traits.block_size;
    if (blocks > std::numeric_limits<std::uint64_t>::max() / traits.block_bytes)
      throw gguf_error(path(), where + ": " + std::to_string(tensor.element_count()) + " elements of " +
                                   std::string(traits.name) + " take more than 2^64 bytes");
    const std::uint64_t size = blocks * traits.block_bytes;
    if (tensor.offset % alignment_ != 0)
      throw gguf_error(path(), where + ": data offset " + std::to_string(tensor.offset) +
                                   " is not a multiple of the alignment " + std::to_string(alignment_));
    const std::uint64_t start = data_offset_ + tensor.offset;
    if (tensor.offset > file_bytes || start > file_bytes || size > file_bytes - start)
      throw gguf_error(path(),
                       where + ": data [" + std::to_string(start) + ", " +
                           (start <= std::numeric_limits<std::uint64_t>::max() - size ? std::to_string(start + size)
                                                                                      : std::string("2^64+")) +
                           ") (" + std::to_string(size) + " bytes of " + std::string(traits.name) +
                           ") runs past the end of the file (" + std::to_string(file_bytes) +
                           " bytes); is the file truncated?");
    tensor.data = bytes().subspan(static_cast<std::size_t>(start), static_cast<std::size_t>(size));
  }
}

// ---- dequantization ----------------------------------------------------------------------------

// Rows [first_row, first_row + out.size() / row_length) of the tensor as float32.
inline void dequantize_rows(const gguf_tensor& tensor, std::uint64_t first_row, std::span<float> out) {
  const std::string where = "tensor " + detail::quoted(tensor.name);
  if (!can_dequantize(tensor.type))
    throw error(where + " has type " + std::string(ggml_type_name(tensor.type)) +
                ", which kvlab cannot dequantize; supported: " + dequantizable_type_names());
  const std::uint64_t row_length = tensor.row_length();
  if (row_length == 0 || out.size() % row_length != 0)
    throw error(where + ": the output holds " + std::to_string(out.size()) + " floats, not a whole number of rows of " +
                std::to_string(row_length));
  const std::uint64_t rows = out.size() / row_length;
  if (first_row > tensor.row_count() || rows > tensor.row_count() - first_row)
    throw error(where + ": rows [" + std::to_string(first_row) + ", " + std::to_string(first_row + rows) +
                ") are outside its " + std::to_string(tensor.row_count()) + " rows");
  const auto& traits = ggml_traits(tensor.type);
  const std::uint64_t row_bytes = row_length / traits.block_size * traits.block_bytes;
  dequantize_blocks(
      tensor.type,
      tensor.data.subspan(static_cast<std::size_t>(first_row * row_bytes), static_cast<std::size_t>(rows * row_bytes)),
      out);
}

// The whole tensor as float32; out.size() must equal its element count.
inline void dequantize(const gguf_tensor& tensor, std::span<float> out) {
  if (out.size() != tensor.element_count())
    throw error("tensor " + detail::quoted(tensor.name) + " has " + std::to_string(tensor.element_count()) +
                " elements, but the output holds " + std::to_string(out.size()) + " floats");
  if (out.empty()) return;
  dequantize_rows(tensor, 0, out);
}

} // namespace kvlab
