// kvlab.data.files: KV dumps on disk, a directory of K.npy/V.npy/Q.npy or a .safetensors file
// (format: github.com/huggingface/safetensors README, "Format"), parsed and written here.
//   load_npy_dir(dir)             -> K.npy, V.npy, Q.npy of [layers, heads, tokens, head_dim] (via read_npy)
//   load_safetensors(file)        -> tensors "k", "v", "q" of [layers, heads, tokens, head_dim], F32/F16/BF16
//   write_safetensors(file, data) -> F32 tensors k, v, q laid out as the reference writer does, atomically
// Every malformed input is a kvlab::error naming the file and the problem.
module;
#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>
export module kvlab.data.files;
import kvlab.core;
import kvlab.npy;

export namespace kvlab {

namespace detail {

// ---------------------------------------------------------------------------------------------
// Shape checks shared by both formats

// Shapes in messages as safetensors headers and kv_shape spell them: [2, 4, 16, 128].
inline std::string dump_shape_text(std::span<const std::size_t> shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i == 0 ? "" : ", ") + std::to_string(shape[i]);
  return text + "]";
}

// A file's shape as [layers, heads, tokens, head_dim], or an error saying what is wrong with it.
inline kv_shape dump_kv_shape(std::span<const std::size_t> shape, const std::string& context, const std::string& tensor,
                              std::string_view heads) {
  const std::string expected = "[layers, " + std::string(heads) + ", tokens, head_dim]";
  if (shape.size() != 4)
    throw error(context + ": " + tensor + " has " + std::to_string(shape.size()) + " dimension" +
                (shape.size() == 1 ? "" : "s") + " (shape " + dump_shape_text(shape) + "), expected 4: " + expected);
  if (std::ranges::find(shape, std::size_t{0}) != shape.end())
    throw error(context + ": " + tensor + " has shape " + dump_shape_text(shape) +
                " with a zero dimension; every dimension of " + expected + " must be at least 1");
  return {shape[0], shape[1], shape[2], shape[3]};
}

inline std::array<std::size_t, 4> dump_dimensions(const kv_shape& shape) {
  return {shape.layers, shape.heads, shape.tokens, shape.head_dim};
}

// Keys and values must be the same [layers, kv_heads, tokens, head_dim].
inline void check_dump_values_shape(const std::string& context, const std::string& keys_name, const kv_shape& keys,
                                    const std::string& values_name, const kv_shape& values) {
  if (!(keys == values))
    throw error(context + ": " + keys_name + " has shape " + to_string(keys) + " but " + values_name + " has shape " +
                to_string(values) + "; keys and values must have the same shape [layers, kv_heads, tokens, head_dim]");
}

// Queries attend over the keys' layers, tokens and head_dim, and every KV head serves a whole
// number of query heads (grouped-query attention).
inline void check_dump_queries_shape(const std::string& context, const std::string& keys_name, const kv_shape& keys,
                                     const std::string& queries_name, const kv_shape& queries) {
  if (queries.layers != keys.layers || queries.tokens != keys.tokens || queries.head_dim != keys.head_dim)
    throw error(context + ": " + queries_name + " has shape " + to_string(queries) + ", expected [" +
                std::to_string(keys.layers) + ", q_heads, " + std::to_string(keys.tokens) + ", " +
                std::to_string(keys.head_dim) + "] (the layers, tokens and head_dim of " + keys_name + " " +
                to_string(keys) + ")");
  if (queries.heads % keys.heads != 0)
    throw error(context + ": inconsistent GQA ratio: " + queries_name + " has " + std::to_string(queries.heads) +
                " query heads, not a multiple of the " + std::to_string(keys.heads) + " KV heads of " + keys_name +
                " (grouped-query attention needs a whole number of query heads per KV head)");
}

// ---------------------------------------------------------------------------------------------
// npy directories

inline constexpr std::array<std::string_view, 3> npy_dump_files = {"K.npy", "V.npy", "Q.npy"};

// One file of the dump as a kv_tensor; the npy array is freed on return, so at most one
// tensor is held twice while a dump loads.
inline kv_tensor load_npy_dump_tensor(const std::filesystem::path& dir, std::string_view name,
                                      const std::string& context, std::string_view heads) {
  npy_array array = read_npy(dir / name);
  kv_tensor tensor(dump_kv_shape(array.shape, context, std::string(name), heads));
  std::ranges::copy(array.values, tensor.values().begin());
  return tensor;
}

// ---------------------------------------------------------------------------------------------
// safetensors: header limits and messages

// The reference reader's MAX_HEADER_SIZE: a larger length field means a corrupt file, and
// this bound keeps it from making us allocate gigabytes for a "header".
inline constexpr std::uint64_t safetensors_max_header_bytes = 100'000'000;
// The bytes before the header: its length N as a little-endian u64.
inline constexpr std::uint64_t safetensors_length_field_bytes = 8;
inline error safetensors_error(const std::filesystem::path& file, const std::string& problem) {
  return error("safetensors file '" + file.string() + "': " + problem);
}

// ---------------------------------------------------------------------------------------------
// safetensors: the header's JSON (objects, arrays, strings, non-negative integers; nothing else)

inline error safetensors_header_error(const std::filesystem::path& file, std::size_t position,
                                      const std::string& problem, const std::string& excerpt) {
  return safetensors_error(file, "invalid JSON header at byte " + std::to_string(position) + " (file offset " +
                                     std::to_string(position + safetensors_length_field_bytes) + "): " + problem +
                                     "; the header there reads \"" + excerpt + "\"");
}

// Shapes and offsets are the header's only numbers; any other value JSON allows is refused
// where it stands, as the reference reader refuses it.
inline void check_safetensors_header_values(const json_value& value, std::string_view header,
                                            const std::filesystem::path& file) {
  const auto fail = [&](const std::string& problem) {
    throw safetensors_header_error(file, value.position, problem, printable(header.substr(value.position), 40));
  };
  if (value.is_bool() || value.is_null())
    fail("the literal '" +
         std::string(value.is_null()   ? "null"
                     : value.boolean() ? "true"
                                       : "false") +
         "' is not allowed in a safetensors header, which holds only objects, arrays, strings and integers");
  if (value.is_number()) {
    const std::string& text = value.number_text();
    if (text.starts_with('-'))
      fail("negative numbers are not allowed in a safetensors header (shapes and offsets are >= 0)");
    if (text.find_first_of(".eE") != std::string::npos)
      fail("only whole numbers are allowed in a safetensors header, found a fraction or exponent");
    if (!value.integer<std::uint64_t>()) fail("the integer " + text + " does not fit in 64 bits");
  }
  if (value.is_array())
    for (const json_value& element : value.array()) check_safetensors_header_values(element, header, file);
  if (value.is_object())
    for (const auto& [key, member] : value.object()) check_safetensors_header_values(member, header, file);
}

// The whole header: an object starting at the first byte (the format requires '{' there),
// then only whitespace (the reference writer pads with spaces to a multiple of 8 bytes).
inline json_value read_safetensors_header(std::string_view header, const std::filesystem::path& file) {
  if (header.empty()) throw safetensors_header_error(file, 0, "the header is empty; expected a JSON object", "");
  if (header[0] != '{')
    throw safetensors_header_error(
        file, 0, "the header must begin with '{' (a JSON object), found '" + printable(header.substr(0, 1)) + "'",
        printable(header, 40));
  json_value root;
  try {
    root = parse_json(header, "safetensors file '" + file.string() + "' header");
  } catch (const json_error& not_json) {
    throw safetensors_header_error(file, not_json.position(), not_json.problem(), not_json.excerpt());
  }
  check_safetensors_header_values(root, header, file);
  return root;
}

// ---------------------------------------------------------------------------------------------
// safetensors: tensor entries and the data layout

// One tensor entry of the header; offsets are relative to the first byte after the header.
struct safetensors_entry {
  std::string name;
  std::string dtype;
  std::vector<std::size_t> shape;
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
};

inline std::string safetensors_tensor_label(std::string_view name) { return "tensor '" + printable(name) + "'"; }

inline std::string safetensors_offsets_text(const safetensors_entry& entry) {
  return "[" + std::to_string(entry.begin) + ", " + std::to_string(entry.end) + "]";
}

// {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, checked field by field; the
// header's numbers were checked to be 64-bit integers (check_safetensors_header_values).
inline safetensors_entry safetensors_entry_of(const std::string& name, const json_value& value,
                                              const std::filesystem::path& file) {
  const std::string label = safetensors_tensor_label(name);
  const auto fail = [&](const std::string& problem) -> error {
    return safetensors_error(file, label + " (header byte " + std::to_string(value.position) + "): " + problem);
  };
  if (!value.is_object())
    throw fail("expected an object {\"dtype\", \"shape\", \"data_offsets\"}, found " + std::string(value.kind_name()));
  for (const auto& [field, ignored] : value.object())
    if (field != "dtype" && field != "shape" && field != "data_offsets")
      throw fail("unknown field \"" + printable(field) + "\"; a tensor entry has dtype, shape and data_offsets");
  const json_value *dtype = value.find("dtype"), *shape = value.find("shape"), *offsets = value.find("data_offsets");
  if (!dtype) throw fail("the field \"dtype\" is missing");
  if (!shape) throw fail("the field \"shape\" is missing");
  if (!offsets) throw fail("the field \"data_offsets\" is missing");
  if (!dtype->is_string())
    throw fail("\"dtype\" must be a string such as \"F32\", found " + std::string(dtype->kind_name()));

  safetensors_entry entry{.name = name, .dtype = dtype->string()};
  if (!shape->is_array())
    throw fail("\"shape\" must be an array of integers, found " + std::string(shape->kind_name()));
  for (const auto& dimension : shape->array()) {
    if (!dimension.is_number())
      throw fail("\"shape\" must be an array of integers, found " + std::string(dimension.kind_name()) + " in it");
    const auto size = dimension.integer<std::size_t>();
    if (!size) throw fail("dimension " + dimension.number_text() + " does not fit in std::size_t");
    entry.shape.push_back(*size);
  }
  const bool offsets_are_a_pair = offsets->is_array() && offsets->array().size() == 2 &&
                                  offsets->array()[0].is_number() && offsets->array()[1].is_number();
  if (!offsets_are_a_pair) throw fail("\"data_offsets\" must be an array of two integers [begin, end]");
  entry.begin = offsets->array()[0].integer<std::uint64_t>().value();
  entry.end = offsets->array()[1].integer<std::uint64_t>().value();
  if (entry.begin > entry.end) throw fail("data_offsets " + safetensors_offsets_text(entry) + " end before they begin");
  return entry;
}

// The tensor entries of the header, by name; "__metadata__" must map strings to strings and
// is skipped.
inline std::vector<safetensors_entry> safetensors_entries(const json_value& root, const std::filesystem::path& file) {
  std::vector<safetensors_entry> entries;
  for (const auto& [name, value] : root.object()) {
    if (name != "__metadata__") {
      entries.push_back(safetensors_entry_of(name, value, file));
      continue;
    }
    if (!value.is_object())
      throw safetensors_error(file,
                              "\"__metadata__\" must be an object of strings, found " + std::string(value.kind_name()));
    for (const auto& [key, field] : value.object())
      if (!field.is_string())
        throw safetensors_error(file, "\"__metadata__\" must map strings to strings, but \"" + printable(key) +
                                          "\" holds " + std::string(field.kind_name()));
  }
  return entries;
}

// Every tensor lies inside the data, and the tensors tile it exactly: overlapping tensors
// would read one tensor's bytes as another's, and the format requires a fully indexed buffer
// (no holes, nothing after the last tensor), as the reference reader checks.
inline void check_safetensors_layout(const std::vector<safetensors_entry>& entries, std::uint64_t data_bytes,
                                     const std::filesystem::path& file) {
  for (const auto& entry : entries)
    if (entry.end > data_bytes)
      throw safetensors_error(file, safetensors_tensor_label(entry.name) + ": data_offsets " +
                                        safetensors_offsets_text(entry) + " are out of bounds: the data after the " +
                                        "header holds only " + std::to_string(data_bytes) +
                                        " bytes (is the file truncated?)");
  std::vector<const safetensors_entry*> by_offset;
  for (const auto& entry : entries) by_offset.push_back(&entry);
  std::ranges::sort(by_offset, {}, [](const safetensors_entry* entry) { return std::pair(entry->begin, entry->end); });
  std::uint64_t covered = 0;
  const safetensors_entry* previous = nullptr;
  for (const safetensors_entry* entry : by_offset) {
    if (entry->begin < covered)
      throw safetensors_error(file, safetensors_tensor_label(previous->name) + " " +
                                        safetensors_offsets_text(*previous) + " and " +
                                        safetensors_tensor_label(entry->name) + " " + safetensors_offsets_text(*entry) +
                                        " have overlapping data_offsets");
    if (entry->begin > covered)
      throw safetensors_error(file, "bytes [" + std::to_string(covered) + ", " + std::to_string(entry->begin) +
                                        ") of the data belong to no tensor (a hole before " +
                                        safetensors_tensor_label(entry->name) +
                                        "); the format requires the tensors to cover the data without holes");
    covered = entry->end;
    previous = entry;
  }
  if (covered != data_bytes)
    throw safetensors_error(file, "the last " + std::to_string(data_bytes - covered) +
                                      " bytes of the data (from byte " + std::to_string(covered) +
                                      ") belong to no tensor; the format requires the " +
                                      "tensors to cover the data without holes");
}

enum class safetensors_element { f32, f16, bf16 };

struct safetensors_dtype {
  std::string_view name;
  safetensors_element element;
  std::size_t bytes;
};

inline constexpr std::array<safetensors_dtype, 3> safetensors_supported_dtypes = {{
    {"F32", safetensors_element::f32, 4},
    {"F16", safetensors_element::f16, 2},
    {"BF16", safetensors_element::bf16, 2},
}};

// One of the KV tensors: its entry, dtype and shape, all checked before anything is allocated.
struct safetensors_kv_tensor {
  const safetensors_entry* entry = nullptr;
  const safetensors_dtype* dtype = nullptr;
  kv_shape shape;
};

inline safetensors_kv_tensor find_safetensors_kv_tensor(const std::vector<safetensors_entry>& entries,
                                                        std::string_view name, std::string_view heads,
                                                        const std::filesystem::path& file) {
  const auto entry = std::ranges::find(entries, name, &safetensors_entry::name);
  const std::string label = safetensors_tensor_label(name);
  if (entry == entries.end()) {
    std::string found;
    for (std::size_t i = 0; i < entries.size() && i < 10; ++i)
      found += (i == 0 ? "'" : ", '") + printable(entries[i].name) + "'";
    if (entries.size() > 10) found += ", ... (" + std::to_string(entries.size()) + " in all)";
    throw safetensors_error(file, "missing " + label + "; a KV dump holds tensors k and v [layers, kv_heads, " +
                                      "tokens, head_dim] and q [layers, q_heads, tokens, head_dim]; the file has " +
                                      (found.empty() ? std::string("no tensors") : "tensors " + found));
  }
  const auto dtype = std::ranges::find(safetensors_supported_dtypes, entry->dtype, &safetensors_dtype::name);
  if (dtype == safetensors_supported_dtypes.end())
    throw safetensors_error(file, label + " has unsupported dtype '" + printable(entry->dtype) +
                                      "'; supported: F32, F16, BF16");
  const kv_shape shape = dump_kv_shape(entry->shape, "safetensors file '" + file.string() + "'", label, heads);
  const auto count = element_count(entry->shape);
  const std::uint64_t span = entry->end - entry->begin;
  // An element count beyond what the span could hold is a mismatch too, and is caught before
  // the multiplication below could overflow.
  if (!count || *count > span / dtype->bytes || *count * dtype->bytes != span)
    throw safetensors_error(file, label + ": shape " + dump_shape_text(entry->shape) + " of " +
                                      std::string(dtype->name) + " needs " +
                                      (count && *count <= std::numeric_limits<std::size_t>::max() / dtype->bytes
                                           ? std::to_string(*count * dtype->bytes) + " bytes"
                                           : std::string("more than 2^64 bytes")) +
                                      ", but data_offsets " + safetensors_offsets_text(*entry) + " span " +
                                      std::to_string(span) + " bytes");
  return {&*entry, &*dtype, shape};
}

inline void decode_safetensors_elements(safetensors_element element, const unsigned char* bytes,
                                        std::span<float> out) noexcept {
  switch (element) {
  case safetensors_element::f32:
    for (std::size_t i = 0; i < out.size(); ++i)
      out[i] = std::bit_cast<float>(load_bits<std::uint32_t, false>(bytes + 4 * i));
    return;
  case safetensors_element::f16:
    for (std::size_t i = 0; i < out.size(); ++i)
      out[i] = half_bits_to_float(load_bits<std::uint16_t, false>(bytes + 2 * i));
    return;
  case safetensors_element::bf16:
    for (std::size_t i = 0; i < out.size(); ++i)
      out[i] = bf16_bits_to_float(load_bits<std::uint16_t, false>(bytes + 2 * i));
    return;
  }
}

// Reads exactly `count` bytes at the current position or says what was missing.
inline void read_safetensors_bytes(std::ifstream& in, char* destination, std::size_t count,
                                   const std::filesystem::path& file, const std::string& what) {
  in.read(destination, static_cast<std::streamsize>(count));
  if (static_cast<std::size_t>(in.gcount()) != count)
    throw safetensors_error(file, "read error in " + what + ": expected " + std::to_string(count) + " bytes, got " +
                                      std::to_string(in.gcount()) + " (was the file changed while it was read?)");
}

// Reads and converts one checked tensor; its size was matched to data_offsets, which lie in the file.
inline kv_tensor read_safetensors_kv_tensor(std::ifstream& in, std::uint64_t data_start,
                                            const safetensors_kv_tensor& tensor, const std::filesystem::path& file) {
  kv_tensor out(tensor.shape);
  const std::size_t count = out.values().size();
  const std::size_t element_bytes = tensor.dtype->bytes;
  in.seekg(static_cast<std::streamoff>(data_start + tensor.entry->begin));
  // Chunks, so F16/BF16 tensors need no second full-size buffer.
  constexpr std::size_t chunk_bytes = std::size_t{1} << 20;
  const std::size_t chunk_elements = chunk_bytes / element_bytes;
  std::vector<unsigned char> chunk(std::min(count, chunk_elements) * element_bytes);
  const std::string what = "the data of " + safetensors_tensor_label(tensor.entry->name);
  for (std::size_t first = 0; first < count; first += chunk_elements) {
    const std::size_t elements = std::min(chunk_elements, count - first);
    read_safetensors_bytes(in, reinterpret_cast<char*>(chunk.data()), elements * element_bytes, file, what);
    decode_safetensors_elements(tensor.dtype->element, chunk.data(), out.values().subspan(first, elements));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// safetensors: writing

struct safetensors_output_tensor {
  std::string_view name;
  const kv_tensor* tensor;
};

// The header the reference writer (safetensors' `prepare`) produces for these tensors: compact
// JSON, fields dtype, shape, data_offsets, data in header order, spaces up to a multiple of 8.
inline std::string safetensors_f32_header(std::span<const safetensors_output_tensor> tensors) {
  std::string json = "{";
  std::uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    const auto dimensions = dump_dimensions(tensor->shape());
    std::string shape;
    for (const std::size_t dimension : dimensions) shape += (shape.empty() ? "" : ",") + std::to_string(dimension);
    const std::uint64_t bytes = std::uint64_t{tensor->values().size()} * sizeof(float);
    json += (json.size() == 1 ? "\"" : ",\"") + std::string(name) + "\":{\"dtype\":\"F32\",\"shape\":[" + shape +
            "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + bytes) + "]}";
    offset += bytes;
  }
  json += "}";
  json.append((8 - json.size() % 8) % 8, ' ');
  return json;
}

} // namespace detail

