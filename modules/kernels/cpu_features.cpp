// Which instruction sets this CPU (and OS) can run, from xsimd's cpuid probe.
#include "kernels.hpp"

#include <xsimd/xsimd.hpp>

namespace kvlab::kernels {

bool cpu_supports(isa instruction_set) noexcept {
  static const auto available = xsimd::available_architectures();
  switch (instruction_set) {
  case isa::scalar: return true;
  case isa::avx2: return available.avx2 && available.fma3_avx2 && __builtin_cpu_supports("f16c");
  case isa::avx512: return available.avx512bw && available.avx512dq && available.avx512f;
  }
  return false;
}

std::string_view isa_name(isa instruction_set) noexcept {
  switch (instruction_set) {
  case isa::scalar: return "scalar";
  case isa::avx2: return "avx2";
  case isa::avx512: return "avx512";
  }
  return "unknown";
}

} // namespace kvlab::kernels
