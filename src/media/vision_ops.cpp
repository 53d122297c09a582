#include "media/vision_ops.h"

#include <cmath>
#include <vector>

#include "tensor/quant.h"

namespace gem4::media {

void round_to_f16(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = fp16_to_fp32(fp32_to_fp16(x[i]));
}

std::vector<float> image_patches(const float* planar, int width, int height, int patch) {
  const int gx = width / patch, gy = height / patch;
  const int64_t row = int64_t(3) * patch * patch;
  std::vector<float> out(size_t(gx) * gy * row);
  const size_t plane = size_t(width) * height;
  for (int py = 0; py < gy; ++py)
    for (int px = 0; px < gx; ++px) {
      float* dst = out.data() + (int64_t(py) * gx + px) * row;
      for (int c = 0; c < 3; ++c)
        for (int ky = 0; ky < patch; ++ky) {
          const float* src = planar + c * plane + size_t(py * patch + ky) * width + size_t(px) * patch;
          for (int kx = 0; kx < patch; ++kx) *dst++ = src[kx];
        }
    }
  return out;
}

namespace {

// ggml's table: for every fp16 value f, fp16(f * 1 / (1 + exp(-1.702 f))).
const std::vector<float>& gelu_quick_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t i = 0; i < 65536; ++i) {
      const float f = fp16_to_fp32(uint16_t(i));
      t[i] = fp16_to_fp32(fp32_to_fp16(f * (1.0f / (1.0f + std::exp(-1.702f * f)))));
    }
    return t;
  }();
  return table;
}

}  // namespace

float gelu_quick_f16(float x) { return gelu_quick_table()[fp32_to_fp16(x)]; }

void gelu_quick_f16_mul(const float* gate, const float* up, float* out, int64_t n) {
  const float* t = gelu_quick_table().data();
  for (int64_t i = 0; i < n; ++i) out[i] = t[fp32_to_fp16(gate[i])] * up[i];
}

void rope_neox_view(float* x, int64_t n_heads, int64_t head_stride, int n_dims, int64_t pos, float base) {
  const int half = n_dims / 2;
  float cs[512], sn[512];
  std::vector<float> big;
  float* c = cs;
  float* s = sn;
  if (half > 512) {
    big.resize(size_t(half) * 2);
    c = big.data();
    s = big.data() + half;
  }
  const float theta_scale = std::pow(base, -2.0f / float(n_dims));
  float theta = float(pos);
  for (int i = 0; i < half; ++i) {
    c[i] = std::cos(theta);
    s[i] = std::sin(theta);
    theta *= theta_scale;
  }
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = x + h * head_stride;
    for (int i = 0; i < half; ++i) {
      const float x0 = v[i], x1 = v[i + half];
      v[i] = x0 * c[i] - x1 * s[i];
      v[i + half] = x0 * s[i] + x1 * c[i];
    }
  }
}

std::vector<float> average_pool_grid(const float* x, int gx, int gy, int width, int k) {
  const int ox = gx / k, oy = gy / k;
  std::vector<float> out(size_t(ox) * oy * width);
  const float area = float(k * k);
  for (int y = 0; y < oy; ++y)
    for (int xo = 0; xo < ox; ++xo) {
      float* dst = out.data() + (size_t(y) * ox + xo) * width;
      for (int d = 0; d < width; ++d) {
        float sum = 0;
        for (int ky = 0; ky < k; ++ky)
          for (int kx = 0; kx < k; ++kx)
            sum += x[(size_t(y * k + ky) * gx + size_t(xo * k + kx)) * width + d];
        dst[d] = sum / area;
      }
    }
  return out;
}

}  // namespace gem4::media
