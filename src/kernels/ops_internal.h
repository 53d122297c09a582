// Internal to kernels/: the per-set entry points that ops.cpp and convert.cpp dispatch to on
// active_isa() (see ops.h and convert.h for what each computes). Avx2 and AvxVnni run the ops_avx2
// versions, Avx512 the ops_avx512 ones (conversions: the 256-bit F16C ones for both), the AArch64 sets
// (Neon, NeonDotprod, NeonI8mm) the ops_neon and convert_neon ones, Scalar the references. Each
// architecture's files are compiled only for it.
#pragma once
#include <cmath>
#include <cstdint>

namespace gem4 {

// RMSNorm's scale from the double sum of the float squares, as llama.cpp takes it: the mean rounded
// to float, then 1 / sqrt(mean + eps) in float. Shared by every set so that all give the same bits.
inline float rms_scale(double sum_squares, int64_t n, float eps) {
  const float mean = float(sum_squares / double(n));
  return 1.0f / std::sqrt(mean + eps);
}

namespace ops_avx2 {  // ops_avx2.cpp: AVX2 + FMA + F16C, 8 lanes
// `table` is the f16-indexed GELU table of ops.cpp (65,536 f32 results).
void gelu_tanh_f16_mul(const float* table, const float* gate, const float* up, float* out, int64_t n);
void softmax(float* x, int64_t n);
void softcap(float* x, int64_t n, float cap);
int64_t argmax_finite(const float* x, int64_t n);
void rmsnorm(const float* x, const float* w, int64_t n, float eps, float* y);
void rope_rotate(float* x, int64_t n_heads, int64_t head_dim, const float* cos, const float* sin);
}  // namespace ops_avx2

namespace ops_avx512 {  // ops_avx512.cpp: 16 lanes, masked tails
void gelu_tanh_f16_mul(const float* table, const float* gate, const float* up, float* out, int64_t n);
void softmax(float* x, int64_t n);
void softcap(float* x, int64_t n, float cap);
int64_t argmax_finite(const float* x, int64_t n);
void rmsnorm(const float* x, const float* w, int64_t n, float eps, float* y);
void rope_rotate(float* x, int64_t n_heads, int64_t head_dim, const float* cos, const float* sin);
}  // namespace ops_avx512

namespace convert_avx2 {  // convert_avx2.cpp: F16C (and AVX2 for BF16), 8 values per instruction
void f16_to_f32(const uint16_t* src, float* dst, int64_t n);
void f32_to_f16(const float* src, uint16_t* dst, int64_t n);
void bf16_to_f32(const uint16_t* src, float* dst, int64_t n);
void f32_to_bf16(const float* src, uint16_t* dst, int64_t n);
}  // namespace convert_avx2

namespace ops_neon {  // ops_neon.cpp: ARMv8.0 Advanced SIMD, 4 lanes; the same algorithms and bits as
                      // ops_avx2
void gelu_tanh_f16_mul(const float* table, const float* gate, const float* up, float* out, int64_t n);
void softmax(float* x, int64_t n);
void softcap(float* x, int64_t n, float cap);
int64_t argmax_finite(const float* x, int64_t n);
void rmsnorm(const float* x, const float* w, int64_t n, float eps, float* y);
}  // namespace ops_neon

namespace convert_neon {  // convert_neon.cpp: fcvtl/fcvtn (f16) and integer steps (bf16), 4 values at a time
void f16_to_f32(const uint16_t* src, float* dst, int64_t n);
void f32_to_f16(const float* src, uint16_t* dst, int64_t n);
void bf16_to_f32(const uint16_t* src, float* dst, int64_t n);
void f32_to_bf16(const float* src, uint16_t* dst, int64_t n);
}  // namespace convert_neon

}  // namespace gem4
