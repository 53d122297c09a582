// Writes a seed corpus for wav_fuzz: small valid WAVs in every encoding the reader takes (8/16/24/32-bit
// PCM, 32/64-bit float, plain and EXTENSIBLE), mono to 3 channels, several rates, with extra chunks
// (LIST, odd-sized and padded) around "fmt " and "data", plus the head of each real WAV given, its data
// chunk shortened to what is kept. Usage: wav_seeds OUT_DIR [REAL.wav ...]
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {

void put16(std::vector<uint8_t>& b, uint32_t v) {
  b.push_back(uint8_t(v));
  b.push_back(uint8_t(v >> 8));
}
void put32(std::vector<uint8_t>& b, uint32_t v) {
  put16(b, v & 0xFFFF);
  put16(b, v >> 16);
}
void put_id(std::vector<uint8_t>& b, const char* id) { b.insert(b.end(), id, id + 4); }

std::vector<uint8_t> wav(uint16_t tag, uint32_t ch, uint32_t rate, uint32_t bits, uint32_t frames, bool ext) {
  std::vector<uint8_t> fmt;
  put16(fmt, ext ? 0xFFFE : tag);
  put16(fmt, ch);
  put32(fmt, rate);
  put32(fmt, rate * ch * bits / 8);
  put16(fmt, ch * bits / 8);
  put16(fmt, bits);
  if (ext) {
    put16(fmt, 22);
    put16(fmt, bits);
    put32(fmt, 0);
    put16(fmt, tag);
    const uint8_t tail[14] = {0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80,
                              0x00, 0x00, 0xAA, 0x00, 0x38, 0x9B, 0x71};
    fmt.insert(fmt.end(), tail, tail + 14);
  }
  std::vector<uint8_t> data;
  for (uint32_t i = 0; i < frames * ch; ++i) {
    const double v = 0.8 * std::sin(0.07 * i);
    if (tag == 3 && bits == 32) {
      const float f = float(v);
      uint32_t u;
      std::memcpy(&u, &f, 4);
      put32(data, u);
    } else if (tag == 3) {
      uint8_t b[8];
      std::memcpy(b, &v, 8);
      data.insert(data.end(), b, b + 8);
    } else {
      const int64_t s = int64_t(v * double((int64_t(1) << (bits - 1)) - 1));
      for (uint32_t k = 0; k < bits / 8; ++k) data.push_back(uint8_t((bits == 8 ? s + 128 : s) >> (8 * k)));
    }
  }
  std::vector<uint8_t> w;
  put_id(w, "RIFF");
  put32(w, uint32_t(4 + 12 + 8 + fmt.size() + 8 + data.size()));
  put_id(w, "WAVE");
  put_id(w, "LIST");
  put32(w, 3);
  w.insert(w.end(), {'a', 'b', 'c', 0});
  put_id(w, "fmt ");
  put32(w, uint32_t(fmt.size()));
  w.insert(w.end(), fmt.begin(), fmt.end());
  put_id(w, "data");
  put32(w, uint32_t(data.size()));
  w.insert(w.end(), data.begin(), data.end());
  return w;
}

void save(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: wav_seeds OUT_DIR [REAL.wav ...]\n");
    return 2;
  }
  const std::string dir = argv[1];
  const struct {
    uint16_t tag;
    uint32_t ch, rate, bits, frames;
    bool ext;
  } seeds[] = {{1, 1, 16000, 16, 400, false}, {1, 2, 44100, 16, 300, false}, {1, 1, 8000, 8, 300, false},
               {1, 3, 22050, 24, 200, false}, {1, 1, 48000, 32, 200, true},  {3, 2, 16000, 32, 200, false},
               {3, 1, 96000, 64, 200, true},  {1, 1, 16000, 16, 2, false}};
  int n = 0;
  for (const auto& s : seeds)
    save(dir + "/gen" + std::to_string(n++) + ".wav", wav(s.tag, s.ch, s.rate, s.bits, s.frames, s.ext));
  for (int i = 2; i < argc; ++i) {
    std::ifstream f(argv[i], std::ios::binary);
    std::vector<uint8_t> b((std::istreambuf_iterator<char>(f)), {});
    if (b.size() < 44 || std::memcmp(b.data(), "RIFF", 4) != 0 || std::memcmp(b.data() + 36, "data", 4) != 0)
      continue;
    b.resize(std::min<size_t>(b.size(), 44 + 4096));  // canonical 44-byte header, then 4 KB of samples
    const uint32_t kept = uint32_t(b.size() - 44);
    for (int k = 0; k < 4; ++k) b[40 + k] = uint8_t(kept >> (8 * k));
    save(dir + "/real" + std::to_string(n++) + ".wav", b);
  }
  std::printf("wav_seeds: %d files in %s\n", n, dir.c_str());
  return 0;
}
