#include "model/attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/ops.h"
#include "kernels/thread_pool.h"

namespace gem4 {

namespace {

// Dot product with independent accumulators so the compiler can vectorise it without -ffast-math.
inline float dot16(const float* a, const float* b, int n) {
  float acc[16] = {0};
  int i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) acc[j] += a[i + j] * b[i + j];
  float s = 0;
  for (; i < n; ++i) s += a[i] * b[i];
  for (int j = 0; j < 16; ++j) s += acc[j];
  return s;
}

inline void axpy16(float a, const float* x, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] += a * x[i];
}

}  // namespace

double attend(const float* q, int n, const int32_t* pos, const int32_t* seq, const AttentionShape& s,
              const KvCache& kv, int slot, bool crop, const int* kv_len, float* out, ThreadPool* pool) {
  const int hd = s.head_dim, group = s.n_head / s.n_kv_heads, qw = s.n_head * hd;
  const bool f32_cache = kv.type() == KvType::F32;
  const int width = kv.row_width(slot);
  std::atomic<int64_t> scored{0};

  parallel_for(pool, int64_t(n) * s.n_kv_heads, 1, [&](int64_t begin, int64_t end, int) {
    thread_local std::vector<float> scores, kbuf, vbuf;
    for (int64_t task = begin; task < end; ++task) {
      const int r = int(task / s.n_kv_heads), g = int(task % s.n_kv_heads);
      const int p = pos[r], sq = seq[r];
      // Keys visited: [lo, hi]. Visible keys: [vis_lo, p].
      const int vis_lo = s.window > 0 ? std::max(0, p - s.window + 1) : 0;
      int lo = vis_lo, hi = p;
      if (!crop) {
        hi = kv_len[sq] - 1;
        lo = s.window > 0 ? std::max(0, kv_len[sq] - kv.capacity(slot)) : 0;
      }
      const int nk = hi - lo + 1;
      scored += int64_t(nk) * group;
      scores.resize(size_t(group) * nk);
      if (!f32_cache) {
        kbuf.resize(width);
        vbuf.resize(width);
      }
      const float* qg = q + int64_t(r) * qw + int64_t(g) * group * hd;
      for (int j = 0; j < nk; ++j) {
        const int kp = lo + j;
        const int cell = kv.cell_of(slot, kp);
        const float* k;
        if (f32_cache) {
          k = static_cast<const float*>(kv.k_row(slot, sq, cell)) + g * hd;
        } else {
          kv.read_k(slot, sq, cell, kbuf.data());
          k = kbuf.data() + g * hd;
        }
        const bool visible = kp >= vis_lo && kp <= p;
        for (int h = 0; h < group; ++h) {
          const float sc = dot16(qg + h * hd, k, hd);  // scale 1.0 (spec 2.4 step 4)
          scores[size_t(h) * nk + j] = visible ? sc : -std::numeric_limits<float>::infinity();
        }
      }
      for (int h = 0; h < group; ++h) {
        float* sh = scores.data() + size_t(h) * nk;
        softmax(sh, nk);
        float* o = out + int64_t(r) * qw + int64_t(g * group + h) * hd;
        std::fill(o, o + hd, 0.0f);
      }
      for (int j = 0; j < nk; ++j) {
        const int cell = kv.cell_of(slot, lo + j);
        const float* v;
        if (f32_cache) {
          v = static_cast<const float*>(kv.v_row(slot, sq, cell)) + g * hd;
        } else {
          kv.read_v(slot, sq, cell, vbuf.data());
          v = vbuf.data() + g * hd;
        }
        for (int h = 0; h < group; ++h) {
          const float w = scores[size_t(h) * nk + j];
          if (w != 0.0f) axpy16(w, v, out + int64_t(r) * qw + int64_t(g * group + h) * hd, hd);
        }
      }
    }
  });
  return double(scored.load()) * hd * 2;  // QK and PV multiply-adds
}

}  // namespace gem4
