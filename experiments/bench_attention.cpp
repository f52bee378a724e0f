// Google Benchmark: decode attention at memory bandwidth. For each recipe, context length,
// head_dim, GQA group and thread count, one decode step of one layer with 2 KV heads
// (parallel over KV heads), next to a streaming read of a buffer far larger than the
// last-level cache with the same thread count. The summary printed at the end gives every
// attention result as GB/s of cache bytes read, as a share of that measured bandwidth, and
// as a speed-up over f16 attention of the same shape, all from this one run.
//   build/test/kvlab_bench_attention --benchmark_filter='ctx:32768/d:128/gqa:4' \
//       --benchmark_out=attention.json --benchmark_out_format=json
// With --benchmark_repetitions=N the summary keeps each benchmark's best run.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>
import kvlab;

namespace {

constexpr std::size_t kv_heads = 2;
const std::vector<std::pair<std::string, std::string>> recipes = {
    {"f16", "k=f16@token,v=f16@token"},
    {"int8@group(32)", "k=int8@group(32),v=int8@group(32)"},
    {"int4@group(32)", "k=int4@group(32),v=int4@group(32)"},
    {"kivi-2", "k=uint2@channel(32),v=uint2@group(32),residual=128"},
    {"fp8_e4m3@token", "k=fp8_e4m3@token,v=fp8_e4m3@token"},
};

// Reads `bytes` of memory with `threads` threads, 4 independent sums per thread.
void memory_read(benchmark::State& state) {
  const auto threads = static_cast<unsigned>(state.range(0));
  static std::vector<float> buffer(std::size_t{512} << 20 >> 2, 1.0f); // 512 MiB, far beyond the LLC
  const std::size_t per_thread = buffer.size() / threads;
  for (auto _ : state) {
    std::vector<float> sums(threads);
    std::vector<std::jthread> pool;
    for (unsigned t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        const float* x = buffer.data() + t * per_thread;
        float a = 0, b = 0, c = 0, d = 0;
        for (std::size_t i = 0; i + 4 <= per_thread; i += 4) a += x[i], b += x[i + 1], c += x[i + 2], d += x[i + 3];
        sums[t] = a + b + c + d;
      });
    pool.clear();
    benchmark::DoNotOptimize(sums.data());
  }
  state.counters["bytes_per_second"] = benchmark::Counter(static_cast<double>(buffer.size() * sizeof(float)),
                                                          benchmark::Counter::kIsIterationInvariantRate);
}

// The cache of the last (recipe, context, head_dim) asked for: built once, reused by every
// GQA and thread variant that follows it in registration order.
const kvlab::kv_cache& cache_for(const std::string& recipe, std::size_t context, std::size_t head_dim) {
  static std::string key;
  static std::unique_ptr<kvlab::kv_cache> cache;
  const std::string wanted = recipe + "/" + std::to_string(context) + "/" + std::to_string(head_dim);
  if (key != wanted) {
    cache.reset();
    const auto& components = kvlab::builtin_registry();
    cache =
        std::make_unique<kvlab::kv_cache>(kvlab::parse_recipe(recipe, components), components, 1, kv_heads, head_dim);
    kvlab::random_stream random(context, head_dim);
    std::vector<float> k(head_dim), v(head_dim);
    for (std::size_t t = 0; t < context; ++t)
      for (std::size_t h = 0; h < kv_heads; ++h) {
        for (std::size_t c = 0; c < head_dim; ++c)
          k[c] = static_cast<float>(random.normal()), v[c] = static_cast<float>(random.normal());
        cache->append(0, h, k, v);
      }
    key = wanted;
  }
  return *cache;
}

