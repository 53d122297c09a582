#include "kernels/attention_ops.h"

#include <cmath>

#include "kernels/cpu_features.h"

namespace gem4 {

void weighted_value_sum_avx512(const float* p, int64_t ldp, int n_rows, const float* const* v, int64_t v_col,
                               int64_t nk, int width, float* out, int64_t ldo);  // attention_ops_avx512.cpp

void weighted_value_sum_reference(const float* p, int64_t ldp, int n_rows, const float* const* v,
                                  int64_t v_col, int64_t nk, int width, float* out, int64_t ldo) {
  for (int h = 0; h < n_rows; ++h) {
    float* o = out + h * ldo;
    for (int d = 0; d < width; ++d) o[d] = 0.0f;
    for (int64_t j = 0; j < nk; ++j) {
      const float w = p[h * ldp + j];
      const float* vj = v[j] + v_col;
      for (int d = 0; d < width; ++d) o[d] = std::fma(w, vj[d], o[d]);
    }
  }
}

void weighted_value_sum(const float* p, int64_t ldp, int n_rows, const float* const* v, int64_t v_col,
                        int64_t nk, int width, float* out, int64_t ldo) {
  if (active_isa() == Isa::Avx512) return weighted_value_sum_avx512(p, ldp, n_rows, v, v_col, nk, width, out, ldo);
  weighted_value_sum_reference(p, ldp, n_rows, v, v_col, nk, width, out, ldo);
}

}  // namespace gem4
