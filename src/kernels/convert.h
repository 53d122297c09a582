// Bulk conversions between f32 and the 16-bit float formats (KV cache rows).
#pragma once
#include <cstdint>

namespace gem4 {

void convert_f16_to_f32(const uint16_t* src, float* dst, int64_t n);
void convert_bf16_to_f32(const uint16_t* src, float* dst, int64_t n);
void convert_f32_to_f16(const float* src, uint16_t* dst, int64_t n);
void convert_f32_to_bf16(const float* src, uint16_t* dst, int64_t n);

}  // namespace gem4