void decode_attention(benchmark::State& state, std::string recipe) {
  const auto context = static_cast<std::size_t>(state.range(0)), head_dim = static_cast<std::size_t>(state.range(1));
  const auto group = static_cast<std::size_t>(state.range(2));
  const auto threads = static_cast<unsigned>(state.range(3));
  const auto& cache = cache_for(recipe, context, head_dim);
  std::vector<float> queries(kv_heads * group * head_dim, 0.1f), out(queries.size());
  const auto& kernels = kvlab::active_kernels();
  for (auto _ : state) {
    kvlab::decode_attention(cache, 0, queries, out, kernels, nullptr, threads);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["cache_bytes_per_second"] =
      benchmark::Counter(static_cast<double>(cache.bytes()), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["ns_per_token_per_kv_head"] =
      benchmark::Counter(static_cast<double>(context * kv_heads) / 1e9,
                         benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.SetLabel(std::string(kvlab::isa_name(kernels.instruction_set)));
}

// Prints the console report and keeps every run for the summary.
class summarizing_reporter : public benchmark::ConsoleReporter {
public:
  void ReportRuns(const std::vector<Run>& runs) override {
    // With --benchmark_repetitions the best run counts: the machine is shared, and other
    // load only ever slows a run down.
    for (const auto& run : runs)
      if (run.run_type == Run::RT_Iteration && !run.error_occurred) {
        const std::string& name = run.run_name.function_name;
        const double time = run.GetAdjustedRealTime();
        if (times_.contains(name) && times_[name] <= time) continue;
        times_[name] = time;
        rates_[name] = rate_of(run);
      }
    ConsoleReporter::ReportRuns(runs);
  }

  void summarize() const {
    std::printf("\nSummary (GB/s of cache bytes read; %% of the streaming read with the same threads; speed-up "
                "over f16 of the same shape)\n");
    for (const auto& [name, rate] : rates_) {
      if (name.rfind("decode_attention/", 0) != 0) continue;
      const std::string shape = name.substr(name.find("/ctx:"));
      const std::string threads = name.substr(name.rfind("threads:") + 8);
      const auto bandwidth = rates_.find("memory_read/threads:" + threads);
      const auto f16 = rates_.find("decode_attention/f16" + shape);
      std::printf("%-70s %7.2f GB/s", name.c_str(), rate / 1e9);
      if (bandwidth != rates_.end()) std::printf("  %5.1f%% of read", 100.0 * rate / bandwidth->second);
      if (f16 != rates_.end() && f16->first != name) // the same attention in less time
        std::printf("  %5.2fx vs f16", times_.at(f16->first) / times_.at(name));
      std::printf("\n");
    }
  }

private:
  static double rate_of(const Run& run) {
    const auto counter = [&](const char* key) {
      const auto found = run.counters.find(key);
      return found == run.counters.end() ? 0.0 : static_cast<double>(found->second);
    };
    return run.run_name.function_name.rfind("memory_read", 0) == 0 ? counter("bytes_per_second")
                                                                   : counter("cache_bytes_per_second");
  }
  std::map<std::string, double> rates_;
  std::map<std::string, double> times_;
};

} // namespace

int main(int argc, char** argv) {
  for (const long threads : {1, 2})
    benchmark::RegisterBenchmark(("memory_read/threads:" + std::to_string(threads)).c_str(), memory_read)
        ->Arg(threads)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  for (const auto& [label, recipe] : recipes)
    for (const long context : {1024, 8192, 32768, 131072})
      for (const long head_dim : {64, 128})
        for (const long group : {1, 4, 8})
          for (const long threads : {1, 2})
            benchmark::RegisterBenchmark(("decode_attention/" + label + "/ctx:" + std::to_string(context) +
                                          "/d:" + std::to_string(head_dim) + "/gqa:" + std::to_string(group) +
                                          "/threads:" + std::to_string(threads))
                                             .c_str(),
                                         decode_attention, recipe)
                ->Args({context, head_dim, group, threads})
                ->Unit(benchmark::kMicrosecond)
                ->UseRealTime();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  summarizing_reporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.summarize();
  benchmark::Shutdown();
  return 0;
}
