// Tests of the matrix products (kernels/matmul.h) on every ISA this CPU has: the fast paths against
// references computed here in double precision.
//  * For the legacy quantized types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) against a reference that quantizes
//    the activations the way llama.cpp does on x86 (q8_0 / q8_1) and multiplies integers: agreement to
//    float rounding (~1e-5 relative). Also against the exact product, within the bound that activation
//    quantization implies.
//  * For the K-quants against the exact product within that bound, and on AVX-512 (whose kernels multiply
//    them with 8-bit activations) against llama.cpp's arithmetic: activations quantized to Q8_K, one
//    f32 scale per 256 values (~1e-5 relative).
//    (So do the AArch64 sets.)
//  * For F32, F16, BF16 against the exact product of the dequantized weights, to float rounding.
#include "kernels/matmul.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gguf/large_alloc.h"
#include "isa_override.h"
#include "kernels/cpu_features.h"
#include "kernels/packed_matrix.h"
#include "kernels/thread_pool.h"
#include "tensor/blocks.h"
#include "tensor/quant.h"

namespace gem4 {
namespace {

const GgmlType kAllTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,
                              GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                              GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

// Types whose fast path must reproduce llama.cpp's 8-bit activation arithmetic.
bool is_int8_activation_type(GgmlType t) {
  return t == GgmlType::Q8_0 || t == GgmlType::Q4_0 || t == GgmlType::Q4_1 || t == GgmlType::Q5_0 ||
         t == GgmlType::Q5_1;
}
bool is_k_quant(GgmlType t) { return t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K; }
// Whether `isa`'s K-quant kernels use 8-bit (Q8_K) activations: every SIMD set, x86 and AArch64; the
// Scalar set multiplies the dequantized weights in f32.
bool k_quants_through_q8k(Isa isa) { return isa != Isa::Scalar; }

using test::IsaOverride;

std::vector<Isa> available_isas() {
  std::vector<Isa> isas;
  for (Isa isa : kAllIsas) {
    if (isa_supported(isa)) isas.push_back(isa);
  }
  return isas;
}

struct Weights {
  GgmlType type;
  int64_t out, in;
  size_t row_bytes;
  std::vector<uint8_t> data;
  std::vector<float> deq;  // dequantized, out x in
  std::shared_ptr<PackedStore>
      store;  // the packed copy (types with a packed layout, on x86 CPUs with a SIMD set)
  MatrixView packed;                   // view with `packed` set, when there is a packed copy
  MatrixView view() const { return {type, data.data(), in, out, row_bytes}; }
  // The views the fast path must agree on under `isa`: the GGUF layout, and the packed copy where the
  // ISA's kernels read it.
  std::vector<MatrixView> views(Isa isa) const {
    std::vector<MatrixView> v{view()};
    if (packed.packed && isa != Isa::Scalar) v.push_back(packed);
    return v;
  }
};

// Random weights with row-dependent scale and offset; rows padded by `pad` bytes (row_bytes > a row).
Weights make_weights(GgmlType t, int64_t out, int64_t in, uint32_t seed, size_t pad = 0) {
  Weights w{t, out, in, ggml_row_bytes(t, in) + pad, {}, {}};
  w.data.assign(w.row_bytes * out + 64, 0xCD);
  w.deq.resize(out * in);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> row(in);
  for (int64_t o = 0; o < out; ++o) {
    const float scale = 0.25f + 0.1f * static_cast<float>(o % 17), shift = 0.05f * static_cast<float>(o % 5);
    for (auto& v : row) v = scale * normal(rng) + shift;
    quantize_row(t, row.data(), w.data.data() + o * w.row_bytes, in);
    dequantize_row(t, w.data.data() + o * w.row_bytes, w.deq.data() + o * in, in);
  }
  if (has_packed_layout(t)) {
    IsaOverride o(Isa::Avx512);  // clamped to the CPU: no packed copy where only the scalar set runs
    w.store = std::make_shared<PackedStore>();
    const MatrixView p = w.store->add(w.view(), nullptr);
    if (p.packed) w.packed = p;
  }
  return w;
}

// Activations rows x in with leading dimension ldx; the gaps are NaN so that a read past `in` shows.
std::vector<float> make_activations(int64_t rows, int64_t in, int64_t ldx, uint32_t seed) {
  std::vector<float> x(rows * ldx, std::nanf(""));
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < in; ++i) x[r * ldx + i] = normal(rng) * (1.0f + 0.3f * static_cast<float>(r % 4));
  return x;
}

// ---------------------------------------------------------------- references computed here

struct Reference {
  std::vector<double> value;  // rows x out
  std::vector<double> scale;  // sum of |terms|: the size rounding errors are measured against
  std::vector<double>
      quant_bound;  // for int8 types vs the exact product: what activation quantization allows
};

void decode_int_block(const Weights& w, int64_t o, int64_t b, int* q, double* d, double* m);

// The additive min of 32-element block b of row o (weight = scale * level + min), 0 for types without.
double block_min(const Weights& w, int64_t o, int64_t b) {
  if (is_int8_activation_type(w.type)) {
    int q[32];
    double d, m;
    decode_int_block(w, o, b, q, &d, &m);
    return m;
  }
  if (w.type == GgmlType::Q4_K || w.type == GgmlType::Q5_K) {
    // Both start with d, dmin, scales[12]: min of sub-block j is -(dmin * min_j).
    const auto* blk = reinterpret_cast<const BlockQ4_K*>(w.data.data() + o * w.row_bytes +
                                                         (b / 8) * ggml_row_bytes(w.type, kQKK));
    uint8_t sc, mn;
    k_quant_scale_min(static_cast<int>(b % 8), blk->scales, &sc, &mn);
    return -static_cast<double>(fp16_to_fp32(blk->dmin)) * mn;
  }
  return 0;
}

// Exact product of the dequantized weights, in double.
Reference exact_reference(const Weights& w, const std::vector<float>& x, int64_t rows, int64_t ldx) {
  Reference ref;
  ref.value.resize(rows * w.out);
  ref.scale.resize(rows * w.out);
  ref.quant_bound.resize(rows * w.out);
  const bool quantized = is_int8_activation_type(w.type) || is_k_quant(w.type);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < w.out; ++o) {
      double v = 0, s = 0, qb = 0;
      for (int64_t b = 0; b < w.in; b += kQK) {
        const int64_t end = std::min(w.in, b + kQK);
        const double m = quantized ? block_min(w, o, b / kQK) : 0.0;
        double amax = 0, wabs = 0;
        for (int64_t i = b; i < end; ++i) {
          const double wi = w.deq[o * w.in + i], xi = x[r * ldx + i];
          v += wi * xi;
          s += std::fabs(wi * xi);
          amax = std::max(amax, std::fabs(xi));
          wabs += std::fabs(wi - m) + std::fabs(m);
        }
        if (is_k_quant(w.type)) {  // one activation scale per 256 values (Q8_K)
          const int64_t sb = b / kQKK * kQKK;
          for (int64_t i = sb; i < sb + kQKK; ++i) amax = std::max(amax, double(std::fabs(x[r * ldx + i])));
        }
        // Activation quantization moves each x by at most amax/254, plus |q| * d * 2^-11 <= amax * 2^-11
        // from the fp16 scale; a min also meets s = fp16(d * sum q), off by <= 2^-11 * 32 * amax.
        qb += wabs * amax * (0.5 / 127 + std::ldexp(1.0, -11)) +
              std::fabs(m) * 32 * amax * std::ldexp(1.01, -11);
      }
      ref.value[r * w.out + o] = v;
      ref.scale[r * w.out + o] = s;
      ref.quant_bound[r * w.out + o] = qb;
    }
  }
  return ref;
}