// Reads a KV dump directory: K.npy and V.npy of [layers, kv_heads, tokens, head_dim] and Q.npy
// of [layers, q_heads, tokens, head_dim], each float32, float16 or float64 (see read_npy).
// Throws kvlab::error naming the file and the problem (missing file, rank, shapes, GQA ratio).
inline kv_data load_npy_dir(const std::filesystem::path& dir) {
  const std::string context = "npy dump '" + dir.string() + "'";
  const std::string layout = "a dump holds K.npy and V.npy [layers, kv_heads, tokens, head_dim] and Q.npy "
                             "[layers, q_heads, tokens, head_dim]";
  std::error_code status_error;
  const auto status = std::filesystem::status(dir, status_error);
  if (status.type() == std::filesystem::file_type::not_found) throw error(context + ": no such directory; " + layout);
  if (status_error) throw error(context + ": cannot open: " + status_error.message());
  if (!std::filesystem::is_directory(status)) throw error(context + ": not a directory; " + layout);
  // All three are looked for first, so a missing Q.npy is reported before gigabytes of K and V are read.
  for (const std::string_view name : detail::npy_dump_files) {
    std::error_code file_error;
    if (std::filesystem::status(dir / name, file_error).type() == std::filesystem::file_type::not_found)
      throw error(context + ": " + std::string(name) + " is missing (no file '" + (dir / name).string() + "'); " +
                  layout);
  }

  kv_data data;
  data.keys = detail::load_npy_dump_tensor(dir, "K.npy", context, "kv_heads");
  data.values = detail::load_npy_dump_tensor(dir, "V.npy", context, "kv_heads");
  detail::check_dump_values_shape(context, "K.npy", data.keys.shape(), "V.npy", data.values.shape());
  data.queries = detail::load_npy_dump_tensor(dir, "Q.npy", context, "q_heads");
  detail::check_dump_queries_shape(context, "K.npy", data.keys.shape(), "Q.npy", data.queries.shape());
  data.source = "npy:" + dir.string();
  return data;
}

