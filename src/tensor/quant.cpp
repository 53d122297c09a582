// Scalar reference (de)quantization of every weight type gem4 computes with. Dequantization follows
// ggml's reference formulas operation by operation (same products in the same order), so that values
// agree bit for bit with what llama.cpp reads from the same file. Quantizers round to nearest like
// ggml's reference quantizers; for the K-quants the scale search is simpler than ggml's.
#include "tensor/quant.h"

// ggml computes these in a library built without FMA, so every product and sum is rounded on its own.
// GCC would otherwise fuse d * q - m into one FMA (-ffp-contract=fast is its default in GNU mode) and
// the last bit could differ from llama.cpp's values.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#elif defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tensor/blocks.h"

namespace gem4 {
namespace {

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

float h2f(uint16_t h) { return fp16_to_fp32(h); }
uint16_t f2h(float f) { return fp32_to_fp16(f); }

// Round half to even (the FPU's default mode), as ggml's nearest_int does.
int nearest_int(float v) { return static_cast<int>(std::nearbyint(v)); }

const char* kSupportedList = "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_K, q5_K, q6_K";

[[noreturn]] void throw_unsupported(GgmlType t, const char* what) {
  throw UnsupportedType(std::string(what) + ": type " + ggml_type_name(t) + " (id " +
                        std::to_string(static_cast<uint32_t>(t)) +
                        ") is not supported (supported: " + kSupportedList + ")");
}

int64_t blocks_of(GgmlType t, int64_t n, const char* what) {
  const int64_t be = ggml_block_elems(t);
  if (n < 0 || n % be != 0) {
    throw std::invalid_argument(std::string(what) + ": " + std::to_string(n) + " elements of " +
                                ggml_type_name(t) + " is not a multiple of its block size " +
                                std::to_string(be));
  }
  return n / be;
}

// ---------------------------------------------------------------- dequantization

void dequant_q4_0(const BlockQ4_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = h2f(b[i].d);
    for (int j = 0; j < 16; ++j) {
      const int x0 = (b[i].qs[j] & 0x0F) - 8;
      const int x1 = (b[i].qs[j] >> 4) - 8;
      y[j] = x0 * d;
      y[j + 16] = x1 * d;
    }
  }
}

void dequant_q4_1(const BlockQ4_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = h2f(b[i].d), m = h2f(b[i].m);
    for (int j = 0; j < 16; ++j) {
      y[j] = (b[i].qs[j] & 0x0F) * d + m;
      y[j + 16] = (b[i].qs[j] >> 4) * d + m;
    }
  }
}

uint32_t load_qh(const uint8_t* qh) {
  uint32_t v;
  std::memcpy(&v, qh, sizeof v);
  return v;
}

void dequant_q5_0(const BlockQ5_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = h2f(b[i].d);
    const uint32_t qh = load_qh(b[i].qh);
    for (int j = 0; j < 16; ++j) {
      const int hi0 = ((qh >> j) & 1) << 4;
      const int hi1 = ((qh >> (j + 16)) & 1) << 4;
      y[j] = (((b[i].qs[j] & 0x0F) | hi0) - 16) * d;
      y[j + 16] = (((b[i].qs[j] >> 4) | hi1) - 16) * d;
    }
  }
}

void dequant_q5_1(const BlockQ5_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = h2f(b[i].d), m = h2f(b[i].m);
    const uint32_t qh = load_qh(b[i].qh);
    for (int j = 0; j < 16; ++j) {
      const int hi0 = ((qh >> j) & 1) << 4;
      const int hi1 = ((qh >> (j + 16)) & 1) << 4;
      y[j] = ((b[i].qs[j] & 0x0F) | hi0) * d + m;
      y[j + 16] = ((b[i].qs[j] >> 4) | hi1) * d + m;
    }
  }
}

void dequant_q8_0(const BlockQ8_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = h2f(b[i].d);
    for (int j = 0; j < kQK; ++j) y[j] = b[i].qs[j] * d;
  }
}

