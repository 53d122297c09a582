// The peak loops of each kernel set (peaks_<set>.cpp, each compiled for its set's instructions) and what
// they count. peaks.cpp times them on every thread; the loop files hold nothing but the loops, so no
// standard-library code is compiled with a wider instruction set than the caller's.
#pragma once
#include <cstddef>
#include <cstdint>

namespace gem4 {

// Runs `iters` iterations on the calling thread; returns the multiply-adds done (one per int8 or bf16
// product summed, one per FMA lane).
using PeakLoop = double (*)(int64_t iters);
// Reads `bytes` bytes at p (a multiple of 256, any alignment) with the set's widest loads and returns
// their sum (so the loads cannot be dropped).
using ReadLoop = uint64_t (*)(const uint8_t* p, size_t bytes);

struct PeakLoops {
  const char* int8_instr = nullptr;  // what the int8 loop issues and counts, for the bench's report
  const char* read_instr = nullptr;
  PeakLoop int8 = nullptr, bf16 = nullptr, fp32 = nullptr;  // nullptr: the set has no such instruction
  // The set's read loops: the read bandwidth is the fastest one's. Each load width is timed plain and
  // with page-head prefetches (kernels/page_heads.h), as the decode GEMVs of some types read: on a Zen
  // 5 VM those read up to a fifth faster, so a bandwidth from the plain loops alone was too low.
  // And in 4 and 8 streams (read_in_streams), as the decode GEMVs read on Intel.
  ReadLoop reads[6] = {};
};

// Twelve independent accumulator chains c0..c11 of type T (more than any of the loops' instruction
// latency times its issue rate), as named variables: GCC 12 keeps an array of vector accumulators in
// memory, or moves it between registers, at every iteration, which cost a third of the int8 peak.
#define GEM4_PEAK_DECLARE_12(T, init)                                                                       \
  T c0 = (init), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0, c7 = c0, c8 = c0, c9 = c0, c10 = c0, \
    c11 = c0
#define GEM4_PEAK_STEP_12(STEP) \
  STEP(c0);                     \
  STEP(c1);                     \
  STEP(c2);                     \
  STEP(c3);                     \
  STEP(c4);                     \
  STEP(c5);                     \
  STEP(c6);                     \
  STEP(c7);                     \
  STEP(c8);                     \
  STEP(c9);                     \
  STEP(c10);                    \
  STEP(c11)
#define GEM4_PEAK_SUM_12(ADD) \
  ADD(ADD(ADD(ADD(c0, c1), ADD(c2, c3)), ADD(ADD(c4, c5), ADD(c6, c7))), ADD(ADD(c8, c9), ADD(c10, c11)))

// The read loops in streams: [p, p + bytes) as groups of S consecutive chunks of kStreamChunkBytes, each
// group read 128 bytes from each chunk in turn (read128(at)), as a decode GEMV reads S panels at once
// (packed_gemv_panels); what no whole group covers by rest(at, n). On an Ice Lake Xeon VM (2 vCPUs) two
// threads read 21-23 GB/s in one stream each, 27-29 in four and 29-30 in eight: each stream the L2
// streamer follows has only so many lines on their way, so one stream a core leaves memory idle.
constexpr size_t kStreamChunkBytes = 16384;
template <int S, class Read128, class Rest>
inline void read_in_streams(const uint8_t* p, size_t bytes, Read128 read128, Rest rest) {
  constexpr size_t kGroup = S * kStreamChunkBytes;
  size_t g = 0;
  for (; g + kGroup <= bytes; g += kGroup)
    for (size_t off = 0; off < kStreamChunkBytes; off += 128)
#pragma GCC unroll 8
      for (int k = 0; k < S; ++k) read128(p + g + k * kStreamChunkBytes + off);
  if (g < bytes) rest(p + g, bytes - g);
}

// peaks_avx512.cpp: vpdpbusd zmm (64 MACs), vdpbf16ps zmm (32, where the CPU has AVX512_BF16),
// vfmadd zmm (16), 512-bit loads.
uint64_t read_loop_avx512(const uint8_t* p, size_t bytes);
uint64_t read_loop_avx512_page_heads(const uint8_t* p, size_t bytes);
uint64_t read_loop_avx512_4_streams(const uint8_t* p, size_t bytes);
uint64_t read_loop_avx512_8_streams(const uint8_t* p, size_t bytes);
double int8_loop_avx512(int64_t iters);
double bf16_loop_avx512(int64_t iters);
double fp32_loop_avx512(int64_t iters);
// peaks_avx2.cpp: vpmaddubsw ymm (32 MACs counted, see there), vfmadd ymm (8), 256-bit loads.
uint64_t read_loop_avx2(const uint8_t* p, size_t bytes);
uint64_t read_loop_avx2_page_heads(const uint8_t* p, size_t bytes);
uint64_t read_loop_avx2_4_streams(const uint8_t* p, size_t bytes);
uint64_t read_loop_avx2_8_streams(const uint8_t* p, size_t bytes);
double int8_loop_avx2(int64_t iters);
double fp32_loop_avx2(int64_t iters);
// peaks_avxvnni.cpp: vpdpbusd ymm (32 MACs); the rest of the AvxVnni set is the Avx2 set's.
double int8_loop_avxvnni(int64_t iters);

}  // namespace gem4
