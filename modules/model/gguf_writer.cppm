// kvlab.gguf:writer: writes GGUF version 3 files (ggml's docs/gguf.md) for tests and benchmarks,
// laid out as ggml's gguf writer does: header, metadata, tensor infos, padding to the alignment,
// then each tensor's data padded to the alignment. Tensors are quantized from float32 with
// ggml's reference rounding (F32, F16, BF16, Q8_0, Q4_0). The file is written to a temporary
// sibling and renamed into place, so readers never see a half-written file.
module;
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>
export module kvlab.gguf:writer;
import :format;
import kvlab.core;

export namespace kvlab {

// The metadata value types the writer emits: string, uint32, int32, uint64, float32, bool and
// arrays of string, float32 and int32.
using gguf_metadata_value = std::variant<std::string, std::uint32_t, std::int32_t, std::uint64_t, float, bool,
                                         std::vector<std::string>, std::vector<float>, std::vector<std::int32_t>>;

struct gguf_metadata_item {
  std::string key;
  gguf_metadata_value value;
};

// A tensor to write: `values` in ggml order (dims[0] varies fastest), stored as `type`.
struct gguf_tensor_input {
  std::string name;
  std::vector<std::uint64_t> dims;
  ggml_type type = ggml_type::f32;
  std::span<const float> values;
};

namespace detail {

inline error gguf_write_error(const std::filesystem::path& file, const std::string& problem) {
  return error("'" + file.string() + "': cannot write GGUF: " + problem);
}

// Appends little-endian fields to the header buffer.
class gguf_header_builder {
public:
  template <class Bits>
  void number(Bits bits) {
    std::byte out[sizeof(Bits)];
    store_bits(bits, out);
    bytes_.insert(bytes_.end(), out, out + sizeof(Bits));
  }
  void type(gguf_value_type type) { number(static_cast<std::uint32_t>(type)); }
  void string(std::string_view text) {
    number(static_cast<std::uint64_t>(text.size()));
    const auto* first = reinterpret_cast<const std::byte*>(text.data());
    bytes_.insert(bytes_.end(), first, first + text.size());
  }
  void pad_to(std::uint64_t alignment) { bytes_.resize(bytes_.size() + gguf_padding(bytes_.size(), alignment)); }
  const std::vector<std::byte>& bytes() const noexcept { return bytes_; }

  static std::uint64_t gguf_padding(std::uint64_t position, std::uint64_t alignment) {
    return (alignment - position % alignment) % alignment;
  }

private:
  std::vector<std::byte> bytes_;
};

inline void append_metadata_value(gguf_header_builder& out, const gguf_metadata_value& value) {
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          out.type(gguf_value_type::string);
          out.string(v);
        } else if constexpr (std::is_same_v<T, std::uint32_t>) {
          out.type(gguf_value_type::uint32);
          out.number(v);
        } else if constexpr (std::is_same_v<T, std::int32_t>) {
          out.type(gguf_value_type::int32);
          out.number(static_cast<std::uint32_t>(v));
        } else if constexpr (std::is_same_v<T, std::uint64_t>) {
          out.type(gguf_value_type::uint64);
          out.number(v);
        } else if constexpr (std::is_same_v<T, float>) {
          out.type(gguf_value_type::float32);
          out.number(std::bit_cast<std::uint32_t>(v));
        } else if constexpr (std::is_same_v<T, bool>) {
          out.type(gguf_value_type::boolean);
          out.number(static_cast<std::uint8_t>(v ? 1 : 0));
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          out.type(gguf_value_type::array);
          out.type(gguf_value_type::string);
          out.number(static_cast<std::uint64_t>(v.size()));
          for (const auto& text : v) out.string(text);
        } else if constexpr (std::is_same_v<T, std::vector<float>>) {
          out.type(gguf_value_type::array);
          out.type(gguf_value_type::float32);
          out.number(static_cast<std::uint64_t>(v.size()));
          for (const float x : v) out.number(std::bit_cast<std::uint32_t>(x));
        } else {
          static_assert(std::is_same_v<T, std::vector<std::int32_t>>);
          out.type(gguf_value_type::array);
          out.type(gguf_value_type::int32);
          out.number(static_cast<std::uint64_t>(v.size()));
          for (const std::int32_t x : v) out.number(static_cast<std::uint32_t>(x));
        }
      },
      value);
}

// The alignment the metadata asks for (general.alignment, a uint32 as ggml writes it), or 32.
inline std::uint64_t gguf_output_alignment(const std::filesystem::path& file,
                                           std::span<const gguf_metadata_item> metadata) {
  for (const auto& item : metadata) {
    if (item.key != "general.alignment") continue;
    const auto* alignment = std::get_if<std::uint32_t>(&item.value);
    if (!alignment) throw gguf_write_error(file, "metadata key 'general.alignment' must be a uint32");
    if (!std::has_single_bit(*alignment))
      throw gguf_write_error(file, "metadata key 'general.alignment' is " + std::to_string(*alignment) +
                                       "; it must be a nonzero power of two");
    return *alignment;
  }
  return 32;
}