void dequant_q4_k(const BlockQ4_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = h2f(b[i].d), dmin = h2f(b[i].dmin);
    const uint8_t* q = b[i].qs;
    for (int c = 0; c < 4; ++c, q += 32) {
      uint8_t sc, m;
      k_quant_scale_min(2 * c, b[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      k_quant_scale_min(2 * c + 1, b[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
    }
  }
}

void dequant_q5_k(const BlockQ5_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = h2f(b[i].d), dmin = h2f(b[i].dmin);
    const uint8_t* ql = b[i].qs;
    const uint8_t* qh = b[i].qh;
    for (int c = 0; c < 4; ++c, ql += 32) {
      uint8_t sc, m;
      k_quant_scale_min(2 * c, b[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      k_quant_scale_min(2 * c + 1, b[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      const uint8_t u1 = static_cast<uint8_t>(1u << (2 * c)), u2 = static_cast<uint8_t>(2u << (2 * c));
      for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
    }
  }
}

void dequant_q6_k(const BlockQ6_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = h2f(b[i].d);
    const uint8_t* ql = b[i].ql;
    const uint8_t* qh = b[i].qh;
    const int8_t* sc = b[i].scales;
    for (int half = 0; half < 2; ++half, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        // (d * scale) first, then times q: ggml's order.
        y[l] = d * sc[is + 0] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
    }
  }
}

// ---------------------------------------------------------------- quantization, legacy types

// The signed value of the element with the largest magnitude (the first one on ties).
float signed_absmax(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void quant_q4_0(const float* x, BlockQ4_0* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    const float d = signed_absmax(x, kQK) / -8;  // the extreme value maps to -8
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = f2h(d);
    for (int j = 0; j < 16; ++j) {
      // Truncation of x + 8.5 rounds half up; values reach 16 only at the extreme, hence the min.
      const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f)));
      const int q1 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j + 16] * id + 8.5f)));
      b[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void min_max(const float* x, int n, float* mn, float* mx) {
  *mn = x[0];
  *mx = x[0];
  for (int j = 1; j < n; ++j) {
    *mn = std::min(*mn, x[j]);
    *mx = std::max(*mx, x[j]);
  }
}

void quant_q4_1(const float* x, BlockQ4_1* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float mn, mx;
    min_max(x, kQK, &mn, &mx);
    const float d = (mx - mn) / 15;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = f2h(d);
    b[i].m = f2h(mn);
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>((x[j] - mn) * id + 0.5f)));
      const int q1 = std::min(15, static_cast<int>(static_cast<int8_t>((x[j + 16] - mn) * id + 0.5f)));
      b[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void pack_q5(const int* q, uint8_t* qs, uint8_t* qh_bytes) {
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    qs[j] = static_cast<uint8_t>((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
    qh |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
    qh |= static_cast<uint32_t>((q[j + 16] >> 4) & 1) << (j + 16);
  }
  std::memcpy(qh_bytes, &qh, sizeof qh);
}

void quant_q5_0(const float* x, BlockQ5_0* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    const float d = signed_absmax(x, kQK) / -16;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = f2h(d);
    int q[kQK];
    for (int j = 0; j < kQK; ++j)
      q[j] = std::min(31, static_cast<int>(static_cast<int8_t>(x[j] * id + 16.5f)));
    pack_q5(q, b[i].qs, b[i].qh);
  }
}

void quant_q5_1(const float* x, BlockQ5_1* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float mn, mx;
    min_max(x, kQK, &mn, &mx);
    const float d = (mx - mn) / 31;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = f2h(d);
    b[i].m = f2h(mn);
    int q[kQK];
    for (int j = 0; j < kQK; ++j) q[j] = std::min(31, static_cast<int>((x[j] - mn) * id + 0.5f));
    pack_q5(q, b[i].qs, b[i].qh);
  }
}

// ggml's quantize_row_q8_0_ref: d = amax / 127, q = roundf(x * (1 / d)) (half away from zero).
void quant_q8_0(const float* x, BlockQ8_0* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = f2h(d);
    for (int j = 0; j < kQK; ++j) b[i].qs[j] = static_cast<int8_t>(std::round(x[j] * id));
  }
}

// ---------------------------------------------------------------- quantization, K-quants

