// flat: every record of a stream in one contiguous buffer; erasing moves the shorter side
// of the victims and releases the freed capacity once it is half the buffer.
// Paper: - (the contiguous layout of HF transformers' DynamicCache)
module;
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>
export module kvlab.strategies.flat;
import kvlab.core;

export namespace kvlab::strategies::flat {

class contiguous_records final : public record_store {
public:
  explicit contiguous_records(std::size_t record_bytes) : record_bytes_(record_bytes) {}
  std::span<std::uint8_t> append_slot() override {
    const std::size_t end = bytes_.size();
    bytes_.resize(end + record_bytes_);
    return std::span(bytes_).subspan(end);
  }
  void pop_back() override { bytes_.resize(bytes_.size() - record_bytes_); }
  void reserve(std::size_t records) override { bytes_.reserve(bytes_.size() + records * record_bytes_); }
  std::span<const std::uint8_t> record(std::size_t index) const override {
    return live().subspan(index * record_bytes_, record_bytes_);
  }
  std::span<const std::uint8_t> run(std::size_t first) const override { return live().subspan(first * record_bytes_); }
  std::size_t size() const noexcept override { return (bytes_.size() - start_) / record_bytes_; }
  std::size_t record_bytes() const noexcept override { return record_bytes_; }
  std::size_t bytes_reserved() const noexcept override { return bytes_.size() - start_; }
  // Each step of an evicting cache erases a token or two from a long buffer, so the records
  // on the shorter side of the victims move: those after them down, or those before them up
  // over a dead prefix (dropped once it outgrows the live records). A sliding window or a
  // sink-and-window policy then moves a handful of records per step, not the whole cache.
  // Moving up keeps the runs on cache lines only when the victims span whole lines (fp16
  // records of head_dim 32 or more); other records always move down.
  void erase(std::span<const std::size_t> sorted_indices) override {
    const std::size_t n = size();
    for (std::size_t i = 0; i < sorted_indices.size(); ++i)
      if (sorted_indices[i] >= n || (i > 0 && sorted_indices[i] <= sorted_indices[i - 1]))
        throw error("flat storage: erase needs ascending, unique indices below " + std::to_string(n));
    if (sorted_indices.empty()) return;
    std::uint8_t* base = bytes_.data() + start_;
    const auto move = [&](std::size_t to, std::size_t from, std::size_t count) {
      std::memmove(base + to * record_bytes_, base + from * record_bytes_, count * record_bytes_);
    };
    const std::size_t victims = sorted_indices.size();
    if (victims * record_bytes_ % cache_line_bytes == 0 && sorted_indices.back() < n - sorted_indices.front()) {
      // Up: each run before a victim moves towards the end, the last run first.
      std::size_t kept_end = sorted_indices.back() + 1;
      for (std::size_t i = victims; i-- > 0;) {
        const std::size_t run_start = i > 0 ? sorted_indices[i - 1] + 1 : 0, count = sorted_indices[i] - run_start;
        kept_end -= count;
        move(kept_end, run_start, count);
      }
      start_ += victims * record_bytes_;
      if (start_ > bytes_.size() - start_) compact();
    } else {
      std::size_t kept = sorted_indices.front();
      for (std::size_t i = 0; i < victims; ++i) {
        const std::size_t first = sorted_indices[i] + 1, end = i + 1 < victims ? sorted_indices[i + 1] : n;
        move(kept, first, end - first);
        kept += end - first;
      }
      bytes_.resize(start_ + kept * record_bytes_);
    }
    // Capacity is released once it is twice what is held: shrinking at every erase would
    // copy every record twice per step (shrink, then grow at the next append).
    if (bytes_.capacity() > 2 * (bytes_.size() - start_)) compact(), bytes_.shrink_to_fit();
  }

private:
  std::span<const std::uint8_t> live() const noexcept { return std::span(bytes_).subspan(start_); }
  void compact() {
    bytes_.erase(bytes_.begin(), bytes_.begin() + static_cast<std::ptrdiff_t>(start_));
    start_ = 0;
  }

  std::size_t record_bytes_;
  std::vector<std::uint8_t, line_aligned_allocator<std::uint8_t>> bytes_; // vector loads stay within lines
  std::size_t start_ = 0; // bytes of erased records before the live ones
};

struct flat_storage {
  using component_concept = storage_tag;
  std::string name() const { return "flat"; }
  std::unique_ptr<record_store> make_store(std::size_t record_bytes) const {
    return std::make_unique<contiguous_records>(record_bytes);
  }
};
static_assert(Storage<flat_storage>);

inline strategy_info info() {
  return {.name = "flat", .usage = "flat", .summary = "one contiguous buffer per stream", .paper = "-"};
}

inline flat_storage make(const strategy_args&) { return flat_storage{}; }

} // namespace kvlab::strategies::flat

// The typed name recipes use (kvlab.compose).
export namespace kvlab::parts {
using flat = strategies::flat::flat_storage;
} // namespace kvlab::parts
