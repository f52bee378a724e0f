// Data specs (synthetic:..., npy:DIR, safetensors:FILE, model:PATH,...): parsed and checked on
// any text, never opening a file; small synthetic workloads are generated too, so the
// generators meet odd parameters.
#include "fuzz_input.hpp"

#include <cstddef>
import kvlab;

namespace {

// Keys, values and queries of at most this many floats take well under a millisecond.
constexpr std::size_t max_generated_elements = std::size_t{1} << 14;

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view spec = kvlab_fuzz::as_text(data, size);
  try {
    // Sources that read files say 0; only generated workloads are built here.
    const std::size_t elements = kvlab::check_data_spec(spec);
    if (elements > 0 && elements <= max_generated_elements) static_cast<void>(kvlab::load_data(spec));
  } catch (const kvlab::error&) {
  }
  return 0;
}
