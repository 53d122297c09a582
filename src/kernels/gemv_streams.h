// The decode GEMVs' panels in streams: the panels handed out to the threads, and a thread's chunk handed
// to a kernel that reads several at once, block by block (matmul_internal.h, kIntelStreams). Shared by
// the AVX-512 and the 256-bit kernel files and matmul_group. Each instance is local to the file that
// makes it (its callback is a lambda there), so copies compiled with different ISA flags never meet at
// link time (see matmul_internal.h).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/matmul.h"
#include "kernels/matmul_internal.h"
#include "kernels/packed_matrix.h"
#include "kernels/thread_pool.h"

namespace gem4::matmul_detail {

// The panels [p, p1) of one call's products, numbered product after product (first_panel[j]: product
// j's first panel; every product packed, panel_bytes each), handed to
// run_panels(n, panels, ys, valid) kStreams at a time while that many are left, then in halves down to
// two. Returns the first panel not handed out: fewer than two are left, for the one-panel kernel.
template <int kStreams, class RunPanels>
int64_t run_panels_in_streams(const MatmulTarget* targets, const int64_t* first_panel, size_t panel_bytes,
                              int64_t p, int64_t p1, RunPanels&& run_panels) {
  static_assert(kStreams >= 2 && kStreams <= kMaxStreams && (kStreams & (kStreams - 1)) == 0,
                "a power of two the callers' arrays hold");
  const uint8_t* panels[kMaxStreams];
  float* ys[kMaxStreams];
  int valid[kMaxStreams];
  int j = 0;
  for (int n = kStreams; n >= 2; n /= 2) {
    while (p1 - p >= n) {
      for (int s = 0; s < n; ++s, ++p) {
        while (p >= first_panel[j + 1]) ++j;
        const int64_t local = p - first_panel[j];
        panels[s] = targets[j].w.packed + size_t(local) * panel_bytes;
        ys[s] = targets[j].y + local * kPackedPanelRows;
        valid[s] = int(std::min<int64_t>(kPackedPanelRows, targets[j].w.out - local * kPackedPanelRows));
      }
      run_panels(n, panels, ys, valid);
    }
  }
  return p;
}

// n panels handed out over the pool as fn(p0, p1, thread), guided (the chunks shrink as the work runs
// out); `in_pairs` for the decode kernels in streams: every chunk but the last of an odd n is then even.
// Handed out one by one, the last guided chunks of each call were single panels, read as one stream: a
// fifth of the panels of a 1536-row product (E2B's FFN down and attention output), ~6.5 % of an E2B
// token's bytes. Ice Lake Xeon, one E2B token's products alternated in one process (100-150 pairs,
// medians of the time ratios): AVX-512 Q4_0 0.987, Q8_0 0.986; AVX2 forced Q4_0 0.978, Q4_K 0.992. A
// minimum chunk of two panels instead (odd chunks still leave one): 0.990-0.996.
template <class Fn>
void hand_out_panels(ThreadPool* pool, int64_t n, bool in_pairs, Fn&& fn) {
  const int64_t unit = in_pairs ? 2 : 1;
  parallel_for_guided(pool, (n + unit - 1) / unit, 1,
                      [&](int64_t u0, int64_t u1, int t) { fn(u0 * unit, std::min(n, u1 * unit), t); });
}

// One packed matrix's panels (panel_bytes each) handed out as above, each thread's chunk read with one
// activation row kStreams panels at a time by run_panels (run_panels_in_streams), and panel by panel by
// run_panel(panel, y, valid) where fewer are left or with more rows.
template <int kStreams, class RunPanels, class RunPanel>
void hand_out_matrix_panels(const MatrixView& w, float* y, int64_t ldy, size_t panel_bytes, int64_t rows,
                            ThreadPool* pool, RunPanels&& run_panels, RunPanel&& run_panel) {
  const int64_t panels = (w.out + kPackedPanelRows - 1) / kPackedPanelRows;
  const MatmulTarget target{w, y, ldy};
  const int64_t first_panel[2] = {0, panels};
  hand_out_panels(pool, panels, rows == 1 && kStreams > 1, [&](int64_t p0, int64_t p1, int) {
    int64_t p = p0;
    if constexpr (kStreams > 1) {
      if (rows == 1)
        p = run_panels_in_streams<kStreams>(&target, first_panel, panel_bytes, p, p1, run_panels);
    }
    for (; p < p1; ++p) {
      const int64_t o0 = p * kPackedPanelRows;
      run_panel(w.packed + size_t(p) * panel_bytes, y + o0,
                static_cast<int>(std::min<int64_t>(kPackedPanelRows, w.out - o0)));
    }
  });
}

}  // namespace gem4::matmul_detail
