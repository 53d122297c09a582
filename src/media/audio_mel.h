// The log-mel features of the gemma4a audio tower, computed as llama.cpp's mtmd does (its
// gemma4a preprocessor), so they match its values to float rounding:
//
// - 16 kHz mono audio in chunks of at most 30 s; each chunk is its own encoder input;
// - per chunk of n samples: frames = (n + 160 - 321) div 160 + 1; the frame buffer is 160 zeros, the
//   samples, then zeros; frame t reads 512 samples from 160 t, times a periodic Hann window of length
//   320 at the start of the 512 (the last 192 taps are 0);
// - a 512-point radix-2 FFT in float with llama.cpp's float sin/cos table and its butterfly order;
// - magnitude |X| (not power), 128 HTK triangular mel filters over 0..8000 Hz without area
//   normalisation (bins at k * 16000 / 512), summed in double, max(., 0.001), natural log.
#pragma once
#include <cstdint>
#include <vector>

namespace gem4::media {

struct LogMel {
  int64_t frames = 0;
  int64_t n_mel = 0;
  std::vector<float> data;  // [frames][n_mel], frame-major
};

inline constexpr int64_t kMelSampleRate = 16000;
inline constexpr int64_t kMelChunkSamples = 30 * kMelSampleRate;  // one encoder input per 30 s

// Frames of a chunk of n samples (0 when it is too short to make one).
int64_t mel_frame_count(int64_t n_samples);

// The log-mel of one chunk (at most kMelChunkSamples samples; the caller splits longer audio).
LogMel log_mel_gemma4a(const float* samples, int64_t n_samples, int64_t n_mel = 128);

// The whole 16 kHz clip, split into chunks of kMelChunkSamples as mtmd does; a chunk too short for a
// frame is dropped (mtmd refuses such a chunk).
std::vector<LogMel> log_mel_chunks(const std::vector<float>& pcm16k, int64_t n_mel = 128);

}  // namespace gem4::media
