// Images as the vision tower's preprocessing reads them: 8-bit RGB, decoded from PNG or JPEG by
// stb_image (Debian's libstb-dev), the decoder llama.cpp uses, so the pixels are the same: 3 channels
// requested (alpha dropped without compositing, gray replicated). Bad input (empty, truncated,
// corrupt, another format, dimensions past the bound) is a MediaError naming the image; the header's
// dimensions are checked before anything is decoded, so a decompression bomb costs no memory.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace gem4::media {

class MediaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;  // [height][width][3]
};

// Bounds on what is decoded at all (the encoder shrinks anything larger to at most 280 tokens anyway).
inline constexpr int kMaxImageSide = 16384;
inline constexpr int64_t kMaxImagePixels = int64_t(1) << 25;     // 33.5 Mpixel: 100 MiB of RGB
inline constexpr int64_t kMaxImageFileBytes = int64_t(1) << 28;  // 256 MiB

// `name` (a path or "request image 1") is used in error messages.
RgbImage decode_image(const uint8_t* data, size_t size, const std::string& name);
RgbImage load_image_file(const std::string& path);

}  // namespace gem4::media