// Fits x[i] ~= scale * L[i] - min with integer L in [0, nmax] and min >= 0 (ggml clamps the offset so
// that zero stays representable). Tries a few step sizes around (max - min) / nmax and keeps the
// least-squares fit with the smallest squared error. Returns scale, writes min.
float fit_scale_min(const float* x, int n, int nmax, float* the_min) {
  float mn, mx;
  min_max(x, n, &mn, &mx);
  if (mn > 0) mn = 0;
  if (mx == mn) {
    *the_min = -mn;
    return 0.0f;
  }
  float best_err = INFINITY, best_scale = (mx - mn) / nmax, best_off = mn;
  for (int step = -6; step <= 6; ++step) {
    const float iscale = (nmax + 0.15f * step) / (mx - mn);
    double sl = 0, sl2 = 0, sx = 0, sxl = 0;
    int L[kQKK];
    for (int i = 0; i < n; ++i) {
      L[i] = std::clamp(nearest_int((x[i] - mn) * iscale), 0, nmax);
      sl += L[i];
      sl2 += double(L[i]) * L[i];
      sx += x[i];
      sxl += double(x[i]) * L[i];
    }
    const double det = n * sl2 - sl * sl;
    if (det <= 0) continue;
    double scale = (n * sxl - sl * sx) / det;
    double off = (sl2 * sx - sl * sxl) / det;
    if (off > 0) {  // the offset must be <= 0
      off = 0;
      scale = sxl / sl2;
    }
    double err = 0;
    for (int i = 0; i < n; ++i) {
      const double e = scale * L[i] + off - x[i];
      err += e * e;
    }
    if (err < best_err) {
      best_err = static_cast<float>(err);
      best_scale = static_cast<float>(scale);
      best_off = static_cast<float>(off);
    }
  }
  *the_min = -best_off;
  return best_scale;
}

// Quantizes eight sub-blocks of 32 to the shared 6-bit scale/min layout of Q4_K and Q5_K: fills d, dmin,
// scales[12] and the integer levels L[256] in [0, nmax].
void quant_k_scales(const float* x, int nmax, uint16_t* d_out, uint16_t* dmin_out, uint8_t* scales, int* L) {
  float sub_scale[8], sub_min[8];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    sub_scale[j] = fit_scale_min(x + 32 * j, 32, nmax, &sub_min[j]);
    max_scale = std::max(max_scale, sub_scale[j]);
    max_min = std::max(max_min, sub_min[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  std::memset(scales, 0, 12);
  for (int j = 0; j < 8; ++j) {
    const int ls = std::min(63, nearest_int(inv_scale * sub_scale[j]));
    const int lm = std::min(63, nearest_int(inv_min * sub_min[j]));
    if (j < 4) {
      scales[j] = static_cast<uint8_t>(ls);
      scales[j + 4] = static_cast<uint8_t>(lm);
    } else {
      scales[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      scales[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      scales[j] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  *d_out = f2h(max_scale / 63.f);
  *dmin_out = f2h(max_min / 63.f);
  // Levels against the scales as stored (rounded), so dequantization sees what we optimised.
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    k_quant_scale_min(j, scales, &sc, &m);
    const float d = h2f(*d_out) * sc;
    const float dm = h2f(*dmin_out) * m;
    for (int i = 0; i < 32; ++i) {
      L[32 * j + i] = d != 0.0f ? std::clamp(nearest_int((x[32 * j + i] + dm) / d), 0, nmax) : 0;
    }
  }
}

void quant_q4_k(const float* x, BlockQ4_K* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    int L[kQKK];
    quant_k_scales(x, 15, &b[i].d, &b[i].dmin, b[i].scales, L);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        b[i].qs[32 * c + l] = static_cast<uint8_t>(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
      }
    }
  }
}

void quant_q5_k(const float* x, BlockQ5_K* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    int L[kQKK];
    quant_k_scales(x, 31, &b[i].d, &b[i].dmin, b[i].scales, L);
    std::memset(b[i].qh, 0, sizeof b[i].qh);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const int lo = L[64 * c + l], hi = L[64 * c + 32 + l];
        b[i].qs[32 * c + l] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
        b[i].qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
      }
    }
  }
}

// Signed scale for 16 values with levels in [-32, 31] (ggml's make_qx_quants without weights): tries
// step sizes around max / -32 and keeps the one whose least-squares scale explains most of x.
float fit_scale_q6(const float* x, int n) {
  const float max = signed_absmax(x, n);
  if (std::fabs(max) < 1e-15f) return 0.0f;
  float best_scale = 0, best = -1;
  for (int step = -9; step <= 9; ++step) {
    const float iscale = -(32 + 0.1f * step) / max;
    double sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * x[i]), -32, 31);
      sumlx += double(x[i]) * l;
      suml2 += double(l) * l;
    }
    if (suml2 > 0 && sumlx * sumlx / suml2 > best) {
      best = static_cast<float>(sumlx * sumlx / suml2);
      best_scale = static_cast<float>(sumlx / suml2);
    }
  }
  return best_scale;
}

