// A recipe is a value: which quantizer and granularity the keys and values use, the fp16
// tiers, the eviction policy and the storage layout. Its canonical name parses back to an
// equal recipe and keys result folders and table rows.
module;
#include <cstddef>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>
export module kvlab.core:recipe;
import :errors;
import :numeric;
import :concepts;
import :eviction;
import :registry;

export namespace kvlab {

struct stream_recipe {
  std::string quantizer = "f16";
  std::string granularity = "token";
  bool operator==(const stream_recipe&) const = default;
};

struct recipe {
  stream_recipe keys;
  stream_recipe values;
  param_precision scale = param_precision::f16; // storage of scales and zeros
  std::size_t sinks = 0;                        // first tokens kept in fp16
  std::size_t residual = 0;                     // most recent tokens kept in fp16
  std::string eviction = "none";
  std::string allocation = "uniform";  // budgets over layers and heads: uniform, pyramid(beta), adakv(alpha)
  std::string gqa = "mean";            // a KV head's score from its query heads: mean or max
  std::string compress;                // prefill, step or every(N); empty: the policy's own schedule
  std::optional<stream_recipe> demote; // evicted tokens move to this tier instead of being dropped
  std::string storage = "flat";
  bool operator==(const recipe&) const = default;
};

// Keys of a recipe string, in canonical order.
inline constexpr std::string_view recipe_keys =
    "k, v, scale, sinks, residual, evict, alloc, gqa, compress, demote, store";

// k and v always; the other parts only when they differ from the default.
inline std::string canonical_name(const recipe& r) {
  std::string name =
      "k=" + r.keys.quantizer + "@" + r.keys.granularity + ",v=" + r.values.quantizer + "@" + r.values.granularity;
  if (r.scale == param_precision::f32) name += ",scale=f32";
  if (r.sinks != 0) name += ",sinks=" + std::to_string(r.sinks);
  if (r.residual != 0) name += ",residual=" + std::to_string(r.residual);
  if (r.eviction != "none") name += ",evict=" + r.eviction;
  if (r.allocation != "uniform") name += ",alloc=" + r.allocation;
  if (r.gqa != "mean") name += ",gqa=" + r.gqa;
  if (!r.compress.empty()) name += ",compress=" + r.compress;
  if (r.demote) name += ",demote=" + r.demote->quantizer + "@" + r.demote->granularity;
  if (r.storage != "flat") name += ",store=" + r.storage;
  return name;
}

// Checks every name against the registry (constructing each component once) and writes
// each component as the name it gives itself, so every spelling of one component (`int08`,
// `window(1e2)`) keys the same folder and table row. Throws kvlab::error naming the bad part.
inline recipe normalized(recipe r, const registry& components) {
  const auto check = [](std::string& text, std::string_view part, auto&& make) {
    try {
      text = make(text).name();
    } catch (const error& e) {
      throw error("recipe part '" + std::string(part) + "': " + e.what());
    }
  };
  const auto quantizer = [&](const std::string& t) { return components.make_quantizer(t); };
  const auto granularity = [&](const std::string& t) { return components.make_granularity(t); };
  check(r.keys.quantizer, "k=" + r.keys.quantizer + "@" + r.keys.granularity, quantizer);
  check(r.keys.granularity, "k=" + r.keys.quantizer + "@" + r.keys.granularity, granularity);
  check(r.values.quantizer, "v=" + r.values.quantizer + "@" + r.values.granularity, quantizer);
  check(r.values.granularity, "v=" + r.values.quantizer + "@" + r.values.granularity, granularity);
  check(r.eviction, "evict=" + r.eviction, [&](const std::string& t) { return components.make_eviction(t); });
  check(r.storage, "store=" + r.storage, [&](const std::string& t) { return components.make_storage(t); });
  // Parts with a fixed vocabulary, rewritten in their normalized spelling.
  const auto fixed = [](std::string& text, std::string_view part, auto&& parse) {
    text = parse(text, "recipe part '" + std::string(part) + "'");
  };
  fixed(r.allocation, "alloc=" + r.allocation,
        [](const std::string& t, const std::string& w) { return budget_allocation::parse(t, w).text(); });
  fixed(r.gqa, "gqa=" + r.gqa, [](const std::string& t, const std::string& w) {
    return parse_group_aggregation(t, w) == group_aggregation::max ? std::string("max") : std::string("mean");
  });
  if (!r.compress.empty())
    fixed(r.compress, "compress=" + r.compress,
          [](const std::string& t, const std::string& w) { return compress_schedule::parse(t, w).text(); });
  if (r.demote) {
    const std::string part = "demote=" + r.demote->quantizer + "@" + r.demote->granularity;
    check(r.demote->quantizer, part, quantizer);
    check(r.demote->granularity, part, granularity);
  }
  if (r.eviction == "none" && (r.allocation != "uniform" || r.gqa != "mean" || !r.compress.empty() || r.demote))
    throw error("recipe '" + canonical_name(r) +
                "': alloc, gqa, compress and demote need an eviction policy (evict=...)");
  return r;
}

// Parses `k=Q@G,v=Q@G,scale=f16|f32,sinks=S,residual=R,evict=E,alloc=A,gqa=mean|max,
// compress=C,demote=Q@G,store=P`. k and v default
// to f16@token; every part may appear once.
inline recipe parse_recipe(std::string_view text, const registry& components) {
  recipe r;
  std::set<std::string> seen;
  const auto parts = split_top_level(text, "recipe '" + std::string(text) + "'");
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const std::string& part = parts[i];
    const std::string where = "recipe part " + std::to_string(i + 1) + " '" + part + "'";
    const auto equals = part.find('=');
    if (equals == std::string::npos)
      throw error(where + ": expected key=value with key one of " + std::string(recipe_keys));
    const std::string key = part.substr(0, equals);
    const std::string value = part.substr(equals + 1);
    if (!seen.insert(key).second) throw error(where + ": '" + key + "' is given twice");
    if (value.empty()) throw error(where + ": empty value for '" + key + "'");
    if (key == "k" || key == "v") {
      const auto at = value.find('@');
      if (at == std::string::npos)
        throw error(where + ": expected quantizer@granularity, for example " + key + "=int8@token");
      auto& stream = key == "k" ? r.keys : r.values;
      stream.quantizer = value.substr(0, at);
      stream.granularity = value.substr(at + 1);
    } else if (key == "scale") {
      if (value != "f16" && value != "f32") throw error(where + ": scale must be f16 or f32");
      r.scale = value == "f32" ? param_precision::f32 : param_precision::f16;
    } else if (key == "sinks") {
      r.sinks = parse_number_in<std::size_t>(value, where, 0, max_tokens);
    } else if (key == "residual") {
      r.residual = parse_number_in<std::size_t>(value, where, 0, max_tokens);
    } else if (key == "evict") {
      r.eviction = value;
    } else if (key == "alloc") {
      r.allocation = value;
    } else if (key == "gqa") {
      r.gqa = value;
    } else if (key == "compress") {
      r.compress = value;
    } else if (key == "demote") {
      const auto at = value.find('@');
      if (at == std::string::npos)
        throw error(where + ": expected quantizer@granularity, for example demote=uint2@token");
      r.demote = stream_recipe{value.substr(0, at), value.substr(at + 1)};
    } else if (key == "store") {
      r.storage = value;
    } else {
      throw error(where + ": unknown key '" + key + "'; allowed keys: " + std::string(recipe_keys));
    }
  }
  return normalized(std::move(r), components);
}

} // namespace kvlab
