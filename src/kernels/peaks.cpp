#include "kernels/peaks.h"

#include "kernels/cpu_features.h"

namespace gem4 {

MachinePeaks measure_peaks_avx512(ThreadPool* pool);  // peaks_avx512.cpp
double measure_int8_peak_quick_avx512(ThreadPool* pool);
double measure_read_bandwidth_quick_avx512(ThreadPool* pool);

MachinePeaks measure_peaks(ThreadPool* pool) {
  // The loops use AVX-512 instructions; other CPUs report zeros (no peak to compare against).
  if (!cpu_features().avx512f) return MachinePeaks{};
  return measure_peaks_avx512(pool);
}

double measure_int8_peak_quick(ThreadPool* pool) {
  if (!cpu_features().avx512f || !cpu_features().avx512vnni) return 0;
  return measure_int8_peak_quick_avx512(pool);
}

double measure_read_bandwidth_quick(ThreadPool* pool) {
  if (!cpu_features().avx512f) return 0;
  return measure_read_bandwidth_quick_avx512(pool);
}

}  // namespace gem4
