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

// n panels handed out over the pool as fn(p0, p1, thread) in shares (parallel_for_shares): each thread
// reads its contiguous share in runs of a quarter of what is left of it (whole steps), down to `step`
// panels, then takes over the back half of what another has left. `step` is the kernel's streams with
// one activation row (a step's panels are read at once, in streams), else two panels (on an Ice Lake
// Xeon single panels at the end of each call had cost 1-2 % of an E2B token). The quarter runs replaced
// runs of one step each on 2026-12-07 (Zen 5 VM, decoded tokens alternated in one `gem4 bench -p 0 -n
// 128 -r 2 --prune 1`, medians of 63 pairs, old over new, where an A/A run of the same switch gave
// 0.985-1.001): AVX-512 E2B Q4_0 1.010, 1.018, E4B Q4_0 1.000, 1.004, E2B Q4_K_M 1.000, 1.009, AVX-VNNI
// E2B Q4_0 1.005, 1.020; with the two the other way round (new over old) AVX-512 E2B Q4_0 0.972-0.980,
// E4B 0.977, 0.985, Q4_K_M 0.976, 0.978, Q8_0 0.980, 0.986, 26B-A4B 0.987, 0.996, forced AVX2 E2B Q4_0
// 0.970, 0.975, Q4_K_M 0.976, 0.980: about 1.5 % faster, one lock cmpxchg and one call of the kernel's
// chunk function per run instead of per step (perf had put ~3 % of the token's samples on that
// exchange). Until 2026-12-07 the panels were handed out guided (chunks of a quarter, then 3/16,
// ... of what was left, down to single panels or pairs): each chunk a new stream and the threads'
// chunks interleaved in memory, which cost most in the small products (a 1536 x 256 Q4_0 GEMV, 221 KB,
// took ~13 hand-outs). Zen 5 VM, AVX-512, Q4_0, rotated copies (cold weights), the two alternated in
// one process (medians of 10 rounds, time with shares over guided): 1536 x 256 0.64, 1536 x 2048 0.87,
// 12288 x 1536 0.93, 262144 x 1536 0.97. Decoded tokens alternated between them in one `gem4 bench -p 0
// -n 128 -r 2 --prune 1` (medians of 128 pairs' time ratios, shares over guided): E2B Q4_0 0.976, Q4_K_M
// 0.981, E4B Q4_0 0.987, 26B-A4B Q4_0 0.979, 0.982, 1.007; forced AVX2 E2B Q4_0 0.978, Q4_K_M 0.980, E4B
// 0.999; AVX-VNNI E2B Q4_0 0.972. E2B Q8_0 lost a little (1.003, 1.009, 1.009; steps of 4 or 8 panels no
// better). An earlier trial of shares, measured on 26B-A4B alone, had found no gain there (1.004-1.007
// in 1-panel steps, 0.997 in 4-panel steps). An equal static split lost on the large products (12288 x
// 1536: 1.17x the time: a thread slowed down holds the barrier) and the token (1.05x).
inline int64_t decode_panel_step(int64_t rows, int streams) { return rows == 1 ? std::max(2, streams) : 2; }

template <class Fn>
void hand_out_panels(ThreadPool* pool, int64_t n, int64_t step, Fn&& fn) {
  parallel_for_shares(pool, n, step, fn);
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
  hand_out_panels(pool, panels, decode_panel_step(rows, kStreams), [&](int64_t p0, int64_t p1, int) {
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
