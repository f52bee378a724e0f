// Hugging Face tokenizers: the input is tokenizer.json, then optionally a NUL byte and the
// tokenizer_config.json beside it; a tokenizer load_hf_tokenizer reads then encodes and decodes.
#include "fuzz_input.hpp"

import kvlab;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto [tokenizer_json, tokenizer_config] = kvlab_fuzz::split_at_nul(kvlab_fuzz::as_text(data, size));
  const auto file = kvlab_fuzz::scratch_file("tokenizer.json", tokenizer_json);
  kvlab_fuzz::scratch_file("tokenizer_config.json", tokenizer_config);
  try {
    kvlab_fuzz::exercise_tokenizer(kvlab::load_hf_tokenizer(file));
  } catch (const kvlab::error&) {
  }
  return 0;
}
