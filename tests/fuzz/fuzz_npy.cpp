// NumPy .npy files: read_npy on any bytes, and a file it reads must survive write_npy and read
// back to the same shape and bits.
#include "fuzz_input.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
import kvlab;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto file = kvlab_fuzz::scratch_file("input.npy", kvlab_fuzz::as_text(data, size));
  kvlab::npy_array array;
  try {
    array = kvlab::read_npy(file);
  } catch (const kvlab::error&) {
    return 0;
  }
  const auto copy = kvlab_fuzz::scratch_folder() / "copy.npy";
  kvlab::write_npy(copy, array.shape, array.values);
  const kvlab::npy_array again = kvlab::read_npy(copy);
  if (again.shape != array.shape || again.values.size() != array.values.size() ||
      std::memcmp(again.values.data(), array.values.data(), array.values.size() * sizeof(float)) != 0) {
    std::fprintf(stderr, "write_npy then read_npy changed the array\n");
    std::abort();
  }
  return 0;
}
