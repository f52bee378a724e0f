// Metric: a number measured at every decode step of every query head, from what the
// compressed cache gave against exact attention over the whole history. Metrics are files
// (metrics/<stem>.cppm, discovered like strategies); `kvlab eval`, sweeps and tables report
// every registered metric with its mean, percentiles and extremes over layers x query heads
// x decode steps.
//   name()           the metric's key in metrics.json and tables
//   direction()      which way is better
//   measure(view)    the number for one step of one query head
module;
#include <concepts>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <utility>
export module kvlab.core:metric;
import :tags;

export namespace kvlab {

enum class metric_direction {
  lower,       // an error: 0 is perfect
  higher,      // a similarity or recall: larger is better
  nearer_zero, // a signed bias
};

// One decode step of one query head. Positions count tokens of the data from 0; the query
// is at position `position` and attends over positions 0..position.
struct step_view {
  std::size_t layer = 0, head = 0, position = 0;
  std::span<const float> output;               // the cache's attention output (head_dim)
  std::span<const double> exact_output;        // exact attention over the whole history
  std::span<const double> probabilities;       // the cache's weight per position (evicted: 0)
  std::span<const double> exact_probabilities; // exact weight per position
  std::span<const float> dots;                 // the cache's q.k per held key (held order)
  std::span<const double> exact_dots;          // exact q.k per position, unscaled
  std::span<const std::size_t> positions;      // the position of each held key
};

template <class M>
concept Metric = opts_into<M, metric_tag> && std::copyable<M> && requires(const M m, const step_view& view) {
  { m.name() } -> std::convertible_to<std::string>;
  { m.direction() } -> std::same_as<metric_direction>;
  { m.measure(view) } -> std::same_as<double>;
};

class any_metric {
public:
  template <Metric M>
  explicit any_metric(M metric) : self_(std::make_shared<model<M>>(std::move(metric))) {}

  std::string name() const { return self_->name(); }
  metric_direction direction() const { return self_->direction(); }
  double measure(const step_view& view) const { return self_->measure(view); }

private:
  struct concept_t {
    virtual ~concept_t() = default;
    virtual std::string name() const = 0;
    virtual metric_direction direction() const = 0;
    virtual double measure(const step_view&) const = 0;
  };
  template <class M>
  struct model final : concept_t {
    explicit model(M m) : m(std::move(m)) {}
    std::string name() const override { return m.name(); }
    metric_direction direction() const override { return m.direction(); }
    double measure(const step_view& view) const override { return m.measure(view); }
    M m;
  };
  std::shared_ptr<const concept_t> self_;
};

} // namespace kvlab
