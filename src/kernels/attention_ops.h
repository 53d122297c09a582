// The value side of attention as a kernel: weighted sums of value rows. (The score side is a matrix
// product, kernels/matmul.h.)
#pragma once
#include <cstdint>

namespace gem4 {

// out[h * ldo + d] = sum over j in [0, nk) of p[h * ldp + j] * v[j][v_col + d], for h < n_rows and
// d < width: the terms in order of j, each one fused multiply-add onto the running sum (starting
// from +0). Every output depends only on its own row of p, so results do not depend on n_rows.
void weighted_value_sum(const float* p, int64_t ldp, int n_rows, const float* const* v, int64_t v_col,
                        int64_t nk, int width, float* out, int64_t ldo);

// Plain scalar reference with the same operations (std::fma per term), which the fast path matches
// bit for bit.
void weighted_value_sum_reference(const float* p, int64_t ldp, int n_rows, const float* const* v,
                                  int64_t v_col, int64_t nk, int width, float* out, int64_t ldo);

}  // namespace gem4