// The checked index of a .safetensors file opened on `in`: every tensor entry (dtype, shape,
// data offsets relative to data_start), with every size in the header checked against the
// file (entries inside the data, tiling it without holes or overlaps) before it is used.
struct safetensors_index {
  std::vector<detail::safetensors_entry> entries;
  std::uint64_t data_start = 0; // file offset of the first data byte
};

inline safetensors_index read_safetensors_index(std::ifstream& in, const std::filesystem::path& file) {
  using detail::safetensors_error;
  std::error_code status_error;
  const auto status = std::filesystem::status(file, status_error);
  if (status.type() == std::filesystem::file_type::not_found)
    throw safetensors_error(file, "cannot open: no such file");
  if (status_error) throw safetensors_error(file, "cannot open: " + status_error.message());
  if (std::filesystem::is_directory(status))
    throw safetensors_error(file, "cannot open: it is a directory, not a file");
  in.open(file, std::ios::binary);
  if (!in) throw safetensors_error(file, "cannot open: " + std::generic_category().message(errno));

  in.seekg(0, std::ios::end);
  const std::streamoff end = in.tellg();
  in.seekg(0, std::ios::beg);
  if (end < 0 || !in) throw safetensors_error(file, "cannot open: the size of the file cannot be determined");
  const auto file_bytes = static_cast<std::uint64_t>(end);

  constexpr std::uint64_t length_field_bytes = detail::safetensors_length_field_bytes;
  if (file_bytes < length_field_bytes)
    throw safetensors_error(file, "file too short: it has " + std::to_string(file_bytes) +
                                      " bytes, fewer than the 8-byte header length that starts every safetensors file");
  std::array<unsigned char, length_field_bytes> length_field{};
  detail::read_safetensors_bytes(in, reinterpret_cast<char*>(length_field.data()), length_field.size(), file,
                                 "the header length");
  const auto header_bytes = detail::load_bits<std::uint64_t, false>(length_field.data());
  if (header_bytes > detail::safetensors_max_header_bytes)
    throw safetensors_error(file, "absurd header length " + std::to_string(header_bytes) + " bytes, more than the " +
                                      std::to_string(detail::safetensors_max_header_bytes) +
                                      " the format's reference reader accepts; the length field is corrupt or this " +
                                      "is not a safetensors file");
  if (header_bytes > file_bytes - length_field_bytes)
    throw safetensors_error(file, "header length " + std::to_string(header_bytes) +
                                      " bytes is larger than the file: only " +
                                      std::to_string(file_bytes - length_field_bytes) +
                                      " bytes follow the 8-byte length field (is the file truncated?)");
  std::string header(static_cast<std::size_t>(header_bytes), '\0');
  detail::read_safetensors_bytes(in, header.data(), header.size(), file, "the header");
  const json_value root = detail::read_safetensors_header(header, file);
  safetensors_index index{.entries = detail::safetensors_entries(root, file),
                          .data_start = length_field_bytes + header_bytes};
  detail::check_safetensors_layout(index.entries, file_bytes - index.data_start, file);
  return index;
}

