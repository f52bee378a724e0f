// model:PATH,text=FILE[,tokens=N][,tokenizer=FILE]: a real model (GGUF, Hugging Face folder
// or llama2.c checkpoint) runs over the first N tokens of the text (default: as many as the
// text gives, up to the model's context, or 4096) and hands over its own keys, values and
// queries (capture_kv; docs/model.md).
// Paper: - (the model's own activations)
module;
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>
export module kvlab.data_sources.model;
import kvlab.core;
import kvlab.data;
import kvlab.model;

export namespace kvlab::data_sources::model {

inline data_source_info info() {
  return {.name = "model",
          .usage = "model:PATH,text=FILE[,tokens=N][,tokenizer=FILE]",
          .summary = "a real model's own keys, values and queries over a text"};
}

inline std::size_t check(std::string_view spec) {
  parse_model_data_spec(spec);
  return 0;
}

inline kv_data load(std::string_view spec) {
  const model_data_request request = parse_model_data_spec(spec);
  const kvlab::model m = load_model(request.model, request.tokenizer);
  const std::vector<std::int32_t> tokens = m.tokenizer->encode(read_whole_file(request.text), m.tokenizer->add_bos());
  const std::size_t limit = m.config.context != 0 ? m.config.context : 4096;
  if (request.tokens && *request.tokens > tokens.size())
    throw error("data spec '" + std::string(spec) + "': tokens=" + std::to_string(*request.tokens) + " but '" +
                request.text.string() + "' gives " + std::to_string(tokens.size()) + " tokens");
  const std::size_t n = request.tokens.value_or(std::min(tokens.size(), limit));
  return capture_kv(m.config, m.weights, std::span(tokens).first(n), std::string(spec)).data;
}

} // namespace kvlab::data_sources::model
