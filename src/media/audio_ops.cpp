#include "media/audio_ops.h"

#include <algorithm>
#include <cmath>

#include "kernels/convert.h"

namespace gem4::media {

void round_to_f16_inplace(float* x, int64_t n) {
  std::vector<uint16_t> h(size_t(std::min<int64_t>(n, 4096)));
  for (int64_t i = 0; i < n; i += int64_t(h.size())) {
    const int64_t m = std::min<int64_t>(int64_t(h.size()), n - i);
    convert_f32_to_f16(x + i, h.data(), m);
    convert_f16_to_f32(h.data(), x + i, m);
  }
}

std::vector<float> im2col_3x3_s2(const float* x, int64_t height, int64_t width, int64_t channels) {
  const int64_t oh = (height - 1) / 2 + 1, ow = (width - 1) / 2 + 1, cols = channels * 9;
  std::vector<float> out(size_t(oh * ow * cols), 0.0f);
  for (int64_t oy = 0; oy < oh; ++oy)
    for (int64_t ox = 0; ox < ow; ++ox) {
      float* row = out.data() + (oy * ow + ox) * cols;
      for (int ky = 0; ky < 3; ++ky) {
        const int64_t y = 2 * oy + ky - 1;
        if (y < 0 || y >= height) continue;
        for (int kx = 0; kx < 3; ++kx) {
          const int64_t xx = 2 * ox + kx - 1;
          if (xx < 0 || xx >= width) continue;
          const float* src = x + (y * width + xx) * channels;
          for (int64_t c = 0; c < channels; ++c) row[(c * 3 + ky) * 3 + kx] = src[c];
        }
      }
    }
  return out;
}

void layer_norm_rows(float* x, int64_t rows, int64_t width, const float* w, float eps, bool relu) {
  for (int64_t r = 0; r < rows; ++r) {
    float* v = x + r * width;
    double sum = 0.0;
    for (int64_t i = 0; i < width; ++i) sum += v[i];
    const float mean = float(sum / double(width));
    double sum2 = 0.0;
    for (int64_t i = 0; i < width; ++i) {
      const float d = v[i] - mean;
      v[i] = d;
      sum2 += double(d * d);
    }
    const float variance = float(sum2 / double(width));
    const float scale = 1.0f / std::sqrt(variance + eps);
    for (int64_t i = 0; i < width; ++i) {
      float y = v[i] * scale;
      if (w) y *= w[i];
      v[i] = relu ? std::max(y, 0.0f) : y;
    }
  }
}

void rms_norm_rows(const float* x, float* y, int64_t rows, int64_t width, const float* w, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* a = x + r * width;
    float* b = y + r * width;
    double sum = 0.0;
    for (int64_t i = 0; i < width; ++i) sum += double(a[i] * a[i]);
    const float mean = float(sum / double(width));
    const float scale = 1.0f / std::sqrt(mean + eps);
    for (int64_t i = 0; i < width; ++i) b[i] = w ? (a[i] * scale) * w[i] : a[i] * scale;
  }
}

float silu(float x) { return x / (1.0f + std::exp(-x)); }
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

std::vector<float> relative_position_sinusoids(int n_embd, int max_past) {
  const int half = n_embd / 2;
  const float increment = std::log(10000.0f) / float(std::max(half - 1, 1));
  std::vector<float> out(size_t((max_past + 1) * n_embd), 0.0f);
  for (int p = 0; p <= max_past; ++p) {
    const float position = float(max_past - p);
    for (int i = 0; i < half; ++i) {
      const float scaled = position * std::exp(-float(i) * increment);
      out[p * n_embd + i] = std::sin(scaled);
      out[p * n_embd + i + half] = std::cos(scaled);
    }
  }
  return out;
}

void chunked_attention_head(const float* q, const float* k, const float* v, int64_t stride, const float* rel,
                            int64_t rel_stride, int64_t n, int head_dim, int chunk, int max_past, float cap,
                            float* out) {
  const int context = chunk + max_past;
  std::vector<float> score(static_cast<size_t>(context));
  std::vector<int64_t> key(static_cast<size_t>(context));
  for (int64_t i = 0; i < n; ++i) {
    const float* qi = q + i * stride;
    const int64_t block_start = (i / chunk) * chunk;
    const int64_t c = i - block_start;  // the query's place in its block
    int m = 0;
    float best = -INFINITY;
    for (int s = 0; s < context; ++s) {
      const int64_t j = block_start - max_past + s;
      if (j < 0 || j >= n || j > i || i - j >= max_past) continue;
      const float* kj = k + j * stride;
      float ac = 0.0f;
      for (int d = 0; d < head_dim; ++d) ac += qi[d] * kj[d];
      // The relative shift of the blocked score matrix: key slot s of query slot c reads
      // rel[s - c], the embedding of distance max_past - (s - c) = i - j.
      const float* r = rel + (s - c) * rel_stride;
      float bd = 0.0f;
      for (int d = 0; d < head_dim; ++d) bd += qi[d] * r[d];
      float x = ac + bd;
      x = std::tanh(x * (1.0f / cap)) * cap;
      score[m] = x;
      key[m] = j;
      best = std::max(best, x);
      ++m;
    }
    double sum = 0.0;
    for (int t = 0; t < m; ++t) {
      score[t] = std::exp(score[t] - best);
      sum += score[t];
    }
    const float inv = float(1.0 / sum);
    float* o = out + i * stride;
    for (int d = 0; d < head_dim; ++d) o[d] = 0.0f;
    for (int t = 0; t < m; ++t) {
      const float p = score[t] * inv;
      const float* vj = v + key[t] * stride;
      for (int d = 0; d < head_dim; ++d) o[d] += p * vj[d];
    }
  }
}

void causal_depthwise_conv(const float* x, int64_t n, int64_t channels, const float* w, int taps, float* y) {
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < channels; ++c) {
      float sum = 0.0f;
      for (int k = 0; k < taps; ++k) {
        const int64_t src = t + k - (taps - 1);
        // ggml_ssm_conv multiplies the zero padding too; 0 * w adds nothing.
        if (src >= 0) sum += x[src * channels + c] * w[c * taps + k];
      }
      y[t * channels + c] = sum;
    }
}

}  // namespace gem4::media
