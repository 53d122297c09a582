// This machine's compute and bandwidth peaks, measured with tight loops of the running kernel set's
// instructions (active_isa(): GEM4_ISA=avx2 measures what the AVX2 kernels can reach, not what the CPU's
// widest instructions could), so `gem4 bench --roofline` can print achieved throughput as a fraction of
// what that set can do on this CPU.
//   Avx512   int8 vpdpbusd zmm (64 MACs each), bf16 vdpbf16ps zmm (32, 0 without AVX512_BF16),
//            fp32 vfmadd zmm (16), 512-bit loads or 256-bit ones, whichever read faster
//   AvxVnni  int8 vpdpbusd ymm (32), no bf16 dot (0), fp32 vfmadd ymm (8), 256-bit loads
//   Avx2     int8 vpmaddubsw ymm (32 MACs counted per instruction; its int16 sums are added with vpaddw
//            and widened with one vpmaddwd per four, as in the kernels: see peaks_avx2.cpp), no bf16 (0),
//            fp32 vfmadd ymm (8), 256-bit loads
//   Scalar   compute peaks 0: the scalar kernels are plain loops whose instructions the compiler picks
//            (it may vectorize them), so no instruction sequence stands for them; read bandwidth with
//            64-bit general-register loads
#pragma once
#include <cstddef>
#include <vector>

#include "kernels/byte_span.h"

namespace gem4 {

class ThreadPool;

struct MachinePeaks {
  double int8_gmacs = 0;   // the set's int8 dot instruction: multiply-accumulates per second, all threads
  double bf16_gmacs = 0;   // the set's bf16 dot instruction (vdpbf16ps in Avx512 only), 0 without one
  double fp32_gflops = 0;  // the set's f32 FMA, counted as multiply-adds (GMAC/s)
  double read_gbs = 0;     // streaming read bandwidth with the set's loads (above) over a page-aligned
                           // buffer much larger than the caches, all threads
  const char* kernel_set = "";  // isa_name() of the set measured
  const char* int8_instr = "";  // "vpdpbusd zmm", ... ("none" for Scalar)
  const char* read_instr = "";  // "256-bit loads", ...
};

// Takes about a second. Peaks the running set has no instruction for are 0.
MachinePeaks measure_peaks(ThreadPool* pool);

// The two peaks the roofline divides by, measured quickly (~0.1 s each, fewer repetitions than
// measure_peaks) so that a benchmark can measure them again between its repetitions and divide by the
// highest seen: on a shared machine whose speed drifts, one measurement may fall in a slow moment.
// Same instructions as measure_peaks (the running set's).
double measure_int8_peak_quick(ThreadPool* pool);       // G MAC/s, 0 for the Scalar set
double measure_read_bandwidth_quick(ThreadPool* pool);  // GB/s

// GB/s reading `spans` where they lie with the same loops (each span shared out among the threads, one
// barrier per pass, best of `passes`; 0 when there is nothing to read). `gem4 bench --roofline`
// gives it the weights one decoded token streams: on a VM whose memory reads at different speeds in
// different places, a 256 MiB buffer can land somewhere faster or slower than the weights, and a plain
// read of the weights themselves says what decode could reach. Spans that fit in the caches are read
// from them after the first pass: one pass each, with other reads in between, keeps them cold.
double measure_read_bandwidth_over(ThreadPool* pool, const std::vector<ByteSpan>& spans, int passes = 3);

// The read loops' own buffer must come from memory, not from the last-level cache: some hosts give a VM
// a cache as large as the buffer once was (an Emerald Rapids Xeon: 260 MiB of L3), and then read loops
// of best-of-three passes over 256 MiB reached 38-53 GB/s where 512 MiB to 4 GiB read 35.2-35.6 GB/s.
// The buffer is four times the last-level cache, at least 256 MiB and at most 1 GiB.
size_t read_buffer_bytes(size_t last_level_cache_bytes);
// The size of cpu0's largest cache (Linux sysfs, else glibc's sysconf); 0 when unknown.
size_t last_level_cache_bytes();

}  // namespace gem4
