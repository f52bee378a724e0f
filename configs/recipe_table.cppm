// Tables and JSON of evaluation results: what sweeps and experiments print.
module;
#include <cstddef>
#include <string>
#include <vector>
export module kvlab.configs:recipe_table;
import kvlab.core;
import kvlab.eval;
import kvlab.report;

export namespace kvlab::configs {

// What an experiment produces: a table for people and the same results as JSON.
struct experiment_output {
  text_table table;
  std::string json;
};

inline text_table eval_table(const std::vector<eval_result>& results) {
  text_table table{{"recipe", "attn_rel_l2", "attn_rel_l2_p99", "attn_cosine", "bytes_per_token"}, {}};
  for (const auto& r : results)
    table.rows.push_back({r.recipe, format_significant(r.attn_rel_l2.mean), format_significant(r.attn_rel_l2.p99),
                          format_significant(r.attn_cosine.mean), format_significant(r.bytes_per_token, 6)});
  return table;
}

inline std::string eval_json(const std::vector<eval_result>& results) {
  std::string json = "[";
  for (std::size_t i = 0; i < results.size(); ++i) json += (i ? ",\n" : "\n") + to_json(results[i]);
  return json + "\n]\n";
}

} // namespace kvlab::configs