// Reads a .safetensors file holding tensors "k" and "v" of [layers, kv_heads, tokens, head_dim]
// and "q" of [layers, q_heads, tokens, head_dim], each F32, F16 or BF16; other tensors and
// "__metadata__" are checked for well-formedness and ignored. Every size in the header is
// checked against the file before it is used. Throws kvlab::error naming the file and the problem.
inline kv_data load_safetensors(const std::filesystem::path& file) {
  std::ifstream in;
  const auto [entries, data_start] = read_safetensors_index(in, file);
  const auto keys = detail::find_safetensors_kv_tensor(entries, "k", "kv_heads", file);
  const auto values = detail::find_safetensors_kv_tensor(entries, "v", "kv_heads", file);
  const auto queries = detail::find_safetensors_kv_tensor(entries, "q", "q_heads", file);
  const std::string context = "safetensors file '" + file.string() + "'";
  detail::check_dump_values_shape(context, "tensor 'k'", keys.shape, "tensor 'v'", values.shape);
  detail::check_dump_queries_shape(context, "tensor 'k'", keys.shape, "tensor 'q'", queries.shape);

  kv_data data;
  data.keys = detail::read_safetensors_kv_tensor(in, data_start, keys, file);
  data.values = detail::read_safetensors_kv_tensor(in, data_start, values, file);
  data.queries = detail::read_safetensors_kv_tensor(in, data_start, queries, file);
  data.source = "safetensors:" + file.string();
  return data;
}

