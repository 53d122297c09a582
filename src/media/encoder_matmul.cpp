#include "media/encoder_matmul.h"

#include <algorithm>
#include <vector>

#include "gguf/ggml_types.h"
#include "kernels/convert.h"
#include "kernels/thread_pool.h"

namespace gem4::media {

void round_activations_for(GgmlType weight_type, float* x, int64_t n) {
  if (weight_type != GgmlType::F16 && weight_type != GgmlType::BF16) return;
  std::vector<uint16_t> h(size_t(std::min<int64_t>(n, 4096)));
  for (int64_t i = 0; i < n; i += int64_t(h.size())) {
    const int64_t m = std::min<int64_t>(int64_t(h.size()), n - i);
    if (weight_type == GgmlType::F16) {
      convert_f32_to_f16(x + i, h.data(), m);
      convert_f16_to_f32(h.data(), x + i, m);
    } else {
      convert_f32_to_bf16(x + i, h.data(), m);
      convert_bf16_to_f32(h.data(), x + i, m);
    }
  }
}

void encoder_matmul(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
                    ThreadPool* pool) {
  // Only F32 weights: there llama.cpp's f32 dot products are the arithmetic to match. With F16/BF16
  // weights ggml rounds the activations to 16 bits instead, which no slicing reproduces, and slices of
  // 16-bit weights cost ~3x (the panels are converted per slice; E2B-shaped tower: 46 s vs 14 s).
  if (w.type == GgmlType::F16 || w.type == GgmlType::BF16) {
    std::vector<float> rounded(size_t(rows) * size_t(w.in));
    for (int64_t r = 0; r < rows; ++r) std::copy(x + r * ldx, x + r * ldx + w.in, rounded.data() + r * w.in);
    round_activations_for(w.type, rounded.data(), int64_t(rounded.size()));
    return matmul(w, rounded.data(), rows, w.in, y, ldy, pool);
  }
  const int64_t slice = std::max<int64_t>(kEncoderSlice, ggml_block_elems(w.type));
  if (w.type != GgmlType::F32 || w.in <= slice || rows <= 0) return matmul(w, x, rows, ldx, y, ldy, pool);
  std::vector<float> part(size_t(rows) * size_t(w.out));
  for (int64_t k0 = 0; k0 < w.in; k0 += slice) {
    MatrixView v = w;
    v.data = static_cast<const uint8_t*>(w.data) + ggml_row_bytes(w.type, k0);
    v.in = std::min(slice, w.in - k0);
    v.packed = nullptr;  // a packed copy covers whole rows only
    if (k0 == 0) {
      matmul(v, x, rows, ldx, y, ldy, pool);
      continue;
    }
    matmul(v, x + k0, rows, ldx, part.data(), w.out, pool);
    parallel_for(pool, rows, 8, [&](int64_t r0, int64_t r1, int) {
      for (int64_t r = r0; r < r1; ++r) {
        float* dst = y + r * ldy;
        const float* src = part.data() + r * w.out;
        for (int64_t o = 0; o < w.out; ++o) dst[o] += src[o];
      }
    });
  }
}

}  // namespace gem4::media