// The kernels that multiply BF16 weights with vdpbf16ps (AVX-512 with AVX512_BF16) round the
// activations to bf16 first, as llama.cpp does for BF16 weights.
// Call with the ISA override for `isa` in effect.
bool rounds_activations_to_bf16(GgmlType t, Isa isa) {
  return t == GgmlType::BF16 && isa == Isa::Avx512 && bf16_dot_active();
}

// The product with every activation rounded to bf16 (nearest even), in double. Against the exact
// product such a kernel may differ by the rounding of each activation: at most half a bf16 ulp, 2^-8
// of |w_i x_i| (8 significant bits).
Reference bf16_activation_reference(const Weights& w, const std::vector<float>& x, int64_t rows, int64_t ldx) {
  Reference ref;
  ref.value.resize(rows * w.out);
  ref.scale.resize(rows * w.out);
  ref.quant_bound.resize(rows * w.out);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < w.out; ++o) {
      double v = 0, s = 0;
      for (int64_t i = 0; i < w.in; ++i) {
        const double wi = w.deq[o * w.in + i];
        v += wi * bf16_to_fp32(fp32_to_bf16(x[r * ldx + i]));
        s += std::fabs(wi * x[r * ldx + i]);
      }
      ref.value[r * w.out + o] = v;
      ref.scale[r * w.out + o] = s;
      ref.quant_bound[r * w.out + o] = std::ldexp(1.0, -8) * s;
    }
  }
  return ref;
}

// Signed integer weights, scale and min of block b of row o, decoded from the format definitions.
void decode_int_block(const Weights& w, int64_t o, int64_t b, int* q, double* d, double* m) {
  const uint8_t* blk = w.data.data() + o * w.row_bytes + b * ggml_row_bytes(w.type, kQK);
  *m = 0;
  auto nibble = [](const uint8_t* qs, int i) { return i < 16 ? (qs[i] & 0xF) : (qs[i - 16] >> 4); };
  auto bit4 = [](const uint8_t* qh, int i) {
    uint32_t h;
    std::memcpy(&h, qh, 4);
    return static_cast<int>((h >> i) & 1) << 4;
  };
  switch (w.type) {
    case GgmlType::Q8_0: {
      const auto* p = reinterpret_cast<const BlockQ8_0*>(blk);
      *d = fp16_to_fp32(p->d);
      for (int i = 0; i < 32; ++i) q[i] = p->qs[i];
      break;
    }
    case GgmlType::Q4_0: {
      const auto* p = reinterpret_cast<const BlockQ4_0*>(blk);
      *d = fp16_to_fp32(p->d);
      for (int i = 0; i < 32; ++i) q[i] = nibble(p->qs, i) - 8;
      break;
    }
    case GgmlType::Q4_1: {
      const auto* p = reinterpret_cast<const BlockQ4_1*>(blk);
      *d = fp16_to_fp32(p->d);
      *m = fp16_to_fp32(p->m);
      for (int i = 0; i < 32; ++i) q[i] = nibble(p->qs, i);
      break;
    }
    case GgmlType::Q5_0: {
      const auto* p = reinterpret_cast<const BlockQ5_0*>(blk);
      *d = fp16_to_fp32(p->d);
      for (int i = 0; i < 32; ++i) q[i] = (nibble(p->qs, i) | bit4(p->qh, i)) - 16;
      break;
    }
    case GgmlType::Q5_1: {
      const auto* p = reinterpret_cast<const BlockQ5_1*>(blk);
      *d = fp16_to_fp32(p->d);
      *m = fp16_to_fp32(p->m);
      for (int i = 0; i < 32; ++i) q[i] = nibble(p->qs, i) | bit4(p->qh, i);
      break;
    }
    default:
      FAIL() << "not an int8 type";
  }
}

// llama.cpp's x86 activation quantization (quantize_row_q8_0 / q8_1): d = amax / 127 rounded to fp16,
// q = round-half-even(x * (127 / amax)), s = fp16(d * sum q) with the unrounded d.
void quantize_activation_block(const float* x, int* q, double* d, double* s) {
  float amax = 0;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float dd = amax / 127.f;
  const float id = amax != 0 ? 127.f / amax : 0.f;
  int sum = 0;
  for (int i = 0; i < 32; ++i) {
    q[i] = static_cast<int>(std::nearbyint(x[i] * id));
    sum += q[i];
  }
  *d = fp16_to_fp32(fp32_to_fp16(dd));
  *s = fp16_to_fp32(fp32_to_fp16(dd * static_cast<float>(sum)));
}

// The integer-arithmetic product the 8-bit path computes, in double: sum_b d_w d_x sum_i w_i q_i + m_w s_x.
Reference q8_reference(const Weights& w, const std::vector<float>& x, int64_t rows, int64_t ldx) {
  Reference ref;
  ref.value.resize(rows * w.out);
  ref.scale.resize(rows * w.out);
  const int64_t nb = w.in / kQK;
  std::vector<int> xq(rows * w.in);
  std::vector<double> xd(rows * nb), xs(rows * nb);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < nb; ++b)
      quantize_activation_block(&x[r * ldx + b * kQK], &xq[r * w.in + b * kQK], &xd[r * nb + b],
                                &xs[r * nb + b]);
  for (int64_t o = 0; o < w.out; ++o) {
    for (int64_t b = 0; b < nb; ++b) {
      int wq[32];
      double dw, mw;
      decode_int_block(w, o, b, wq, &dw, &mw);
      for (int64_t r = 0; r < rows; ++r) {
        long isum = 0, iabs = 0;
        for (int i = 0; i < 32; ++i) {
          isum += wq[i] * xq[r * w.in + b * kQK + i];
          iabs += std::abs(wq[i] * xq[r * w.in + b * kQK + i]);
        }
        const double dd = dw * xd[r * nb + b];
        ref.value[r * w.out + o] += dd * isum + mw * xs[r * nb + b];
        ref.scale[r * w.out + o] += std::fabs(dd) * iabs + std::fabs(mw * xs[r * nb + b]);
      }
    }
  }
  return ref;
}

