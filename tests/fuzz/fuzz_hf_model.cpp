// Hugging Face model folders: the input is config.json, then optionally a NUL byte and
// model.safetensors; load_hf_weights reads both.
#include "fuzz_input.hpp"

import kvlab;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto [config, weights] = kvlab_fuzz::split_at_nul(kvlab_fuzz::as_text(data, size));
  kvlab_fuzz::scratch_file("config.json", config);
  kvlab_fuzz::scratch_file("model.safetensors", weights);
  try {
    static_cast<void>(kvlab::load_hf_weights(kvlab_fuzz::scratch_folder()));
  } catch (const kvlab::error&) {
  }
  return 0;
}
