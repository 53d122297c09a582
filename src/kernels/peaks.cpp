#include "kernels/peaks.h"

#include "kernels/cpu_features.h"

namespace gem4 {

MachinePeaks measure_peaks_avx512(ThreadPool* pool);  // peaks_avx512.cpp

MachinePeaks measure_peaks(ThreadPool* pool) {
  // The loops use AVX-512 instructions; other CPUs report zeros (no peak to compare against).
  if (!cpu_features().avx512f) return MachinePeaks{};
  return measure_peaks_avx512(pool);
}

}  // namespace gem4
