// Google Benchmark: what eviction costs a decode step as the context grows. For each policy
// with a ratio budget (strategy_info::at_budget) at 10 % of the tokens, over fp16 keys and
// values (head_dim 128, one layer, one KV head, one query head), a cache that has seen
// `context` tokens and holds its budget; each iteration is one decode step's bookkeeping:
// append a token, record its attention over the held tokens (what the policy scores with),
// and compress (score, select, erase). Attention itself is not in it: it costs the same
// with or without eviction. ns_per_step should not grow with the context beyond the
// O(held) work of recording attention. `held` is the tokens held after the last step.
//   build/test/kvlab_bench_eviction --benchmark_filter='h2o' --benchmark_out=eviction.json \
//       --benchmark_out_format=json
#include <benchmark/benchmark.h>

#include <cstddef>
#include <string>
#include <vector>
import kvlab;

namespace {

constexpr std::size_t head_dim = 128;

void eviction_step(benchmark::State& state, std::string policy) {
  const auto& components = kvlab::builtin_registry();
  const std::size_t context = static_cast<std::size_t>(state.range(0));
  kvlab::any_recipe recipe = kvlab::parse_recipe("k=f16@token,v=f16@token", components);
  for (const auto& info : components.list())
    if (info.kind == kvlab::component_kind::eviction && info.name == policy) recipe.eviction = info.at_budget(0.1);
  kvlab::kv_cache cache(recipe, 1, 1, head_dim);
  kvlab::random_stream random(context, head_dim);
  std::vector<float> row(head_dim);
  const auto append = [&] {
    for (auto& x : row) x = static_cast<float>(random.normal());
    cache.append(0, 0, row, row);
  };
  // The steady state after `context` tokens: everything appended, then one compression.
  for (std::size_t t = 0; t < context; ++t) append();
  cache.compress();
  std::vector<float> attention;
  for (auto _ : state) {
    append();
    attention.assign(cache.keys(0, 0).tokens(), 1.0f / static_cast<float>(cache.keys(0, 0).tokens()));
    if (cache.observes_decode_steps()) cache.observe(0, 0, attention, 1);
    cache.token_done();
  }
  state.counters["held"] = static_cast<double>(cache.keys(0, 0).tokens());
  state.counters["ns_per_step"] = benchmark::Counter(static_cast<double>(state.iterations()) * 1e-9,
                                                     benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

} // namespace

int main(int argc, char** argv) {
  for (const auto& info : kvlab::builtin_registry().list())
    if (info.kind == kvlab::component_kind::eviction && info.at_budget)
      for (const long context : {1024, 8192, 32768, 131072})
        benchmark::RegisterBenchmark(("evict_step/" + info.name + "/ctx:" + std::to_string(context)).c_str(),
                                     eviction_step, info.name)
            ->Arg(context)
            // Every step adds a token: context / 8 steps keep the context within 12.5 % of its name.
            ->Iterations(context / 8)
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
