// kvlab.simd: picks the kernel table once (the best ISA this CPU runs, or KVLAB_ISA to force
// one) and hands it to callers, who then call through it per block, never per element.
module;
#include "kernels.hpp"

#include <cstdlib>
#include <string>
#include <string_view>
export module kvlab.simd;
import kvlab.core;

export namespace kvlab {

using kernels::channel_block;
using kernels::element_kind;
using kernels::fixed_point_values;
using kernels::isa;
using kernels::isa_name;
using kernels::kernel_table;
using kernels::nearest_thresholds;
using kernels::record_format;

inline bool cpu_supports(isa instruction_set) noexcept { return kernels::cpu_supports(instruction_set); }

// The kernel table of one ISA; throws if this CPU cannot run it.
inline const kernel_table& kernels_for(isa instruction_set) {
  if (!kernels::cpu_supports(instruction_set))
    throw error("this CPU cannot run the " + std::string(isa_name(instruction_set)) + " kernels");
  return kernels::kernels_of(instruction_set);
}

inline isa parse_isa(std::string_view name) {
  for (const isa candidate : {isa::scalar, isa::avx2, isa::avx512, isa::avx512_vnni})
    if (name == isa_name(candidate)) return candidate;
  throw error("unknown instruction set '" + std::string(name) + "'; allowed: scalar, avx2, avx512, avx512vnni");
}

// Best ISA of this CPU, unless the environment variable KVLAB_ISA names one (checked here,
// so a wrong name is an error rather than a silent fallback). The check runs once, as the
// choice does: every append asks for the table, and reading the environment each time was
// 5 % of an int8 append.
inline const kernel_table& active_kernels() {
  static const bool checked = [] {
    if (const char* forced = std::getenv("KVLAB_ISA"); forced && *forced) {
      try {
        kernels_for(parse_isa(forced));
      } catch (const error& e) {
        throw error(std::string("KVLAB_ISA: ") + e.what());
      }
    }
    return true;
  }();
  (void)checked;
  return kernels::active_kernels();
}

} // namespace kvlab
