// This machine's compute and bandwidth peaks, measured with tight loops, so `gem4 bench --roofline`
// can print achieved throughput as a fraction of what the CPU can do.
#pragma once

namespace gem4 {

class ThreadPool;

struct MachinePeaks {
  double int8_gmacs = 0;   // vpdpbusd (AVX-512 VNNI) multiply-accumulates per second, all threads
  double bf16_gmacs = 0;   // vdpbf16ps
  double fp32_gflops = 0;  // vfmadd, counted as multiply-adds (GMAC/s)
  double read_gbs = 0;     // streaming read bandwidth over a buffer much larger than the caches
};

// Takes about a second. Peaks for instructions the CPU lacks are 0.
MachinePeaks measure_peaks(ThreadPool* pool);

// The two peaks the roofline divides by, measured quickly (~0.1 s each, fewer repetitions than
// measure_peaks) so that a benchmark can measure them again between its repetitions and divide by the
// highest seen: on a shared machine whose speed drifts, one measurement may fall in a slow moment.
double measure_int8_peak_quick(ThreadPool* pool);      // G MAC/s, 0 without AVX-512 VNNI
double measure_read_bandwidth_quick(ThreadPool* pool);  // GB/s, 0 without AVX-512

}  // namespace gem4
