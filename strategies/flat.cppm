// flat: every record of a stream in one buffer, in order, with at most one gap where the
// last victims were erased; capacity is released once it is half the buffer.
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
  std::span<std::uint8_t> append_slots(std::size_t records) override {
    const std::size_t end = bytes_.size(), added = std::max<std::size_t>(records, 1);
    bytes_.resize(end + added * record_bytes_);
    slots_ += added;
    return std::span(bytes_).subspan(end);
  }
  void pop_back() override {
    bytes_.resize(bytes_.size() - record_bytes_);
    --slots_;
    drop_gap_at_end();
  }
  void reserve(std::size_t records) override { bytes_.reserve(bytes_.size() + records * record_bytes_); }
  std::span<const std::uint8_t> record(std::size_t index) const override {
    return std::span(bytes_).subspan(slot(index) * record_bytes_, record_bytes_);
  }
  std::span<const std::uint8_t> run(std::size_t first) const override {
    const std::size_t end = first < gap_at_ ? gap_at_ : slots();
    return std::span(bytes_).subspan(slot(first) * record_bytes_, (end - slot(first)) * record_bytes_);
  }
  std::size_t size() const noexcept override { return slots() - gap_; }
  std::size_t record_bytes() const noexcept override { return record_bytes_; }
  std::size_t bytes_reserved() const noexcept override { return size() * record_bytes_; }
  // Each step of an evicting cache erases a token or two from a long buffer, and step after
  // step near the same place: behind a sliding window's front, behind the sinks, at the edge
  // of H2O's recent window. The erased slots form a gap that stays where the last victims
  // were, and the next erasure moves only the records between the gap and its victims, so a
  // policy that erases near where it erased before moves a handful of records per step, not
  // the cache. When the gap is further from the victims than from the end, it is closed by
  // moving the records after it down instead. A gap is kept only while it spans whole cache
  // lines, so every record keeps the line offset it has in a gapless buffer.
  void erase(std::span<const std::size_t> sorted_indices) override {
    const std::size_t n = size();
    for (std::size_t i = 0; i < sorted_indices.size(); ++i)
      if (sorted_indices[i] >= n || (i > 0 && sorted_indices[i] <= sorted_indices[i - 1]))
        throw error("flat storage: erase needs ascending, unique indices below " + std::to_string(n));
    if (sorted_indices.empty()) return;
    const std::size_t victims = sorted_indices.size(), first = sorted_indices.front();
    const bool gap_stays_on_lines = (gap_ + victims) * record_bytes_ % cache_line_bytes == 0;
    if (!gap_stays_on_lines || n - gap_at_ < (first > gap_at_ ? first - gap_at_ : gap_at_ - first)) close_gap();
    move_gap_to(first);
    // The gap now ends at the first victim: it swallows each victim, and the live records
    // between one victim and the next move down across it.
    for (std::size_t i = 0; i < victims; ++i) {
      ++gap_;
      if (i + 1 == victims) break;
      const std::size_t between = sorted_indices[i + 1] - sorted_indices[i] - 1;
      move_slots(gap_at_, gap_at_ + gap_, between);
      gap_at_ += between;
    }
    if (!gap_stays_on_lines) close_gap();
    drop_gap_at_end();
    // A gap longer than the live records is closed (one move of them, after at least as many
    // erasures), and capacity is released once it is twice what is held: shrinking at every
    // erase would copy every record twice per step (shrink, then grow at the next append).
    if (gap_ > size()) close_gap();
    if (bytes_.capacity() > 2 * bytes_reserved()) close_gap(), bytes_.shrink_to_fit();
  }

private:
  std::size_t slots() const noexcept { return slots_; }
  // Live record `index` sits in slot `index` before the gap, and `gap_` slots later after it.
  std::size_t slot(std::size_t index) const noexcept { return index < gap_at_ ? index : index + gap_; }
  void move_slots(std::size_t to, std::size_t from, std::size_t count) {
    std::memmove(bytes_.data() + to * record_bytes_, bytes_.data() + from * record_bytes_, count * record_bytes_);
  }
  // The gap moves to sit before live record `index`, carrying the records in between across it.
  void move_gap_to(std::size_t index) {
    if (gap_ > 0 && index > gap_at_) move_slots(gap_at_, gap_at_ + gap_, index - gap_at_);
    if (gap_ > 0 && index < gap_at_) move_slots(index + gap_, index, gap_at_ - index);
    gap_at_ = index;
  }
  void close_gap() {
    move_gap_to(size());
    drop_gap_at_end();
  }
  void drop_gap_at_end() {
    if (gap_at_ < size()) return;
    bytes_.resize(bytes_.size() - gap_ * record_bytes_);
    slots_ -= gap_;
    gap_ = 0;
    gap_at_ = 0;
  }

  std::size_t record_bytes_;
  std::vector<std::uint8_t, line_aligned_allocator<std::uint8_t>> bytes_; // vector loads stay within lines
  // bytes_.size() / record_bytes_, kept rather than divided: size() is called several times
  // per appended token (5 % of a KIVI-2 append's samples were that division).
  std::size_t slots_ = 0;
  std::size_t gap_at_ = 0; // live records before the gap
  std::size_t gap_ = 0;    // erased record slots between them and the rest
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
