// libFuzzer target for the WAV reader and the 16 kHz conversion (built by scripts/fuzz.sh, not part of
// gem4_tests). Any input must either decode or throw an AudioError naming the input; decoded audio must
// resample to the length the reference's decoder reports, and short clips must give the log-mel frame
// count the frame rule says.
#include <cstdint>
#include <cstring>

#include "media/audio_mel.h"
#include "media/audio_resample.h"
#include "media/audio_wav.h"

using namespace gem4::media;

namespace {

void check(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  MonoPcm pcm;
  try {
    pcm = decode_wav_mono(data, size, "fuzz.wav");
  } catch (const AudioError& e) {
    check(std::strncmp(e.what(), "fuzz.wav: ", 10) == 0);
    return 0;
  }
  const WavFormat& f = pcm.format;
  check(f.channels >= 1 && f.channels <= kWavMaxChannels);
  check(f.sample_rate >= kWavMinRate && f.sample_rate <= kWavMaxRate);
  check(f.frames == pcm.samples.size() && f.frames > 0);
  check(f.frames * f.block_align <= size);
  volatile float sink = 0;
  for (float v : pcm.samples) sink = sink + v;
  // Bound the work per input: long upsampled clips only cost time, not coverage.
  if (pcm.samples.size() * 16000 / f.sample_rate > 200000) return 0;
  const std::vector<float> out = resample_linear(pcm.samples, f.sample_rate, 16000);
  check(out.size() == resampled_length(16000, f.sample_rate, pcm.samples.size()));
  if (out.size() <= 20000) {
    const std::vector<LogMel> mel = log_mel_chunks(out);
    check(mel.size() == (mel_frame_count(int64_t(out.size())) > 0 ? 1u : 0u));
    if (!mel.empty()) check(mel[0].frames == mel_frame_count(int64_t(out.size())));
  }
  (void)sink;
  return 0;
}
