// NumPy .npy files: read_npy on any bytes, and a file it reads must survive write_npy and read
// back to the same shape and bits.
#include "fuzz_input.hpp"

#include <cstring>
import kvlab;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  kvlab_fuzz::check_round_trip<kvlab::error>(
      kvlab_fuzz::as_text(data, size), "input.npy",
      [](const std::filesystem::path& file) { return kvlab::read_npy(file); },
      [](const std::filesystem::path& file, const kvlab::npy_array& array) {
        kvlab::write_npy(file, array.shape, array.values);
      },
      [](const kvlab::npy_array& a, const kvlab::npy_array& b) {
        return a.shape == b.shape && a.values.size() == b.values.size() &&
               std::memcmp(a.values.data(), b.values.data(), a.values.size() * sizeof(float)) == 0;
      },
      "array");
  return 0;
}
