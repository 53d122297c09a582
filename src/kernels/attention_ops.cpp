#include "kernels/attention_ops.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cpu_features.h"
#include "tensor/blocks.h"
#include "tensor/quant.h"

namespace gem4 {

void weighted_value_sum_avx512(const float* p, int64_t ldp, int n_rows, GgmlType type, const void* const* v,
                               int64_t v_col, int64_t nk, int width, float* out, int64_t ldo,
                               bool accumulate);  // attention_ops_avx512.cpp
void weighted_value_sum_avx2(const float* p, int64_t ldp, int n_rows, GgmlType type, const void* const* v,
                             int64_t v_col, int64_t nk, int width, float* out, int64_t ldo,
                             bool accumulate);  // attention_ops_avx2.cpp (Avx2 and AvxVnni)
void weighted_value_sum_neon(const float* p, int64_t ldp, int n_rows, GgmlType type, const void* const* v,
                             int64_t v_col, int64_t nk, int width, float* out, int64_t ldo,
                             bool accumulate);  // attention_ops_neon.cpp (every AArch64 set)

namespace {

float element(GgmlType type, const void* row, int64_t i) {
  switch (type) {
    case GgmlType::F32:
      return static_cast<const float*>(row)[i];
    case GgmlType::F16:
      return fp16_to_fp32(static_cast<const uint16_t*>(row)[i]);
    case GgmlType::BF16:
      return bf16_to_fp32(static_cast<const uint16_t*>(row)[i]);
    case GgmlType::Q8_0: {
      const BlockQ8_0& b = static_cast<const BlockQ8_0*>(row)[i / kQK];
      return fp16_to_fp32(b.d) * float(b.qs[i % kQK]);
    }
    default:
      throw std::logic_error("weighted_value_sum: value rows must be F32, F16, BF16 or Q8_0");
  }
}

void check_type(GgmlType type, int64_t v_col) {
  if (type != GgmlType::F32 && type != GgmlType::F16 && type != GgmlType::BF16 && type != GgmlType::Q8_0)
    throw std::logic_error("weighted_value_sum: value rows must be F32, F16, BF16 or Q8_0");
  if (type == GgmlType::Q8_0 && v_col % kQK != 0)
    throw std::logic_error("weighted_value_sum: Q8_0 value columns must start at a block (v_col " +
                           std::to_string(v_col) + ")");
}

}  // namespace

void weighted_value_sum_reference(const float* p, int64_t ldp, int n_rows, GgmlType type,
                                  const void* const* v, int64_t v_col, int64_t nk, int width, float* out,
                                  int64_t ldo, bool accumulate) {
  check_type(type, v_col);
  for (int h = 0; h < n_rows; ++h) {
    float* o = out + h * ldo;
    if (!accumulate)
      for (int d = 0; d < width; ++d) o[d] = 0.0f;
    for (int64_t j = 0; j < nk; ++j) {
      const float w = p[h * ldp + j];
      for (int d = 0; d < width; ++d) o[d] = std::fma(w, element(type, v[j], v_col + d), o[d]);
    }
  }
}

void weighted_value_sum(const float* p, int64_t ldp, int n_rows, GgmlType type, const void* const* v,
                        int64_t v_col, int64_t nk, int width, float* out, int64_t ldo, bool accumulate) {
  check_type(type, v_col);
  switch (active_isa()) {
#if defined(__x86_64__)
    case Isa::Avx512:
      return weighted_value_sum_avx512(p, ldp, n_rows, type, v, v_col, nk, width, out, ldo, accumulate);
    case Isa::Avx2:
    case Isa::AvxVnni:
      return weighted_value_sum_avx2(p, ldp, n_rows, type, v, v_col, nk, width, out, ldo, accumulate);
#elif defined(__aarch64__)
    case Isa::Neon:
    case Isa::NeonDotprod:
    case Isa::NeonI8mm:
      return weighted_value_sum_neon(p, ldp, n_rows, type, v, v_col, nk, width, out, ldo, accumulate);
#endif
    default:
      break;
  }
  weighted_value_sum_reference(p, ldp, n_rows, type, v, v_col, nk, width, out, ldo, accumulate);
}

}  // namespace gem4