void quant_q6_k(const float* x, BlockQ6_K* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    float scales[16];
    float max_scale = 0, max_abs_scale = 0;
    for (int s = 0; s < 16; ++s) {
      scales[s] = fit_scale_q6(x + 16 * s, 16);
      if (std::fabs(scales[s]) > max_abs_scale) {
        max_abs_scale = std::fabs(scales[s]);
        max_scale = scales[s];
      }
    }
    std::memset(&b[i], 0, sizeof b[i]);
    int L[kQKK];
    if (max_abs_scale < 1e-15f) {
      std::fill(L, L + kQKK, 32);  // all zeros
    } else {
      const float iscale = -128.f / max_scale;
      b[i].d = f2h(1 / iscale);
      for (int s = 0; s < 16; ++s)
        b[i].scales[s] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[s])));
      for (int s = 0; s < 16; ++s) {
        const float d = h2f(b[i].d) * b[i].scales[s];
        for (int k = 0; k < 16; ++k) {
          L[16 * s + k] = d != 0.0f ? std::clamp(nearest_int(x[16 * s + k] / d), -32, 31) + 32 : 32;
        }
      }
    }
    for (int half = 0; half < 2; ++half) {
      const int* Lh = L + 128 * half;
      uint8_t* ql = b[i].ql + 64 * half;
      uint8_t* qh = b[i].qh + 32 * half;
      for (int l = 0; l < 32; ++l) {
        ql[l] = static_cast<uint8_t>((Lh[l] & 0xF) | ((Lh[l + 64] & 0xF) << 4));
        ql[l + 32] = static_cast<uint8_t>((Lh[l + 32] & 0xF) | ((Lh[l + 96] & 0xF) << 4));
        qh[l] = static_cast<uint8_t>((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) | ((Lh[l + 64] >> 4) << 4) |
                                     ((Lh[l + 96] >> 4) << 6));
      }
    }
  }
}

}  // namespace

// ---------------------------------------------------------------- public API

bool is_supported_weight_type(GgmlType t) {
  switch (t) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
    case GgmlType::Q8_0:
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
      return true;
    default:
      return false;
  }
}

void require_supported_weight_type(GgmlType t, const std::string& tensor_name) {
  if (is_supported_weight_type(t)) return;
  throw UnsupportedType("tensor " + tensor_name + " has type " + ggml_type_name(t) + " (id " +
                        std::to_string(static_cast<uint32_t>(t)) +
                        "), which gem4 does not support (supported: " + kSupportedList + ")");
}

void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n) {
  if (!is_supported_weight_type(t)) throw_unsupported(t, "dequantize_row");
  const int64_t nb = blocks_of(t, n, "dequantize_row");
  switch (t) {
    case GgmlType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case GgmlType::F16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(h[i]);
      return;
    }
    case GgmlType::BF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(h[i]);
      return;
    }
    case GgmlType::Q4_0:
      return dequant_q4_0(static_cast<const BlockQ4_0*>(src), dst, nb);
    case GgmlType::Q4_1:
      return dequant_q4_1(static_cast<const BlockQ4_1*>(src), dst, nb);
    case GgmlType::Q5_0:
      return dequant_q5_0(static_cast<const BlockQ5_0*>(src), dst, nb);
    case GgmlType::Q5_1:
      return dequant_q5_1(static_cast<const BlockQ5_1*>(src), dst, nb);
    case GgmlType::Q8_0:
      return dequant_q8_0(static_cast<const BlockQ8_0*>(src), dst, nb);
    case GgmlType::Q4_K:
      return dequant_q4_k(static_cast<const BlockQ4_K*>(src), dst, nb);
    case GgmlType::Q5_K:
      return dequant_q5_k(static_cast<const BlockQ5_K*>(src), dst, nb);
    case GgmlType::Q6_K:
      return dequant_q6_k(static_cast<const BlockQ6_K*>(src), dst, nb);
    default:
      throw_unsupported(t, "dequantize_row");
  }
}

