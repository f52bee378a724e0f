// Google Benchmark: `kvlab ppl`'s speed on models of realistic shape with random weights
// (SmolLM2-135M's and Llama-3.2-1B's shapes, generated in memory), for an fp16 cache, int4
// and KIVI-2. One iteration scores one 512-token chunk (the second half, as ppl does),
// without the attention metrics; counters give tokens per second and the time split into
// matrix products, attention (cache appends included) and the cache appends alone. Next to
// them, `matmul_probe` runs kvlab's matrix product (OpenBLAS sgemm in blocks) on a square-ish
// product of the same size class with the same thread count: the machine's attainable
// matrix-product rate. The summary gives each model's matrix-product rate as a share of the
// probe, and each recipe's time against the fp16 cache's, all from this one run.
//   build/test/kvlab_bench_model --benchmark_out=model.json --benchmark_out_format=json
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>
import kvlab;

namespace {

struct model_shape {
  std::string name;
  kvlab::model_config config;
};

const std::vector<model_shape> shapes = {
    {"smollm2-135m",
     {.layers = 30,
      .hidden = 576,
      .heads = 9,
      .kv_heads = 3,
      .head_dim = 64,
      .ffn = 1536,
      .vocab = 49152,
      .context = 8192,
      .rope_theta = 100000.0,
      .rope = kvlab::rope_pairing::half_split}},
    {"llama-3.2-1b",
     {.layers = 16,
      .hidden = 2048,
      .heads = 32,
      .kv_heads = 8,
      .head_dim = 64,
      .ffn = 8192,
      .vocab = 128256,
      .context = 131072,
      .rope_theta = 500000.0,
      .rope = kvlab::rope_pairing::half_split}},
};

const std::vector<std::pair<std::string, std::string>> recipes = {
    {"f16", "k=f16@token,v=f16@token"},
    {"int4@group(32)", "k=int4@group(32),v=int4@group(32)"},
    {"kivi-2", "k=uint2@channel(32),v=uint2@group(32),residual=128"},
};

constexpr std::size_t context = 512;
const unsigned threads = std::max(1u, std::thread::hardware_concurrency());

// Matrix-product floating-point operations of one chunk: every projection and the MLP over
// all tokens, the classifier over the scored half.
double matmul_flops(const kvlab::model_config& c) {
  const double q = double(c.heads * c.head_dim), kv = double(c.kv_heads * c.head_dim), d = double(c.hidden);
  const double per_token = c.layers * (d * (q + 2 * kv) + q * d + 3 * double(c.ffn) * d);
  return 2.0 * (context * per_token + double(context - context / 2) * d * double(c.vocab));
}

// Weights are made once per shape and kept for every recipe.
const kvlab::model_weights& weights(const model_shape& s) {
  static std::map<std::string, std::unique_ptr<kvlab::model_weights>> made;
  auto& w = made[s.name];
  if (!w) w = std::make_unique<kvlab::model_weights>(kvlab::random_weights(s.config, 1));
  return *w;
}

struct measured {
  double seconds = 0.0, matmul_gflops = 0.0;
};
std::map<std::string, measured> results; // best (fastest) iteration per benchmark
double probe_gflops = 0.0;

void model_chunk(benchmark::State& state, const model_shape& s, const std::string& recipe_name,
                 const std::string& recipe) {
  const auto& components = kvlab::builtin_registry();
  const kvlab::any_recipe r = kvlab::parse_recipe(recipe, components);
  const auto& w = weights(s);
  std::vector<std::int32_t> tokens(context);
  kvlab::random_stream random(7, 0);
  for (auto& t : tokens) t = static_cast<std::int32_t>(random.next() % s.config.vocab);
  const kvlab::perplexity_options o{.context = context, .threads = threads, .attention_metrics = false};
  measured& best = results[s.name + "/" + recipe_name];
  kvlab::forward_timing total;
  double appends = 0.0, seconds = 0.0;
  for (auto _ : state) {
    const auto run = kvlab::run_scored(s.config, w, tokens, r, o);
    benchmark::DoNotOptimize(run.log_probs.data());
    total.matrix_products += run.timing.matrix_products;
    total.attention += run.timing.attention;
    total.other += run.timing.other;
    appends += run.append_seconds;
    seconds += run.seconds;
    const double gflops = matmul_flops(s.config) / run.timing.matrix_products * 1e-9;
    if (best.seconds == 0.0 || run.seconds < best.seconds) best = {run.seconds, gflops};
  }
  const auto n = static_cast<double>(state.iterations());
  state.counters["tokens_per_second"] = context * n / seconds;
  state.counters["seconds_matrix_products"] = total.matrix_products / n;
  state.counters["seconds_attention"] = total.attention / n;
  state.counters["seconds_cache_appends"] = appends / n;
  state.counters["seconds_other"] = total.other / n;
  state.counters["matmul_gflops"] = matmul_flops(s.config) / total.matrix_products * n * 1e-9;
}

// kvlab's matrix product on 512 rows x 2048 inputs x 8192 outputs (Llama-3.2-1B's MLP).
void matmul_probe(benchmark::State& state) {
  const std::size_t n = 512, in = 2048, out = 8192;
  std::vector<float> x(n * in, 0.5f), w(out * in, 0.25f), y(n * out);
  double best = 0.0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    kvlab::matmul(x, w, y, n, in, out, threads);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    benchmark::DoNotOptimize(y.data());
    best = std::max(best, 2.0 * double(n * in * out) / seconds * 1e-9);
  }
  probe_gflops = std::max(probe_gflops, best);
  state.counters["gflops"] =
      benchmark::Counter(2.0 * double(n * in * out) * double(state.iterations()), benchmark::Counter::kIsRate);
}

} // namespace

int main(int argc, char** argv) {
  // The probe runs first and last; the summary keeps the faster (other tenants only slow it).
  benchmark::RegisterBenchmark("matmul_probe/first", matmul_probe)
      ->Unit(benchmark::kMillisecond)
      ->MinTime(2.0)
      ->UseRealTime();
  for (const auto& s : shapes)
    for (const auto& [name, recipe] : recipes)
      benchmark::RegisterBenchmark(("ppl_chunk/" + s.name + "/" + name).c_str(), model_chunk, s, name, recipe)
          ->Unit(benchmark::kMillisecond)
          ->Iterations(s.name == "llama-3.2-1b" ? 1 : 3)
          ->UseRealTime();
  benchmark::RegisterBenchmark("matmul_probe/last", matmul_probe)
      ->Unit(benchmark::kMillisecond)
      ->MinTime(2.0)
      ->UseRealTime();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::printf("\nthreads %u; matrix-product probe %.1f GFLOP/s\n", threads, probe_gflops);
  std::printf("%-14s %-16s %10s %14s %12s %14s\n", "model", "recipe", "tokens/s", "matmul GFLOP/s", "of probe",
              "time vs f16");
  for (const auto& s : shapes) {
    const auto base = results.find(s.name + "/f16");
    for (const auto& [name, recipe] : recipes) {
      const auto found = results.find(s.name + "/" + name);
      if (found == results.end() || found->second.seconds == 0.0) continue;
      const measured& m = found->second;
      std::printf("%-14s %-16s %10.1f %14.1f %11.0f%% %13.2fx\n", s.name.c_str(), name.c_str(), context / m.seconds,
                  m.matmul_gflops, probe_gflops > 0 ? 100.0 * m.matmul_gflops / probe_gflops : 0.0,
                  base != results.end() && base->second.seconds > 0 ? m.seconds / base->second.seconds : 0.0);
    }
  }
  return 0;
}
