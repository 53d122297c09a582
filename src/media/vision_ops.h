// The small operations of the gemma4v tower that are not matrix products, as llama.cpp's CPU backend
// computes them (the precision traps are deliberate: see each comment). Plain loops: next to the ViT's
// GEMMs (kernels::matmul) they cost little.
#pragma once
#include <cstdint>
#include <vector>

namespace gem4::media {

// Rounds every value to the nearest fp16 and back (ggml_conv_2d's im2col is F16, and the CPU mul_mat
// converts the F32 kernel to F16 as well, so the patch convolution multiplies fp16-rounded values).
void round_to_f16(float* x, int64_t n);

// im2col of a planar [3][height][width] image for a P x P stride-P convolution: row p = py * (width/P) +
// px holds the patch's values in (channel, ky, kx) order, the order of ggml's kernel [P, P, 3, n_embd].
std::vector<float> image_patches(const float* planar, int width, int height, int patch);

// x * sigmoid(1.702 x) as ggml evaluates it: the input rounded to fp16, the result looked up in a
// table of fp16 values; out = gelu_quick(gate) * up (geglu_quick).
float gelu_quick_f16(float x);
void gelu_quick_f16_mul(const float* gate, const float* up, float* out, int64_t n);

// ggml's NeoX RoPE of a view of `n_dims` values of each of n_heads heads (head stride `head_stride`),
// in place: pair (i, i + n_dims/2) turns by pos * base^(-2i/n_dims), the angles built by repeated
// multiplication in float as ggml does. The 2-D RoPE of gemma4v calls it on the two halves of each head.
void rope_neox_view(float* x, int64_t n_heads, int64_t head_stride, int n_dims, int64_t pos, float base);

// k x k average pool (stride k) over a grid of gx x gy rows of `width` values (row index y * gx + x):
// gives (gx/k) * (gy/k) rows, row-major; each output sums its window in float, row by row, then divides
// by k*k (ggml_pool_2d).
std::vector<float> average_pool_grid(const float* x, int gx, int gy, int width, int k);

}  // namespace gem4::media