// What the AVX-512 kernels compute for K-quant weights, as llama.cpp does: the activations quantized
// to Q8_K by the scalar reference (quantize_row_q8_k, one f32 scale per 256 values), then the exact
// product with the dequantized weights, in double. The kernels differ from it by float rounding only.
Reference q8k_reference(const Weights& w, const std::vector<float>& x, int64_t rows, int64_t ldx) {
  Reference ref;
  ref.value.resize(rows * w.out);
  ref.scale.resize(rows * w.out);
  std::vector<BlockQ8_K> blocks(w.in / kQKK);
  std::vector<double> xq(w.in);
  for (int64_t r = 0; r < rows; ++r) {
    quantize_row_q8_k(&x[r * ldx], blocks.data(), w.in);
    for (int64_t i = 0; i < w.in; ++i) xq[i] = double(blocks[i / kQKK].d) * blocks[i / kQKK].qs[i % kQKK];
    for (int64_t o = 0; o < w.out; ++o) {
      double v = 0, sc = 0;
      for (int64_t i = 0; i < w.in; ++i) {
        v += w.deq[o * w.in + i] * xq[i];
        sc += std::fabs(w.deq[o * w.in + i] * xq[i]);
      }
      ref.value[r * w.out + o] = v;
      ref.scale[r * w.out + o] = sc;
    }
  }
  return ref;
}

// ---------------------------------------------------------------- comparison

struct Case {
  GgmlType type;
  int64_t rows, out, in, ldx, ldy;
  std::string describe(Isa isa, bool pooled) const {
    std::ostringstream s;
    s << ggml_type_name(type) << " rows=" << rows << " out=" << out << " in=" << in << " ldx=" << ldx
      << " ldy=" << ldy << " isa=" << isa_name(isa) << (pooled ? " pool=2" : " pool=null");
    return s.str();
  }
};

constexpr float kSentinel = 12345.0f;

// Runs the fast path and checks every output against `ref` within rel * scale (+ the activation
// quantization bound when `with_quant_bound`), and that y's padding is untouched.
::testing::AssertionResult check_fast_path(const Case& c, const MatrixView& w, const std::vector<float>& x,
                                           const Reference& ref, double rel, bool with_quant_bound,
                                           ThreadPool* pool) {
  std::vector<float> y(c.rows * c.ldy + 3, kSentinel);
  matmul(w, x.data(), c.rows, c.ldx, y.data(), c.ldy, pool);
  for (int64_t r = 0; r < c.rows; ++r) {
    for (int64_t o = 0; o < c.ldy; ++o) {
      const float got = y[r * c.ldy + o];
      if (o >= c.out) {
        if (got != kSentinel)
          return ::testing::AssertionFailure() << "wrote padding y[" << r << "][" << o << "]";
        continue;
      }
      const double want = ref.value[r * c.out + o];
      double tol = rel * ref.scale[r * c.out + o] + 1e-6;
      if (with_quant_bound) tol += ref.quant_bound[r * c.out + o];
      if (!(std::fabs(got - want) <= tol)) {
        return ::testing::AssertionFailure()
               << "y[" << r << "][" << o << "] = " << got << ", expected " << want << " +- " << tol;
      }
    }
  }
  for (size_t i = c.rows * c.ldy; i < y.size(); ++i) {
    if (y[i] != kSentinel) return ::testing::AssertionFailure() << "wrote past y";
  }
  return ::testing::AssertionSuccess();
}

// Every ISA, with and without a pool, against both references.
void check_all_paths(const Case& c, const std::vector<Isa>& isas, ThreadPool* pool) {
  const Weights w = make_weights(c.type, c.out, c.in, static_cast<uint32_t>(c.out * 131 + c.in));
  const std::vector<float> x = make_activations(c.rows, c.in, c.ldx, static_cast<uint32_t>(c.rows * 7 + 1));
  const Reference exact = exact_reference(w, x, c.rows, c.ldx);
  const bool int8 = is_int8_activation_type(c.type);
  Reference q8, q8k, bf16;
  if (int8) q8 = q8_reference(w, x, c.rows, c.ldx);
  if (is_k_quant(c.type)) q8k = q8k_reference(w, x, c.rows, c.ldx);
  if (c.type == GgmlType::BF16) bf16 = bf16_activation_reference(w, x, c.rows, c.ldx);
  for (Isa isa : isas) {
    IsaOverride o(isa);
    for (const MatrixView& v : w.views(isa)) {
      const std::string layout = v.packed ? " packed" : "";
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), pool}) {
        if (int8) {
          EXPECT_TRUE(check_fast_path(c, v, x, q8, 2e-5, false, p))
              << c.describe(isa, p) << layout << " vs q8 reference";
          EXPECT_TRUE(check_fast_path(c, v, x, exact, 2e-5, true, p))
              << c.describe(isa, p) << layout << " vs exact product";
        } else if (rounds_activations_to_bf16(c.type, isa)) {
          EXPECT_TRUE(check_fast_path(c, v, x, bf16, 1e-5, false, p))
              << c.describe(isa, p) << " vs bf16-activation reference";
          Reference exact_with_bound = exact;
          exact_with_bound.quant_bound = bf16.quant_bound;
          EXPECT_TRUE(check_fast_path(c, v, x, exact_with_bound, 1e-5, true, p))
              << c.describe(isa, p) << " vs exact product";
        } else if (is_k_quant(c.type)) {
          if (k_quants_through_q8k(isa)) {  // the int8 kernels: llama.cpp's Q8_K activations
            EXPECT_TRUE(check_fast_path(c, v, x, q8k, 2e-5, false, p))
                << c.describe(isa, p) << layout << " vs q8_K reference";
          }
          EXPECT_TRUE(check_fast_path(c, v, x, exact, 2e-5, true, p))
              << c.describe(isa, p) << layout << " vs exact product";
        } else {
          EXPECT_TRUE(check_fast_path(c, v, x, exact, 1e-5, false, p)) << c.describe(isa, p);
        }
      }
    }
  }
}

std::vector<int64_t> test_widths(GgmlType t) {
  const int64_t be = ggml_block_elems(t);
  if (be == 1) return {5, 37, 96};  // plain types: odd widths exercise the vector tails
  return {be, 3 * be, 4 * be};      // one block, an odd count, an even count
}

// ---------------------------------------------------------------- tests

TEST(Matmul, ReferenceMatchesDoublePrecision) {
  for (GgmlType t : {GgmlType::F32, GgmlType::Q4_0, GgmlType::Q6_K}) {
    const int64_t in = 2 * ggml_block_elems(t) * (ggml_block_elems(t) == 1 ? 40 : 1);
    const Weights w = make_weights(t, 7, in, 11);
    const int64_t rows = 3, ldx = in + 2, ldy = 9;
    const auto x = make_activations(rows, in, ldx, 5);
    const Reference ref = exact_reference(w, x, rows, ldx);
    std::vector<float> y(rows * ldy, kSentinel);
    matmul_reference(w.view(), x.data(), rows, ldx, y.data(), ldy);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t o = 0; o < w.out; ++o) {
        EXPECT_NEAR(y[r * ldy + o], ref.value[r * w.out + o], 1e-5 * ref.scale[r * w.out + o] + 1e-6);
      }
      EXPECT_EQ(y[r * ldy + 7], kSentinel);
    }
  }
}

