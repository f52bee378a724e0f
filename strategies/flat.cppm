// flat: every record of a stream in one contiguous buffer; erasing compacts it in place
// and releases the freed capacity.
// Paper: - (the contiguous layout of HF transformers' DynamicCache)
module;
#include <algorithm>
#include <cstddef>
#include <cstdint>
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
  void append(std::span<const std::uint8_t> record) override {
    if (record.size() != record_bytes_)
      throw error("flat storage: record of " + std::to_string(record.size()) + " bytes, expected " +
                  std::to_string(record_bytes_));
    bytes_.insert(bytes_.end(), record.begin(), record.end());
  }
  std::span<const std::uint8_t> record(std::size_t index) const override {
    return std::span(bytes_).subspan(index * record_bytes_, record_bytes_);
  }
  std::span<const std::uint8_t> run(std::size_t first) const override {
    return std::span(bytes_).subspan(first * record_bytes_);
  }
  std::size_t size() const noexcept override { return bytes_.size() / record_bytes_; }
  std::size_t record_bytes() const noexcept override { return record_bytes_; }
  std::size_t bytes_reserved() const noexcept override { return bytes_.size(); }
  void erase(std::span<const std::size_t> sorted_indices) override {
    for (std::size_t i = 0; i < sorted_indices.size(); ++i)
      if (sorted_indices[i] >= size() || (i > 0 && sorted_indices[i] <= sorted_indices[i - 1]))
        throw error("flat storage: erase needs ascending, unique indices below " + std::to_string(size()));
    std::size_t kept = 0;
    std::size_t next_victim = 0;
    for (std::size_t index = 0; index < size(); ++index) {
      if (next_victim < sorted_indices.size() && sorted_indices[next_victim] == index) {
        ++next_victim;
        continue;
      }
      std::copy_n(bytes_.begin() + static_cast<std::ptrdiff_t>(index * record_bytes_), record_bytes_,
                  bytes_.begin() + static_cast<std::ptrdiff_t>(kept * record_bytes_));
      ++kept;
    }
    bytes_.resize(kept * record_bytes_);
    bytes_.shrink_to_fit();
  }

private:
  std::size_t record_bytes_;
  std::vector<std::uint8_t, line_aligned_allocator<std::uint8_t>> bytes_; // vector loads stay within lines
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
