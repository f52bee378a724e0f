// Type-erased handles over the component concepts, so recipes chosen at run time (command
// line, sweeps) and typed recipes (kvlab.compose) meet in one any_recipe. any_schedule is
// in :schedule.
module;
#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>
export module kvlab.core:erased;
import :codebook;
import :concepts;
import :errors;
import :eviction;

export namespace kvlab {

class any_quantizer;
// Optional part of a Quantizer:
//   residual() a second quantizer for what the first leaves of each token (residual(P,R))
template <class Q>
concept has_residual = requires(const Q q) {
  { q.residual() } -> std::same_as<any_quantizer>;
};

class any_quantizer {
public:
  template <Quantizer Q>
  explicit any_quantizer(Q quantizer) : self_(std::make_shared<model<Q>>(std::move(quantizer))) {}

  std::string name() const { return self_->name(); }
  unsigned bits() const { return self_->bits(); }
  unsigned params_per_group() const { return self_->params_per_group(); }
  element_format format() const { return self_->format(); }
  std::span<const float> levels() const { return self_->levels(); }
  group_params fit(std::span<const float> group) const { return self_->fit(group); }
  // The group's codes: codes[i] = encode(values[i], params) for every i, or the
  // quantizer's encode_group where it has one.
  void encode(std::span<const float> values, group_params params, std::span<std::uint32_t> codes) const {
    self_->encode(values, params, codes);
  }
  // The code of one value under stored parameters (for a group, encode the group: some
  // quantizers choose a group's codes against more than its stored parameters).
  std::uint32_t encode(float value, group_params params) const { return self_->encode_one(value, params); }
  // Whether a group's codes depend on more than its stored parameters (encodes_groups).
  bool encodes_groups() const { return self_->encodes_groups(); }
  // values[i] = decode(codes[i], params) for every i: one call per group.
  void decode(std::span<const std::uint32_t> codes, group_params params, std::span<float> values) const {
    self_->decode(codes, params, values);
  }
  float decode(std::uint32_t code, group_params params) const {
    float value;
    self_->decode(std::span(&code, 1), params, std::span(&value, 1));
    return value;
  }
  encoding_rule encoding() const { return self_->encoding(); }
  // The quantizer's scale bytes (stores_scale_bytes): empty for fp16 or f32 scales.
  std::span<const float> scale_levels() const { return self_->scale_levels(); }
  std::uint8_t scale_code(float scale) const { return self_->scale_code(scale); }
  bool rotates() const { return self_->rotates(); }
  void rotate(std::span<float> token) const { self_->rotate(token); }
  void unrotate(std::span<float> token) const { self_->unrotate(token); }
  // The map from tokens of head_dim channels to what the body stores: the quantizer's own
  // projection (projects_tokens), its rotation, or null (the body stores the tokens).
  std::shared_ptr<const token_projection> projection(std::size_t head_dim) const { return self_->projection(head_dim); }
  // Values per stored row: the projection's stored_dim, else head_dim.
  std::size_t stored_dim(std::size_t head_dim) const {
    const auto map = projection(head_dim);
    return map ? map->stored_dim() : head_dim;
  }
  // Whether decoding gives the tokens back (every quantizer but a sketch such as QJL).
  bool invertible() const { return self_->invertible(); }
  // The quantizer of each token's residual, if any (has_residual).
  std::optional<any_quantizer> residual() const { return self_->residual(); }
  // The codec of whole groups of `channels` values for format() == group_code (codes_groups;
  // throws when it cannot code that width), else null.
  std::shared_ptr<const kvlab::group_codec> group_codec(std::size_t channels) const {
    return self_->group_codec(channels);
  }
  // Bits of the codes of one stored row of `width` values in groups of `group_channels`,
  // parameters not included.
  std::size_t row_code_bits(std::size_t width, std::size_t group_channels) const {
    if (format() == element_format::group_code) {
      const auto codec = group_codec(group_channels); // throws for widths it cannot code, 0 among them
      return width / group_channels * codec->code_bits();
    }
    return width * bits();
  }

private:
  struct concept_t {
    virtual ~concept_t() = default;
    virtual std::string name() const = 0;
    virtual unsigned bits() const = 0;
    virtual unsigned params_per_group() const = 0;
    virtual element_format format() const = 0;
    virtual std::span<const float> levels() const = 0;
    virtual group_params fit(std::span<const float>) const = 0;
    virtual void encode(std::span<const float>, group_params, std::span<std::uint32_t>) const = 0;
    virtual std::uint32_t encode_one(float, group_params) const = 0;
    virtual bool encodes_groups() const = 0;
    virtual void decode(std::span<const std::uint32_t>, group_params, std::span<float>) const = 0;
    virtual encoding_rule encoding() const = 0;
    virtual std::span<const float> scale_levels() const = 0;
    virtual std::uint8_t scale_code(float) const = 0;
    virtual bool rotates() const = 0;
    virtual void rotate(std::span<float>) const = 0;
    virtual void unrotate(std::span<float>) const = 0;
    virtual std::shared_ptr<const token_projection> projection(std::size_t) const = 0;
    virtual bool invertible() const = 0;
    virtual std::optional<any_quantizer> residual() const = 0;
    virtual std::shared_ptr<const kvlab::group_codec> group_codec(std::size_t) const = 0;
  };
  // A rotating quantizer's rotation as a token_projection (stored_dim = head_dim).
  template <class Q>
  struct rotation final : token_projection {
    rotation(Q q, std::size_t head_dim) : q(std::move(q)), head_dim(head_dim) {}
    std::size_t stored_dim() const override { return head_dim; }
    void key(std::span<const float> token, std::span<float> stored) const override { query(token, stored); }
    void query(std::span<const float> token, std::span<float> stored) const override {
      std::copy(token.begin(), token.end(), stored.begin());
      q.rotate(stored.first(token.size()));
    }
    void adjoint(std::span<const float> stored, std::span<float> token) const override {
      std::copy(stored.begin(), stored.end(), token.begin());
      q.unrotate(token.first(stored.size()));
    }
    Q q;
    std::size_t head_dim;
  };
  template <class Q>
  struct model final : concept_t {
    explicit model(Q q) : q(std::move(q)) {}
    std::string name() const override { return q.name(); }
    // A quantizer of whole groups (codes_groups only) has no code per element: its element
    // calls say so rather than invent codes.
    [[noreturn]] void no_element_codes() const {
      throw error(q.name() + " codes whole groups of channels; it has no code per element");
    }
    unsigned bits() const override {
      if constexpr (codes_elements<Q>) return q.bits();
      return 0;
    }
    unsigned params_per_group() const override {
      if constexpr (codes_elements<Q>) return q.params_per_group();
      return 0;
    }
    element_format format() const override {
      if constexpr (codes_elements<Q>) return q.format();
      return element_format::group_code;
    }
    std::span<const float> levels() const override {
      if constexpr (codes_elements<Q>) return q.levels();
      return {};
    }
    group_params fit(std::span<const float> group) const override {
      if constexpr (codes_elements<Q>) return q.fit(group);
      no_element_codes();
    }
    void encode(std::span<const float> values, group_params params, std::span<std::uint32_t> codes) const override {
      if constexpr (kvlab::encodes_groups<Q>) {
        q.encode_group(values, params, codes);
      } else if constexpr (codes_elements<Q>) {
        for (std::size_t i = 0; i < values.size(); ++i) codes[i] = q.encode(values[i], params);
      } else {
        no_element_codes();
      }
    }
    std::uint32_t encode_one(float value, group_params params) const override {
      if constexpr (codes_elements<Q>) return q.encode(value, params);
      no_element_codes();
    }
    bool encodes_groups() const override { return kvlab::encodes_groups<Q>; }
    void decode(std::span<const std::uint32_t> codes, group_params params, std::span<float> values) const override {
      if constexpr (codes_elements<Q>) {
        for (std::size_t i = 0; i < codes.size(); ++i) values[i] = q.decode(codes[i], params);
      } else {
        no_element_codes();
      }
    }
    encoding_rule encoding() const override {
      if constexpr (has_encoding_rule<Q>) return q.encoding();
      return {};
    }
    std::span<const float> scale_levels() const override { return scale_levels_of(q); }
    std::uint8_t scale_code(float scale) const override {
      if constexpr (stores_scale_bytes<Q>) return q.scale_code(scale);
      return 0;
    }
    bool rotates() const override { return rotates_tokens<Q>; }
    void rotate(std::span<float> token) const override {
      if constexpr (rotates_tokens<Q>) q.rotate(token);
    }
    void unrotate(std::span<float> token) const override {
      if constexpr (rotates_tokens<Q>) q.unrotate(token);
    }
    std::shared_ptr<const token_projection> projection(std::size_t head_dim) const override {
      if constexpr (projects_tokens<Q>) return q.projection(head_dim);
      if constexpr (rotates_tokens<Q>) return std::make_shared<const rotation<Q>>(q, head_dim);
      return nullptr;
    }
    bool invertible() const override {
      if constexpr (projects_tokens<Q>) return q.invertible();
      return true;
    }
    std::optional<any_quantizer> residual() const override {
      if constexpr (has_residual<Q>) return q.residual();
      return std::nullopt;
    }
    std::shared_ptr<const kvlab::group_codec> group_codec(std::size_t channels) const override {
      if constexpr (codes_groups<Q>) return q.group_codec(channels);
      return nullptr;
    }
    Q q;
  };
  std::shared_ptr<const concept_t> self_;
};

class any_granularity {
public:
  template <Granularity G>
  explicit any_granularity(G granularity) : self_(std::make_shared<model<G>>(std::move(granularity))) {}

