// KV dumps in .safetensors files: load_safetensors on any bytes, and a dump it reads must
// survive write_safetensors and read back to the same shapes and bits.
#include "fuzz_input.hpp"

#include <cstring>
import kvlab;

namespace {

bool same(const kvlab::kv_tensor& a, const kvlab::kv_tensor& b) {
  return a.shape() == b.shape() &&
         std::memcmp(a.values().data(), b.values().data(), a.values().size() * sizeof(float)) == 0;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  kvlab_fuzz::check_round_trip<kvlab::error>(
      kvlab_fuzz::as_text(data, size), "input.safetensors",
      [](const std::filesystem::path& file) { return kvlab::load_safetensors(file); },
      [](const std::filesystem::path& file, const kvlab::kv_data& dump) { kvlab::write_safetensors(file, dump); },
      [](const kvlab::kv_data& a, const kvlab::kv_data& b) {
        return same(a.keys, b.keys) && same(a.values, b.values) && same(a.queries, b.queries);
      },
      "dump");
  return 0;
}