void quantize_row(GgmlType t, const float* src, void* dst, int64_t n) {
  if (!is_supported_weight_type(t)) throw_unsupported(t, "quantize_row");
  const int64_t nb = blocks_of(t, n, "quantize_row");
  switch (t) {
    case GgmlType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case GgmlType::F16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_fp16(src[i]);
      return;
    }
    case GgmlType::BF16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_bf16(src[i]);
      return;
    }
    case GgmlType::Q4_0:
      return quant_q4_0(src, static_cast<BlockQ4_0*>(dst), nb);
    case GgmlType::Q4_1:
      return quant_q4_1(src, static_cast<BlockQ4_1*>(dst), nb);
    case GgmlType::Q5_0:
      return quant_q5_0(src, static_cast<BlockQ5_0*>(dst), nb);
    case GgmlType::Q5_1:
      return quant_q5_1(src, static_cast<BlockQ5_1*>(dst), nb);
    case GgmlType::Q8_0:
      return quant_q8_0(src, static_cast<BlockQ8_0*>(dst), nb);
    case GgmlType::Q4_K:
      return quant_q4_k(src, static_cast<BlockQ4_K*>(dst), nb);
    case GgmlType::Q5_K:
      return quant_q5_k(src, static_cast<BlockQ5_K*>(dst), nb);
    case GgmlType::Q6_K:
      return quant_q6_k(src, static_cast<BlockQ6_K*>(dst), nb);
    default:
      throw_unsupported(t, "quantize_row");
  }
}

// ---------------------------------------------------------------- half and bfloat16

float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  const uint32_t man = h & 0x3FF;
  if (exp == 0) {
    // Zero or subnormal: man * 2^-24 is exact in f32.
    const float mag = static_cast<float>(man) * 5.9604644775390625e-8f;
    return bits_float(float_bits(mag) | sign);
  }
  if (exp == 0x1F) return bits_float(sign | 0x7F800000u | (man << 13));  // inf, nan (payload kept)
  return bits_float(sign | ((exp + (127 - 15)) << 23) | (man << 13));
}

uint16_t fp32_to_fp16(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00 | ((a >> 13) & 0x3FF));  // quiet nan
  // From halfway between 65504 (the largest half) and 65536 on, round-to-even gives infinity.
  if (a >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00);
  if (a < 0x38800000u) {
    // Below the smallest normal half (2^-14): adding 0.5 puts the 2^-24 unit in the last mantissa bit,
    // so the FPU rounds to even for us; what is left above 0.5 is the subnormal half's bits.
    const float shifted = bits_float(a) + 0.5f;
    return static_cast<uint16_t>(sign | (float_bits(shifted) - 0x3F000000u));
  }
  // Normal: rebias the exponent and round the 13 dropped mantissa bits to nearest even; a carry out of
  // the mantissa correctly increments the exponent.
  const uint32_t odd = (a >> 13) & 1;
  const uint32_t rounded = a + (static_cast<uint32_t>(15 - 127) << 23) + 0xFFF + odd;
  return static_cast<uint16_t>(sign | (rounded >> 13));
}

float bf16_to_fp32(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

uint16_t fp32_to_bf16(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet nan
  return static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

void quantize_row_q8_k(const float* src, BlockQ8_K* dst, int64_t n) {
  const int64_t nb = blocks_of(GgmlType::Q8_K, n, "quantize_row_q8_k");
  for (int64_t i = 0; i < nb; ++i, src += kQKK) {
    BlockQ8_K& b = dst[i];
    const float max = signed_absmax(src, kQKK);
    if (max == 0.0f) {
      b = BlockQ8_K{};
      continue;
    }
    const float iscale = -127.f / max;  // the extreme value maps to -127
    for (int j = 0; j < kQKK; ++j) b.qs[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * src[j])));
    for (int k = 0; k < kQKK / 16; ++k) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += b.qs[16 * k + j];
      b.bsums[k] = static_cast<int16_t>(sum);
    }
    b.d = 1.0f / iscale;
  }
}

void quantize_row_q8_0_activation(const float* src, BlockQ8_0* dst, int64_t n) {
  const int64_t nb = blocks_of(GgmlType::Q8_0, n, "quantize_row_q8_0_activation");
  for (int64_t i = 0; i < nb; ++i, src += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(src[j]));
    const float id = amax != 0.0f ? 127.f / amax : 0.0f;
    dst[i].d = fp32_to_fp16(amax / 127.f);
    for (int j = 0; j < kQK; ++j) {
      const float v = src[j] * id;  // |v| <= 127, or NaN for non-finite input (stored as 0)
      dst[i].qs[j] = v == v ? static_cast<int8_t>(nearest_int(v)) : int8_t{0};
    }
  }
}

}  // namespace gem4
