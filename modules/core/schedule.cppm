// Schedule: when a cache with an eviction policy compresses. Schedules are strategies
// (strategies/prefill.cppm, step.cppm, every.cppm); a recipe names one with compress=...,
// and otherwise the policy's own schedule applies (after every token unless it says).
//   after_prefill()   compress once when prefill ends
//   after_token(seen) compress after an appended token, `seen` tokens having arrived
module;
#include <concepts>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
export module kvlab.core:schedule;
import :tags;

export namespace kvlab {

template <class S>
concept Schedule = opts_into<S, schedule_tag> && std::copyable<S> && requires(const S s, std::size_t seen) {
  { s.name() } -> std::convertible_to<std::string>;
  { s.after_prefill() } -> std::same_as<bool>;
  { s.after_token(seen) } -> std::same_as<bool>;
};

class any_schedule {
public:
  template <Schedule S>
  explicit any_schedule(S schedule) : self_(std::make_shared<model<S>>(std::move(schedule))) {}

  std::string name() const { return self_->name(); }
  bool after_prefill() const { return self_->after_prefill(); }
  bool after_token(std::size_t seen) const { return self_->after_token(seen); }

private:
  struct concept_t {
    virtual ~concept_t() = default;
    virtual std::string name() const = 0;
    virtual bool after_prefill() const = 0;
    virtual bool after_token(std::size_t) const = 0;
  };
  template <class S>
  struct model final : concept_t {
    explicit model(S s) : s(std::move(s)) {}
    std::string name() const override { return s.name(); }
    bool after_prefill() const override { return s.after_prefill(); }
    bool after_token(std::size_t seen) const override { return s.after_token(seen); }
    S s;
  };
  std::shared_ptr<const concept_t> self_;
};

} // namespace kvlab