// The main sweep: every type, ISA and pool over small edge shapes with strides.
TEST(Matmul, FastPathMatchesReferencesOnEdgeShapes) {
  const auto isas = available_isas();
  ASSERT_FALSE(isas.empty());
  ThreadPool pool(2);
  for (GgmlType t : kAllTypes) {
    for (int64_t in : test_widths(t)) {
      for (int64_t rows : {1, 2, 3, 5, 17, 64}) {
        for (int64_t out : {1, 3, 16, 33}) {
          check_all_paths({t, rows, out, in, in + 3, out + 2}, isas, &pool);
          if (HasFailure()) return;  // one broken path would otherwise print thousands of lines
        }
      }
    }
  }
}

// Under both decode schedules (AMD's: one panel at a time; Intel's: several in turn), whatever this
// CPU is, so that each is checked on every machine.
TEST(Matmul, ContiguousStridesAndManyPanels) {
  const auto isas = available_isas();
  ThreadPool pool(2);
  struct Restore {
    ~Restore() { set_gemv_schedule(GemvSchedule::Auto); }
  } restore;
  for (GemvSchedule schedule : {GemvSchedule::Amd, GemvSchedule::Intel}) {
    set_gemv_schedule(schedule);
    for (GgmlType t : kAllTypes) {
      const int64_t be = ggml_block_elems(t);
      const int64_t in = be == 1 ? 160 : (be == kQK ? 192 : 512);
      // 600 rows: many 32-row panels (threads split the output); 70 rows: few panels (threads also split
      // the activation rows); 1, 2 and 9 rows: the streaming kernels.
      for (int64_t out : {70, 600}) {
        for (int64_t rows : {1, 2, 9, 40}) {
          check_all_paths({t, rows, out, in, in, out}, isas, &pool);
          if (HasFailure()) {
            ADD_FAILURE() << "schedule " << (schedule == GemvSchedule::Amd ? "amd" : "intel");
            return;
          }
        }
      }
    }
  }
}

// With one-hot activations each output is a single weight, so the fast path's f32 conversion of the
// weights must reproduce the reference dequantization bit for bit. (Quantized types may go through 8-bit
// activations, where the product is rounded differently; the sweeps above bound those.)
TEST(Matmul, FastPathDequantizationIsExact) {
  const auto isas = available_isas();
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16}) {
    const int64_t in = 256, out = 37;
    const Weights w = make_weights(t, out, in, 99);
    for (int64_t rows : {int64_t{4}, in}) {  // streaming kernel, then the GEMM kernel
      std::vector<float> x(rows * in, 0.0f);
      for (int64_t r = 0; r < rows; ++r) x[r * in + (r * 37) % in] = 1.0f;
      for (Isa isa : isas) {
        IsaOverride o(isa);
        std::vector<float> y(rows * out);
        matmul(w.view(), x.data(), rows, in, y.data(), out, nullptr);
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t j = 0; j < out; ++j) {
            ASSERT_EQ(y[r * out + j], w.deq[j * in + (r * 37) % in])
                << ggml_type_name(t) << " isa=" << isa_name(isa) << " rows=" << rows << " r=" << r
                << " o=" << j;
          }
        }
      }
    }
  }
}

// Threads split whole outputs, so a pool must not change a single bit of the result.
TEST(Matmul, ThreadPoolDoesNotChangeResults) {
  const auto isas = available_isas();
  ThreadPool pool(2);
  for (GgmlType t : kAllTypes) {
    const int64_t in = ggml_block_elems(t) == 1 ? 80 : 2 * ggml_block_elems(t);
    const Weights w = make_weights(t, 70, in, 21);
    for (int64_t rows : {1, 3, 7, 50}) {
      const auto x = make_activations(rows, in, in, 2);
      for (Isa isa : isas) {
        IsaOverride o(isa);
        std::vector<float> serial(rows * 70), pooled(rows * 70);
        matmul(w.view(), x.data(), rows, in, serial.data(), 70, nullptr);
        matmul(w.view(), x.data(), rows, in, pooled.data(), 70, &pool);
        ASSERT_EQ(0, std::memcmp(serial.data(), pooled.data(), serial.size() * sizeof(float)))
            << ggml_type_name(t) << " isa=" << isa_name(isa) << " rows=" << rows;
      }
    }
  }
}

// Batch invariance: a row's outputs must not depend on the other rows of the call (how many, where
// the row sits in a tile or remainder) nor on the pool. Model code relies on it: a prompt in
// micro-batches, or a pruned pass with 1 row, must give bit-identical logits to one full call.
void check_batch_invariance(GgmlType t, const std::vector<Isa>& isas, ThreadPool* pool) {
  constexpr int64_t kRows = 37, kOut = 70;
  {
    const int64_t be = ggml_block_elems(t);
    const int64_t in = be == 1 ? 83 : 3 * be;
    const int64_t ldx = in + 5;
    const Weights w = make_weights(t, kOut, in, 33);
    const auto x = make_activations(kRows, in, ldx, 9);
    for (Isa isa : isas) {
      IsaOverride o(isa);
      // The whole call on the GGUF layout is the yardstick: the packed copy must match it bit for bit too.
      std::vector<float> whole(kRows * kOut);
      matmul(w.view(), x.data(), kRows, ldx, whole.data(), kOut, nullptr);
      for (const MatrixView& v : w.views(isa)) {
        for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), pool}) {
          for (int64_t chunk : {kRows, int64_t{1}, int64_t{3}, int64_t{5}, int64_t{7}, int64_t{8}}) {
            std::vector<float> y(kRows * kOut, kSentinel);
            for (int64_t r0 = 0; r0 < kRows; r0 += chunk) {
              const int64_t n = std::min(chunk, kRows - r0);
              matmul(v, x.data() + r0 * ldx, n, ldx, y.data() + r0 * kOut, kOut, p);
            }
            for (int64_t r = 0; r < kRows; ++r) {
              ASSERT_EQ(0, std::memcmp(whole.data() + r * kOut, y.data() + r * kOut, kOut * sizeof(float)))
                  << ggml_type_name(t) << " isa=" << isa_name(isa) << " chunk=" << chunk << " row=" << r
                  << (p ? " pool=2" : " pool=null") << (v.packed ? " packed" : "");
            }
          }
        }
      }
    }
  }
}

