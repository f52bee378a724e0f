// Recipe strings: parse_recipe on any text either refuses it with kvlab::error or gives a recipe
// whose canonical name parses back to a recipe of the same name (recipes are equal when
// their canonical names are).
#include "fuzz_input.hpp"

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
import kvlab;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto& components = kvlab::builtin_registry();
  std::optional<kvlab::any_recipe> parsed;
  try {
    parsed = kvlab::parse_recipe(kvlab_fuzz::as_text(data, size), components);
  } catch (const kvlab::error&) {
    return 0;
  }
  const std::string name = kvlab::canonical_name(*parsed);
  try {
    const kvlab::any_recipe again = kvlab::parse_recipe(name, components);
    if (kvlab::canonical_name(again) == name) return 0;
    std::fprintf(stderr, "canonical name '%s' parses to another recipe, named '%s'\n", name.c_str(),
                 kvlab::canonical_name(again).c_str());
  } catch (const kvlab::error& e) {
    std::fprintf(stderr, "canonical name '%s' does not parse: %s\n", name.c_str(), e.what());
  }
  std::abort();
}