// Writes data as F32 tensors k, v and q in the layout the reference writer produces (tensors
// ordered by dtype alignment, then name: k, q, v; header padded with spaces to a multiple of 8
// bytes), to a temporary sibling renamed over `file`, so readers never see a half-written file.
inline void write_safetensors(const std::filesystem::path& file, const kv_data& data) {
  const std::string context = "safetensors file '" + file.string() + "': cannot write";
  const auto keys = detail::dump_dimensions(data.keys.shape());
  const auto values = detail::dump_dimensions(data.values.shape());
  const auto queries = detail::dump_dimensions(data.queries.shape());
  detail::dump_kv_shape(keys, context, "keys", "kv_heads");
  detail::dump_kv_shape(values, context, "values", "kv_heads");
  detail::dump_kv_shape(queries, context, "queries", "q_heads");
  detail::check_dump_values_shape(context, "keys", data.keys.shape(), "values", data.values.shape());
  detail::check_dump_queries_shape(context, "keys", data.keys.shape(), "queries", data.queries.shape());

  const std::array<detail::safetensors_output_tensor, 3> tensors = {{
      {"k", &data.keys},
      {"q", &data.queries},
      {"v", &data.values},
  }};
  const std::string header = detail::safetensors_f32_header(tensors);
  std::array<unsigned char, detail::safetensors_length_field_bytes> length_field{};
  for (std::size_t i = 0; i < length_field.size(); ++i)
    length_field[i] = static_cast<unsigned char>(std::uint64_t{header.size()} >> (8 * i));

  write_file_atomically(file, "safetensors file '" + file.string() + "'", [&](file_output& out) {
    out.write(std::as_bytes(std::span(length_field)));
    out.write(header);
    for (const auto& tensor : tensors) detail::write_float32_little_endian(out, tensor.tensor->values());
  });
}

} // namespace kvlab
