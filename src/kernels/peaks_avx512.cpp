// Peak loops. Each runs many independent accumulator chains (more than the instruction latency times
// the issue width) so the loop is bound by throughput, not latency; results feed a volatile sink so
// the compiler cannot drop the work.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/peaks.h"
#include "kernels/thread_pool.h"

namespace gem4 {

namespace {

using Clock = std::chrono::steady_clock;
volatile float g_sink;

// Horizontal sums through memory: GCC 12's _mm512_reduce_* trip -Wuninitialized.
float hsum(__m512 v) {
  alignas(64) float t[16];
  _mm512_store_ps(t, v);
  float s = 0;
  for (float x : t) s += x;
  return s;
}
float hsum_i32(__m512i v) {
  alignas(64) int32_t t[16];
  _mm512_store_si512(t, v);
  int64_t s = 0;
  for (int32_t x : t) s += x;
  return float(s);
}

double int8_loop(int64_t iters) {
  __m512i acc[12];
  for (auto& a : acc) a = _mm512_setzero_si512();
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(5);
  for (int64_t i = 0; i < iters; ++i)
    for (auto& x : acc) x = _mm512_dpbusd_epi32(x, a, b);
  __m512i s = acc[0];
  for (int k = 1; k < 12; ++k) s = _mm512_add_epi32(s, acc[k]);
  g_sink = hsum_i32(s);
  return double(iters) * 12 * 64;  // 64 int8 MACs per instruction
}

double bf16_loop(int64_t iters) {
  __m512 acc[12];
  for (auto& a : acc) a = _mm512_setzero_ps();
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3f80);
  for (int64_t i = 0; i < iters; ++i)
    for (auto& x : acc) x = _mm512_dpbf16_ps(x, a, b);
  __m512 s = acc[0];
  for (int k = 1; k < 12; ++k) s = _mm512_add_ps(s, acc[k]);
  g_sink = hsum(s);
  return double(iters) * 12 * 32;
}

double fp32_loop(int64_t iters) {
  __m512 acc[12];
  for (auto& a : acc) a = _mm512_setzero_ps();
  const __m512 a = _mm512_set1_ps(1.0001f), b = _mm512_set1_ps(0.9999f);
  for (int64_t i = 0; i < iters; ++i)
    for (auto& x : acc) x = _mm512_fmadd_ps(x, a, b);
  __m512 s = acc[0];
  for (int k = 1; k < 12; ++k) s = _mm512_add_ps(s, acc[k]);
  g_sink = hsum(s);
  return double(iters) * 12 * 16;
}

// Runs `loop` on every thread for a fixed number of iterations; returns ops/s summed over threads.
template <typename Loop>
double measure(ThreadPool* pool, Loop loop, int64_t iters, int reps = 20) {
  const int n = pool ? pool->size() : 1;
  double best = 0;
  // Best of many short runs (~10 ms each): on a shared machine a neighbour's burst lowers some of
  // them, and a peak must not be underestimated (that would flatter every fraction of it).
  for (int rep = 0; rep < reps; ++rep) {
    std::vector<double> ops(n, 0);
    const auto t0 = Clock::now();
    if (pool) pool->run_on_all([&](int t) { ops[t] = loop(iters); });
    else ops[0] = loop(iters);
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    double total = 0;
    for (double o : ops) total += o;
    best = std::max(best, total / secs);
  }
  return best;
}

double read_bandwidth(ThreadPool* pool, std::vector<uint8_t>& buf, int passes) {
  const size_t bytes = buf.size();
  const int n = pool ? pool->size() : 1;
  double best = 0;
  for (int rep = 0; rep < passes; ++rep) {  // best of several passes, for the same reason
    std::vector<float> sums(n, 0);
    const auto t0 = Clock::now();
    auto body = [&](int t) {
      const size_t chunk = bytes / n;
      const __m512i* p = reinterpret_cast<const __m512i*>(buf.data() + chunk * t);
      __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
      for (size_t i = 0; i + 4 <= chunk / 64; i += 4) {
        s0 = _mm512_add_epi64(s0, _mm512_loadu_si512(p + i));
        s1 = _mm512_add_epi64(s1, _mm512_loadu_si512(p + i + 1));
        s2 = _mm512_add_epi64(s2, _mm512_loadu_si512(p + i + 2));
        s3 = _mm512_add_epi64(s3, _mm512_loadu_si512(p + i + 3));
      }
      s0 = _mm512_add_epi64(_mm512_add_epi64(s0, s1), _mm512_add_epi64(s2, s3));
      sums[t] = hsum_i32(s0);
    };
    if (pool) pool->run_on_all(body);
    else body(0);
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    g_sink = sums[0];
    best = std::max(best, double(bytes) / secs);
  }
  return best;
}

}  // namespace

// Called only when the CPU has AVX-512F (see peaks.cpp).
MachinePeaks measure_peaks_avx512(ThreadPool* pool) {
  MachinePeaks p;
  const CpuFeatures& f = cpu_features();
  const int64_t iters = 4'000'000;
  if (f.avx512vnni) p.int8_gmacs = measure(pool, int8_loop, iters) / 1e9;
  if (f.avx512bf16) p.bf16_gmacs = measure(pool, bf16_loop, iters) / 1e9;
  p.fp32_gflops = measure(pool, fp32_loop, iters) / 1e9;
  std::vector<uint8_t> buf(size_t(512) << 20, 1);  // 512 MiB: far beyond the caches
  p.read_gbs = read_bandwidth(pool, buf, 8) / 1e9;
  return p;
}

double measure_int8_peak_quick_avx512(ThreadPool* pool) { return measure(pool, int8_loop, 4'000'000, 8) / 1e9; }

double measure_read_bandwidth_quick_avx512(ThreadPool* pool) {
  // 256 MiB kept between calls (allocating and faulting it in would cost more than the measurement).
  static std::vector<uint8_t> buf(size_t(256) << 20, 1);
  return read_bandwidth(pool, buf, 3) / 1e9;
}

}  // namespace gem4
