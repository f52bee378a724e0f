// Which instruction sets this CPU (and OS) can run, from xsimd's cpuid probe.
#include "kernels.hpp"

#include <cstdlib>
#include <xsimd/xsimd.hpp>

namespace kvlab::kernels {

bool cpu_supports(isa instruction_set) noexcept {
  static const auto available = xsimd::available_architectures();
  switch (instruction_set) {
  case isa::scalar: return true;
  case isa::avx2: return available.avx2 && available.fma3_avx2 && __builtin_cpu_supports("f16c");
  case isa::avx512:
    return available.avx512bw && available.avx512dq && available.avx512f && __builtin_cpu_supports("avx512vl");
  case isa::avx512_vnni: return cpu_supports(isa::avx512) && __builtin_cpu_supports("avx512vnni");
  }
  return false;
}

const kernel_table& kernels_of(isa instruction_set) noexcept {
  switch (instruction_set) {
  case isa::avx512_vnni: return avx512_vnni_kernels();
  case isa::avx512: return avx512_kernels();
  case isa::avx2: return avx2_kernels();
  case isa::scalar: break;
  }
  return scalar_kernels();
}

const kernel_table& active_kernels() noexcept {
  static const kernel_table& table = []() -> const kernel_table& {
    if (const char* forced = std::getenv("KVLAB_ISA"); forced && *forced) {
      for (const isa candidate : {isa::scalar, isa::avx2, isa::avx512, isa::avx512_vnni})
        if (isa_name(candidate) == forced && cpu_supports(candidate)) return kernels_of(candidate);
      return scalar_kernels();
    }
    if (cpu_supports(isa::avx512_vnni)) return avx512_vnni_kernels();
    if (cpu_supports(isa::avx512)) return avx512_kernels();
    if (cpu_supports(isa::avx2)) return avx2_kernels();
    return scalar_kernels();
  }();
  return table;
}

std::string_view isa_name(isa instruction_set) noexcept {
  switch (instruction_set) {
  case isa::scalar: return "scalar";
  case isa::avx2: return "avx2";
  case isa::avx512: return "avx512";
  case isa::avx512_vnni: return "avx512vnni";
  }
  return "unknown";
}

} // namespace kvlab::kernels
