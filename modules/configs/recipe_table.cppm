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

// One row per result: the mean of every per-step metric the first result measured, and
// bytes per token.
inline text_table eval_table(const std::vector<eval_result>& results) {
  text_table table{{"recipe"}, {}};
  if (!results.empty())
    for (const auto& m : results.front().per_step) table.header.push_back(m.name);
  table.header.push_back("bytes_per_token");
  for (const auto& r : results) {
    std::vector<std::string> row{r.recipe};
    for (std::size_t c = 1; c + 1 < table.header.size(); ++c)
      row.push_back(format_significant(r.metric(table.header[c]).mean));
    row.push_back(format_significant(r.bytes_per_token, 6));
    table.rows.push_back(row);
  }
  return table;
}

inline std::string eval_json(const std::vector<eval_result>& results) {
  std::string json = "[";
  for (std::size_t i = 0; i < results.size(); ++i) json += (i ? ",\n" : "\n") + to_json(results[i]);
  return json + "\n]\n";
}

} // namespace kvlab::configs
