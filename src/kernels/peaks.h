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

}  // namespace gem4
