// Element types as numbers: scalar reference dequantize/quantize for every supported weight type.
// These are the ground truth the fast kernels are tested against. No model knowledge here.
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "gguf/ggml_types.h"
#include "tensor/blocks.h"

namespace gem4 {

class UnsupportedType : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The weight types gem4 computes with: F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q5_K Q6_K.
bool is_supported_weight_type(GgmlType t);
// Throws UnsupportedType("tensor NAME has type X, which gem4 does not support (supported: ...)").
void require_supported_weight_type(GgmlType t, const std::string& tensor_name);

// Scalar reference: n elements (a multiple of the block size) from `src` into f32 `dst`.
void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n);
// Scalar reference quantizer (round-to-nearest, as ggml's reference quantizers do).
void quantize_row(GgmlType t, const float* src, void* dst, int64_t n);

// Activations as llama.cpp quantizes them for the K-quant dot products (Q8_K, quantize_row_q8_K_ref): per
// 256 values, max = the first value of largest magnitude, iscale = -127 / max, qs = min(127,
// round-half-even(iscale * x)), d = 1 / iscale. n: a multiple of 256. The scalar reference of the
// AVX-512 K-quant kernels' activations.
void quantize_row_q8_k(const float* src, BlockQ8_K* dst, int64_t n);

// Q8_0 as llama.cpp's x86 CPU backend quantizes at run time (its quantize_row_q8_0: activations of
// the Q8_0 dot products and rows stored into a q8_0 KV cache): d = amax / 127 stored as f16, q =
// round-half-even(x * (127 / amax)); all zero where amax is 0. (quantize_row's Q8_0 is ggml's reference
// quantizer instead: q = round-half-away(x / d), what llama-quantize writes.) n: a multiple of 32.
void quantize_row_q8_0_activation(const float* src, BlockQ8_0* dst, int64_t n);

// IEEE half and bfloat16 conversions (round-to-nearest-even).
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);

}  // namespace gem4
