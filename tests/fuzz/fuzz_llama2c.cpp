// llama2.c checkpoints: load_llama2c_checkpoint on any bytes.
#include "fuzz_input.hpp"

import kvlab;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto file = kvlab_fuzz::scratch_file("model.bin", kvlab_fuzz::as_text(data, size));
  try {
    static_cast<void>(kvlab::load_llama2c_checkpoint(file));
  } catch (const kvlab::error&) {
  }
  return 0;
}