// The int8 kernels of every SIMD set (AVX2's vpmaddubsw, AVX-VNNI's and AVX-512's vpdpbusd) take the
// same integer sums and the same float steps, so on the packable types they agree bit for bit with each
// other, decode GEMV and prefill GEMM alike, read from the packed copy or from the GGUF layout.
TEST(Matmul, EverySimdSetGivesTheSameBits) {
  std::vector<Isa> simd;
  for (Isa isa : available_isas())
    if (isa != Isa::Scalar) simd.push_back(isa);
  if (simd.size() < 2) GTEST_SKIP() << "fewer than two SIMD kernel sets on this CPU";
  ThreadPool pool(2);
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
    const bool k = is_k_quant(t);
    for (int64_t in : k ? std::vector<int64_t>{256, 768} : std::vector<int64_t>{32, 96, 17 * 32}) {
      for (int64_t out : {1, 7, 33, 70}) {
        const Weights w = make_weights(t, out, in, uint32_t(in + out));
        for (int64_t rows : {1, 2, 3, 4, 5, 7, 37}) {
          const int64_t ldx = in + 1;
          auto x = make_activations(rows, in, ldx, uint32_t(rows * 7 + in));
          if (rows > 2) std::fill(x.begin() + ldx, x.begin() + ldx + in, 0.0f);  // an all-zero row
          std::vector<float> want(rows * out);
          {
            IsaOverride o(simd.back());
            matmul(w.view(), x.data(), rows, ldx, want.data(), out, nullptr);
          }
          for (Isa isa : simd) {
            IsaOverride o(isa);
            for (const MatrixView& v : w.views(isa)) {
              for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
                std::vector<float> got(rows * out, kSentinel);
                matmul(v, x.data(), rows, ldx, got.data(), out, p);
                ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
                    << ggml_type_name(t) << " " << out << " x " << in << " rows=" << rows << " isa=" << isa_name(isa)
                    << " vs " << isa_name(simd.back()) << (v.packed ? " packed" : "") << (p ? " pool=2" : "");
              }
            }
          }
        }
      }
    }
  }
}

// The F32 family (F32, F16 weights; BF16 too where the AVX-512 set does not take vdpbf16ps) computes
// each output as one FMA chain over k in order on every SIMD set, decode stream and prefill tile alike,
// so the sets agree bit for bit there too.
TEST(Matmul, EverySimdSetGivesTheSameF32FamilyBits) {
  std::vector<Isa> simd;
  for (Isa isa : available_isas())
    if (isa != Isa::Scalar) simd.push_back(isa);
  if (simd.size() < 2) GTEST_SKIP() << "fewer than two SIMD kernel sets on this CPU";
  ThreadPool pool(2);
  std::vector<GgmlType> types = {GgmlType::F32, GgmlType::F16};
  {
    // BF16 joins where the widest set multiplies it with FMAs too (Intel): not with vdpbf16ps.
    IsaOverride o(simd.back());
    if (!bf16_dot_active()) types.push_back(GgmlType::BF16);
  }
  for (GgmlType t : types) {
    for (int64_t in : {1, 7, 8, 9, 64, 200}) {
      for (int64_t out : {1, 7, 16, 33, 70}) {
        const Weights w = make_weights(t, out, in, uint32_t(in * 3 + out));
        for (int64_t rows : {1, 2, 4, 5, 6, 7, 8, 13}) {
          const int64_t ldx = in + 3;
          auto x = make_activations(rows, in, ldx, uint32_t(rows * 5 + in));
          std::vector<float> want(rows * out);
          {
            IsaOverride o(simd.back());
            matmul(w.view(), x.data(), rows, ldx, want.data(), out, nullptr);
          }
          for (Isa isa : simd) {
            IsaOverride o(isa);
            for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
              std::vector<float> got(rows * out, kSentinel);
              matmul(w.view(), x.data(), rows, ldx, got.data(), out, p);
              ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
                  << ggml_type_name(t) << " " << out << " x " << in << " rows=" << rows << " isa=" << isa_name(isa)
                  << " vs " << isa_name(simd.back()) << (p ? " pool=2" : "");
            }
          }
        }
      }
    }
  }
}

TEST(Matmul, BatchInvariance) {
  const auto isas = available_isas();
  ThreadPool pool(2);
  for (GgmlType t : kAllTypes) {
    check_batch_invariance(t, isas, &pool);
    if (HasFailure()) return;
  }
}

// The GEMM quantizes long rows 16 blocks at a time (AVX-512: one transposed reduction for the 16 block
// maxima and sums); the streaming kernels one block at a time. Rows long enough for both (two groups
// of 16 plus a remainder), with edge-case activations: an all-zero row, an all-zero block, values on
// the rounding boundary x * 127 / amax = k + 1/2, a single huge value, and tiny subnormal-scale values.
TEST(Matmul, LongRowsQuantizeLikeOneBlockAtATime) {
  const auto isas = available_isas();
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q4_K,
                     GgmlType::Q6_K}) {
    const int64_t in = ggml_block_elems(t) == 256 ? 5 * 256 : 35 * 32;
    constexpr int64_t kRows = 14, kOut = 40;
    const Weights w = make_weights(t, kOut, in, 5);
    std::vector<float> x = make_activations(kRows, in, in, 21);
    std::fill(x.begin(), x.begin() + in, 0.0f);                      // row 0: zeros
    std::fill(x.begin() + in + 64, x.begin() + in + 96, 0.0f);       // row 1, block 2: zeros
    for (int64_t i = 0; i < in; ++i) x[2 * in + i] = float(i % 32) - 15.5f;  // row 2: amax 16, halves
    for (int64_t i = 0; i < in; ++i) x[3 * in + i] = (i % 32 == 7) ? 3e4f : 0.25f * float(i % 5);
    for (int64_t i = 0; i < in; ++i) x[4 * in + i] = 1e-30f * float(int(i % 9) - 4);
    for (Isa isa : isas) {
      IsaOverride o(isa);
      for (const MatrixView& v : w.views(isa)) {
        std::vector<float> whole(kRows * kOut), single(kRows * kOut);
        matmul(v, x.data(), kRows, in, whole.data(), kOut, nullptr);
        for (int64_t r = 0; r < kRows; ++r) matmul(v, x.data() + r * in, 1, in, single.data() + r * kOut, kOut, nullptr);
        for (int64_t r = 0; r < kRows; ++r) {
          ASSERT_EQ(0, std::memcmp(whole.data() + r * kOut, single.data() + r * kOut, kOut * sizeof(float)))
              << ggml_type_name(t) << " isa=" << isa_name(isa) << " row=" << r << (v.packed ? " packed" : "");
        }
      }
    }
  }
}

