#include "media/audio_wav.h"

#include <cstring>
#include <fstream>

#include "media/audio_resample.h"

namespace gem4::media {

namespace {

constexpr uint16_t kTagPcm = 1;
constexpr uint16_t kTagFloat = 3;
constexpr uint16_t kTagExtensible = 0xFFFE;
// The last 14 bytes of the KSDATAFORMAT_SUBTYPE GUIDs for PCM and IEEE float (the first two bytes are
// the format tag).
constexpr uint8_t kSubformatTail[14] = {0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80,
                                        0x00, 0x00, 0xAA, 0x00, 0x38, 0x9B, 0x71};

uint16_t le16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
uint32_t le32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

std::string fourcc(const uint8_t* p) {
  std::string s;
  for (int i = 0; i < 4; ++i) {
    const char c = char(p[i]);
    s += (c >= 32 && c < 127) ? c : '?';
  }
  return s;
}

[[noreturn]] void fail(const std::string& name, const std::string& what) {
  throw AudioError(name + ": " + what);
}

WavFormat parse_fmt(const uint8_t* p, uint32_t size, const std::string& name) {
  if (size < 16) fail(name, "\"fmt \" chunk of " + std::to_string(size) + " bytes (at least 16 expected)");
  WavFormat f;
  f.format_tag = le16(p);
  f.channels = le16(p + 2);
  f.sample_rate = le32(p + 4);
  f.block_align = le16(p + 12);
  f.bits = le16(p + 14);
  if (f.format_tag == kTagExtensible) {
    if (size < 40)
      fail(name, "WAVE_FORMAT_EXTENSIBLE \"fmt \" chunk of " + std::to_string(size) + " bytes (40 expected)");
    if (std::memcmp(p + 26, kSubformatTail, sizeof kSubformatTail) != 0)
      fail(name, "WAVE_FORMAT_EXTENSIBLE with an unknown sub-format GUID");
    f.format_tag = le16(p + 24);
  }
  const std::string what =
      "format tag " + std::to_string(f.format_tag) + ", " + std::to_string(f.bits) + " bits";
  if (f.format_tag == kTagPcm) {
    if (f.bits != 8 && f.bits != 16 && f.bits != 24 && f.bits != 32)
      fail(name, "unsupported PCM encoding (" + what + "; 8, 16, 24 and 32-bit PCM are read)");
  } else if (f.format_tag == kTagFloat) {
    if (f.bits != 32 && f.bits != 64)
      fail(name, "unsupported float encoding (" + what + "; 32 and 64-bit IEEE float are read)");
  } else {
    fail(name, "unsupported WAV encoding (" + what +
                   "; only integer PCM and IEEE float are read, not compressed formats)");
  }
  if (f.channels == 0) fail(name, "0 channels");
  if (f.channels > kWavMaxChannels)
    fail(name, std::to_string(f.channels) + " channels (at most " + std::to_string(kWavMaxChannels) + ")");
  if (f.sample_rate < kWavMinRate || f.sample_rate > kWavMaxRate)
    fail(name, "sample rate " + std::to_string(f.sample_rate) + " Hz (" + std::to_string(kWavMinRate) +
                   " to " + std::to_string(kWavMaxRate) + " Hz are read)");
  if (f.block_align != f.channels * (f.bits / 8))
    fail(name, "block align " + std::to_string(f.block_align) + " does not match " +
                   std::to_string(f.channels) + " channels of " + std::to_string(f.bits) + " bits");
  return f;
}

// One sample as dr_wav converts it to f32.
float sample_to_f32(const uint8_t* p, const WavFormat& f) {
  if (f.format_tag == kTagFloat) {
    if (f.bits == 32) {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    double v;
    std::memcpy(&v, p, 8);
    return float(v);
  }
  switch (f.bits) {
    case 8: {
      float x = p[0];
      x = x * 0.00784313725490196078f;
      return x - 1;
    }
    case 16:
      return float(int16_t(le16(p))) * 0.000030517578125f;
    case 24: {
      const int32_t v = int32_t(uint32_t(p[0]) << 8 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 24) >> 8;
      return float(double(v) * 0.00000011920928955078125);
    }
    default:
      return float(int32_t(le32(p)) / 2147483648.0);
  }
}

}  // namespace

MonoPcm decode_wav_mono(const uint8_t* data, size_t size, const std::string& name) {
  if (size == 0) fail(name, "empty file (0 bytes)");
  if (size < 12) fail(name, "truncated: " + std::to_string(size) + " bytes, not even a RIFF header");
  if (std::memcmp(data, "RIFF", 4) != 0 || std::memcmp(data + 8, "WAVE", 4) != 0) {
    if (std::memcmp(data, "RF64", 4) == 0 || std::memcmp(data, "RIFX", 4) == 0)
      fail(name, fourcc(data) + " WAV files are not supported (only little-endian RIFF/WAVE)");
    fail(name, "not a WAV file (no RIFF/WAVE header)");
  }
  // Walk the chunks up to the end of the file (the RIFF size field is often wrong in the wild);
  // stop at the first "data" chunk once "fmt " has been seen.
  bool have_fmt = false;
  WavFormat fmt;
  const uint8_t* samples = nullptr;
  uint64_t data_bytes = 0;
  size_t at = 12;
  while (true) {
    if (size - at < 8) {
      if (!have_fmt) fail(name, "no \"fmt \" chunk");
      fail(name, "no \"data\" chunk");
    }
    const std::string id = fourcc(data + at);
    const uint32_t chunk = le32(data + at + 4);
    const size_t body = at + 8;
    const size_t avail = size - body;
    if (id == "fmt ") {
      if (chunk > avail)
        fail(name, "truncated \"fmt \" chunk (" + std::to_string(chunk) + " bytes declared, " +
                       std::to_string(avail) + " present)");
      if (have_fmt) fail(name, "two \"fmt \" chunks");
      fmt = parse_fmt(data + body, chunk, name);
      have_fmt = true;
    } else if (id == "data") {
      if (!have_fmt) fail(name, "\"data\" chunk before the \"fmt \" chunk");
      if (chunk > avail)
        fail(name, "truncated: the \"data\" chunk declares " + std::to_string(chunk) + " bytes but " +
                       std::to_string(avail) + " follow");
      samples = data + body;
      data_bytes = chunk;
      break;
    } else if (chunk > avail) {
      fail(name, "truncated \"" + id + "\" chunk at byte " + std::to_string(at) + " (" +
                     std::to_string(chunk) + " bytes declared, " + std::to_string(avail) + " present)");
    }
    // Chunks are padded to an even size; a missing pad byte at the very end is tolerated.
    const uint64_t next = uint64_t(body) + chunk + (chunk & 1);
    at = size_t(std::min<uint64_t>(next, size));
  }
  fmt.frames = data_bytes / fmt.block_align;
  if (fmt.frames == 0) fail(name, "no audio samples (empty \"data\" chunk)");
  if (fmt.frames > kWavMaxFrames)
    fail(name, std::to_string(fmt.frames) + " frames (at most " + std::to_string(kWavMaxFrames) +
                   ", an hour at 48 kHz, are read)");
  if (double(fmt.frames) / fmt.sample_rate > kWavMaxSeconds)
    fail(name, "audio of " + std::to_string(uint64_t(double(fmt.frames) / fmt.sample_rate)) + " s (at most " +
                   std::to_string(uint64_t(kWavMaxSeconds)) + " s are read)");

  MonoPcm out;
  out.format = fmt;
  out.samples.resize(fmt.frames);
  const uint32_t bytes = fmt.bits / 8;
  const uint8_t* p = samples;
  for (uint64_t i = 0; i < fmt.frames; ++i) {
    // miniaudio's mono down-mix: the f32 sum of the channels in order, divided by their count.
    float sum = 0;
    for (uint32_t c = 0; c < fmt.channels; ++c, p += bytes) sum += sample_to_f32(p, fmt);
    out.samples[i] = fmt.channels == 1 ? sum : sum / float(fmt.channels);
  }
  return out;
}

std::vector<float> wav_to_16k_mono(const uint8_t* data, size_t size, const std::string& name) {
  MonoPcm pcm = decode_wav_mono(data, size, name);
  return resample_linear(pcm.samples, pcm.format.sample_rate, 16000);
}

std::vector<float> read_wav_16k_mono(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) fail(path, "cannot open the file");
  const std::streamoff end = f.tellg();
  if (end < 0) fail(path, "cannot read the file");
  if (uint64_t(end) > kWavMaxFileBytes)
    fail(path,
         "file of " + std::to_string(end) + " bytes (at most " + std::to_string(kWavMaxFileBytes) + ")");
  const size_t n = size_t(end);
  std::vector<uint8_t> bytes(n);
  f.seekg(0);
  if (!bytes.empty() && !f.read(reinterpret_cast<char*>(bytes.data()), std::streamsize(bytes.size())))
    fail(path, "cannot read the file");
  return wav_to_16k_mono(bytes.data(), bytes.size(), path);
}

}  // namespace gem4::media
