// Software prefetch for the loops over runs of records, shared by every family.
#pragma once
#include <cstddef>
#include <cstdint>
#include <immintrin.h>

namespace kvlab::kernels::simd {
// Internal linkage: each ISA's translation units keep their own copies, compiled with their
// own -m flags.
namespace {

// One core's hardware prefetcher does not keep a per-token loop fed from DRAM: each batch
// of up to 16 records asks for the lines that start inside the batch 8 KiB ahead, into L2
// (L2 to L1 the hardware keeps up), so every line is asked for once; prefetches never
// fault, so reaching past the run is harmless. Without it f16 attention at 32k context
// ran about 1.5x slower; a second prefetch into L1 at 2 KiB measured no better and costs
// L2-resident loops time. The span is worked out once per batch: per record it cost as
// much scalar work as a 4-bit record's vector work (per batch, int4 and int8 values read
// 1.1-1.2x faster from DRAM).
inline constexpr std::size_t prefetch_distance = 8192;
// The lines that start inside [begin, begin + bytes) 8 KiB ahead: where they start and
// how many.
struct prefetch_span {
  std::uintptr_t first;
  std::size_t lines;
};
inline prefetch_span lines_ahead(const std::uint8_t* begin, std::size_t bytes) noexcept {
  const std::uintptr_t start = reinterpret_cast<std::uintptr_t>(begin) + prefetch_distance;
  const std::uintptr_t first = (start + 63) & ~std::uintptr_t{63};
  return {first, first < start + bytes ? (start + bytes - first + 63) / 64 : 0};
}
// Every line [begin, begin + bytes) touches.
inline prefetch_span lines_covering(const std::uint8_t* begin, std::size_t bytes) noexcept {
  const std::uintptr_t start = reinterpret_cast<std::uintptr_t>(begin), first = start & ~std::uintptr_t{63};
  return {first, bytes == 0 ? 0 : (start + bytes - first + 63) / 64};
}
// A request waits for a free L1 fill buffer, so a burst of them stalls the loop: loops
// over many records spread their requests over their work, asking in part `part` of
// `parts` for lines part, part + parts, ... (measured 5-10 % faster from DRAM than one
// burst per 16 records).
template <int Hint = _MM_HINT_T1>
inline void prefetch_part(prefetch_span span, std::size_t part, std::size_t parts) noexcept {
  for (std::size_t line = part; line < span.lines; line += parts)
    _mm_prefetch(reinterpret_cast<const char*>(span.first + 64 * line), Hint);
}

// Loops that go over a chunk of records in passes (the values of several heads: a few
// vectors or blocks of every record per pass) spread the chunk's requests over all its
// passes, one part per token and pass, so each line is asked for once: one burst in the
// first pass stalled on full fill buffers (on AMD Zen 3, f16 at GQA 4 from DRAM took 58.9
// ns per token that way against 45.6, docs/performance.md).
struct chunk_passes {
  std::size_t count; // the passes over `units` vectors or blocks, at most per_pass each
  chunk_passes(std::size_t units, std::size_t per_pass) noexcept : count(units / per_pass + units % per_pass) {}
  // Token t (of `tokens`) in pass `pass`: its part of the lines ahead.
  void prefetch(prefetch_span ahead, std::size_t pass, std::size_t t, std::size_t tokens) const noexcept {
    prefetch_part(ahead, pass * tokens + t, count * tokens);
  }
};

} // namespace
} // namespace kvlab::kernels::simd
