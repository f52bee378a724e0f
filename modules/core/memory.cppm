// Buffers for cache records, aligned to 64-byte lines. A vector of bytes from malloc starts
// 16 bytes into a line (large blocks are mmapped pages behind a 16-byte header), so every
// vector load of a record run straddled two lines: KIVI-2's keys from DRAM took 1.95-1.99
// ns per token with their rows and parameters 16 bytes off, 1.83 aligned.
module;
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <utility>
export module kvlab.core:memory;

export namespace kvlab {

inline constexpr std::size_t cache_line_bytes = 64;

// std::allocator's interface, every block aligned to a cache line.
template <class T>
struct line_aligned_allocator {
  using value_type = T;
  line_aligned_allocator() noexcept = default;
  template <class U>
  line_aligned_allocator(const line_aligned_allocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{cache_line_bytes}));
  }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, std::align_val_t{cache_line_bytes}); }
  // resize() default-initialises what it adds: bytes are left as they are, not zeroed. Every
  // record appended is written by its encoder (bits past the last code included, or they
  // are never read), and zeroing the run first was 8 % of an int8 append.
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    if constexpr (sizeof...(Args) == 0)
      ::new (static_cast<void*>(p)) U;
    else
      ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
  template <class U>
  bool operator==(const line_aligned_allocator<U>&) const noexcept {
    return true;
  }
};

// A line-aligned array of bytes, freed with the matching aligned delete.
struct line_aligned_delete {
  void operator()(std::uint8_t* p) const noexcept { ::operator delete[](p, std::align_val_t{cache_line_bytes}); }
};
using line_aligned_bytes = std::unique_ptr<std::uint8_t[], line_aligned_delete>;
inline line_aligned_bytes make_line_aligned_bytes(std::size_t bytes) {
  return line_aligned_bytes(new (std::align_val_t{cache_line_bytes}) std::uint8_t[bytes]);
}

} // namespace kvlab
