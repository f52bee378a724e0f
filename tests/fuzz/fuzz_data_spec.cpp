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
    if (spec.starts_with("model:")) {
      static_cast<void>(kvlab::parse_model_data_spec(spec));
      return 0;
    }
    const kvlab::data_request request = kvlab::parse_data_spec(spec);
    if (request.source == "synthetic" && request.elements <= max_generated_elements)
      static_cast<void>(kvlab::load_data(spec));
  } catch (const kvlab::error&) {
  }
  return 0;
}
