// The small operations of the gemma4a conformer that are not matrix products, as llama.cpp's CPU
// backend computes them. Plain loops: next to the tower's GEMMs (kernels::matmul) they cost little.
// Activations are row-major [rows][width] unless a comment says otherwise.
#pragma once
#include <cstdint>
#include <vector>

#include "gguf/ggml_types.h"

namespace gem4::media {

// Every value rounded to the nearest fp16 and back (ggml_conv_2d's im2col is F16 and the CPU product
// converts the F32 kernel to F16 too, so the convolution multiplies fp16-rounded values).
void round_to_f16_inplace(float* x, int64_t n);

// im2col of a 3x3, stride 2, padding 1 convolution over a [height][width][channels] grid (channels
// fastest): row (y * out_w + x) of the result holds the window in (channel, ky, kx) order, ggml's
// kernel layout [3, 3, in, out]; out-of-range taps are 0. out_h = (height - 1)/2 + 1, likewise out_w.
std::vector<float> im2col_3x3_s2(const float* x, int64_t height, int64_t width, int64_t channels);

// y = (x - mean) / sqrt(var + eps) * w over each row of `width` values, in place (ggml_norm: mean and
// variance summed in double, the scale in float), then ReLU when `relu`.
void layer_norm_rows(float* x, int64_t rows, int64_t width, const float* w, float eps, bool relu);

// ggml_rms_norm (sum of squares in double, 1/sqrtf in float) times w (null: no weight), row by row.
void rms_norm_rows(const float* x, float* y, int64_t rows, int64_t width, const float* w, float eps);

// x / (1 + e^-x), and 1 / (1 + e^-x), as ggml's f32 ops.
float silu(float x);
float sigmoid(float x);

// The max_past + 1 sinusoids llama.cpp feeds the relative-position projection: row p (p = 0..max_past)
// is position max_past - p, n_embd/2 sines then n_embd/2 cosines of timescales 10000^(i/(n_embd/2-1)).
std::vector<float> relative_position_sinusoids(int n_embd, int max_past);

// The chunked local attention of one head over n frames (Transformer-XL relative positions): query i
// (block b = i / chunk) sees keys j with 0 <= i - j < max_past; score = q_i.k_j + q_i.rel[max_past -
// (i - j)], softcapped cap*tanh(s/cap), softmax over the block's chunk + max_past keys (masked ones
// contribute exactly 0), out_i = sum_j p_j v_j. q, k, v, out: rows of `stride` floats with this head's
// head_dim values at offset 0 (pass pointers already offset to the head); rel: [max_past + 1] rows of
// `rel_stride` floats, this head's values at offset 0.
void chunked_attention_head(const float* q, const float* k, const float* v, int64_t stride, const float* rel,
                            int64_t rel_stride, int64_t n, int head_dim, int chunk, int max_past, float cap,
                            float* out);

// Causal depthwise convolution over time: y[t][c] = sum_k x[t + k - (taps-1)][c] * w[c][k] (earlier
// frames than the first are 0), summed in float in tap order (ggml_ssm_conv).
void causal_depthwise_conv(const float* x, int64_t n, int64_t channels, const float* w, int taps, float* y);

}  // namespace gem4::media
