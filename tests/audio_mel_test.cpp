// The gemma4a log-mel against llama.cpp's mtmd on the two reference clips: frame counts exact and the
// features equal to the bit (the FFT, window and filterbank follow mtmd's float arithmetic), plus the
// frame-count rule and the 30 s chunking on synthetic input.
#include "media/audio_mel.h"

#include <gtest/gtest.h>

#include <cmath>

#include "media/audio_encoder.h"
#include "media/audio_wav.h"
#include "test_util.h"

namespace gem4::media {
namespace {

using gem4::test::mtmd;

TEST(AudioMel, ReferenceFeaturesAreBitExact) {
  const struct {
    const char* dump;
    int64_t frames;
  } cases[] = {{"audio__aud1-speech-16k-mono", 308}, {"audio__aud2-tones-44k1-stereo", 169}};
  for (const auto& c : cases) {
    const std::vector<float> pcm = test::read_f32(mtmd(std::string("dumps/") + c.dump + "/pcm16k.f32"));
    const std::vector<LogMel> chunks = log_mel_chunks(pcm);
    ASSERT_EQ(chunks.size(), 1u);
    EXPECT_EQ(chunks[0].frames, c.frames);
    EXPECT_EQ(chunks[0].n_mel, 128);
    const std::vector<float> want = test::read_f32(mtmd(std::string("dumps/") + c.dump + "/mel.f32"));
    ASSERT_EQ(chunks[0].data.size(), want.size());
    EXPECT_EQ(test::max_abs_diff(chunks[0].data.data(), want.data(), want.size()), 0.0) << c.dump;
  }
}

TEST(AudioMel, FrameCountsAndChunks) {
  // frames = (n + 160 - 321) / 160 + 1 with C++ truncation; 1 sample gives none.
  EXPECT_EQ(mel_frame_count(0), 0);
  EXPECT_EQ(mel_frame_count(1), 0);
  EXPECT_EQ(mel_frame_count(2), 1);
  EXPECT_EQ(mel_frame_count(320), 1);
  EXPECT_EQ(mel_frame_count(321), 2);
  EXPECT_EQ(mel_frame_count(49326), 308);
  EXPECT_EQ(mel_frame_count(27200), 169);
  EXPECT_EQ(mel_frame_count(kMelChunkSamples), 2999);
  EXPECT_EQ(AudioEncoder::n_tokens_for_frames(2999), 750);

  // 40 s: a full 30 s chunk and a 10 s one; a trailing single sample makes no chunk.
  std::vector<float> pcm(size_t(40 * kMelSampleRate) + 0);
  for (size_t i = 0; i < pcm.size(); ++i) pcm[i] = 0.1f * float(std::sin(0.01 * double(i)));
  std::vector<LogMel> chunks = log_mel_chunks(pcm);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0].frames, 2999);
  EXPECT_EQ(chunks[1].frames, mel_frame_count(10 * kMelSampleRate));
  // The second chunk starts from its own zero padding: its first frame equals a fresh clip's.
  const std::vector<float> tail(pcm.begin() + kMelChunkSamples, pcm.end());
  const LogMel alone = log_mel_gemma4a(tail.data(), int64_t(tail.size()));
  EXPECT_EQ(alone.data, chunks[1].data);
  pcm.resize(size_t(kMelChunkSamples) + 1);
  EXPECT_EQ(log_mel_chunks(pcm).size(), 1u);

  // Silence reaches the floor: ln(0.001) everywhere.
  const std::vector<float> silence(4000, 0.0f);
  const LogMel quiet = log_mel_gemma4a(silence.data(), int64_t(silence.size()));
  for (float v : quiet.data) EXPECT_FLOAT_EQ(v, std::log(0.001f));
}

}  // namespace
}  // namespace gem4::media
