// WAV (RIFF/WAVE) reading for the audio tower: integer PCM (8, 16, 24, 32 bit) and IEEE float (32, 64
// bit), plain or WAVE_FORMAT_EXTENSIBLE, any sample rate and channel count. Samples become f32 exactly
// as llama.cpp's decoder (miniaudio's dr_wav) converts them, channels are averaged to mono as
// miniaudio's channel converter does, and audio_resample.h brings the result to 16 kHz.
//
// Every error is an AudioError whose message starts with the file's name and says what is wrong
// (truncated chunk, missing "fmt " or "data", unsupported encoding, absurd sizes). Memory is bounded by
// the file: nothing is allocated from a size field before it has been checked against the bytes there.
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace gem4::media {

class AudioError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Limits on what the reader accepts (larger values are refused with an error naming them).
inline constexpr uint32_t kWavMaxChannels = 254;  // miniaudio's MA_MAX_CHANNELS
inline constexpr uint32_t kWavMinRate = 1000;
inline constexpr uint32_t kWavMaxRate = 768000;
inline constexpr size_t kWavMaxFileBytes = size_t(1) << 31;  // 2 GiB
// An hour is ~45,000 soft tokens, a third of the E-models' context; and at most an hour at 48 kHz of
// frames, so the decoded mono f32 stays under 700 MB whatever the rate.
inline constexpr double kWavMaxSeconds = 3600.0;
inline constexpr uint64_t kWavMaxFrames = uint64_t(3600) * 48000;

struct WavFormat {
  uint16_t format_tag = 0;  // 1 PCM, 3 IEEE float (the sub-format's tag for EXTENSIBLE files)
  uint32_t channels = 0;
  uint32_t sample_rate = 0;
  uint32_t bits = 0;         // container bits per sample
  uint32_t block_align = 0;  // bytes per frame
  uint64_t frames = 0;       // whole frames in the data chunk
};

// Mono audio at the file's own rate.
struct MonoPcm {
  WavFormat format;
  std::vector<float> samples;
};

// Parses the WAV image [data, data + size); `name` (a path or "request body") prefixes every error.
MonoPcm decode_wav_mono(const uint8_t* data, size_t size, const std::string& name);

// decode_wav_mono, then resampled to 16 kHz as llama.cpp's mtmd helper does (ma_decoder with f32
// output, 1 channel, 16000 Hz): the samples the gemma4a log-mel reads.
std::vector<float> wav_to_16k_mono(const uint8_t* data, size_t size, const std::string& name);

// Reads `path` (at most kWavMaxFileBytes) and returns wav_to_16k_mono of it.
std::vector<float> read_wav_16k_mono(const std::string& path);

}  // namespace gem4::media