// The tensor's size in bytes as `type`, after checking its shape against its values.
inline std::uint64_t gguf_checked_tensor_bytes(const std::filesystem::path& file, const gguf_tensor_input& tensor) {
  const std::string where = "tensor '" + tensor.name + "'";
  if (tensor.dims.empty() || tensor.dims.size() > 4)
    throw gguf_write_error(file, where + " has " + std::to_string(tensor.dims.size()) +
                                     " dimensions; GGUF tensors have 1 to 4");
  if (!can_quantize(tensor.type))
    throw gguf_write_error(file, where + ": cannot store type " + std::string(ggml_type_name(tensor.type)) +
                                     "; supported: " + quantizable_type_names());
  std::uint64_t count = 1;
  for (const std::uint64_t dim : tensor.dims) {
    if (dim != 0 && count > std::numeric_limits<std::uint64_t>::max() / dim)
      throw gguf_write_error(file, where + ": the element count overflows 64 bits");
    count *= dim;
  }
  if (count != tensor.values.size())
    throw gguf_write_error(file, where + ": its dimensions hold " + std::to_string(count) + " values, but " +
                                     std::to_string(tensor.values.size()) + " were given");
  const auto& traits = ggml_traits(tensor.type);
  if (tensor.dims[0] % traits.block_size != 0)
    throw gguf_write_error(file, where + ": ne[0] = " + std::to_string(tensor.dims[0]) + " is not a multiple of " +
                                     std::string(traits.name) + "'s block size " + std::to_string(traits.block_size));
  if (traits.block_size > 1) {
    const auto bad = std::ranges::find_if(tensor.values, [](float x) { return !std::isfinite(x); });
    if (bad != tensor.values.end())
      throw gguf_write_error(file, where + ": element " + std::to_string(bad - tensor.values.begin()) + " is " +
                                       format_number(*bad) + "; " + std::string(traits.name) +
                                       " stores finite values only");
  }
  return count / traits.block_size * traits.block_bytes;
}

} // namespace detail

// Writes a GGUF version 3 file. Keys and tensor names must be unique; general.alignment, if
// given, must be a uint32 power of two and sets the alignment (default 32).
inline void write_gguf(const std::filesystem::path& file, std::span<const gguf_metadata_item> metadata,
                       std::span<const gguf_tensor_input> tensors) {
  using detail::gguf_write_error;
  const std::uint64_t alignment = detail::gguf_output_alignment(file, metadata);
  std::set<std::string_view> keys, names;
  for (const auto& item : metadata)
    if (!keys.insert(item.key).second) throw gguf_write_error(file, "metadata key '" + item.key + "' appears twice");
  for (const auto& tensor : tensors)
    if (!names.insert(tensor.name).second) throw gguf_write_error(file, "tensor '" + tensor.name + "' appears twice");

  detail::gguf_header_builder header;
  header.number(std::uint32_t{0x46554747}); // "GGUF" read as a little-endian uint32
  header.number(std::uint32_t{3});
  header.number(static_cast<std::uint64_t>(tensors.size()));
  header.number(static_cast<std::uint64_t>(metadata.size()));
  for (const auto& item : metadata) {
    header.string(item.key);
    detail::append_metadata_value(header, item.value);
  }
  std::vector<std::uint64_t> sizes;
  std::uint64_t offset = 0;
  for (const auto& tensor : tensors) {
    sizes.push_back(detail::gguf_checked_tensor_bytes(file, tensor));
    header.string(tensor.name);
    header.number(static_cast<std::uint32_t>(tensor.dims.size()));
    for (const std::uint64_t dim : tensor.dims) header.number(dim);
    header.number(static_cast<std::uint32_t>(tensor.type));
    header.number(offset);
    offset += sizes.back() + detail::gguf_header_builder::gguf_padding(sizes.back(), alignment);
  }
  header.pad_to(alignment);

  write_file_atomically(file, "'" + file.string() + "': cannot write GGUF", [&](file_output& out) {
    out.write(header.bytes());
    // Whole blocks of every type at a time: 2^16 elements is a multiple of 32 and 256.
    constexpr std::size_t chunk_elements = std::size_t{1} << 16;
    std::vector<std::byte> chunk;
    const std::vector<std::byte> zeros(alignment > 4096 ? 4096 : static_cast<std::size_t>(alignment));
    for (std::size_t t = 0; t < tensors.size() && out.ok(); ++t) {
      const auto& tensor = tensors[t];
      const auto& traits = ggml_traits(tensor.type);
      for (std::size_t first = 0; first < tensor.values.size() && out.ok(); first += chunk_elements) {
        const auto values = tensor.values.subspan(first, std::min(chunk_elements, tensor.values.size() - first));
        chunk.resize(values.size() / traits.block_size * traits.block_bytes);
        quantize_blocks(tensor.type, values, chunk);
        out.write(chunk);
      }
      for (std::uint64_t padding = detail::gguf_header_builder::gguf_padding(sizes[t], alignment); padding > 0;) {
        const std::size_t now = static_cast<std::size_t>(std::min<std::uint64_t>(padding, zeros.size()));
        out.write(std::span(zeros).first(now));
        padding -= now;
      }
    }
  });
}

} // namespace kvlab
