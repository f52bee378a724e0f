// A recipe is a value: which quantizer and granularity the keys and values use, the fp16
// tiers, the eviction policy with its allocation, aggregation and schedule, demotion and the
// storage layout. any_recipe is its type-erased form: what recipe strings parse into
// (parse_recipe, for the command line and sweeps) and what typed recipes (kvlab.compose)
// erase into. Its canonical name parses back to an equal recipe and keys result folders
// and table rows.
module;
#include <cstddef>
#include <functional>
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
import :erased;
import :schedule;
import :registry;

export namespace kvlab {

// One stream's codec: quantizer@granularity.
struct any_stream {
  any_quantizer quantizer;
  any_granularity granularity;
  std::string name() const { return quantizer.name() + "@" + granularity.name(); }
};

// `evict=NAME,budget=B`: the eviction policy NAME keeps what fits B bytes per token seen,
// counted over the whole cache (every layer and KV head, keys and values: the unit of the
// `bytes_per_token` metric), so methods compare at equal memory. The cache turns the bytes
// into a token count per (layer, KV head) at every compression, from what its tiers cost
// (kvlab.cache:budget); the policy's own shape (h2o's recent half, streaming's sinks) comes
// from its registered `at_budget` at the ratio the bytes give.
struct byte_budget {
  double bytes_per_token = 0.0;
  std::string policy;                                 // the policy's registered name: h2o, snapkv, ...
  std::function<any_eviction(double ratio)> at_ratio; // the policy keeping `ratio` of the tokens seen
};

struct any_recipe {
  any_stream keys;
  any_stream values;
  param_precision scale = param_precision::f16; // storage of scales and zeros
  std::size_t sinks = 0;                        // first tokens kept in fp16
  std::size_t residual = 0;                     // most recent tokens kept in fp16
  // rope=pre: keys are stored before the rotary embedding and rotated after decoding
  // (KVQuant, arXiv 2401.18079, sec. 3.2); attention then needs the model's RoPE (kvlab.model)
  bool keys_before_rope = false;
  any_eviction eviction;                // none when `budget` names the policy
  std::optional<byte_budget> budget;    // the policy and its budget in bytes per token
  any_allocation allocation;            // budgets over layers and heads
  any_aggregation gqa;                  // a KV head's score from its query heads
  std::optional<any_schedule> compress; // empty: the policy's own schedule
  std::optional<any_stream> demote;     // evicted tokens move to this tier instead of being dropped
  any_storage storage;
};

// What a recipe string leaves out: the names parse_recipe fills in and canonical_name omits.
struct recipe_defaults {
  static constexpr std::string_view stream = "f16@token", eviction = "none", allocation = "uniform", gqa = "mean",
                                    storage = "flat";
};

// Keys of a recipe string, in canonical order.
inline constexpr std::string_view recipe_keys =
    "k, v, scale, sinks, residual, rope, evict, budget, alloc, gqa, compress, demote, store";

// Whether the recipe evicts: a policy with a token budget, or one named with budget=.
inline bool evicts(const any_recipe& r) { return r.budget.has_value() || r.eviction.evicts(); }

// k and v always; the other parts only when they differ from the default.
inline std::string canonical_name(const any_recipe& r) {
  std::string name = "k=" + r.keys.name() + ",v=" + r.values.name();
  if (r.scale == param_precision::f32) name += ",scale=f32";
  if (r.sinks != 0) name += ",sinks=" + std::to_string(r.sinks);
  if (r.residual != 0) name += ",residual=" + std::to_string(r.residual);
  if (r.keys_before_rope) name += ",rope=pre";
  const auto part = [&](std::string_view key, const std::string& value, std::string_view otherwise) {
    if (value != otherwise) name += "," + std::string(key) + "=" + value;
  };
  if (r.budget)
    name += ",evict=" + r.budget->policy + ",budget=" + format_number(r.budget->bytes_per_token);
  else
    part("evict", r.eviction.name(), recipe_defaults::eviction);
  part("alloc", r.allocation.name(), recipe_defaults::allocation);
  part("gqa", r.gqa.name(), recipe_defaults::gqa);
  if (r.compress) name += ",compress=" + r.compress->name();
  if (r.demote) name += ",demote=" + r.demote->name();
  part("store", r.storage.name(), recipe_defaults::storage);
  return name;
}

// Recipes are equal when their canonical names are: every part writes itself by name.
inline bool operator==(const any_recipe& a, const any_recipe& b) { return canonical_name(a) == canonical_name(b); }

// The largest budget= a recipe may give, in bytes per token (1 TiB: far above any cache).
inline constexpr double max_budget_bytes = 1099511627776.0;

// Checks what the parts cannot check alone; throws kvlab::error naming the recipe.
inline void check_recipe(const any_recipe& r) {
  const bool extras = r.allocation.name() != recipe_defaults::allocation || r.gqa.name() != recipe_defaults::gqa ||
                      r.compress || r.demote;
  if (!evicts(r) && extras)
    throw error("recipe '" + canonical_name(r) +
                "': alloc, gqa, compress and demote need an eviction policy (evict=...)");
  // A sketch (QJL) estimates inner products; attention would sum its decoded rows as values.
  if (!r.values.quantizer.invertible())
    throw error("recipe '" + canonical_name(r) + "': v=" + r.values.quantizer.name() +
                " is a sketch whose tokens cannot be decoded back; it may hold keys (k=) only");
  if (r.demote && !r.demote->quantizer.invertible())
    throw error("recipe '" + canonical_name(r) + "': demote=" + r.demote->quantizer.name() +
                " is a sketch whose tokens cannot be decoded back; demoted tiers hold values too");
  if (r.demote && !r.keys.quantizer.invertible())
    throw error("recipe '" + canonical_name(r) + "': demote= re-encodes decoded keys, and k=" +
                r.keys.quantizer.name() + " is a sketch whose decoded keys are too noisy to re-encode");
  if (r.keys_before_rope && !r.keys.quantizer.invertible())
    throw error("recipe '" + canonical_name(r) + "': rope=pre rotates decoded keys, and k=" + r.keys.quantizer.name() +
                " is a sketch whose keys cannot be decoded back");
  if (r.budget && r.eviction.evicts())
    throw error("recipe '" + canonical_name(r) + "': the eviction policy is given twice (evict= and budget=)");
  if (r.budget && !(r.budget->bytes_per_token > 0.0 && r.budget->bytes_per_token <= max_budget_bytes))
    throw error("recipe '" + canonical_name(r) + "': budget must be in (0, " + format_number(max_budget_bytes) +
                "] bytes per token, got " + format_number(r.budget->bytes_per_token));
}

// Parses `k=Q@G,v=Q@G,scale=f16|f32,sinks=S,residual=R,rope=pre|post,evict=E,budget=B,alloc=A,gqa=G,
// compress=C,demote=Q@G,store=P`. k and v default to f16@token; every part may appear once.
// With budget=B (bytes per token, see byte_budget), evict= is a policy's bare name. Each part
// is built by the registry, so every spelling of one component (`int08`, `window(1e2)`)
// gives the same canonical name. Throws kvlab::error naming the bad part.
inline any_recipe parse_recipe(std::string_view text, const registry& components) {
  const auto build = [](const std::string& part, auto&& make) {
    try {
      return make();
    } catch (const error& e) {
      throw error("recipe part '" + part + "': " + e.what());
    }
  };
  const auto stream = [&](const std::string& key, const std::string& value, const std::string& where) {
    const auto at = value.find('@');
    if (at == std::string::npos)
      throw error(where + ": expected quantizer@granularity, for example " + key + "=int8@token");
    return build(key + "=" + value, [&] {
      return any_stream{components.make_quantizer(value.substr(0, at)),
                        components.make_granularity(value.substr(at + 1))};
    });
  };
  const std::string f16_token(recipe_defaults::stream);
  any_recipe r{.keys = stream("k", f16_token, "k"),
               .values = stream("v", f16_token, "v"),
               .eviction = components.make_eviction(recipe_defaults::eviction),
               .allocation = components.make_allocation(recipe_defaults::allocation),
               .gqa = components.make_aggregation(recipe_defaults::gqa),
               .storage = components.make_storage(recipe_defaults::storage)};
  std::set<std::string> seen;
  std::optional<std::string> evict_text, budget_text; // evict= resolves once budget= is known
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
    if (key == "k") {
      r.keys = stream(key, value, where);
    } else if (key == "v") {
      r.values = stream(key, value, where);
    } else if (key == "scale") {
      if (value != "f16" && value != "f32") throw error(where + ": scale must be f16 or f32");
      r.scale = value == "f32" ? param_precision::f32 : param_precision::f16;
    } else if (key == "sinks") {
      r.sinks = parse_number_in<std::size_t>(value, where, 0, max_tokens);
    } else if (key == "residual") {
      r.residual = parse_number_in<std::size_t>(value, where, 0, max_tokens);
    } else if (key == "rope") {
      if (value != "pre" && value != "post") throw error(where + ": rope must be pre or post");
      r.keys_before_rope = value == "pre";
    } else if (key == "evict") {
      evict_text = value;
    } else if (key == "budget") {
      budget_text = value;
    } else if (key == "alloc") {
      r.allocation = build(part, [&] { return components.make_allocation(value); });
    } else if (key == "gqa") {
      r.gqa = build(part, [&] { return components.make_aggregation(value); });
    } else if (key == "compress") {
      r.compress = build(part, [&] { return components.make_schedule(value); });
    } else if (key == "demote") {
      if (value.find('@') == std::string::npos)
        throw error(where + ": expected quantizer@granularity, for example demote=uint2@token");
      r.demote = stream(key, value, where);
    } else if (key == "store") {
      r.storage = build(part, [&] { return components.make_storage(value); });
    } else {
      throw error(where + ": unknown key '" + key + "'; allowed keys: " + std::string(recipe_keys));
    }
  }
  if (budget_text && !evict_text)
    throw error("recipe '" + std::string(text) + "': budget=" + *budget_text +
                " needs the policy that keeps it, for example evict=h2o,budget=" + *budget_text);
  if (budget_text) {
    const std::string where = "recipe part 'budget=" + *budget_text + "'";
    const double bytes = parse_number<double>(*budget_text, where);
    if (!(bytes > 0.0 && bytes <= max_budget_bytes))
      throw error(where + ": a budget is a positive number of bytes per token, at most " +
                  format_number(max_budget_bytes) + ", got '" + *budget_text + "'");
    const std::string part = "evict=" + *evict_text;
    r.budget = byte_budget{bytes, *evict_text, build(part, [&] { return components.eviction_at_budget(*evict_text); })};
  } else if (evict_text) {
    r.eviction = build("evict=" + *evict_text, [&] { return components.make_eviction(*evict_text); });
  }
  check_recipe(r);
  return r;
}

} // namespace kvlab
