// GGUF files: gguf_file on any bytes; in a file it accepts, every metadata value read with the
// getters its type allows, every tensor dequantized, and the model and tokenizer it describes
// loaded (the tokenizer then encodes and decodes).
#include "fuzz_input.hpp"

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>
import kvlab;

namespace {

// A getter may refuse a value (a negative number read as unsigned, say) with kvlab::error.
template <class Read>
void read_or_refuse(Read&& read) {
  try {
    read();
  } catch (const kvlab::error&) {
  }
}

void read_every_value(const kvlab::gguf_file& file) {
  using type = kvlab::gguf_value_type;
  for (const std::string_view key : file.keys()) {
    static_cast<void>(file.type_name_of(key));
    switch (*file.type_of(key)) {
    case type::string: static_cast<void>(file.get_string(key)); break;
    case type::boolean: static_cast<void>(file.get_bool(key)); break;
    case type::float32:
    case type::float64: static_cast<void>(file.get_float(key)); break;
    case type::array:
      static_cast<void>(file.array_size(key));
      read_or_refuse([&] { file.get_string_array(key); });
      read_or_refuse([&] { file.get_float_array(key); });
      read_or_refuse([&] { file.get_int_array(key); });
      break;
    default: read_or_refuse([&] { file.get_uint(key); }); read_or_refuse([&] { file.get_int(key); });
    }
  }
}

void dequantize_every_tensor(const kvlab::gguf_file& file) {
  for (const kvlab::gguf_tensor& tensor : file.tensors()) {
    if (!kvlab::can_dequantize(tensor.type)) continue;
    std::vector<float> values(static_cast<std::size_t>(tensor.element_count())); // bounded by the file's bytes
    kvlab::dequantize(tensor, values);
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto path = kvlab_fuzz::scratch_file("input.gguf", kvlab_fuzz::as_text(data, size));
  try {
    const kvlab::gguf_file file(path);
    read_every_value(file);
    dequantize_every_tensor(file);
    read_or_refuse([&] { kvlab::load_gguf_weights(file); });
    read_or_refuse([&] { kvlab_fuzz::exercise_tokenizer(kvlab::tokenizer_from_gguf(file)); });
  } catch (const kvlab::error&) {
  }
  return 0;
}
