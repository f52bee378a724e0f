// Google Benchmark: what eviction costs a decode step as the context grows. For each policy
// with a ratio budget (strategy_info::at_budget) at 10 % of the tokens, over fp16 keys and
// values (head_dim 128, one layer, one KV head, one query head), a cache that has seen
// `context` tokens and holds its budget; each iteration is one decode step's bookkeeping:
// append a token, record its attention over the held tokens (what the policy scores with),
// and compress (score, select, erase). Attention itself is not in it: it costs the same
// with or without eviction. ns_per_step should not grow with the context beyond the
// O(held) work of recording attention. `held` is the tokens held after the last step.
// `attend_step/ctx:N` is the yardstick: one decode step's attention (4 query heads, fp16
// keys and values) over the tokens the policies hold at that context, which every step
// pays with or without eviction.
//   build/test/kvlab_bench_eviction --benchmark_filter='h2o' --benchmark_out=eviction.json \
//       --benchmark_out_format=json
#include <benchmark/benchmark.h>

#include <cstddef>
#include <span>
#include <string>
#include <vector>
import kvlab;

namespace {

constexpr std::size_t head_dim = 128;

// Every step adds a token: context / 8 steps keep the context within 12.5 % of its name.
std::size_t steps_at(std::size_t context) { return context / 8; }
// What a policy at a 10 % budget holds after those steps.
std::size_t held_at(std::size_t context) { return (context + steps_at(context) + 9) / 10; }

// `count` rows of head_dim standard normal values.
std::vector<float> normal_rows(kvlab::random_stream& random, std::size_t count) {
  std::vector<float> rows(count * head_dim);
  for (auto& x : rows) x = static_cast<float>(random.normal());
  return rows;
}

// Row t of `rows` as token t's key and value.
void append_row(kvlab::kv_cache& cache, std::span<const float> rows, std::size_t t) {
  const auto row = rows.subspan(t * head_dim, head_dim);
  cache.append(0, 0, row, row);
}

void eviction_step(benchmark::State& state, std::string policy) {
  const auto& components = kvlab::builtin_registry();
  const std::size_t context = static_cast<std::size_t>(state.range(0));
  kvlab::any_recipe recipe = kvlab::parse_recipe("k=f16@token,v=f16@token", components);
  for (const auto& info : components.list())
    if (info.kind == kvlab::component_kind::eviction && info.name == policy) recipe.eviction = info.at_budget(0.1);
  kvlab::kv_cache cache(recipe, 1, 1, head_dim);
  kvlab::random_stream random(context, head_dim);
  // The steady state after `context` tokens: everything appended, then one compression.
  const auto prefill = normal_rows(random, context);
  for (std::size_t t = 0; t < context; ++t) append_row(cache, prefill, t);
  cache.compress();
  // The steps' tokens are drawn before the clock starts: drawing them costs more than a
  // short context's step.
  const auto steps = normal_rows(random, steps_at(context));
  std::vector<float> attention;
  std::size_t step = 0;
  for (auto _ : state) {
    append_row(cache, steps, step++);
    attention.assign(cache.keys(0, 0).tokens(), 1.0f / static_cast<float>(cache.keys(0, 0).tokens()));
    if (cache.observes_decode_steps()) cache.observe(0, 0, attention, 1);
    cache.token_done();
  }
  state.counters["held"] = static_cast<double>(cache.keys(0, 0).tokens());
  state.counters["ns_per_step"] = benchmark::Counter(static_cast<double>(state.iterations()) * 1e-9,
                                                     benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

// Decode attention of one GQA-4 group over `held(context)` fp16 tokens, per step.
void attention_step(benchmark::State& state) {
  const std::size_t context = static_cast<std::size_t>(state.range(0));
  constexpr std::size_t group = 4;
  kvlab::kv_cache cache(kvlab::parse_recipe("k=f16@token,v=f16@token", kvlab::builtin_registry()), 1, 1, head_dim);
  kvlab::random_stream random(context, head_dim);
  const auto held = normal_rows(random, held_at(context));
  for (std::size_t t = 0; t < held_at(context); ++t) append_row(cache, held, t);
  const auto queries = normal_rows(random, group);
  std::vector<float> out(group * head_dim);
  const auto& kernels = kvlab::active_kernels();
  for (auto _ : state) {
    kvlab::decode_attention(cache, 0, queries, out, kernels);
    benchmark::DoNotOptimize(out.data());
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
            ->Iterations(static_cast<benchmark::IterationCount>(steps_at(static_cast<std::size_t>(context))))
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
  for (const long context : {1024, 8192, 32768, 131072})
    benchmark::RegisterBenchmark(("attend_step/ctx:" + std::to_string(context)).c_str(), attention_step)
        ->Arg(context)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
