// The WAV reader and the 16 kHz conversion: bit for bit what llama.cpp's miniaudio decoding gives for
// the two reference clips (16 kHz mono, 44.1 kHz stereo), every sample encoding against the 16-bit
// one, the down-mix and the resampler's lengths, clear refusals of bad files, and a corpus of
// truncated and mutated files that must only ever give samples or an AudioError (also under ASan).
#include "media/audio_wav.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>

#include "media/audio_resample.h"
#include "test_util.h"

namespace gem4::media {
namespace {

using gem4::test::mtmd;
using gem4::test::read_bytes;

void put16(std::vector<uint8_t>& b, uint32_t v) {
  b.push_back(uint8_t(v));
  b.push_back(uint8_t(v >> 8));
}
void put32(std::vector<uint8_t>& b, uint32_t v) {
  put16(b, v & 0xFFFF);
  put16(b, v >> 16);
}
void put_id(std::vector<uint8_t>& b, const char* id) { b.insert(b.end(), id, id + 4); }

// A WAV image: fmt chunk (PCM or float, optionally EXTENSIBLE) and the raw sample bytes.
std::vector<uint8_t> make_wav(uint16_t tag, uint32_t channels, uint32_t rate, uint32_t bits,
                              const std::vector<uint8_t>& samples, bool extensible = false) {
  std::vector<uint8_t> fmt;
  put16(fmt, extensible ? 0xFFFE : tag);
  put16(fmt, channels);
  put32(fmt, rate);
  put32(fmt, rate * channels * bits / 8);
  put16(fmt, channels * bits / 8);
  put16(fmt, bits);
  if (extensible) {
    put16(fmt, 22);
    put16(fmt, bits);
    put32(fmt, 0);
    put16(fmt, tag);
    const uint8_t tail[14] = {0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80,
                              0x00, 0x00, 0xAA, 0x00, 0x38, 0x9B, 0x71};
    fmt.insert(fmt.end(), tail, tail + 14);
  }
  std::vector<uint8_t> w;
  put_id(w, "RIFF");
  put32(w, uint32_t(4 + 8 + fmt.size() + 8 + samples.size()));
  put_id(w, "WAVE");
  put_id(w, "LIST");  // a chunk to skip, odd-sized (padded)
  put32(w, 3);
  w.insert(w.end(), {'a', 'b', 'c', 0});
  put_id(w, "fmt ");
  put32(w, uint32_t(fmt.size()));
  w.insert(w.end(), fmt.begin(), fmt.end());
  put_id(w, "data");
  put32(w, uint32_t(samples.size()));
  w.insert(w.end(), samples.begin(), samples.end());
  return w;
}

// The 16-bit samples of aud1 (header of 44 bytes: canonical sox output).
std::vector<int16_t> aud1_s16() {
  const std::vector<uint8_t> b = read_bytes(mtmd("inputs/aud1-speech-16k-mono.wav"));
  EXPECT_GT(b.size(), 44u);
  std::vector<int16_t> s((b.size() - 44) / 2);
  std::memcpy(s.data(), b.data() + 44, s.size() * 2);
  return s;
}

TEST(AudioWav, ReferencePcmIsBitExact) {
  const std::pair<const char*, const char*> cases[] = {
      {"inputs/aud1-speech-16k-mono.wav", "dumps/audio__aud1-speech-16k-mono/pcm16k.f32"},
      {"inputs/aud2-tones-44k1-stereo.wav", "dumps/audio__aud2-tones-44k1-stereo/pcm16k.f32"}};
  for (const auto& [wav, dump] : cases) {
    const std::vector<float> got = read_wav_16k_mono(mtmd(wav));
    const std::vector<float> want = test::read_f32(mtmd(dump));
    ASSERT_EQ(got.size(), want.size()) << wav;
    EXPECT_EQ(test::max_abs_diff(got.data(), want.data(), want.size()), 0.0) << wav;
  }
}

TEST(AudioWav, ReportsTheFormat) {
  const std::vector<uint8_t> b = read_bytes(mtmd("inputs/aud2-tones-44k1-stereo.wav"));
  const MonoPcm pcm = decode_wav_mono(b.data(), b.size(), "aud2");
  EXPECT_EQ(pcm.format.channels, 2u);
  EXPECT_EQ(pcm.format.sample_rate, 44100u);
  EXPECT_EQ(pcm.format.bits, 16u);
  EXPECT_EQ(pcm.format.frames, 74970u);
  EXPECT_EQ(pcm.samples.size(), 74970u);
}

TEST(AudioWav, EveryEncodingGivesTheSixteenBitValues) {
  std::vector<int16_t> s = aud1_s16();
  s.resize(4000);
  std::vector<uint8_t> b16, b24, b32, bf, bd;
  for (int16_t v : s) {
    put16(b16, uint16_t(v));
    const uint32_t v24 = uint32_t(int32_t(v) * 256);
    b24.insert(b24.end(), {uint8_t(v24), uint8_t(v24 >> 8), uint8_t(v24 >> 16)});
    put32(b32, uint32_t(int32_t(v) * 65536));
    float f = v / 32768.0f;
    uint32_t fb;
    std::memcpy(&fb, &f, 4);
    put32(bf, fb);
    double d = v / 32768.0;
    uint8_t db[8];
    std::memcpy(db, &d, 8);
    bd.insert(bd.end(), db, db + 8);
  }
  const auto decode = [](const std::vector<uint8_t>& w) {
    return decode_wav_mono(w.data(), w.size(), "mem").samples;
  };
  const std::vector<float> ref = decode(make_wav(1, 1, 16000, 16, b16));
  ASSERT_EQ(ref.size(), s.size());
  EXPECT_EQ(ref[100], s[100] * 0.000030517578125f);
  EXPECT_EQ(decode(make_wav(1, 1, 16000, 24, b24)), ref);
  EXPECT_EQ(decode(make_wav(1, 1, 16000, 32, b32)), ref);
  EXPECT_EQ(decode(make_wav(3, 1, 16000, 32, bf)), ref);
  EXPECT_EQ(decode(make_wav(3, 1, 16000, 64, bd)), ref);
  EXPECT_EQ(decode(make_wav(1, 1, 16000, 16, b16, /*extensible=*/true)), ref);
  EXPECT_EQ(decode(make_wav(3, 1, 16000, 32, bf, /*extensible=*/true)), ref);
  // 8-bit is unsigned: 0 -> -1, 255 -> 255 * (2/255) - 1 in float.
  const std::vector<float> u8 = decode(make_wav(1, 1, 16000, 8, {0, 128, 255}));
  ASSERT_EQ(u8.size(), 3u);
  EXPECT_EQ(u8[0], -1.0f);
  EXPECT_EQ(u8[2], 255.0f * 0.00784313725490196078f - 1);
}

TEST(AudioWav, DownMixAveragesTheChannels) {
  std::vector<uint8_t> b;
  const int16_t frames[2][3] = {{1000, -3000, 7}, {-32768, 32767, 0}};
  for (const auto& f : frames)
    for (int16_t v : f) put16(b, uint16_t(v));
  const std::vector<uint8_t> w = make_wav(1, 3, 16000, 16, b);
  const MonoPcm pcm = decode_wav_mono(w.data(), w.size(), "mem");
  ASSERT_EQ(pcm.samples.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const float sum = 0.0f + frames[i][0] * 0.000030517578125f + frames[i][1] * 0.000030517578125f +
                      frames[i][2] * 0.000030517578125f;
    EXPECT_EQ(pcm.samples[i], sum / 3.0f);
  }
}

TEST(AudioResample, LengthsAndEdges) {
  EXPECT_EQ(resampled_length(16000, 44100, 74970), 27200u);  // aud2
  EXPECT_EQ(resampled_length(16000, 16000, 123), 123u);
  EXPECT_EQ(resampled_length(16000, 8000, 1000), 2000u);
  EXPECT_EQ(resampled_length(16000, 48000, 0), 0u);
  const std::vector<float> ramp = {0.5f, 0.25f, -0.25f, 1.0f};
  EXPECT_EQ(resample_linear(ramp, 16000, 16000), ramp);
  // Both directions start from the resampler's zero state and keep the reported length.
  std::vector<float> tone(4410);
  for (size_t i = 0; i < tone.size(); ++i) tone[i] = float(std::sin(0.05 * double(i)));
  for (uint32_t rate : {8000u, 22050u, 44100u, 48000u, 96000u}) {
    const std::vector<float> out = resample_linear(tone, rate, 16000);
    EXPECT_EQ(out.size(), resampled_length(16000, rate, tone.size())) << rate;
    EXPECT_EQ(out[0], 0.0f) << rate;
    double energy = 0;
    for (float v : out) energy += double(v) * v;
    EXPECT_GT(energy, 0.0) << rate;
  }
}

// Each bad file: the error names the file and says what is wrong.
TEST(AudioWav, RefusesBadFiles) {
  std::vector<uint8_t> pcm;
  for (int i = 0; i < 64; ++i) put16(pcm, uint16_t(i * 100));
  const std::vector<uint8_t> good = make_wav(1, 2, 16000, 16, pcm);
  const auto expect_error = [](std::vector<uint8_t> w, const std::string& needle) {
    try {
      decode_wav_mono(w.data(), w.size(), "clip.wav");
      ADD_FAILURE() << "accepted; expected an error containing \"" << needle << "\"";
    } catch (const AudioError& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.rfind("clip.wav: ", 0), 0u) << m;
      EXPECT_NE(m.find(needle), std::string::npos) << m;
    }
  };
  const size_t fmt_at = 12 + 8 + 4;  // after RIFF/WAVE and the padded LIST chunk
  const size_t fmt_body = fmt_at + 8, data_at = fmt_body + 16;
  auto patch16 = [&](size_t at, uint16_t v) {
    std::vector<uint8_t> w = good;
    w[at] = uint8_t(v);
    w[at + 1] = uint8_t(v >> 8);
    return w;
  };
  auto patch32 = [&](size_t at, uint32_t v) {
    std::vector<uint8_t> w = patch16(at, uint16_t(v));
    w[at + 2] = uint8_t(v >> 16);
    w[at + 3] = uint8_t(v >> 24);
    return w;
  };
  expect_error({}, "empty");
  expect_error({'R', 'I', 'F', 'F'}, "truncated");
  expect_error(std::vector<uint8_t>(100, 'x'), "not a WAV");
  {
    std::vector<uint8_t> w = good;
    std::memcpy(w.data(), "RF64", 4);
    expect_error(w, "RF64");
  }
  expect_error(std::vector<uint8_t>(good.begin(), good.begin() + fmt_at), "no \"fmt \"");
  expect_error(std::vector<uint8_t>(good.begin(), good.begin() + data_at), "no \"data\"");
  expect_error(std::vector<uint8_t>(good.begin(), good.end() - 3), "truncated");
  expect_error(std::vector<uint8_t>(good.begin(), good.begin() + fmt_body + 10), "truncated \"fmt \"");
  expect_error(patch32(data_at + 4, 0xFFFFFFFFu), "declares 4294967295 bytes");
  expect_error(patch32(fmt_at + 4, 12), "at least 16");
  expect_error(patch16(fmt_body, 2), "unsupported WAV encoding");  // MS ADPCM
  expect_error(patch16(fmt_body, 0x55), "unsupported WAV encoding");
  expect_error(patch16(fmt_body + 2, 0), "0 channels");
  expect_error(patch16(fmt_body + 2, 1000), "1000 channels");
  expect_error(patch32(fmt_body + 4, 0), "sample rate 0");
  expect_error(patch32(fmt_body + 4, 100000000), "sample rate 100000000");
  expect_error(patch16(fmt_body + 14, 12), "unsupported PCM");
  expect_error(patch16(fmt_body + 12, 3), "block align");
  expect_error(patch32(data_at + 4, 0), "no audio samples");
  {
    std::vector<uint8_t> w = make_wav(1, 1, 16000, 16, pcm, /*extensible=*/true);
    w[fmt_body + 30] ^= 0xFF;  // inside the sub-format GUID
    expect_error(w, "sub-format");
  }
  {
    std::vector<uint8_t> w = good;  // "data" renamed: the file has fmt but no data chunk
    std::memcpy(w.data() + data_at, "dat4", 4);
    expect_error(w, "no \"data\"");
  }
  {
    // More than an hour (here at 1 kHz, 2 bytes a frame): refused after the header checks, before decoding.
    const std::vector<uint8_t> long_pcm(size_t(3601) * 1000 * 2, 0);
    expect_error(make_wav(1, 1, 1000, 16, long_pcm), "3601 s");
  }
  EXPECT_THROW(read_wav_16k_mono("/nonexistent/clip.wav"), AudioError);
  try {
    read_wav_16k_mono("/nonexistent/clip.wav");
  } catch (const AudioError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/clip.wav: cannot open"), std::string::npos)
        << e.what();
  }
}

// Truncations at every length and random byte mutations of two WAVs (the real stereo clip's head and a
// float EXTENSIBLE file): each gives samples or an AudioError, never a crash (the ASan run checks the
// memory accesses) or an output larger than the file allows.
TEST(AudioWav, CorpusOfTruncatedAndMutatedFiles) {
  std::vector<uint8_t> real = read_bytes(mtmd("inputs/aud2-tones-44k1-stereo.wav"));
  ASSERT_GT(real.size(), 4000u);
  real.resize(4000);
  std::vector<uint8_t> fl;
  for (int i = 0; i < 300; ++i) {
    const float v = float(std::sin(i * 0.1));
    uint32_t b;
    std::memcpy(&b, &v, 4);
    put32(fl, b);
  }
  const std::vector<std::vector<uint8_t>> seeds = {real, make_wav(3, 3, 22050, 32, fl, true)};
  std::mt19937 rng(20);
  int ok = 0, refused = 0;
  const auto run = [&](const std::vector<uint8_t>& w) {
    try {
      const MonoPcm pcm = decode_wav_mono(w.data(), w.size(), "corpus");
      EXPECT_LE(pcm.samples.size(), w.size());
      const std::vector<float> r = resample_linear(pcm.samples, pcm.format.sample_rate, 16000);
      EXPECT_LE(r.size(), pcm.samples.size() * 16000 / pcm.format.sample_rate + 2);
      ++ok;
    } catch (const AudioError&) {
      ++refused;
    }
  };
  for (const auto& seed : seeds) {
    // Every truncation point in the header region, then every 97th byte.
    for (size_t len = 0; len <= seed.size(); len += (len < 200 ? 1 : 97))
      run(std::vector<uint8_t>(seed.begin(), seed.begin() + len));
    for (int m = 0; m < 1500; ++m) {
      std::vector<uint8_t> w = seed;
      const int edits = 1 + int(rng() % 4);
      for (int e = 0; e < edits; ++e) {
        // Mostly in the header, where the structure is.
        const size_t at = (rng() % 4 != 0) ? rng() % std::min<size_t>(80, w.size()) : rng() % w.size();
        w[at] = uint8_t(rng() % 3 == 0 ? 0xFF : rng());
      }
      run(w);
    }
  }
  EXPECT_GT(ok, 100);
  EXPECT_GT(refused, 100);
}

}  // namespace
}  // namespace gem4::media