// Products sharing an input (q/k/v, gate/up) in one call: bit for bit the separate calls, for every
// type and ISA, packed or not, with row counts on both sides of the streaming limit, small products
// (fewer panels than threads x 8, so their rows are split; one of a single panel) and one target of another type or width
// (which takes the separate-call fallback). Big enough (> 0.5 M multiply-adds) for the fast path at 1 row.
TEST(Matmul, SharedInputMatchesSeparateCalls) {
  const auto isas = available_isas();
  ThreadPool pool(2);
  for (GgmlType t : kAllTypes) {
    const int64_t be = ggml_block_elems(t);
    const int64_t in = be == 1 ? 96 : (be == 256 ? 512 : 17 * 32);
    const Weights wk = make_weights(t, 20, in, 3), wv = make_weights(t, 33, in, 4), wq = make_weights(t, 1100, in, 6);
    const Weights other = make_weights(GgmlType::F32, 20, in, 7);
    for (int64_t rows : {int64_t{1}, int64_t{5}, int64_t{37}}) {
      const int64_t ldx = in + 3;
      const auto x = make_activations(rows, in, ldx, uint32_t(rows));
      for (Isa isa : isas) {
        IsaOverride o(isa);
        for (size_t variant = 0; variant < wk.views(isa).size(); ++variant) {
          const MatrixView k = wk.views(isa)[variant], v = wv.views(isa)[variant], q = wq.views(isa)[variant];
          for (bool mixed : {false, true}) {
            const MatrixView third = mixed ? other.view() : q;
            std::vector<float> yk(rows * 20, kSentinel), yv(rows * 33, kSentinel), yq(rows * (third.out + 1), kSentinel);
            const MatmulTarget targets[3] = {{k, yk.data(), 20}, {v, yv.data(), 33}, {third, yq.data(), third.out + 1}};
            matmul_shared_input(targets, 3, x.data(), rows, ldx, rows == 5 ? nullptr : &pool);
            for (const MatmulTarget& tg : targets) {
              std::vector<float> want(rows * tg.ldy, kSentinel);
              matmul(tg.w, x.data(), rows, ldx, want.data(), tg.ldy, nullptr);
              ASSERT_EQ(0, std::memcmp(want.data(), tg.y, want.size() * sizeof(float)))
                  << ggml_type_name(t) << " isa=" << isa_name(isa) << " rows=" << rows << " out=" << tg.w.out
                  << (tg.w.packed ? " packed" : "") << (mixed ? " mixed" : "");
            }
          }
        }
      }
    }
  }
}

// Independent products at one barrier (the experts of a MoE layer): bit for bit the separate calls, for
// every type and ISA, packed or not. The jobs differ in weights, inputs and row counts (0, 1, a few, past
// the streaming limit), one has a row count that is not a whole number of panels, one is another type,
// and their outputs are written with leading dimensions wider than `out`. Two threads split them into
// slices that cross job boundaries; big enough in total (> 256 K multiply-adds) to be shared out.
TEST(Matmul, GroupMatchesSeparateCalls) {
  const auto isas = available_isas();
  ThreadPool pool(2);
  for (GgmlType t : kAllTypes) {
    const int64_t be = ggml_block_elems(t);
    const int64_t in = be == 256 ? 512 : 17 * 32;
    const Weights wa = make_weights(t, 160, in, 11), wb = make_weights(t, 70, in, 12),
                  wc = make_weights(t, 256, in, 13);
    const Weights other = make_weights(GgmlType::F16, 40, in, 14);
    const int64_t rows_of[4] = {1, 0, 7, 2};
    std::vector<std::vector<float>> xs;
    for (int j = 0; j < 4; ++j)
      xs.push_back(make_activations(std::max<int64_t>(rows_of[j], 1), in, in + 5, uint32_t(20 + j)));
    for (Isa isa : isas) {
      IsaOverride o(isa);
      for (size_t variant = 0; variant < wa.views(isa).size(); ++variant) {
        const MatrixView ws[4] = {wa.views(isa)[variant], wb.views(isa)[variant], wc.views(isa)[variant],
                                  other.view()};
        for (const bool decode : {true, false}) {
          std::vector<MatmulJob> jobs;
          std::vector<std::vector<float>> ys;
          for (int j = 0; j < 4; ++j) {
            const int64_t rows = decode ? std::min<int64_t>(rows_of[j], 1) : rows_of[j];
            ys.emplace_back(std::max<int64_t>(rows, 1) * (ws[j].out + 3), kSentinel);
          }
          for (int j = 0; j < 4; ++j) {
            const int64_t rows = decode ? std::min<int64_t>(rows_of[j], 1) : rows_of[j];
            jobs.push_back({ws[j], xs[j].data(), rows, in + 5, ys[j].data(), ws[j].out + 3});
          }
          matmul_group(jobs.data(), int(jobs.size()), &pool);
          for (const MatmulJob& job : jobs) {
            std::vector<float> want(std::max<int64_t>(job.rows, 1) * job.ldy, kSentinel);
            matmul(job.w, job.x, job.rows, job.ldx, want.data(), job.ldy, nullptr);
            ASSERT_EQ(0, std::memcmp(want.data(), job.y, want.size() * sizeof(float)))
                << ggml_type_name(t) << " isa=" << isa_name(isa) << " rows=" << job.rows
                << " out=" << job.w.out << (job.w.packed ? " packed" : "")
                << (decode ? " decode" : " prefill");
          }
        }
      }
    }
  }
  EXPECT_THROW(matmul_group(nullptr, -1, &pool), std::invalid_argument);
}

// One decode row read by every job of a group (a MoE layer's experts), as the kernels may quantize it
// once per thread and group: bit for bit the separate calls, with types of different activation
// formats and a narrower matrix reading the same row's first half mixed in one group, and the row
// rewritten between two groups at the same address (nothing kept from one group may reach the next).
TEST(Matmul, GroupSharedInputMatchesSeparateCalls) {
  ThreadPool pool(2);
  const int64_t in = 512;
  const GgmlType types[] = {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K,
                            GgmlType::Q5_K, GgmlType::Q4_0, GgmlType::Q8_0};
  std::vector<Weights> ws;
  for (size_t j = 0; j < std::size(types); ++j)
    ws.push_back(make_weights(types[j], 160 + 32 * int64_t(j % 3), j == 5 ? in / 2 : in, uint32_t(50 + j)));
  for (Isa isa : available_isas()) {
    IsaOverride o(isa);
    std::vector<float> x = make_activations(1, in, in, 60);
    for (int round = 0; round < 3; ++round) {
      std::vector<MatmulJob> jobs;
      std::vector<std::vector<float>> ys;
      for (const Weights& w : ws) ys.emplace_back(w.out, kSentinel);
      for (size_t j = 0; j < ws.size(); ++j) {
        const MatrixView v = ws[j].views(isa).back();
        jobs.push_back({v, x.data(), 1, in, ys[j].data(), v.out});
      }
      matmul_group(jobs.data(), int(jobs.size()), &pool);
      for (const MatmulJob& job : jobs) {
        std::vector<float> want(size_t(job.w.out), kSentinel);
        matmul(job.w, job.x, 1, job.ldx, want.data(), job.w.out, nullptr);
        ASSERT_EQ(0, std::memcmp(want.data(), job.y, want.size() * sizeof(float)))
            << ggml_type_name(job.w.type) << " in=" << job.w.in << " isa=" << isa_name(isa) << " round "
            << round << (job.w.packed ? " packed" : "");
      }
      for (float& v : x) v = -0.5f * v + 0.25f;  // the same buffer, new values, for the next group
    }
  }
}

