#include "kernels/convert.h"

#include <cstring>

#include "kernels/cpu_features.h"
#include "kernels/ops_internal.h"
#include "tensor/quant.h"

namespace gem4 {

// Every x86 vector set has F16C and AVX2 (eight values per instruction, convert_avx2.cpp), every AArch64
// set the ARMv8.0 conversions (convert_neon.cpp); the scalar functions of tensor/quant.h are the
// reference and the Scalar set's path. All round to nearest even.
namespace {
bool vector_set() { return active_isa() != Isa::Scalar; }
}  // namespace

#if defined(__aarch64__)
namespace convert_vector = convert_neon;
#elif defined(__x86_64__)
namespace convert_vector = convert_avx2;
#endif

void convert_f16_to_f32(const uint16_t* src, float* dst, int64_t n) {
#if defined(__aarch64__) || defined(__x86_64__)
  if (vector_set()) return convert_vector::f16_to_f32(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(src[i]);
}

void convert_f32_to_f16(const float* src, uint16_t* dst, int64_t n) {
#if defined(__aarch64__) || defined(__x86_64__)
  if (vector_set()) return convert_vector::f32_to_f16(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
}

void convert_bf16_to_f32(const uint16_t* src, float* dst, int64_t n) {
#if defined(__aarch64__) || defined(__x86_64__)
  if (vector_set()) return convert_vector::bf16_to_f32(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t bits = uint32_t(src[i]) << 16;
    std::memcpy(dst + i, &bits, 4);
  }
}

void convert_f32_to_bf16(const float* src, uint16_t* dst, int64_t n) {
#if defined(__aarch64__) || defined(__x86_64__)
  if (vector_set()) return convert_vector::f32_to_bf16(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = fp32_to_bf16(src[i]);
}

}  // namespace gem4
