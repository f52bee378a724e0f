// llama2.c's tokenizer.bin: the input is the vocabulary size the checkpoint would give (2 bytes,
// little-endian) and then the file; a tokenizer it loads then encodes and decodes.
#include "fuzz_input.hpp"

#include <cstddef>
import kvlab;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::size_t vocab_size = data[0] | std::size_t{data[1]} << 8;
  const auto file = kvlab_fuzz::scratch_file("tokenizer.bin", kvlab_fuzz::as_text(data + 2, size - 2));
  try {
    kvlab_fuzz::exercise_tokenizer(kvlab::load_llama2c_tokenizer(file, vocab_size));
  } catch (const kvlab::error&) {
  }
  return 0;
}