  std::string name() const { return self_->name(); }
  kvlab::group_shape group_shape(std::size_t head_dim) const { return self_->group_shape(head_dim); }

private:
  struct concept_t {
    virtual ~concept_t() = default;
    virtual std::string name() const = 0;
    virtual kvlab::group_shape group_shape(std::size_t) const = 0;
  };
  template <class G>
  struct model final : concept_t {
    explicit model(G g) : g(std::move(g)) {}
    std::string name() const override { return g.name(); }
    kvlab::group_shape group_shape(std::size_t head_dim) const override { return g.group_shape(head_dim); }
    G g;
  };
  std::shared_ptr<const concept_t> self_;
};

class any_eviction {
public:
  template <Eviction E>
  explicit any_eviction(E eviction) : self_(std::make_shared<model<E>>(std::move(eviction))) {}

  std::string name() const { return self_->name(); }
  eviction_needs needs() const { return self_->needs(); }
  std::size_t budget(std::size_t seen) const { return self_->budget(seen); }
  std::vector<double> scores(const eviction_view& view) const { return self_->scores(view); }
  // False for a policy that keeps every token (see keeps_every_token).
  bool evicts() const { return self_->evicts(); }

private:
  struct concept_t {
    virtual ~concept_t() = default;
    virtual std::string name() const = 0;
    virtual bool evicts() const = 0;
    virtual eviction_needs needs() const = 0;
    virtual std::size_t budget(std::size_t) const = 0;
    virtual std::vector<double> scores(const eviction_view&) const = 0;
  };
  template <class E>
  struct model final : concept_t {
    explicit model(E e) : e(std::move(e)) {}
    std::string name() const override { return e.name(); }
    bool evicts() const override { return !keeps_every_token<E>; }
    eviction_needs needs() const override { return e.needs(); }
    std::size_t budget(std::size_t seen) const override { return e.budget(seen); }
    std::vector<double> scores(const eviction_view& view) const override { return e.scores(view); }
    E e;
  };
  std::shared_ptr<const concept_t> self_;
};

class any_storage {
public:
  template <Storage S>
  explicit any_storage(S storage) : self_(std::make_shared<model<S>>(std::move(storage))) {}

