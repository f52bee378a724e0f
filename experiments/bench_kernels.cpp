// Google Benchmark: encode, decode, fused dot and fused axpy of every registered quantizer
// (every width) at per-token granularities, head_dim 64 and 128, on the active ISA, with
// the records resident in L2 (about 256 KiB); dot4 and axpy4 serve a GQA group of 4 query
// heads in one pass, as decode attention does. KIVI's per-channel keys (channel(32): blocks
// of 32 tokens, their parameters folded into the query per block) get dot, axpy, dot4 and
// axpy4 too, to compare with the same codes in per-token groups. Counters are bytes per
// second: records read for decode/dot/axpy, float input plus records written for encode.
//   build/test/kvlab_bench_kernels --benchmark_filter='int4@group\(32\)/128' --benchmark_format=json
#include <benchmark/benchmark.h>

#include <algorithm>
#include <span>
#include <string>
#include <vector>
import kvlab;

namespace {

enum class operation { encode, decode, dot, axpy, dot4, axpy4 };
constexpr const char* operation_names[] = {"encode", "decode", "dot", "axpy", "dot4", "axpy4"};
constexpr std::size_t gqa_heads = 4;

void kernel_benchmark(benchmark::State& state, std::string quantizer, std::string granularity, std::size_t head_dim,
                      operation op) {
  const auto& components = kvlab::builtin_registry();
  const auto& kernels = kvlab::active_kernels();
  kvlab::quantized_body stream(components.make_quantizer(quantizer),
                               components.make_granularity(granularity).group_shape(head_dim), head_dim,
                               kvlab::param_precision::f16, components.make_storage("flat"));
  // Whole blocks (one token, or the block_tokens of a per-channel block) of about 256 KiB.
  const std::size_t block = stream.block_tokens(), block_bytes = stream.layout().bytes();
  const std::size_t tokens = block * std::max<std::size_t>((64 + block - 1) / block, (256 << 10) / block_bytes);
  const auto data = kvlab::load_data("synthetic:gaussian(L=1,H=1,Q=1,T=" + std::to_string(tokens) +
                                     ",D=" + std::to_string(head_dim) + ",seed=1)");
  for (std::size_t t = 0; t < tokens; t += block)
    stream.append(std::span(data.keys.row(0, 0, t).data(), block * head_dim), kernels);
  std::vector<float> query(gqa_heads * head_dim, 0.5f), weights(gqa_heads * tokens, 1.0f / static_cast<float>(tokens));
  std::vector<float> scores(gqa_heads * tokens), out(gqa_heads * head_dim);
  std::vector<std::uint8_t> record(stream.layout().bytes());
  for (auto _ : state) {
    switch (op) {
    case operation::encode:
      for (std::size_t t = 0; t < tokens; ++t) stream.encode(data.keys.row(0, 0, t), kernels, record);
      benchmark::DoNotOptimize(record.data());
      break;
    case operation::decode:
      for (std::size_t t = 0; t < tokens; ++t) stream.decode(t, out, kernels);
      benchmark::DoNotOptimize(out.data());
      break;
    case operation::dot:
      stream.dot_all(kernels, query, 1, scores.data(), tokens);
      benchmark::DoNotOptimize(scores.data());
      break;
    case operation::axpy:
      stream.axpy_all(kernels, weights.data(), tokens, 1, std::span(out).first(head_dim));
      benchmark::DoNotOptimize(out.data());
      break;
    case operation::dot4:
      stream.dot_all(kernels, query, gqa_heads, scores.data(), tokens);
      benchmark::DoNotOptimize(scores.data());
      break;
    case operation::axpy4:
      stream.axpy_all(kernels, weights.data(), tokens, gqa_heads, out);
      benchmark::DoNotOptimize(out.data());
      break;
    }
  }
  const double record_bytes = static_cast<double>(stream.bytes());
  const double input_bytes = op == operation::encode ? static_cast<double>(tokens * head_dim * sizeof(float)) : 0.0;
  state.counters["bytes_per_second"] =
      benchmark::Counter(record_bytes + input_bytes, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(kvlab::isa_name(kernels.instruction_set)));
}

} // namespace

int main(int argc, char** argv) {
  const auto& components = kvlab::builtin_registry();
  for (const auto& quantizer : components.instances(kvlab::component_kind::quantizer))
    for (const std::string granularity : {"token", "group(32)", "channel(32)"})
      for (const std::size_t head_dim : {64u, 128u})
        for (const auto op : {operation::encode, operation::decode, operation::dot, operation::axpy, operation::dot4,
                              operation::axpy4}) {
          // per-channel blocks: the attention kernels only (they encode and decode by reference)
          if (granularity == "channel(32)" && (op == operation::encode || op == operation::decode)) continue;
          benchmark::RegisterBenchmark((std::string(operation_names[static_cast<int>(op)]) + "/" + quantizer + "@" +
                                        granularity + "/" + std::to_string(head_dim))
                                           .c_str(),
                                       kernel_benchmark, quantizer, granularity, head_dim, op)
              ->MinTime(0.05);
        }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
