// The component tags. A type opts into a component concept with a tag (`using
// component_concept = kvlab::quantizer_tag;`): matching the shape alone never makes a type
// a component.
module;
#include <concepts>
export module kvlab.core:tags;

export namespace kvlab {

struct quantizer_tag {};
struct granularity_tag {};
struct eviction_tag {};
struct storage_tag {};
struct allocation_tag {};
struct schedule_tag {};
struct aggregation_tag {};
struct metric_tag {};

template <class T, class Tag>
concept opts_into = requires { typename T::component_concept; } && std::same_as<typename T::component_concept, Tag>;

} // namespace kvlab
