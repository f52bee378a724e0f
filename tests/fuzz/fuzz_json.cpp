// The JSON reader of result files and model headers: parse_json on any text, and what it reads
// must survive the result writer's json_string and json_number and read back the same.
#include "fuzz_input.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <variant>
import kvlab;

namespace {

std::string written(const kvlab::json_value& value) {
  if (value.is_object()) {
    std::string text = "{";
    for (const auto& [key, member] : value.object())
      text += (text.size() > 1 ? "," : "") + kvlab::json_string(key) + ":" + written(member);
    return text + "}";
  }
  if (value.is_array()) {
    std::string text = "[";
    for (const auto& item : value.array()) text += (text.size() > 1 ? "," : "") + written(item);
    return text + "]";
  }
  if (value.is_string()) return kvlab::json_string(value.string());
  if (value.is_number()) return kvlab::json_number(value.number());
  if (std::holds_alternative<bool>(value.value)) return std::get<bool>(value.value) ? "true" : "false";
  return "null";
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  kvlab::json_value value;
  try {
    value = kvlab::parse_json(kvlab_fuzz::as_text(data, size), "fuzz input");
  } catch (const kvlab::error&) {
    return 0;
  }
  const std::string text = written(value);
  try {
    if (written(kvlab::parse_json(text, "written")) == text) return 0;
    std::fprintf(stderr, "JSON written as %s reads back as another value\n", text.c_str());
  } catch (const kvlab::error& e) {
    std::fprintf(stderr, "JSON written as %s does not read back: %s\n", text.c_str(), e.what());
  }
  std::abort();
}
