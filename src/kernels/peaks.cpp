#include "kernels/peaks.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/peaks_internal.h"
#include "kernels/thread_pool.h"

namespace gem4 {

namespace {

using Clock = std::chrono::steady_clock;
volatile uint64_t g_sink;

// The Scalar set's read loop: 64-bit loads into general registers. The empty asm keeps the sums in
// registers at every step, so the compiler (-march=native) cannot turn the loop into vector loads.
uint64_t read_loop_scalar(const uint8_t* p, size_t bytes) {
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (size_t i = 0; i + 32 <= bytes; i += 32) {
    uint64_t v[4];
    std::memcpy(v, p + i, 32);
    s0 += v[0];
    s1 += v[1];
    s2 += v[2];
    s3 += v[3];
    asm("" : "+r"(s0), "+r"(s1), "+r"(s2), "+r"(s3));
  }
  return s0 + s1 + s2 + s3;
}

// The running set's loops. A set the CPU cannot run is never active (active_isa clamps).
PeakLoops loops_for(Isa isa) {
  PeakLoops l;
  switch (isa) {
#if defined(__x86_64__)
    case Isa::Avx512:
      l.int8_instr = "vpdpbusd zmm";
      l.read_instr = "512- or 256-bit loads, plain, with page-head prefetches or in 4 or 8 streams";
      l.int8 = int8_loop_avx512;
      if (cpu_features().avx512bf16) l.bf16 = bf16_loop_avx512;
      l.fp32 = fp32_loop_avx512;
      // In a slow state of a Zen 5 VM 512-bit loads read 31-32 GB/s where 256-bit ones read 37-40 (page-
      // aligned buffers; equal in its fast state), and a bandwidth taken from the slower loop would
      // flatter every fraction divided by it.
      l.reads[0] = read_loop_avx512;
      l.reads[1] = read_loop_avx2;
      l.reads[2] = read_loop_avx512_page_heads;
      l.reads[3] = read_loop_avx2_page_heads;
      l.reads[4] = read_loop_avx512_4_streams;
      l.reads[5] = read_loop_avx512_8_streams;
      break;
    case Isa::AvxVnni:
      l.int8_instr = "vpdpbusd ymm";
      l.read_instr = "256-bit loads, plain, with page-head prefetches or in 4 or 8 streams";
      l.int8 = int8_loop_avxvnni;
      l.fp32 = fp32_loop_avx2;
      l.reads[0] = read_loop_avx2;
      l.reads[1] = read_loop_avx2_page_heads;
      l.reads[2] = read_loop_avx2_4_streams;
      l.reads[3] = read_loop_avx2_8_streams;
      break;
    case Isa::Avx2:
      l.int8_instr = "vpmaddubsw ymm";
      l.read_instr = "256-bit loads, plain, with page-head prefetches or in 4 or 8 streams";
      l.int8 = int8_loop_avx2;
      l.fp32 = fp32_loop_avx2;
      l.reads[0] = read_loop_avx2;
      l.reads[1] = read_loop_avx2_page_heads;
      l.reads[2] = read_loop_avx2_4_streams;
      l.reads[3] = read_loop_avx2_8_streams;
      break;
#endif
    // The AArch64 sets have no peak loops yet: like Scalar, compute peaks 0 and 64-bit loads.
    default:
      l.int8_instr = "none";
      l.read_instr = "64-bit loads";
      l.reads[0] = read_loop_scalar;
      break;
  }
  return l;
}

// Runs `loop` on every thread for a fixed number of iterations; returns MACs/s summed over threads, or
// 0 without a loop.
double measure(ThreadPool* pool, PeakLoop loop, int64_t iters, int reps) {
  if (!loop) return 0;
  const int n = pool ? pool->size() : 1;
  double best = 0;
  // Best of many short runs (~10 ms each): on a shared machine a neighbour's burst lowers some of
  // them, and a peak must not be underestimated (that would flatter every fraction of it).
  for (int rep = 0; rep < reps; ++rep) {
    std::vector<double> ops(n, 0);
    const auto t0 = Clock::now();
    if (pool)
      pool->run_on_all([&](int t) { ops[t] = loop(iters); });
    else
      ops[0] = loop(iters);
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    double total = 0;
    for (double o : ops) total += o;
    best = std::max(best, total / secs);
  }
  return best;
}

// A buffer for the read loops, page-aligned as the weights they stand for are. Where malloc puts a
// large block (16 bytes past a page boundary) every 512-bit load straddles two cache lines, and on a
// Zen 5 VM that read 2 threads' worth of memory at 52-57 GB/s against 68-75 GB/s aligned (256-bit
// loads: 70-80 either way), so the AVX-512 set's bandwidth and every roofline fraction over it were
// off by up to a quarter.
class ReadBuffer {
 public:
  explicit ReadBuffer(size_t bytes) : storage_(bytes + kPage, 1), bytes_(bytes) {
    const auto at = reinterpret_cast<uintptr_t>(storage_.data());
    data_ = storage_.data() + (kPage - at % kPage) % kPage;
  }
  std::vector<ByteSpan> spans() const { return {{data_, bytes_}}; }

