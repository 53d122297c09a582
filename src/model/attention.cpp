#include "model/attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/convert.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/thread_pool.h"

namespace gem4 {

namespace {

inline void axpy(float a, const float* x, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] += a * x[i];
}

// The keys and values one sequence's query rows may read, as f32 rows indexed by position - first.
// For an f32 cache these point into the cache; for f16/bf16 the range is converted once per call
// (not once per query row and head).
struct SeqKeys {
  int first = 0, last = -1;  // positions [first, last]
  std::vector<const float*> k, v;
  std::vector<float> k_buf, v_buf;
};

}  // namespace

double attend(const float* q, int n, const int32_t* pos, const int32_t* seq, const AttentionShape& s,
              const KvCache& kv, int slot, bool crop, const int* kv_len, float* out, ThreadPool* pool) {
  const int hd = s.head_dim, group = s.n_head / s.n_kv_heads, qw = s.n_head * hd;
  const int width = kv.row_width(slot);

  // Which positions each row visits: [lo, hi]; visible are [vis_lo, pos].
  auto range = [&](int r, int& lo, int& hi, int& vis_lo) {
    const int p = pos[r];
    vis_lo = s.window > 0 ? std::max(0, p - s.window + 1) : 0;
    lo = vis_lo, hi = p;
    if (!crop) {
      hi = kv_len[seq[r]] - 1;
      lo = s.window > 0 ? std::max(0, kv_len[seq[r]] - kv.capacity(slot)) : 0;
    }
  };
  // Gather, per sequence present, the union of positions its rows visit.
  std::vector<SeqKeys> keys(kv.n_seq());
  for (int r = 0; r < n; ++r) {
    int lo, hi, vis_lo;
    range(r, lo, hi, vis_lo);
    SeqKeys& sk = keys[seq[r]];
    if (sk.last < sk.first) {
      sk.first = lo, sk.last = hi;
    } else {
      sk.first = std::min(sk.first, lo), sk.last = std::max(sk.last, hi);
    }
  }
  for (int sq = 0; sq < kv.n_seq(); ++sq) {
    SeqKeys& sk = keys[sq];
    if (sk.last < sk.first) continue;
    const int nk = sk.last - sk.first + 1;
    sk.k.resize(nk), sk.v.resize(nk);
    if (kv.type() == KvType::F32) {
      for (int j = 0; j < nk; ++j) {
        const int cell = kv.cell_of(slot, sk.first + j);
        sk.k[j] = static_cast<const float*>(kv.k_row(slot, sq, cell));
        sk.v[j] = static_cast<const float*>(kv.v_row(slot, sq, cell));
      }
      continue;
    }
    sk.k_buf.resize(size_t(nk) * width), sk.v_buf.resize(size_t(nk) * width);
    const bool bf16 = kv.type() == KvType::BF16;
    parallel_for(pool, nk, 16, [&](int64_t b, int64_t e, int) {
      for (int64_t j = b; j < e; ++j) {
        const int cell = kv.cell_of(slot, sk.first + int(j));
        const auto* kr = static_cast<const uint16_t*>(kv.k_row(slot, sq, cell));
        const auto* vr = static_cast<const uint16_t*>(kv.v_row(slot, sq, cell));
        float* kd = sk.k_buf.data() + j * width;
        float* vd = sk.v_buf.data() + j * width;
        if (bf16) {
          convert_bf16_to_f32(kr, kd, width), convert_bf16_to_f32(vr, vd, width);
        } else {
          convert_f16_to_f32(kr, kd, width), convert_f16_to_f32(vr, vd, width);
        }
      }
    });
    for (int j = 0; j < nk; ++j) {
      sk.k[j] = sk.k_buf.data() + size_t(j) * width;
      sk.v[j] = sk.v_buf.data() + size_t(j) * width;
    }
  }

  std::atomic<int64_t> scored{0};
  parallel_for(pool, int64_t(n) * s.n_kv_heads, 1, [&](int64_t begin, int64_t end, int) {
    thread_local std::vector<float> scores;
    int64_t local_scored = 0;
    for (int64_t task = begin; task < end; ++task) {
      const int r = int(task / s.n_kv_heads), g = int(task % s.n_kv_heads);
      const SeqKeys& sk = keys[seq[r]];
      int lo, hi, vis_lo;
      range(r, lo, hi, vis_lo);
      const int p = pos[r];
      const int nk = hi - lo + 1;
      local_scored += int64_t(nk) * group;
      scores.resize(size_t(group) * nk);
      const float* qg = q + int64_t(r) * qw + int64_t(g) * group * hd;
      // Scores of the group's query heads against every visited key: an f32 matrix product over runs
      // of keys that sit contiguously in memory (the whole range, except where a sliding ring wraps).
      // scores is [group][nk].
      for (int j0 = 0; j0 < nk;) {
        const int base = lo + j0 - sk.first;
        int len = 1;
        while (j0 + len < nk && sk.k[base + len] == sk.k[base] + size_t(len) * width) ++len;
        MatrixView keys_view;
        keys_view.type = GgmlType::F32;
        keys_view.data = sk.k[base] + g * hd;
        keys_view.in = hd;
        keys_view.out = len;
        keys_view.row_bytes = size_t(width) * sizeof(float);
        matmul(keys_view, qg, group, hd, scores.data() + j0, nk, nullptr);  // scale 1.0 (spec 2.4 step 4)
        j0 += len;
      }
      if (lo < vis_lo || hi > p) {  // without mask cropping: mask what the row may not see
        for (int j = 0; j < nk; ++j) {
          const int kp = lo + j;
          if (kp >= vis_lo && kp <= p) continue;
          for (int h = 0; h < group; ++h) scores[size_t(h) * nk + j] = -std::numeric_limits<float>::infinity();
        }
      }
      for (int h = 0; h < group; ++h) {
        softmax(scores.data() + size_t(h) * nk, nk);
        float* o = out + int64_t(r) * qw + int64_t(g * group + h) * hd;
        std::fill(o, o + hd, 0.0f);
      }
      for (int j = 0; j < nk; ++j) {
        const float* v = sk.v[lo + j - sk.first] + g * hd;
        for (int h = 0; h < group; ++h) {
          const float w = scores[size_t(h) * nk + j];
          if (w != 0.0f) axpy(w, v, out + int64_t(r) * qw + int64_t(g * group + h) * hd, hd);
        }
      }
    }
    scored += local_scored;
  });
  return double(scored.load()) * hd * 2;  // QK and PV multiply-adds
}

}  // namespace gem4
