// Element-wise and row-wise operations of a transformer, in f32. Plain implementations (they are cheap
// next to the matrix products), except RMSNorm, RoPE, the f16-table GELU, softmax, softcap and argmax, which
// pick a vectorised version for the active kernel set at run time (active_isa(): 8 lanes for Avx2 and
// AvxVnni, 16 for Avx512; Scalar runs the references).
#pragma once
#include <cstdint>

namespace gem4 {

// y = x * (mean(x^2) + eps)^-1/2 * w (w may be null: no weight). In-place allowed (y == x). The same
// bits on every kernel set.
void rmsnorm(const float* x, const float* w, int64_t n, float eps, float* y);
// RMSNorm of each of n_groups consecutive groups of width `group` with one shared weight (or null).
void rmsnorm_groups(float* x, const float* w, int64_t n_groups, int64_t group, float eps);

// NeoX ("rotate half") RoPE of n_heads heads of width head_dim, in place, at position pos, with
// llama.cpp's float arithmetic: pair (i, i + head_dim/2) turns by theta_i / factors[i], where
// theta_0 = pos and theta_{i+1} = theta_i * theta_scale, rounded at every step (theta_scale =
// base^(-2/n_rot)); factors has head_dim/2 divisors (1 for none; proportional RoPE's huge ones leave
// a pair all but unturned). (a, b) -> (fma(a, cos, -(b sin)), fma(a, sin, b cos)).
// Vectorised on the x86 sets (the same bits); the angles of the last few positions are kept per thread.
void rope_neox(float* x, int64_t n_heads, int64_t head_dim, int64_t pos, float theta_scale,
               const float* factors);
// The same, computed from scratch one pair at a time (what the vectorised version is tested against).
void rope_neox_reference(float* x, int64_t n_heads, int64_t head_dim, int64_t pos, float theta_scale,
                         const float* factors);

// GELU, tanh approximation (PyTorch's gelu_pytorch_tanh).
float gelu_tanh(float x);
// out = gelu(gate) * up, element by element: out may be gate or up (in place).
void gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t n);

// The same GELU as llama.cpp's CPU backend computes it: input rounded to f16, looked up in a table of
// f16 results (0 below -10, identity above 10). Its ~1e-3 relative error is harmless for trained
// models but matters when comparing logits with llama.cpp on chaotic random models, where 8-bit
// activation rounding amplifies every difference. Forward uses it unless exact GELU is asked for.
float gelu_tanh_f16(float x);
void gelu_tanh_f16_mul(const float* gate, const float* up, float* out, int64_t n);  // out may be gate or up
// The same, one element at a time (the reference the vectorised version is tested against).
void gelu_tanh_f16_mul_reference(const float* gate, const float* up, float* out, int64_t n);

// Numerically stable softmax in place. Vectorised (exp within ~2 ulp; attention runs it on every
// query row's scores); -inf scores (masked keys) give exactly 0.
void softmax(float* x, int64_t n);
// The same with std::exp, one element at a time (the vectorised version's reference).
void softmax_reference(float* x, int64_t n);
// x = cap * tanh(x / cap). Vectorised (a tanh within ~3 ulp of libm's, the same bits on both vector sets);
// decode applies it to 262,144 logits per token, where libm's tanhf took ~3 % of the token.
void softcap(float* x, int64_t n, float cap);
// The same with std::tanh, one element at a time (what the vectorised version is tested against).
void softcap_reference(float* x, int64_t n, float cap);

// Index of the largest finite value (the first on ties), or -1 when none is finite. Vectorised: greedy
// decoding takes it over 262,144 logits per token, where the scalar loop took ~0.2 ms.
int64_t argmax_finite(const float* x, int64_t n);
// The same as a plain loop (what the vectorised version is tested against).
int64_t argmax_finite_reference(const float* x, int64_t n);

float dot_f32(const float* a, const float* b, int64_t n);
void axpy_f32(float a, const float* x, float* y, int64_t n);  // y += a * x

}  // namespace gem4
