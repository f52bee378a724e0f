// kvlab.core: tensor views, errors, the component concepts, the strategy registry and
// the recipe type. Everything else in kvlab builds on these names.
export module kvlab.core;
export import :errors;
export import :numeric;
export import :text;
export import :json;
export import :memory;
export import :mapped_file;
export import :durable_file;
export import :sha256;
export import :random;
export import :tensor;
export import :codebook;
export import :tags;
export import :schedule;
export import :metric;
export import :eviction;
export import :concepts;
export import :erased;
export import :registry;
export import :recipe;
export import :arguments;
export import :resources;