// The vdpbf16ps kernels, wherever the CPU has them (Auto may leave them off, see matmul.h): the same
// sweeps as above against the bf16-activation reference, and batch invariance between the streaming
// and the GEMM kernel.
TEST(Matmul, Bf16DotKernels) {
  const auto all = available_isas();
  if (!cpu_features().avx512bf16 || std::count(all.begin(), all.end(), Isa::Avx512) == 0)
    GTEST_SKIP() << "this CPU has no AVX512_BF16";
  struct ForceOn {
    ForceOn() { set_bf16_dot(Bf16Dot::On); }
    ~ForceOn() { set_bf16_dot(Bf16Dot::Auto); }
  } force;
  const std::vector<Isa> isas = {Isa::Avx512};
  {
    IsaOverride o(Isa::Avx512);
    ASSERT_TRUE(bf16_dot_active());
  }
  ThreadPool pool(2);
  for (int64_t in : {1, 2, 5, 31, 32, 33, 96, 160}) {
    for (int64_t rows : {1, 2, 4, 5, 13, 40}) {
      for (int64_t out : {1, 16, 33, 70}) {
        check_all_paths({GgmlType::BF16, rows, out, in, in + 3, out + 2}, isas, &pool);
        if (HasFailure()) return;
      }
    }
  }
  check_batch_invariance(GgmlType::BF16, isas, &pool);
}

TEST(Matmul, PaddedWeightRows) {
  const auto isas = available_isas();
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_1, GgmlType::F16, GgmlType::Q6_K}) {
    const int64_t in =
        ggml_block_elems(t) == 1 ? 64 : 2 * ggml_block_elems(t) * (ggml_block_elems(t) == kQK ? 4 : 1);
    const Weights w = make_weights(t, 40, in, 3, /*pad=*/32);
    for (int64_t rows : {1, 20}) {
      const auto x = make_activations(rows, in, in, 8);
      const Reference ref =
          is_int8_activation_type(t) ? q8_reference(w, x, rows, in) : exact_reference(w, x, rows, in);
      for (Isa isa : isas) {
        IsaOverride o(isa);
        EXPECT_TRUE(check_fast_path({t, rows, 40, in, in, 40}, w.view(), x, ref, 2e-5, is_k_quant(t), nullptr))
            << ggml_type_name(t) << " isa=" << isa_name(isa) << " rows=" << rows;
      }
    }
  }
}

TEST(Matmul, ZeroRowsOrOutputsDoNothing) {
  const Weights w = make_weights(GgmlType::Q8_0, 4, 32, 1);
  float x[32] = {}, y[4] = {kSentinel, kSentinel, kSentinel, kSentinel};
  matmul(w.view(), x, 0, 32, y, 4, nullptr);
  EXPECT_EQ(y[0], kSentinel);
  matmul(w.view().rows(1, 0), x, 1, 32, y, 4, nullptr);
  EXPECT_EQ(y[0], kSentinel);
}

TEST(Matmul, ArgumentErrors) {
  const Weights w = make_weights(GgmlType::Q4_0, 4, 64, 1);
  std::vector<float> x(2 * 64), y(2 * 4);
  MatrixView v = w.view();
  EXPECT_THROW(matmul(v, x.data(), 2, 63, y.data(), 4, nullptr), std::invalid_argument);  // ldx < in
  EXPECT_THROW(matmul(v, x.data(), 2, 64, y.data(), 3, nullptr), std::invalid_argument);  // ldy < out
  MatrixView bad_in = v;
  bad_in.in = 48;  // not whole blocks
  EXPECT_THROW(matmul(bad_in, x.data(), 2, 64, y.data(), 4, nullptr), std::invalid_argument);
  MatrixView short_rows = v;
  short_rows.row_bytes = 20;
  EXPECT_THROW(matmul(short_rows, x.data(), 2, 64, y.data(), 4, nullptr), std::invalid_argument);
  MatrixView unsupported = v;
  unsupported.type = GgmlType::Q2_K;
  unsupported.in = 256;
  unsupported.row_bytes = 84;
  std::vector<float> x256(256);
  EXPECT_THROW(matmul(unsupported, x256.data(), 1, 256, y.data(), 4, nullptr), UnsupportedType);
  EXPECT_THROW(matmul_reference(unsupported, x256.data(), 1, 256, y.data(), 4), UnsupportedType);
  // Shared input: every target is checked, and at most 4 of them.
  const MatmulTarget good{v, y.data(), 4}, bad_ldy{v, y.data(), 3};
  const MatmulTarget five[5] = {good, good, good, good, good};
  EXPECT_THROW(matmul_shared_input(five, 5, x.data(), 2, 64, nullptr), std::invalid_argument);
  const MatmulTarget one_bad[2] = {good, bad_ldy};
  try {
    matmul_shared_input(one_bad, 2, x.data(), 2, 64, nullptr);
    ADD_FAILURE() << "no exception for ldy < out";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("matmul_shared_input"), std::string::npos) << e.what();
  }
}

TEST(MatrixView, RowsAndGetRow) {
  const Weights w = make_weights(GgmlType::Q5_1, 10, 64, 4);
  const MatrixView v = w.view();
  const MatrixView sub = v.rows(3, 4);
  EXPECT_EQ(sub.out, 4);
  EXPECT_EQ(sub.in, 64);
  EXPECT_EQ(sub.data, w.data.data() + 3 * w.row_bytes);
  std::vector<float> row(64);
  matrix_get_row(sub, 1, row.data());
  for (int i = 0; i < 64; ++i) EXPECT_EQ(row[i], w.deq[4 * 64 + i]);
  EXPECT_THROW(v.rows(8, 3), std::out_of_range);
  EXPECT_THROW(v.rows(-1, 2), std::out_of_range);
  EXPECT_THROW(matrix_get_row(v, 10, row.data()), std::out_of_range);
}

TEST(CpuFeatures, OverrideClampsToTheCpu) {
  const CpuFeatures& f = cpu_features();
  Isa best = Isa::Scalar;
  {
    IsaOverride o(Isa::Avx512);
    best = active_isa();
  }
  if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512vnni && f.avx2 && f.fma && f.f16c) {
    EXPECT_EQ(best, Isa::Avx512);
  } else {
    EXPECT_NE(best, Isa::Avx512);
  }
  if (best == Isa::Avx512) {
    EXPECT_TRUE(f.avx2 && f.fma && f.f16c);
  }
  {
    IsaOverride o(Isa::Scalar);
    EXPECT_EQ(active_isa(), Isa::Scalar);
  }
  EXPECT_STREQ(isa_name(Isa::Avx2), "avx2");
  EXPECT_NE(cpu_features_string().find(isa_name(active_isa())), std::string::npos);
}

// A packed copy can be sliced at panel boundaries (the PLE projection takes the rows of some layers);
// elsewhere the slice falls back to the GGUF layout. Either way the product is that of the rows.
// A part of a row (whole blocks) is the same slice of the whole row, for every weight type.
TEST(MatrixView, GetRowPartIsTheSliceOfTheRow) {
  for (GgmlType t : kAllTypes) {
    const int64_t be = ggml_block_elems(t), in = 4 * std::max<int64_t>(be, 32);
    const Weights w = make_weights(t, 5, in, 11);
    std::vector<float> row(in), part(in);
    matrix_get_row(w.view(), 3, row.data());
    for (int64_t col0 = 0; col0 < in; col0 += std::max<int64_t>(be, 32)) {
      for (int64_t n = 0; col0 + n <= in; n += std::max<int64_t>(be, 32)) {
        std::fill(part.begin(), part.end(), kSentinel);
        matrix_get_row_part(w.view(), 3, col0, n, part.data());
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(part[i], row[col0 + i]) << ggml_type_name(t) << " col " << col0 + i;
        if (n < in) {
          EXPECT_EQ(part[n], kSentinel) << ggml_type_name(t);  // nothing past n written
        }
      }
    }
    if (be > 1) {
      EXPECT_THROW(matrix_get_row_part(w.view(), 3, be / 2, be, part.data()), std::out_of_range);
      EXPECT_THROW(matrix_get_row_part(w.view(), 3, 0, be + 1, part.data()), std::out_of_range);
    }
    EXPECT_THROW(matrix_get_row_part(w.view(), 3, in - be, 2 * be, part.data()), std::out_of_range);
    EXPECT_THROW(matrix_get_row_part(w.view(), 5, 0, be, part.data()), std::out_of_range);
  }
}