  std::string name() const { return self_->name(); }
  std::unique_ptr<record_store> make_store(std::size_t record_bytes) const { return self_->make_store(record_bytes); }

private:
  struct concept_t {
    virtual ~concept_t() = default;
    virtual std::string name() const = 0;
    virtual std::unique_ptr<record_store> make_store(std::size_t) const = 0;
  };
  template <class S>
  struct model final : concept_t {
    explicit model(S s) : s(std::move(s)) {}
    std::string name() const override { return s.name(); }
    std::unique_ptr<record_store> make_store(std::size_t record_bytes) const override {
      return s.make_store(record_bytes);
    }
    S s;
  };
  std::shared_ptr<const concept_t> self_;
};

class any_allocation {
public:
  template <Allocation A>
  explicit any_allocation(A allocation) : self_(std::make_shared<model<A>>(std::move(allocation))) {}

  std::string name() const { return self_->name(); }
  std::vector<std::vector<std::size_t>> keep(std::size_t layer, std::size_t layers, std::size_t budget,
                                             std::span<const std::vector<double>> scores) const {
    return self_->keep(layer, layers, budget, scores);
  }

private:
  struct concept_t {
    virtual ~concept_t() = default;
    virtual std::string name() const = 0;
    virtual std::vector<std::vector<std::size_t>> keep(std::size_t, std::size_t, std::size_t,
                                                       std::span<const std::vector<double>>) const = 0;
  };
  template <class A>
  struct model final : concept_t {
    explicit model(A a) : a(std::move(a)) {}
    std::string name() const override { return a.name(); }
    std::vector<std::vector<std::size_t>> keep(std::size_t layer, std::size_t layers, std::size_t budget,
                                               std::span<const std::vector<double>> scores) const override {
      return a.keep(layer, layers, budget, scores);
    }
    A a;
  };
  std::shared_ptr<const concept_t> self_;
};

class any_aggregation {
public:
  template <Aggregation G>
  explicit any_aggregation(G aggregation) : self_(std::make_shared<model<G>>(std::move(aggregation))) {}

  std::string name() const { return self_->name(); }
  void combine(std::span<const float> probabilities, std::size_t group, std::span<double> scores) const {
    self_->combine(probabilities, group, scores);
  }

private:
  struct concept_t {
    virtual ~concept_t() = default;
    virtual std::string name() const = 0;
    virtual void combine(std::span<const float>, std::size_t, std::span<double>) const = 0;
  };
  template <class G>
  struct model final : concept_t {
    explicit model(G g) : g(std::move(g)) {}
    std::string name() const override { return g.name(); }
    void combine(std::span<const float> probabilities, std::size_t group, std::span<double> scores) const override {
      g.combine(probabilities, group, scores);
    }
    G g;
  };
  std::shared_ptr<const concept_t> self_;
};

} // namespace kvlab
