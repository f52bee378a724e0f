// Google Benchmark: decode attention at memory bandwidth. For each recipe, context length,
// head_dim, GQA group and thread count, one decode step over every layer of a model with 2
// KV heads per layer and as many layers as it takes for the cache to be at least twice the
// last-level cache (so every step reads it from DRAM), parallel over layers. Next to it, a
// streaming read (the active ISA's vector absmax kernel, prefetching as the attention loops
// do) of a buffer far larger than the last-level cache with the same thread count. The
// summary printed at the end gives every attention result as GB/s of cache bytes read, as
// a share of that measured bandwidth, and as a speed-up over f16 attention of the same
// shape, all from this one run. The same read with work added per byte (`*_read_with_work`)
// shows how much of the read a loop keeps when its work costs a given share of the read's
// time: the curve that compute-bound recipes sit on. `append/*` times prefill's appends
// (encode and store) per quantizer, as GB/s of fp16 input next to the same run's read.
//   build/test/kvlab_bench_attention --benchmark_filter='ctx:32768/d:128/gqa:4' \
//       --benchmark_out=attention.json --benchmark_out_format=json
// With --benchmark_repetitions=N the summary keeps each benchmark's best run.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <malloc.h>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>
import kvlab;

namespace {

constexpr std::size_t kv_heads = 2;
const std::vector<std::pair<std::string, std::string>> recipes = {
    {"f16", "k=f16@token,v=f16@token"},
    {"int8@group(32)", "k=int8@group(32),v=int8@group(32)"},
    {"int4@group(32)", "k=int4@group(32),v=int4@group(32)"},
    {"kivi-2", "k=uint2@channel(32),v=uint2@group(32),residual=128"},
    // KIVI-2 with per-token keys: the per-channel (KIVI) key path should be as fast.
    {"uint2@group(32)", "k=uint2@group(32),v=uint2@group(32)"},
    {"fp8_e4m3@token", "k=fp8_e4m3@token,v=fp8_e4m3@token"},
};

// The last-level cache as the OS reports it (a VM may report the host's), at least 32 MiB.
std::size_t last_level_cache_bytes() {
  const long reported = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return std::max<std::size_t>(reported > 0 ? static_cast<std::size_t>(reported) : 0, std::size_t{32} << 20);
}

// Runs work(w) for w < threads on `threads` threads (the caller's thread when 1).
template <class Work>
void on_threads(unsigned threads, Work&& work) {
  if (threads == 1) return work(0u);
  std::vector<std::jthread> pool;
  for (unsigned w = 0; w < threads; ++w) pool.emplace_back([&, w] { work(w); });
}

// Reads a buffer four times the last-level cache with `threads` threads through the active
// ISA's vector absmax kernel (one load and two vector operations per vector of floats), in
// pieces of 4 KiB with every line of the piece 8 KiB ahead prefetched into L2, as the
// attention kernels do: without it the read measured 10-12 % slower than with it, and f16
// attention read faster than the "bandwidth".
constexpr std::size_t read_piece_bytes = 4096, read_prefetch_distance = 8192;

// `extra_passes` more absmax passes over each piece once it is in cache stand for the work
// a kernel does on the bytes it reads (memory_read_with_work, below).
float absmax_prefetching(const kvlab::kernel_table& kernels, const float* data, std::size_t count,
                         std::size_t extra_passes = 0) {
  constexpr std::size_t piece = read_piece_bytes / sizeof(float), line = 64;
  const char* bytes = reinterpret_cast<const char*>(data);
  const char* end = reinterpret_cast<const char*>(data + count);
  float result = 0.0f;
  for (std::size_t first = 0; first < count; first += piece) {
    const char* ahead = bytes + first * sizeof(float) + read_prefetch_distance;
    for (std::size_t at = 0; at < read_piece_bytes && ahead + at < end; at += line)
      __builtin_prefetch(ahead + at, 0, 2);
    for (std::size_t pass = 0; pass <= extra_passes; ++pass)
      result = std::max(result, kernels.absmax(data + first, std::min(piece, count - first)));
  }
  return result;
}

// The streaming read over `floats` floats (shared by the benchmarks asking for that size).
void read_benchmark(benchmark::State& state, std::size_t floats, unsigned threads, std::size_t extra_passes) {
  static std::map<std::size_t, std::vector<float>> buffers;
  auto& buffer = buffers.try_emplace(floats, floats, 1.0f).first->second;
  const auto& kernels = kvlab::active_kernels();
  const std::size_t per_thread = buffer.size() / threads;
  std::vector<float> results(threads);
  for (auto _ : state) {
    on_threads(threads, [&](unsigned w) {
      results[w] = absmax_prefetching(kernels, buffer.data() + w * per_thread, per_thread, extra_passes);
    });
    benchmark::DoNotOptimize(results.data());
  }
  state.counters["bytes_per_second"] = benchmark::Counter(static_cast<double>(per_thread * threads * sizeof(float)),
                                                          benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(kvlab::isa_name(kernels.instruction_set)));
}

// The read probes' buffer: four times the last-level cache, so it streams from DRAM.
std::size_t dram_buffer_floats() { return 4 * last_level_cache_bytes() / sizeof(float); }

void memory_read(benchmark::State& state) {
  read_benchmark(state, dram_buffer_floats(), static_cast<unsigned>(state.range(0)), 0);
}

// How much of the read a loop keeps when it also works on what it reads: the same read
// with `passes` more absmax passes over each 4 KiB piece, from DRAM and (the work alone)
// from a 512 KiB buffer that stays in L2. Attention kernels whose work per byte costs
// about as much as the read itself sit on this curve, not at the plain read's rate.
void memory_read_with_work(benchmark::State& state) {
  read_benchmark(state, dram_buffer_floats(), 1, static_cast<std::size_t>(state.range(0)));
}
void cache_read_with_work(benchmark::State& state) {
  read_benchmark(state, (512 << 10) / sizeof(float), 1, static_cast<std::size_t>(state.range(0)));
}

// A model's cache for (recipe, context, head_dim): 2 KV heads per layer and enough layers
// for at least twice the last-level cache. Every layer holds the same tokens (what is read
// is what counts). The last one asked for is kept for the GQA and thread variants that
// follow it in registration order.
const kvlab::kv_cache& cache_for(const std::string& recipe, std::size_t context, std::size_t head_dim) {
  static std::string key;
  static std::unique_ptr<kvlab::kv_cache> cache;
  const std::string wanted = recipe + "/" + std::to_string(context) + "/" + std::to_string(head_dim);
  if (key != wanted) {
    cache.reset();
    const auto& components = kvlab::builtin_registry();
    const auto parsed = kvlab::parse_recipe(recipe, components);
    kvlab::random_stream random(context, head_dim);
    std::vector<float> k(head_dim), v(head_dim);
    const auto fill = [&](kvlab::kv_cache& c, std::size_t tokens) {
      for (std::size_t t = 0; t < tokens; ++t)
        for (std::size_t h = 0; h < kv_heads; ++h) {
          for (std::size_t i = 0; i < head_dim; ++i)
            k[i] = static_cast<float>(random.normal()), v[i] = static_cast<float>(random.normal());
          for (std::size_t layer = 0; layer < c.layers(); ++layer) c.append(layer, h, k, v);
        }
    };
    kvlab::kv_cache one_layer(parsed, 1, kv_heads, head_dim);
    fill(one_layer, context);
    const std::size_t layers = (2 * last_level_cache_bytes() + one_layer.bytes() - 1) / one_layer.bytes();
    cache = std::make_unique<kvlab::kv_cache>(parsed, layers, kv_heads, head_dim);
    fill(*cache, context);
    key = wanted;
  }
  return *cache;
}

void decode_attention(benchmark::State& state, std::string recipe) {
  const auto context = static_cast<std::size_t>(state.range(0)), head_dim = static_cast<std::size_t>(state.range(1));
  const auto group = static_cast<std::size_t>(state.range(2));
  const auto threads = static_cast<unsigned>(state.range(3));
  const auto& cache = cache_for(recipe, context, head_dim);
  const std::size_t layers = cache.layers();
  std::vector<float> queries(kv_heads * group * head_dim, 0.1f);
  std::vector<std::vector<float>> out(threads, std::vector<float>(queries.size()));
  const auto& kernels = kvlab::active_kernels();
  for (auto _ : state) {
    on_threads(threads, [&](unsigned w) {
      for (std::size_t layer = w; layer < layers; layer += threads)
        kvlab::decode_attention(cache, layer, queries, out[w], kernels);
    });
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["cache_bytes_per_second"] =
      benchmark::Counter(static_cast<double>(cache.bytes()), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["ns_per_token_per_kv_head"] =
      benchmark::Counter(static_cast<double>(context * kv_heads * layers) / 1e9,
                         benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.counters["layers"] = static_cast<double>(layers);
  state.SetLabel(std::string(kvlab::isa_name(kernels.instruction_set)));
}

// Recipes for the append benchmark: the attention recipes and the other per-token formats.
const std::vector<std::pair<std::string, std::string>> append_recipes = [] {
  auto all = recipes;
  for (const char* format : {"int8@token", "uint4@group(32)", "nf4@group(64)", "lloyd2@group(32)", "fp8_e5m2@token",
                             "bf16@token", "rht(int4)@group(32)"})
    all.emplace_back(format, std::string("k=") + format + ",v=" + format);
  return all;
}();

// Prefill's appends: 8192 tokens of 2 KV heads into an empty one-layer cache, keys and
// values handed over as a model's prefill hands them: chunks of 256 fp32 rows fresh from
// the projections (256 KiB per tensor, in L2). The rate counts the input as fp16 (2 bytes
// per element), the unit of what the cache stores uncompressed; fp32 rows streamed from
// DRAM instead would hold it to half the read probe by themselves (4 bytes read per 2
// counted). Timed per iteration without building and freeing the cache.
void append_tokens(benchmark::State& state, std::string recipe) {
  constexpr std::size_t tokens = 8192, chunk = 256;
  const auto head_dim = static_cast<std::size_t>(state.range(0));
  const auto parsed = kvlab::parse_recipe(recipe, kvlab::builtin_registry());
  kvlab::random_stream random(chunk, head_dim);
  std::vector<float> keys(kv_heads * chunk * head_dim), values(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i)
    keys[i] = static_cast<float>(random.normal()), values[i] = static_cast<float>(random.normal());
  for (auto _ : state) {
    kvlab::kv_cache cache(parsed, 1, kv_heads, head_dim);
    cache.reserve(0, tokens);
    const auto start = std::chrono::steady_clock::now();
    for (std::size_t first = 0; first < tokens; first += chunk) cache.prefill(0, keys, values, chunk);
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    benchmark::DoNotOptimize(cache.bytes());
  }
  state.counters["bytes_per_second"] = benchmark::Counter(static_cast<double>(2 * kv_heads * tokens * head_dim * 2),
                                                          benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(kvlab::isa_name(kvlab::active_kernels().instruction_set)));
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
        const auto per_token = run.counters.find("ns_per_token_per_kv_head");
        if (per_token != run.counters.end()) per_token_[name] = static_cast<double>(per_token->second);
      }
    ConsoleReporter::ReportRuns(runs);
  }

  void summarize() const {
    std::printf("\nSummary (GB/s of cache bytes read; %% of the streaming read with the same threads; ns per token "
                "and KV head; speed-up over f16 of the same shape and threads; speed-up of 2 threads over 1; last, "
                "the read with work per byte added)\n");
    for (const auto& [name, rate] : rates_) {
      if (name.rfind("decode_attention/", 0) != 0) continue;
      const std::string shape = name.substr(name.find("/ctx:"));
      const std::string threads = name.substr(name.rfind("threads:") + 8);
      const auto bandwidth = rates_.find("memory_read/threads:" + threads);
      const auto f16 = per_token_.find("decode_attention/f16" + shape);
      const auto one_thread = per_token_.find(name.substr(0, name.rfind("threads:")) + "threads:1");
      const double ns = per_token_.at(name);
      std::printf("%-70s %7.2f GB/s", name.c_str(), rate / 1e9);
      if (bandwidth != rates_.end()) std::printf("  %5.1f%% of read", 100.0 * rate / bandwidth->second);
      std::printf("  %6.1f ns", ns);
      // Caches of different recipes have different layer counts: compare time per token.
      if (f16 != per_token_.end() && f16->first != name) std::printf("  %5.2fx vs f16", f16->second / ns);
      if (one_thread != per_token_.end() && one_thread->first != name)
        std::printf("  %5.2fx vs 1 thread", one_thread->second / ns);
      std::printf("\n");
    }
    const auto read = rates_.find("memory_read/threads:1");
    if (read == rates_.end()) return;
    for (const auto& [name, rate] : rates_)
      if (name.rfind("append/", 0) == 0)
        std::printf("%-70s %7.2f GB/s of fp16 input  %5.1f%% of read\n", name.c_str(), rate / 1e9,
                    100.0 * rate / read->second);
    // A recipe that reads at the two-thread read's rate cannot gain more from a second
    // thread than the read itself does: about 1.85-1.9x here, 1.3-1.4x while another
    // tenant loaded the memory.
    const auto read_2 = rates_.find("memory_read/threads:2");
    if (read_2 != rates_.end())
      std::printf("streaming read: %7.2f GB/s with 1 thread, %7.2f GB/s with 2 (%4.2fx): the bound on 2 threads' "
                  "speed-up for recipes that read at the read's rate\n",
                  read->second / 1e9, read_2->second / 1e9, read_2->second / read->second);
    for (const auto& [name, rate] : rates_) {
      if (name.rfind("memory_read_with_work/", 0) != 0) continue;
      const std::string passes = name.substr(name.find('/') + 1);
      const auto work = rates_.find("cache_read_with_work/" + passes);
      std::printf("read with work, %-10s 1 thread: %7.2f GB/s  %5.1f%% of read", passes.c_str(), rate / 1e9,
                  100.0 * rate / read->second);
      if (work != rates_.end())
        std::printf("  (the work alone, in L2, takes %3.0f%% of the read's time)", 100.0 * read->second / work->second);
      std::printf("\n");
    }
  }

private:
  static double rate_of(const Run& run) {
    const auto counter = [&](const char* key) {
      const auto found = run.counters.find(key);
      return found == run.counters.end() ? 0.0 : static_cast<double>(found->second);
    };
    return run.run_name.function_name.rfind("decode_attention", 0) == 0 ? counter("cache_bytes_per_second")
                                                                        : counter("bytes_per_second");
  }
  std::map<std::string, double> rates_;
  std::map<std::string, double> times_;
  std::map<std::string, double> per_token_;
};

} // namespace

int main(int argc, char** argv) {
  // Freed memory stays in the process, so each append iteration's cache reuses the pages the
  // last one touched: the appends are timed, not the first touch of fresh pages. With glibc's
  // adaptive defaults, whether a new cache got recycled or fresh pages depended on the
  // allocations before it, and f16 appends read 1.2-1.5 GB/s in some runs against 13-15.
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  // The read probe runs first and again last: other tenants' load only slows a run down, so
  // the summary's best of the two is less likely to be a busy moment's rate (against a probe
  // measured at a busy moment, f16 attention read at 126 % of it).
  const auto register_read_probe = [] {
    for (const long threads : {1, 2})
      benchmark::RegisterBenchmark(("memory_read/threads:" + std::to_string(threads)).c_str(), memory_read)
          ->Arg(threads)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
  };
  register_read_probe();
  for (const long passes : {1, 2, 3, 4})
    for (const auto& [name, read] : {std::pair{"memory_read_with_work", &memory_read_with_work},
                                     std::pair{"cache_read_with_work", &cache_read_with_work}})
      benchmark::RegisterBenchmark((std::string(name) + "/passes:" + std::to_string(passes)).c_str(), read)
          ->Arg(passes)
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
  for (const auto& [label, recipe] : append_recipes)
    for (const long head_dim : {64, 128})
      benchmark::RegisterBenchmark(("append/" + label + "/d:" + std::to_string(head_dim)).c_str(), append_tokens,
                                   recipe)
          ->Arg(head_dim)
          ->Unit(benchmark::kMillisecond)
          ->UseManualTime();
  register_read_probe();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  summarizing_reporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.summarize();
  benchmark::Shutdown();
  return 0;
}