TEST(MatrixView, RowsOfAPackedMatrix) {
  const Weights w = make_weights(GgmlType::Q4_0, 100, 64, 6);
  if (!w.packed.packed) GTEST_SKIP() << "no packed copy: only the scalar kernel set runs on this CPU";
  IsaOverride o(Isa::Avx512);
  const auto x = make_activations(2, 64, 64, 1);
  for (auto [first, count] : {std::pair<int64_t, int64_t>{32, 64}, {3, 40}, {64, 36}}) {
    const MatrixView sub = w.packed.rows(first, count);
    EXPECT_EQ(sub.packed != nullptr, first % kPackedPanelRows == 0) << first;
    std::vector<float> got(2 * count), want(2 * count);
    matmul(sub, x.data(), 2, 64, got.data(), count, nullptr);
    matmul(w.view().rows(first, count), x.data(), 2, 64, want.data(), count, nullptr);
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float))) << first;
  }
}

// Copies taken from a reserved block (PackedStore::reserve, as a load packs): back to back at 64-byte
// boundaries, read as the GGUF layout is (the same bits), decode and prompt rows; once the block is
// used up, a copy of its own.
TEST(MatrixView, ReservedPackedCopiesGiveTheFileLayoutsBits) {
  const Weights small = make_weights(GgmlType::Q4_0, 100, 64, 8),
                large = make_weights(GgmlType::Q4_0, 4096, 1024, 7);
  if (!large.packed.packed) GTEST_SKIP() << "no packed copy: only the scalar kernel set runs on this CPU";
  IsaOverride o(Isa::Avx512);
  PackedStore store;
  store.reserve(PackedStore::reserved_bytes(small.view()) + PackedStore::reserved_bytes(large.view()));
  const MatrixView a = store.add(small.view(), nullptr), b = store.add(large.view(), nullptr);
  const MatrixView c = store.add(small.view(), nullptr);  // past the block
  ASSERT_TRUE(a.packed && b.packed && c.packed);
  for (const MatrixView& v : {a, b, c}) EXPECT_EQ(0u, reinterpret_cast<uintptr_t>(v.packed) % 64);
  if (kLargeBlocksMapped) {
    EXPECT_EQ(b.packed, a.packed + PackedStore::reserved_bytes(small.view()));
  }
  EXPECT_EQ(0, std::memcmp(a.packed, small.packed.packed, packed_matrix_bytes(a)));
  EXPECT_EQ(0, std::memcmp(c.packed, small.packed.packed, packed_matrix_bytes(c)));
  ThreadPool pool(2);
  for (int64_t rows : {1, 3, 40}) {
    const auto x = make_activations(rows, 1024, 1024, 2);
    std::vector<float> got(size_t(rows) * 4096), want(got.size());
    matmul(b, x.data(), rows, 1024, got.data(), 4096, &pool);
    matmul(large.view(), x.data(), rows, 1024, want.data(), 4096, &pool);
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float))) << rows << " rows";
  }
}

// Both schedules cover [0, n) exactly once, in chunks within bounds, for any pool size and chunking.
TEST(ThreadPool, SchedulesCoverEveryIndexOnce) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{100}, int64_t{1001}}) {
      for (int64_t chunk : {int64_t{1}, int64_t{3}, int64_t{64}}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        pool.parallel_for_dynamic(n, chunk, [&](int64_t b, int64_t e, int t) {
          ASSERT_TRUE(0 <= b && b < e && e <= n && 0 <= t && t < threads);
          ASSERT_TRUE(e - b <= chunk || (b == 0 && e == n));  // one thread or one chunk: a single call
          for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
        });
        pool.parallel_for(n, chunk, [&](int64_t b, int64_t e, int t) {
          ASSERT_TRUE(0 <= b && b < e && e <= n && 0 <= t && t < threads);
          for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
        });
        pool.parallel_for_guided(n, chunk, [&](int64_t b, int64_t e, int t) {
          ASSERT_TRUE(0 <= b && b < e && e <= n && 0 <= t && t < threads);
          // At least min_chunk (the last chunk may be shorter), at most half of what was left / threads.
          ASSERT_TRUE(e - b >= chunk || e == n) << b << " " << e;
          ASSERT_TRUE(e - b <= std::max<int64_t>(chunk, (n - b) / (2 * threads)) || (b == 0 && e == n)) << b << " " << e;
          for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
        });
        pool.parallel_for_shares(n, chunk, [&](int64_t b, int64_t e, int t) {
          ASSERT_TRUE(0 <= b && b < e && e <= n && 0 <= t && t < threads);
          // At most a quarter of the work or a step at a time, or one call for all.
          ASSERT_TRUE(e - b <= std::max(chunk, n / 4) || (b == 0 && e == n)) << b << " " << e;
          for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
        });
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 4)
              << "threads=" << threads << " n=" << n << " i=" << i;
      }
    }
  }
}

// parallel_for_shares: a thread held up leaves the rest of its share to the others, who take it over
// from its back (and from one another), every index still run exactly once.
TEST(ThreadPool, SharesOfAThreadHeldUpAreTakenOver) {
  for (int threads : {2, 3, 4}) {
    ThreadPool pool(threads);
    const int64_t n = 1000, step = 2;
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n)), runner(static_cast<size_t>(n));
    std::atomic<bool> held{false};
    pool.parallel_for_shares(n, step, [&](int64_t b, int64_t e, int t) {
      // Every step takes a while, so that all threads start on their shares; thread 1 stops in its
      // first step for longer than the others need to run all the rest.
      std::this_thread::sleep_for(std::chrono::microseconds(20));
      if (t == 1 && !held.exchange(true)) std::this_thread::sleep_for(std::chrono::milliseconds(200));
      for (int64_t i = b; i < e; ++i) {
        hits[static_cast<size_t>(i)]++;
        runner[static_cast<size_t>(i)] = t;
      }
    });
    int64_t taken_over = 0;  // indices of thread 1's share that another thread ran
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "threads=" << threads << " i=" << i;
      if (i >= n / threads && i < 2 * n / threads && runner[static_cast<size_t>(i)] != 1) ++taken_over;
    }
    // Thread 1 ran its first step while the others finished their shares and most of its own.
    EXPECT_GT(taken_over, n / threads / 2) << "threads=" << threads;
  }
}

}  // namespace
}  // namespace gem4