 private:
  static constexpr size_t kPage = 4096;
  std::vector<uint8_t> storage_;
  const uint8_t* data_ = nullptr;
  size_t bytes_;
};

// Bytes/s: every thread reads its share of every span (a span is cut into one slice per thread at
// multiples of 256 bytes, which every read loop reads whole; a span's last partial 256 bytes are not
// read and not counted); best of `passes`.
double read_bandwidth_of(ThreadPool* pool, ReadLoop loop, const std::vector<ByteSpan>& spans, int passes) {
  const int n = pool ? pool->size() : 1;
  double bytes = 0;
  for (const ByteSpan& s : spans) bytes += double(s.size / 256 * 256);
  if (bytes == 0) return 0;
  double best = 0;
  for (int rep = 0; rep < passes; ++rep) {  // best of several passes, for the same reason
    std::vector<uint64_t> sums(n, 0);
    const auto t0 = Clock::now();
    auto body = [&](int t) {
      uint64_t sum = 0;
      for (const ByteSpan& s : spans) {
        const size_t blocks = s.size / 256, b0 = blocks * size_t(t) / size_t(n),
                     b1 = blocks * size_t(t + 1) / size_t(n);
        if (b1 > b0) sum += loop(s.data + b0 * 256, (b1 - b0) * 256);
      }
      sums[t] = sum;
    };
    if (pool)
      pool->run_on_all(body);
    else
      body(0);
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    g_sink = sums[0];
    best = std::max(best, bytes / secs);
  }
  return best;
}

// The set's read loops (see PeakLoops::reads): the fastest.
double read_bandwidth(ThreadPool* pool, const PeakLoops& l, const std::vector<ByteSpan>& spans, int passes) {
  double best = 0;
  for (ReadLoop loop : l.reads)
    if (loop) best = std::max(best, read_bandwidth_of(pool, loop, spans, passes));
  return best;
}

constexpr int64_t kIters = 4'000'000;  // ~10 ms per run of a compute loop

}  // namespace

size_t read_buffer_bytes(size_t last_level_cache_bytes) {
  constexpr size_t kMin = size_t(256) << 20, kMax = size_t(1) << 30;
  return std::clamp(4 * last_level_cache_bytes, kMin, kMax);
}

size_t last_level_cache_bytes() {
  size_t largest = 0;
  for (int index = 0; index < 16; ++index) {
    std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/size");
    if (!in) break;
    size_t value = 0;
    std::string unit;
    if (!(in >> value)) continue;
    in >> unit;  // "K", "M" or nothing
    const size_t scale = unit == "K" ? size_t(1) << 10 : unit == "M" ? size_t(1) << 20 : 1;
    largest = std::max(largest, value * scale);
  }
#if defined(_SC_LEVEL3_CACHE_SIZE)
  if (largest == 0) largest = size_t(std::max(0L, sysconf(_SC_LEVEL3_CACHE_SIZE)));
#endif
  return largest;
}

MachinePeaks measure_peaks(ThreadPool* pool) {
  const Isa isa = active_isa();
  const PeakLoops l = loops_for(isa);
  MachinePeaks p;
  p.kernel_set = isa_name(isa);
  p.int8_instr = l.int8_instr;
  p.read_instr = l.read_instr;
  p.int8_gmacs = measure(pool, l.int8, kIters, 20) / 1e9;
  p.bf16_gmacs = measure(pool, l.bf16, kIters, 20) / 1e9;
  p.fp32_gflops = measure(pool, l.fp32, kIters, 20) / 1e9;
  // Beyond the caches (read_buffer_bytes), and at least 512 MiB.
  const ReadBuffer buf(std::max(size_t(512) << 20, read_buffer_bytes(last_level_cache_bytes())));
  p.read_gbs = read_bandwidth(pool, l, buf.spans(), 8) / 1e9;
  return p;
}

double measure_int8_peak_quick(ThreadPool* pool) {
  return measure(pool, loops_for(active_isa()).int8, kIters, 8) / 1e9;
}

double measure_read_bandwidth_quick(ThreadPool* pool) {
  // Kept between calls (allocating and faulting it in would cost more than the measurement).
  static const ReadBuffer buf(read_buffer_bytes(last_level_cache_bytes()));
  return read_bandwidth(pool, loops_for(active_isa()), buf.spans(), 3) / 1e9;
}

double measure_read_bandwidth_over(ThreadPool* pool, const std::vector<ByteSpan>& spans, int passes) {
  return read_bandwidth(pool, loops_for(active_isa()), spans, passes) / 1e9;
}

}  // namespace gem4
