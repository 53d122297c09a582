// F32 arithmetic in the order llama.cpp's CPU backend (ggml, AVX-512 build) evaluates it, for runs
// that must reproduce its logits to the last bit (PlanSwitches::llama_f32_order). The tiny test
// models turn any rounding difference into 1e-3 in the logits, because one ulp moves an input of the
// f16 GELU table across a rounding tie; so the products with F32 weights and the attention over an
// F32 cache follow ggml's summation order exactly. Portable code (std::fma): every kernel set gives
// the same bits, and none is fast; the ordinary kernels (matmul.h, attention_ops.h) stay the default.
#pragma once
#include <cstdint>

#include "kernels/matmul.h"

namespace gem4 {

class ThreadPool;

// Sum of 16 lanes as _mm512_reduce_add_ps: halves, quarters, then (0+2) + (1+3).
float llama_reduce16(const float* v);

// The dot product of n floats as ggml sums it. batch: the product had two or more activation columns
// and n % 16 == 0, where llamafile's tinyBLAS runs (16 lane sums over k, FMA, then llama_reduce16);
// otherwise ggml_vec_dot_f32 (4 x 16 lane sums over blocks of 64, combined (0+2, 1+3), (0+1), reduced,
// then the tail one rounded product at a time).
float llama_dot_f32(const float* a, const float* b, int64_t n, bool batch);

// y[r][o] = llama_dot_f32(w row o, x row r) for an F32 matrix; `batch` as above (the number of
// activation columns llama.cpp's product has, not `rows`, decides it). Threads split the outputs.
void llama_matmul_f32(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
                      bool batch, ThreadPool* pool);

// ggml_v_expf: exp(x) by its range reduction and polynomial (within ~1.5 ulp of exp), 0 below about
// -192 ln 2, +inf above +192 ln 2.
float llama_expf(float x);

}  // namespace gem4
