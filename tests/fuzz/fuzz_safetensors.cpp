// KV dumps in .safetensors files: load_safetensors on any bytes, and a dump it reads must
// survive write_safetensors and read back to the same shapes and bits.
#include "fuzz_input.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
import kvlab;

namespace {

bool same(const kvlab::kv_tensor& a, const kvlab::kv_tensor& b) {
  return a.shape() == b.shape() &&
         std::memcmp(a.values().data(), b.values().data(), a.values().size() * sizeof(float)) == 0;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto file = kvlab_fuzz::scratch_file("input.safetensors", kvlab_fuzz::as_text(data, size));
  kvlab::kv_data dump;
  try {
    dump = kvlab::load_safetensors(file);
  } catch (const kvlab::error&) {
    return 0;
  }
  const auto copy = kvlab_fuzz::scratch_folder() / "copy.safetensors";
  kvlab::write_safetensors(copy, dump);
  const kvlab::kv_data again = kvlab::load_safetensors(copy);
  if (!same(again.keys, dump.keys) || !same(again.values, dump.values) || !same(again.queries, dump.queries)) {
    std::fprintf(stderr, "write_safetensors then load_safetensors changed the dump\n");
    std::abort();
  }
  return 0;
}
