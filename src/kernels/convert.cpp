#include "kernels/convert.h"

#include <cstring>

#include "kernels/cpu_features.h"
#include "kernels/ops_internal.h"
#include "tensor/quant.h"

namespace gem4 {

// Every vector set has F16C and AVX2 (eight values per instruction, convert_avx2.cpp); the scalar
// functions of tensor/quant.h are the reference and the Scalar set's path. Both round to nearest even.
namespace {
bool vector_set() { return active_isa() != Isa::Scalar; }
}  // namespace

void convert_f16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  if (vector_set()) return convert_avx2::f16_to_f32(src, dst, n);
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(src[i]);
}

void convert_f32_to_f16(const float* src, uint16_t* dst, int64_t n) {
  if (vector_set()) return convert_avx2::f32_to_f16(src, dst, n);
  for (int64_t i = 0; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
}

void convert_bf16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  if (vector_set()) return convert_avx2::bf16_to_f32(src, dst, n);
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t bits = uint32_t(src[i]) << 16;
    std::memcpy(dst + i, &bits, 4);
  }
}

void convert_f32_to_bf16(const float* src, uint16_t* dst, int64_t n) {
  if (vector_set()) return convert_avx2::f32_to_bf16(src, dst, n);
  for (int64_t i = 0; i < n; ++i) dst[i] = fp32_to_bf16(src[i]);
}

}  // namespace gem4
