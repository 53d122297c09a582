#include "model/attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/attention_ops.h"
#include "kernels/convert.h"
#include "kernels/llama_order.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/thread_pool.h"

namespace gem4 {

namespace {

// The keys and values one sequence's query rows may read: pointers to the cache rows (in the cache's
// element type) indexed by position - first. The kernels read F16/BF16/Q8_0 rows directly.
struct SeqKeys {
  int first = 0, last = -1;  // positions [first, last]
  std::vector<const void*> k, v;
  std::vector<float> k_buf, v_buf;  // the rows converted to f32, for prompts (see attend)
};

GgmlType element_type(KvType t) {
  switch (t) {
    case KvType::F16:
      return GgmlType::F16;
    case KvType::BF16:
      return GgmlType::BF16;
    case KvType::Q8_0:
      return GgmlType::Q8_0;
    default:
      return GgmlType::F32;
  }
}

// Attention over an F32 cache as llama.cpp's CPU backend computes it without flash attention, for a
// single sequence whose cache cell is its position: scores k.q in ggml_vec_dot_f32's order (its query
// is a strided view, so never tinyBLAS), the masked softmax with ggml's exp summed 16 cells at a time
// into a double and scaled by float(1 / sum), then the value sums over the cells in the order of a
// product with `batch_cols` activation columns. Cells outside a row's view weigh exactly 0, so the
// cache's padding to 256 cells changes nothing and the sums run over whole blocks of 64 cells.
double attend_llama_order(const float* q, int n, const int32_t* pos, const int32_t* seq,
                          const AttentionShape& s, const KvCache& kv, int slot, float* out, ThreadPool* pool,
                          const int32_t* hi_pos, int batch_cols) {
  const int hd = s.head_dim, group = s.n_head / s.n_kv_heads, qw = s.n_head * hd;
  std::atomic<int64_t> scored{0};
  parallel_for(pool, n, 1, [&](int64_t r0, int64_t r1, int) {
    std::vector<float> p, vcol;
    for (int64_t r = r0; r < r1; ++r) {
      const int lo = s.window > 0 ? std::max(0, pos[r] - s.window + 1) : 0;
      const int hi = hi_pos ? hi_pos[r] : pos[r];
      const int cells = (hi + 1 + 63) / 64 * 64;
      p.assign(cells, 0.0f), vcol.assign(cells, 0.0f);
      for (int h = 0; h < s.n_head; ++h) {
        const int g = h / group;
        const float* qh = q + r * qw + int64_t(h) * hd;
        float mx = -std::numeric_limits<float>::infinity();
        for (int c = lo; c <= hi; ++c) {
          const auto* k = static_cast<const float*>(kv.k_row(slot, seq[r], kv.cell_of(slot, c))) + g * hd;
          p[c] = llama_dot_f32(k, qh, hd, false);
          mx = std::max(mx, p[c]);
        }
        double sum = 0;
        float blk[16];
        for (int c0 = (lo / 16) * 16; c0 <= hi; c0 += 16) {
          for (int j = 0; j < 16; ++j) {
            const int c = c0 + j;
            blk[j] = p[c] = c >= lo && c <= hi ? llama_expf(p[c] - mx) : 0.0f;
          }
          sum += double(llama_reduce16(blk));
        }
        const float inv = float(1.0 / sum);
        for (int c = lo; c <= hi; ++c) p[c] *= inv;
        float* o = out + r * qw + int64_t(h) * hd;
        for (int d = 0; d < hd; ++d) {
          for (int c = lo; c <= hi; ++c)
            vcol[c] = static_cast<const float*>(kv.v_row(slot, seq[r], kv.cell_of(slot, c)))[g * hd + d];
          o[d] = llama_dot_f32(vcol.data(), p.data(), cells, batch_cols >= 2);
        }
        std::fill(p.begin() + lo, p.begin() + hi + 1, 0.0f);
      }
      scored += int64_t(hi - lo + 1) * s.n_head;
    }
  });
  return double(scored.load()) * hd * 2;
}

}  // namespace

double attend(const float* q, int n, const int32_t* pos, const int32_t* seq, const AttentionShape& s,
              const KvCache& kv, int slot, bool crop, const int* kv_len, float* out, ThreadPool* pool,
              const int32_t* hi_pos, int llama_cols) {
  if (llama_cols > 0 && kv.type() == KvType::F32)
    return attend_llama_order(q, n, pos, seq, s, kv, slot, out, pool, hi_pos, llama_cols);
  const int hd = s.head_dim, group = s.n_head / s.n_kv_heads, qw = s.n_head * hd;
  const int width = kv.row_width(slot);

  // Which positions each row visits: [lo, hi]; visible are [vis_lo, vis_hi] (vis_hi: pos, or the end
  // of the row's image).
  auto vis_hi_of = [&](int r) { return hi_pos ? hi_pos[r] : pos[r]; };
  auto range = [&](int r, int& lo, int& hi, int& vis_lo) {
    const int p = pos[r];
    vis_lo = s.window > 0 ? std::max(0, p - s.window + 1) : 0;
    lo = vis_lo, hi = vis_hi_of(r);
    if (!crop) {
      hi = kv_len[seq[r]] - 1;
      lo = s.window > 0 ? std::max(0, kv_len[seq[r]] - kv.capacity(slot)) : 0;
    }
  };
  // Gather, per sequence present, the union of positions its rows visit.
  // Kept between calls (per thread), not reallocated for every layer.
  // (A reference, so that the worker threads below read this thread's copy, not their own.)
  thread_local std::vector<SeqKeys> per_thread_keys;
  std::vector<SeqKeys>& keys = per_thread_keys;
  keys.resize(std::max<size_t>(keys.size(), size_t(kv.n_seq())));
  for (SeqKeys& sk : keys) sk.first = 0, sk.last = -1;
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
  // F16/BF16 rows: a prompt's many query rows read each key many times, so the range is converted to
  // f32 once per call (in parallel); a few decode rows read the cache directly. Both give the same
  // bits (the kernels convert exactly). Q8_0 rows are always read as they are: the scores are int8
  // products with the query quantized to Q8_0 (as llama.cpp computes them), which f32 keys would not
  // reproduce, and the value kernels widen the blocks in registers.
  // BF16 keys stay BF16 where the matrix products of BF16 take the bf16 dot product (bf16_dot_active:
  // the query rounded to bf16, as llama.cpp does), which f32 keys would not reproduce: converted, a
  // prompt's scores differed from the same rows' scores in decode.
  const bool convert = (kv.type() == KvType::F16 || kv.type() == KvType::BF16) && n > 4;
  const bool convert_keys = convert && !(kv.type() == KvType::BF16 && bf16_dot_active());
  const GgmlType stored = element_type(kv.type());
  const GgmlType key_type = convert_keys ? GgmlType::F32 : stored,
                 value_type = convert ? GgmlType::F32 : stored;
  const size_t key_row_bytes = ggml_row_bytes(key_type, width);
  const bool bf16 = kv.type() == KvType::BF16;
  auto to_f32 = [&](const void* row, float* dst) {
    const auto* r = static_cast<const uint16_t*>(row);
    bf16 ? convert_bf16_to_f32(r, dst, width) : convert_f16_to_f32(r, dst, width);
  };
  for (int sq = 0; sq < kv.n_seq(); ++sq) {
    SeqKeys& sk = keys[sq];
    if (sk.last < sk.first) continue;
    const int nk = sk.last - sk.first + 1;
    sk.k.resize(nk), sk.v.resize(nk);
    for (int j = 0; j < nk; ++j) {
      const int cell = kv.cell_of(slot, sk.first + j);
      sk.k[j] = kv.k_row(slot, sq, cell);
      sk.v[j] = kv.v_row(slot, sq, cell);
    }
    if (!convert) continue;
    if (convert_keys) sk.k_buf.resize(size_t(nk) * width);
    sk.v_buf.resize(size_t(nk) * width);
    parallel_for(pool, nk, 16, [&](int64_t b, int64_t e, int) {
      for (int64_t j = b; j < e; ++j) {
        if (convert_keys) to_f32(sk.k[j], sk.k_buf.data() + j * width);
        to_f32(sk.v[j], sk.v_buf.data() + j * width);
      }
    });
    for (int j = 0; j < nk; ++j) {
      if (convert_keys) sk.k[j] = sk.k_buf.data() + size_t(j) * width;
      sk.v[j] = sk.v_buf.data() + size_t(j) * width;
    }
  }

  // Tasks: blocks of up to kRowBlock consecutive rows of one sequence, times KV heads. A block's query
  // heads are scored together in one matrix product over the union of the rows' key ranges, so each
  // run of keys is laid out for the kernel once per block rather than once per row (with causal rows
  // the union adds at most kRowBlock - 1 keys, whose scores are simply not used). Softmax and the
  // weighted sum of values then run over each row's own range, so a row's result does not depend on
  // which rows share its block.
  constexpr int kRowBlock = 8;
  // Keys per run of the value sums (below): with F32 value rows of 512 columns 256 KiB, which stays in
  // a core's L2 while the block's rows take their share.
  constexpr int kValueKeys = 128;
  std::vector<std::pair<int, int>> blocks;
  for (int r = 0; r < n;) {
    int e = r + 1;
    while (e < n && e - r < kRowBlock && seq[e] == seq[r]) ++e;
    blocks.emplace_back(r, e);
    r = e;
  }
  std::atomic<int64_t> scored{0};
  // With a single task (decode of a model with one KV head) the task itself uses the threads: keys are
  // split among them for the scores, value columns for the weighted sums, neither changing any result.
  const int64_t n_tasks = int64_t(blocks.size()) * s.n_kv_heads;
  ThreadPool* inner = n_tasks == 1 ? pool : nullptr;
  // Handed out one at a time, the last blocks first: a causal prompt's later rows see more keys, so
  // with the tasks split in halves the thread holding the second half had three times the work of the
  // other (E2B pp512, AVX-512: the value sums alone 9 % of the prompt's samples).
  auto run_tasks = [&](int64_t begin, int64_t end, int) {
    thread_local std::vector<float> scores, qbuf;
    int64_t local_scored = 0;
    for (int64_t order = begin; order < end; ++order) {
      const int64_t task = n_tasks - 1 - order;
      const auto [rb, re] = blocks[size_t(task / s.n_kv_heads)];
      const int g = int(task % s.n_kv_heads);
      const SeqKeys& sk = keys[seq[rb]];
      int ulo = 0, uhi = -1;
      for (int r = rb; r < re; ++r) {
        int lo, hi, vis_lo;
        range(r, lo, hi, vis_lo);
        ulo = r == rb ? lo : std::min(ulo, lo);
        uhi = r == rb ? hi : std::max(uhi, hi);
      }
      const int nk = uhi - ulo + 1;
      const int q_rows = (re - rb) * group;
      // The block's query heads of this KV group, [q_rows][hd]; scores is [q_rows][nk].
      qbuf.resize(size_t(q_rows) * hd);
      for (int r = rb; r < re; ++r) {
        const float* src = q + int64_t(r) * qw + int64_t(g) * group * hd;
        std::copy(src, src + size_t(group) * hd, qbuf.begin() + size_t(r - rb) * group * hd);
      }
      scores.resize(size_t(q_rows) * nk);
      // Scores against every key of the union: an f32 matrix product over runs of keys that sit
      // contiguously in memory (the whole range, except where a sliding ring wraps). Scale 1.0 (spec
      // 2.4 step 4).
      for (int j0 = 0; j0 < nk;) {
        const int base = ulo + j0 - sk.first;
        int len = 1;
        const auto* first_key = static_cast<const uint8_t*>(sk.k[base]);
        while (j0 + len < nk && sk.k[base + len] == first_key + size_t(len) * key_row_bytes) ++len;
        MatrixView keys_view;
        keys_view.type = key_type;
        keys_view.data = first_key + ggml_row_bytes(key_type, int64_t(g) * hd);
        keys_view.in = hd;
        keys_view.out = len;
        keys_view.row_bytes = key_row_bytes;
        matmul(keys_view, qbuf.data(), q_rows, hd, scores.data() + j0, nk, inner);
        j0 += len;
      }
      for (int r = rb; r < re; ++r) {
        int lo, hi, vis_lo;
        range(r, lo, hi, vis_lo);
        const int p = vis_hi_of(r);
        const int nk_r = hi - lo + 1;
        local_scored += int64_t(nk_r) * group;
        float* sr = scores.data() + size_t(r - rb) * group * nk + (lo - ulo);  // [group][nk], row's range
        for (int h = 0; h < group; ++h) {
          float* sh = sr + size_t(h) * nk;
          if (lo < vis_lo || hi > p) {  // without mask cropping: mask what the row may not see
            for (int j = 0; j < nk_r; ++j) {
              const int kp = lo + j;
              if (kp < vis_lo || kp > p) sh[j] = -std::numeric_limits<float>::infinity();
            }
          }
          softmax(sh, nk_r);
        }
      }
      // The weighted sums of the values, run by run of kValueKeys keys, every row of the block taking
      // its part of a run before the next run starts: a run's value rows are read from memory once per
      // block and then from cache, not once per row (a row of a long prompt reads every value row of
      // its range: at 16K positions 32 MiB per row and full layer). Each row's sums continue from run
      // to run in order of keys (accumulate), so the bits are those of one call over its range. With a
      // single task the columns are split among the threads. One row (decode) takes runs too: AVX2's
      // tile (4 heads x 16 columns) passes over the keys four times per 32 columns, and within a run
      // those passes read the values from L1/L2 instead of striding through the whole range again
      // (E2B Q4_0 at 4096 positions, `avx2`, tokens alternated: 0.93 of the time; `avx512` 1.006).
      const float* block_scores = scores.data();  // this thread's (scores is thread_local)
      parallel_for(inner, hd, 64, [&](int64_t d0, int64_t d1, int) {
        for (int k0 = ulo; k0 <= uhi; k0 += kValueKeys) {  // the run of keys [k0, k1)
          const int k1 = std::min(uhi + 1, k0 + kValueKeys);
          for (int r = rb; r < re; ++r) {
            int lo, hi, vis_lo;
            range(r, lo, hi, vis_lo);
            const int a = std::max(lo, k0), b = std::min(hi + 1, k1);
            if (a >= b) continue;  // every row has a key (itself), so its first run starts the sums
            const float* sr = block_scores + size_t(r - rb) * group * nk + (a - ulo);
            float* o = out + int64_t(r) * qw + int64_t(g) * group * hd + d0;
            weighted_value_sum(sr, nk, group, value_type, &sk.v[a - sk.first], int64_t(g) * hd + d0, b - a,
                               int(d1 - d0), o, hd, a > lo);
          }
        }
      });
    }
    scored += local_scored;
  };
  if (pool) {
    pool->parallel_for_dynamic(n_tasks, 1, run_tasks);
  } else {
    run_tasks(0, n_tasks, 0);
  }
  return double(scored.load()) * hd * 2;  // QK and PV multiply-adds
}

}  // namespace gem4
