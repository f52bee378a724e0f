// Google Benchmark: decode attention over a compressed cache for every registered
// quantizer (so a new strategy file is benchmarked with no edit here), next to a streaming
// memory read, so results read as a fraction of the machine's bandwidth.
//   build/test/kvlab_bench --benchmark_format=json --benchmark_out=bench.json
#include <benchmark/benchmark.h>

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>
import kvlab;

namespace {

// Reads a buffer far larger than the last-level cache: the machine's read bandwidth.
void memory_read(benchmark::State& state) {
  std::vector<float> buffer(std::size_t{256} << 20 >> 2, 1.0f);
  for (auto _ : state) {
    float sum = 0.0f;
    for (std::size_t i = 0; i < buffer.size(); i += 16) sum += buffer[i] + buffer[i + 8];
    benchmark::DoNotOptimize(sum);
  }
  state.counters["bytes_per_second"] = benchmark::Counter(static_cast<double>(buffer.size() * sizeof(float)),
                                                          benchmark::Counter::kIsIterationInvariantRate);
}

// One layer, one KV head, `tokens` tokens, head_dim 128, a GQA group of 4 query heads.
void decode_attention(benchmark::State& state, std::string recipe_text, kvlab::isa isa) {
  const auto& components = kvlab::builtin_registry();
  const std::size_t tokens = static_cast<std::size_t>(state.range(0)), head_dim = 128, group = 4;
  const auto data = kvlab::load_data("synthetic:gaussian(L=1,H=1,Q=4,T=" + std::to_string(tokens) + ",D=128,seed=1)");
  kvlab::kv_cache cache(kvlab::parse_recipe(recipe_text, components), components, 1, 1, head_dim);
  for (std::size_t t = 0; t < tokens; ++t) cache.append(0, 0, data.keys.row(0, 0, t), data.values.row(0, 0, t));
  std::vector<float> queries(group * head_dim, 0.1f), out(group * head_dim);
  const auto& kernels = kvlab::kernels_for(isa);
  for (auto _ : state) {
    kvlab::decode_attention(cache, 0, queries, out, kernels);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["cache_bytes_per_second"] =
      benchmark::Counter(static_cast<double>(cache.bytes()), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["ns_per_token"] = benchmark::Counter(
      static_cast<double>(tokens), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

} // namespace

int main(int argc, char** argv) {
  benchmark::RegisterBenchmark("memory_read/256MiB", memory_read)->Unit(benchmark::kMillisecond);
  const auto& components = kvlab::builtin_registry();
  for (const auto isa : {kvlab::isa::scalar, kvlab::isa::avx2, kvlab::isa::avx512}) {
    if (!kvlab::cpu_supports(isa)) continue;
    for (const auto& q : components.instances(kvlab::component_kind::quantizer)) {
      for (const std::string granularity : {"token", "group(32)"}) {
        const std::string recipe = "k=" + q + "@" + granularity + ",v=" + q + "@" + granularity;
        benchmark::RegisterBenchmark(("decode_attention/" + std::string(kvlab::isa_name(isa)) + "/" + recipe).c_str(),
                                     decode_attention, recipe, isa)
            ->Arg(4096)
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
