// paged(P): each stream keeps its own list of fixed-size pages of P records, so heads and
// layers can hold different numbers of tokens. Erasing compacts the stream and returns
// whole pages to a free list shared by all streams of the cache, from which new pages are
// taken first. A stream's bytes are its pages (padding of the last one included) plus its
// page table (one pointer per page).
// Paper: PagedAttention (vLLM), arXiv 2309.06180, sec. 4.1-4.2.
module;
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>
export module kvlab.strategies.paged;
import kvlab.core;

export namespace kvlab::strategies::paged {

using page = line_aligned_bytes; // vector loads stay within lines

// Free pages by size, shared by the streams of one cache.
class page_pool {
public:
  page take(std::size_t bytes) {
    auto& free = free_[bytes];
    if (free.empty()) return make_line_aligned_bytes(bytes);
    page reused = std::move(free.back());
    free.pop_back();
    return reused;
  }
  void give_back(page p, std::size_t bytes) { free_[bytes].push_back(std::move(p)); }

private:
  std::map<std::size_t, std::vector<page>> free_;
};

class paged_records final : public record_store {
public:
  paged_records(std::size_t record_bytes, std::size_t page_records, std::shared_ptr<page_pool> pool)
      : record_bytes_(record_bytes), page_records_(page_records), pool_(std::move(pool)) {}
  ~paged_records() override {
    for (auto& p : pages_) pool_->give_back(std::move(p), page_bytes());
  }

  // Up to the end of the last page (a new one when it is full).
  std::span<std::uint8_t> append_slots(std::size_t records) override {
    if (size_ == pages_.size() * page_records_) pages_.push_back(pool_->take(page_bytes()));
    const std::size_t first = size_;
    size_ = std::min(pages_.size() * page_records_, first + std::max<std::size_t>(records, 1));
    return {slot(first), (size_ - first) * record_bytes_};
  }
  void pop_back() override {
    --size_;
    if (size_ + page_records_ == pages_.size() * page_records_) {
      pool_->give_back(std::move(pages_.back()), page_bytes());
      pages_.pop_back();
    }
  }
  // The page table grows without reallocating; pages come from the pool as records need them.
  void reserve(std::size_t records) override { pages_.reserve((size_ + records + page_records_ - 1) / page_records_); }
  std::span<const std::uint8_t> record(std::size_t index) const override { return {slot(index), record_bytes_}; }
  std::span<const std::uint8_t> run(std::size_t first) const override {
    const std::size_t end = std::min(size_, (first / page_records_ + 1) * page_records_);
    return {slot(first), (end - first) * record_bytes_};
  }
  std::size_t size() const noexcept override { return size_; }
  std::size_t record_bytes() const noexcept override { return record_bytes_; }
  std::size_t bytes_reserved() const noexcept override {
    return pages_.size() * (page_bytes() + sizeof(std::uint8_t*));
  }
  void erase(std::span<const std::size_t> sorted_indices) override {
    for (std::size_t i = 0; i < sorted_indices.size(); ++i)
      if (sorted_indices[i] >= size_ || (i > 0 && sorted_indices[i] <= sorted_indices[i - 1]))
        throw error("paged storage: erase needs ascending, unique indices below " + std::to_string(size_));
    if (sorted_indices.empty()) return;
    // Records before the first victim stay where they are.
    std::size_t kept = sorted_indices.front(), next_victim = 0;
    for (std::size_t index = kept; index < size_; ++index) {
      if (next_victim < sorted_indices.size() && sorted_indices[next_victim] == index) {
        ++next_victim;
        continue;
      }
      if (kept != index) std::memcpy(slot(kept), slot(index), record_bytes_);
      ++kept;
    }
    size_ = kept;
    const std::size_t pages_needed = (size_ + page_records_ - 1) / page_records_;
    while (pages_.size() > pages_needed) {
      pool_->give_back(std::move(pages_.back()), page_bytes());
      pages_.pop_back();
    }
  }

private:
  std::size_t page_bytes() const noexcept { return record_bytes_ * page_records_; }
  std::uint8_t* slot(std::size_t index) const noexcept {
    return pages_[index / page_records_].get() + (index % page_records_) * record_bytes_;
  }

  std::size_t record_bytes_;
  std::size_t page_records_;
  std::shared_ptr<page_pool> pool_;
  std::vector<page> pages_;
  std::size_t size_ = 0;
};

// Pages beyond this many records would be larger than any stream needs (and P x record
// bytes must not overflow).
inline constexpr std::size_t max_page_records = std::size_t{1} << 20;

struct paged_storage {
  using component_concept = storage_tag;
  std::size_t page_records;
  std::shared_ptr<page_pool> pool = std::make_shared<page_pool>();
  std::string name() const { return "paged(" + std::to_string(page_records) + ")"; }
  std::unique_ptr<record_store> make_store(std::size_t record_bytes) const {
    if (page_records == 0 || page_records > max_page_records)
      throw error(name() + ": page size must be in 1.." + std::to_string(max_page_records) + " records");
    return std::make_unique<paged_records>(record_bytes, page_records, pool);
  }
};
static_assert(Storage<paged_storage>);

inline strategy_info info() {
  return {.name = "paged",
          .usage = "paged(P)",
          .summary = "pages of P records per stream, shared free list",
          .paper = "arXiv 2309.06180 sec. 4",
          .examples = {"paged(16)", "paged(3)"}};
}

inline paged_storage make(const strategy_args& args) {
  args.expect_arguments(1, "paged(P)");
  return paged_storage{args.number_in<std::size_t>(0, "page size P (records)", 1, max_page_records)};
}

} // namespace kvlab::strategies::paged

// The typed name recipes use (kvlab.compose).
export namespace kvlab::parts {
using paged = strategies::paged::paged_storage;
} // namespace kvlab::parts
