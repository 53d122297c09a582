// Byte layouts of the quantized block types gem4 computes with, exactly as ggml writes them
// (ggml-common.h). A row of n elements is n / block_elems consecutive blocks, packed with no padding.
// Scales are IEEE half floats stored as raw bits (little-endian, like everything in GGUF).
#pragma once
#include <cstdint>

namespace gem4 {

constexpr int kQK = 32;    // elements per block of the legacy types (Q4_0 ... Q8_0)
constexpr int kQKK = 256;  // elements per super-block of the K-quants

// Value i of the block is (nibble_i - 8) * d. Byte j holds element j in its low nibble and element
// j + 16 in its high nibble.
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[16];
};
// Value i is nibble_i * d + m; nibbles packed as in Q4_0.
struct BlockQ4_1 {
  uint16_t d, m;
  uint8_t qs[16];
};
// Value i is (q_i - 16) * d with 5-bit q: low four bits packed as in Q4_0, bit 4 of element i is bit i of
// the little-endian 32-bit word qh.
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[16];
};
// Value i is q_i * d + m, q packed as in Q5_0.
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[16];
};
// Value i is qs[i] * d.
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[32];
};

// Eight sub-blocks of 32, each with a 6-bit scale and a 6-bit min (see k_quant_scale_min):
// value = d * scale_s * q - dmin * min_s, q a nibble. The 256 nibbles are in four chunks of 64
// elements: chunk c uses qs[32c .. 32c+31], low nibbles for its first 32 elements, high nibbles for the
// next 32.
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qs[128];
};
// As Q4_K with 5-bit q: bit 4 of element 64c + l (l < 32) is bit 2c of qh[l], of element 64c + 32 + l
// it is bit 2c + 1 of qh[l].
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
// Sixteen sub-blocks of 16 with signed 8-bit scales: value = d * scales[s] * (q - 32), q 6 bits.
// Two halves of 128 elements; in half h (ql += 64h, qh += 32h), for l < 32:
//   element l      : low nibble of ql[l]      | bits 0-1 of qh[l] << 4
//   element l + 32 : low nibble of ql[l + 32] | bits 2-3 of qh[l] << 4
//   element l + 64 : high nibble of ql[l]     | bits 4-5 of qh[l] << 4
//   element l + 96 : high nibble of ql[l + 32]| bits 6-7 of qh[l] << 4
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};

// Activations, not weights: llama.cpp's Q8_K, what its K-quant dot products multiply with. Value i is
// d * qs[i]; bsums[k] is the sum of qs[16k .. 16k + 15].
struct BlockQ8_K {
  float d;
  int8_t qs[256];
  int16_t bsums[16];
};

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block. Sub-blocks 0-3 keep theirs in the
// low 6 bits of bytes j and j + 4; sub-blocks 4-7 keep the low 4 bits in byte j + 4 (scale low nibble,
// min high nibble) and the top 2 bits in the spare high bits of bytes j - 4 (scale) and j (min).
inline void k_quant_scale_min(int j, const uint8_t* scales, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = scales[j] & 63;
    *min = scales[j + 4] & 63;
  } else {
    *scale = static_cast<uint8_t>((scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4));
    *min = static_cast<uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
  }
}

}  // namespace gem4
