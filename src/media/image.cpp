#include "media/image.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <memory>

// The one translation unit that compiles stb_image. Only the two formats gem4 accepts; no stdio (files
// are read here, with a size bound); no float/HDR paths. The dimension bound is checked here from the
// header (stbi_info), so stb keeps its default STBI_MAX_DIMENSIONS and the header reports any size.
#define STB_IMAGE_IMPLEMENTATION
#define STBI_ONLY_PNG
#define STBI_ONLY_JPEG
#define STBI_NO_STDIO
#define STBI_NO_LINEAR
#define STBI_NO_HDR
#define STBI_FAILURE_USERMSG
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wall"
#pragma GCC diagnostic ignored "-Wextra"
#pragma GCC diagnostic ignored "-Wunused-function"
#include <stb/stb_image.h>
#pragma GCC diagnostic pop

namespace gem4::media {

namespace {

const char* format_of(const uint8_t* d, size_t n) {
  if (n >= 8 && memcmp(d, "\x89PNG\r\n\x1a\n", 8) == 0) return "PNG";
  if (n >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF) return "JPEG";
  return nullptr;
}

std::string other_format_name(const uint8_t* d, size_t n) {
  if (n >= 4 && (memcmp(d, "GIF8", 4) == 0)) return "GIF";
  if (n >= 2 && d[0] == 'B' && d[1] == 'M') return "BMP";
  if (n >= 12 && memcmp(d, "RIFF", 4) == 0 && memcmp(d + 8, "WEBP", 4) == 0) return "WebP";
  if (n >= 4 && (memcmp(d, "II*\0", 4) == 0 || memcmp(d, "MM\0*", 4) == 0)) return "TIFF";
  if (n >= 12 && memcmp(d + 4, "ftyp", 4) == 0) return "HEIF/AVIF";
  return "";
}

// A PNG's size from its IHDR chunk, read directly: stbi_info refuses sizes past its own bound (2^30
// bytes) without reporting them, and the error should say how large the image claims to be.
bool png_header_size(const uint8_t* d, size_t n, int64_t& w, int64_t& h) {
  if (n < 24 || memcmp(d + 12, "IHDR", 4) != 0) return false;
  const auto be32 = [&](size_t i) {
    return (int64_t(d[i]) << 24) | (d[i + 1] << 16) | (d[i + 2] << 8) | d[i + 3];
  };
  w = be32(16);
  h = be32(20);
  return true;
}

// Debian's stb_image (2.27) trusts a JPEG's Huffman table sizes: a DHT segment whose 16 counts add up
// to more than 256 codes writes past its size table (found by tests/fuzz/image_fuzz.cpp; stb 2.28 checks
// it). So every DHT segment of the file is checked here first, walking the markers and skipping the
// entropy-coded data after each SOS (stuffed 0xFF00 bytes and RSTn markers belong to it). A table cut
// off by the end of the file counts too: stb reads zeros past the end and builds it from the counts
// that are there.
void check_jpeg_tables(const uint8_t* d, size_t n, const std::string& name) {
  const auto corrupt = [&](const char* what) { throw MediaError(name + ": corrupt JPEG (" + what + ")"); };
  size_t i = 2;  // after SOI
  while (i + 1 < n) {
    if (d[i] != 0xFF) {
      ++i;  // entropy-coded data (after SOS) or padding: look for the next marker
      continue;
    }
    const uint8_t m = d[i + 1];
    if (m == 0xFF) {  // fill byte
      ++i;
      continue;
    }
    if (m == 0x00 || (m >= 0xD0 && m <= 0xD7) || m == 0x01) {  // stuffed byte, RSTn, TEM: no length
      i += 2;
      continue;
    }
    if (m == 0xD9) return;   // EOI
    if (i + 3 >= n) return;  // truncated: stb reports it
    const size_t len = (size_t(d[i + 2]) << 8) | d[i + 3];
    if (len < 2) corrupt("a segment shorter than its length field");
    const size_t end = std::min(n, i + 2 + len);
    if (m == 0xC4) {
      size_t p = i + 4;
      while (p < end) {
        // stb reads a table's 16 counts whatever the segment's length says (it checks the length only
        // after building the table), so they are summed up to the end of the file, not of the segment.
        size_t codes = 0;
        for (size_t k = p + 1; k < std::min(n, p + 17); ++k) codes += d[k];
        if (codes > 256) corrupt("a Huffman table with more than 256 codes");
        p += 17 + codes;
      }
    }
    i += 2 + len;
  }
}

void check_size(const std::string& name, int64_t w, int64_t h) {
  if (w > kMaxImageSide || h > kMaxImageSide || w * h > kMaxImagePixels)
    throw MediaError(name + ": the image is " + std::to_string(w) + "x" + std::to_string(h) +
                     " pixels, more than gem4 decodes (sides up to " + std::to_string(kMaxImageSide) + ", " +
                     std::to_string(kMaxImagePixels) + " pixels in all)");
}

}  // namespace

RgbImage decode_image(const uint8_t* data, size_t size, const std::string& name) {
  if (size == 0) throw MediaError(name + ": the image is empty (0 bytes)");
  if (int64_t(size) > kMaxImageFileBytes)
    throw MediaError(name + ": the image file has " + std::to_string(size) +
                     " bytes, more than gem4 reads (" + std::to_string(kMaxImageFileBytes) + ")");
  const char* format = format_of(data, size);
  if (!format) {
    const std::string other = other_format_name(data, size);
    throw MediaError(name + ": " + (other.empty() ? "not a PNG or JPEG image" : "a " + other + " image") +
                     "; gem4 reads PNG and JPEG");
  }
  if (size > size_t(INT32_MAX)) throw MediaError(name + ": the image file is too large");
  if (format[0] == 'J') check_jpeg_tables(data, size, name);
  int w = 0, h = 0, channels = 0;
  if (int64_t pw = 0, ph = 0; format[0] == 'P' && png_header_size(data, size, pw, ph))
    check_size(name, pw, ph);
  if (!stbi_info_from_memory(data, int(size), &w, &h, &channels))
    throw MediaError(name + ": cannot read the " + format + " header (" + stbi_failure_reason() + ")");
  if (w <= 0 || h <= 0)
    throw MediaError(name + ": the " + std::string(format) + " image has no pixels (" + std::to_string(w) +
                     "x" + std::to_string(h) + ")");
  check_size(name, w, h);
  int dw = 0, dh = 0, dc = 0;
  std::unique_ptr<stbi_uc, void (*)(void*)> pixels(stbi_load_from_memory(data, int(size), &dw, &dh, &dc, 3),
                                                   stbi_image_free);
  if (!pixels)
    throw MediaError(name + ": cannot decode the " + format + " image (" + stbi_failure_reason() + ")");
  if (dw != w || dh != h) throw MediaError(name + ": the image's size changed while decoding");
  RgbImage img;
  img.width = w;
  img.height = h;
  img.rgb.assign(pixels.get(), pixels.get() + size_t(w) * size_t(h) * 3);
  return img;
}

RgbImage load_image_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) throw MediaError(path + ": cannot open the image file");
  const std::streamoff n = f.tellg();
  if (n < 0) throw MediaError(path + ": cannot read the image file");
  if (n > kMaxImageFileBytes)
    throw MediaError(path + ": the image file has " + std::to_string(n) + " bytes, more than gem4 reads (" +
                     std::to_string(kMaxImageFileBytes) + ")");
  std::vector<uint8_t> bytes(static_cast<size_t>(n));
  f.seekg(0);
  if (n > 0 && !f.read(reinterpret_cast<char*>(bytes.data()), n))
    throw MediaError(path + ": cannot read the image file");
  return decode_image(bytes.data(), bytes.size(), path);
}

}  // namespace gem4::media
