// The matrix product of the projector towers: kernels::matmul over slices of the reduction.
//
// Why not one kernels::matmul call: the kernels' f32 path keeps one FMA chain per output over the whole
// reduction, whose rounding drifts with its length, while ggml's f32 dot products keep 64 partial sums
// (4 x 16 lanes). The towers are sensitive to that difference: gelu_quick reads an fp16 table and the
// clamp scalars cut values, so a last-bit difference in a gate sometimes moves a value to the next fp16
// step, and on the reference projector a single chain left the embeddings 1.2e-4 from llama.cpp's
// (the patch convolution, a 768-long reduction, most of it). Summing 32-long slices (ggml's accuracy, to
// within its own rounding) gives 3e-5..8e-5. Each slice is one kernels::matmul call (the kernel sets'
// GEMMs). Only F32 weights are sliced: with F16/BF16 weights (real E2B/E4B files) ggml rounds the
// activations to 16 bits, which slicing does not reproduce, and 16-bit slices cost ~3x (each slice
// converts its panels; an E2B-shaped tower took 46 s instead of 14 s per 280-token image). The
// attention products (scores, value sums) are plain kernels::matmul calls: slicing them gained little.
#pragma once
#include <cstdint>

#include "gguf/ggml_types.h"
#include "kernels/matmul.h"

namespace gem4 {
class ThreadPool;
}

namespace gem4::media {

// The activations of a product with weights of `weight_type` as ggml's CPU backend feeds them: rounded
// to fp16 for F16 weights and to bf16 for BF16 weights (its vec_dot types), unchanged otherwise (F32;
// the quantized types' kernels quantize activations themselves). In place.
void round_activations_for(GgmlType weight_type, float* x, int64_t n);

// Reduction slice length (a multiple of every 32-element quantized block; K-quants use their 256).
inline constexpr int64_t kEncoderSlice = 32;

// y[r, o] = sum_i W[o, i] x[r, i] for r < rows (the layout of kernels::matmul); for F32 weights as a
// sum of slice products taken in order, for F16/BF16 weights on activations rounded to the weights' type
// (a copy; x is not changed). y must not overlap x.
void encoder_matmul(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
                    ThreadPool* pool);

}  // namespace gem4::media
