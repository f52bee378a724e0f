// Affine codes in token lanes on AVX-512: dots for GQA groups (2-bit rows without
// parameters for one head by pair tables) and per-channel key blocks.
#include "avx512.hpp"
#include "../dispatch/paths.hpp"

namespace kvlab::kernels::avx512 {
const dot_records_kernel dot_token_lanes = &simd::token_lane_kernels::dot_records;
const decltype(kernel_table::dot_channel_blocks) dot_channel_blocks_in_token_lanes =
    &simd::token_lane_kernels::dot_channel_blocks;
} // namespace kvlab::kernels::avx512
