// Google Benchmark: encode, decode, fused dot and fused axpy of every registered quantizer
// (every width) at per-token granularities, head_dim 64 and 128, on the active ISA, with
// the records resident in L2 (about 256 KiB); dot4 and axpy4 serve a GQA group of 4 query
// heads in one pass, as decode attention does. KIVI's per-channel keys (channel(32): blocks
// of 32 tokens, their parameters folded into the query per block) get dot, axpy, dot4 and
// axpy4 too, to compare with the same codes in per-token groups. Counters are bytes per
// second: records read for decode/dot/axpy, float input plus records written for encode.
// kivi2/ takes KIVI-2's decode step for one query head apart, each kernel alone on 2048
// tokens in L2 (ns_per_token): keys (per-channel blocks of 32 rows, the query folded with
// each block's parameters, then the rows), the same blocks without rows (the per-block
// preparation alone), the same rows as one block (the rows alone), softmax, and the values
// in fixed point.
//   build/test/kvlab_bench_kernels --benchmark_filter='int4@group\(32\)/128' --benchmark_format=json
//   build/test/kvlab_bench_kernels --benchmark_filter='kivi2/' --benchmark_repetitions=3
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <random>
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
  std::optional<kvlab::quantized_body> body; // quantizers that refuse the granularity skip
  try {
    body.emplace(components.make_quantizer(quantizer), components.make_granularity(granularity).group_shape(head_dim),
                 head_dim, kvlab::param_precision::f16, components.make_storage("flat"));
  } catch (const kvlab::error& e) {
    state.SkipWithError(e.what());
    return;
  }
  kvlab::quantized_body& stream = *body;
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

enum class kivi2_phase { keys, keys_prepare, keys_rows, softmax, values };
constexpr const char* kivi2_phase_names[] = {"keys", "keys_prepare", "keys_rows", "softmax", "values"};

void kivi2_benchmark(benchmark::State& state, kivi2_phase phase) {
  constexpr std::size_t head_dim = 128, tokens = 2048, block_tokens = 32, groups = head_dim / 32;
  const auto& kernels = kvlab::active_kernels();
  if (phase == kivi2_phase::values && !kernels.axpy_records_fixed) {
    state.SkipWithError("the active ISA has no fixed-point values");
    return;
  }
  std::mt19937 random(1);
  const auto half = [&](float lo, float hi) {
    return kvlab::float_to_half_bits(std::uniform_real_distribution<float>(lo, hi)(random));
  };
  // Keys: bare 2-bit rows; per block of 32, each channel's fp16 scale and zero (a dword).
  const kvlab::record_format key_rows{.kind = kvlab::element_kind::affine_codes,
                                      .record_bytes = head_dim / 4,
                                      .head_dim = head_dim,
                                      .group_channels = head_dim,
                                      .bits = 2};
  std::vector<std::uint8_t> rows(tokens * key_rows.record_bytes), key_params(tokens / block_tokens * head_dim * 4);
  for (auto& byte : rows) byte = static_cast<std::uint8_t>(random());
  for (std::size_t i = 0; i < key_params.size() / 4; ++i) {
    const std::uint16_t scale_zero[2] = {half(0.01f, 0.3f), half(-1.0f, 0.0f)};
    std::memcpy(key_params.data() + 4 * i, scale_zero, 4);
  }
  std::vector<kvlab::channel_block> blocks;
  for (std::size_t b = 0; b < tokens / block_tokens; ++b)
    blocks.push_back({key_params.data() + b * head_dim * 4, rows.data() + b * block_tokens * key_rows.record_bytes,
                      b * block_tokens, phase == kivi2_phase::keys_prepare ? 0 : block_tokens});
  if (phase == kivi2_phase::keys_rows) blocks.assign(1, {key_params.data(), rows.data(), 0, tokens});
  // Values: per token 2-bit codes, then per group of 32 channels an fp16 scale and zero.
  const kvlab::record_format values{.kind = kvlab::element_kind::affine_codes,
                                    .record_bytes = head_dim / 4 + groups * 4,
                                    .head_dim = head_dim,
                                    .group_channels = 32,
                                    .bits = 2,
                                    .params_per_group = 2};
  std::vector<std::uint8_t> records(tokens * values.record_bytes);
  for (std::size_t t = 0; t < tokens; ++t) {
    std::uint8_t* record = records.data() + t * values.record_bytes;
    for (std::size_t i = 0; i < head_dim / 4; ++i) record[i] = static_cast<std::uint8_t>(random());
    for (std::size_t g = 0; g < 2 * groups; ++g) {
      const std::uint16_t param = g % 2 == 0 ? half(0.01f, 0.3f) : half(-1.0f, 0.0f);
      std::memcpy(record + head_dim / 4 + 2 * g, &param, 2);
    }
  }
  // Weights of 1 / tokens and scales below 1: F below 2^13 on a grid of 2^24.
  std::vector<float> query(head_dim), scores(tokens), weights(tokens, 1.0f / tokens), grid(2 * groups, 0x1p24f);
  for (auto& q : query) q = std::normal_distribution<float>()(random);
  std::vector<std::int64_t> sums(head_dim), zero_sums(groups);
  std::vector<std::uint64_t> weight_sums(groups);
  for (auto _ : state) {
    switch (phase) {
    case kivi2_phase::keys:
    case kivi2_phase::keys_prepare:
    case kivi2_phase::keys_rows:
      kernels.dot_channel_blocks(key_rows, blocks.data(), blocks.size(), 2, false, query.data(), 1, scores.data(),
                                 tokens);
      break;
    case kivi2_phase::softmax:
      std::fill(scores.begin(), scores.end(), 0.5f);
      benchmark::DoNotOptimize(kernels.softmax(scores.data(), tokens));
      break;
    case kivi2_phase::values:
      kernels.axpy_records_fixed(values, weights.data(), tokens, 1, grid.data(), records.data(), tokens, sums.data(),
                                 weight_sums.data(), zero_sums.data());
      break;
    }
    benchmark::DoNotOptimize(scores.data());
    benchmark::DoNotOptimize(sums.data());
  }
  state.counters["ns_per_token"] = benchmark::Counter(
      static_cast<double>(tokens) / 1e9, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
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
  for (const auto phase : {kivi2_phase::keys, kivi2_phase::keys_prepare, kivi2_phase::keys_rows, kivi2_phase::softmax,
                           kivi2_phase::values})
    benchmark::RegisterBenchmark((std::string("kivi2/") + kivi2_phase_names[static_cast<int>(phase)]).c_str(),
                                 kivi2_benchmark, phase)
        ->MinTime(0.1);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
