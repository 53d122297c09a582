// The value side of attention as a kernel: weighted sums of value rows. (The score side is a matrix
// product, kernels/matmul.h, which reads F16/BF16 key rows directly, and Q8_0 key rows with the query
// quantized to Q8_0 blocks on the fly, as llama.cpp's CPU attention does for a q8_0 K cache.)
#pragma once
#include <cstdint>

#include "gguf/ggml_types.h"

namespace gem4 {

// out[h * ldo + d] = sum over j in [0, nk) of p[h * ldp + j] * v_j[v_col + d], for h < n_rows and
// d < width, where v_j = v[j] holds elements of `type` (F32, F16 or BF16, converted exactly to f32; or
// Q8_0 blocks, element c being d[c / 32] * qs[c % 32], also exact in f32): the terms in order of j, each
// one fused multiply-add onto the running sum (starting from +0). Every output depends only on its own
// row of p, so results do not depend on n_rows; and every type gives the same bits as converting the
// rows to f32 first. Q8_0 rows need v_col to be a multiple of 32 (a head starts at a block).
// With `accumulate` the running sums start from out's values instead of +0: a key range split into
// consecutive calls, each continuing the previous one's sums, gives the bits of one call over the
// whole range (so a prompt's rows can share the value rows of a run of keys while they are in cache).
void weighted_value_sum(const float* p, int64_t ldp, int n_rows, GgmlType type, const void* const* v,
                        int64_t v_col, int64_t nk, int width, float* out, int64_t ldo,
                        bool accumulate = false);

// Plain scalar reference with the same operations (std::fma per term), which the fast path matches
// bit for bit. Throws std::logic_error for another type or a Q8_0 v_col off a block start.
void weighted_value_sum_reference(const float* p, int64_t ldp, int n_rows, GgmlType type,
                                  const void* const* v, int64_t v_col, int64_t nk, int width, float* out,
                                  int64_t ldo, bool accumulate = false);

}  // namespace gem4
