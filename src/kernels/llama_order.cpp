#include "kernels/llama_order.h"

#include <cmath>
#include <limits>
#include <stdexcept>

#include "kernels/thread_pool.h"

namespace gem4 {

float llama_reduce16(const float* v) {
  float h[8], q[4];
  for (int i = 0; i < 8; ++i) h[i] = v[i + 8] + v[i];
  for (int i = 0; i < 4; ++i) q[i] = h[i + 4] + h[i];
  return (q[0] + q[2]) + (q[1] + q[3]);
}

float llama_dot_f32(const float* a, const float* b, int64_t n, bool batch) {
  if (batch && n % 16 == 0) {
    float acc[16] = {};
    for (int64_t k = 0; k < n; k += 16)
      for (int l = 0; l < 16; ++l) acc[l] = std::fma(a[k + l], b[k + l], acc[l]);
    return llama_reduce16(acc);
  }
  const int64_t np = n & ~int64_t(63);
  float acc[4][16] = {};
  for (int64_t k = 0; k < np; k += 64)
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 16; ++l) acc[j][l] = std::fma(a[k + 16 * j + l], b[k + 16 * j + l], acc[j][l]);
  for (int l = 0; l < 16; ++l) acc[0][l] += acc[2][l], acc[1][l] += acc[3][l];
  for (int l = 0; l < 16; ++l) acc[0][l] += acc[1][l];
  float s = llama_reduce16(acc[0]);
  for (int64_t k = np; k < n; ++k) {
    const float p = a[k] * b[k];  // this file is compiled without FMA contraction (CMakeLists.txt)
    s += p;
  }
  return s;
}

void llama_matmul_f32(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
                      bool batch, ThreadPool* pool) {
  if (w.type != GgmlType::F32) throw std::invalid_argument("llama_matmul_f32: the weights are not F32");
  parallel_for(pool, w.out, 16, [&](int64_t o0, int64_t o1, int) {
    for (int64_t o = o0; o < o1; ++o) {
      const auto* wr =
          reinterpret_cast<const float*>(static_cast<const uint8_t*>(w.data) + size_t(o) * w.row_bytes);
      for (int64_t r = 0; r < rows; ++r) y[r * ldy + o] = llama_dot_f32(wr, x + r * ldx, w.in, batch);
    }
  });
}

float llama_expf(float x) {
  const float shift = 0x1.8p23f;
  const float z = std::fma(x, 0x1.715476p+0f, shift);
  const float n = z - shift;  // round(x / ln 2)
  if (std::isnan(n)) return n;
  if (std::fabs(n) > 192.0f) return n <= 0.0f ? 0.0f : std::numeric_limits<float>::infinity();
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));  // x - n ln 2
  const float u = b * b;
  const float j = std::fma(
      std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
      u, std::fma(0x1.ffffecp-1f, b, 1.0f));
  return std::ldexp(j, int(n));
}

}  // namespace gem4
