// The scalar reference, family by family: the oracle every vector kernel is tested
// against, and the tail and odd-width fallback the vector kernels call for the elements
// their vector loops do not cover.
//
// Its functions have internal linkage: every kernel TU keeps its own copies. The ISA TUs
// are built with -mfma, where a + b * c contracts to one fused multiply-add; with shared
// (inline) definitions the linker keeps one TU's copy for all, so the scalar reference's
// arithmetic would depend on link order (its fold_channel_params could be an AVX-512 TU's,
// fused).
#pragma once
#include "channel_params/reference.hpp"
#include "codes/reference.hpp"
#include "encoders/reference.hpp"
#include "fixed_point/reference.hpp"
#include "records/reference.hpp"
#include "rows/reference.hpp"
#include "softmax/reference.hpp"
