// libFuzzer target for the image reader (stb_image behind media/image.h) and the vision preprocessing
// (built by scripts/fuzz.sh, not part of gem4_tests). Any input must either decode or throw a MediaError
// naming the input; a decoded image must respect the size bounds, and resizing it to its gemma4v target
// and normalising it must stay in bounds.
#include <cstdint>
#include <cstring>

#include "media/image.h"
#include "media/image_preprocess.h"

using namespace gem4::media;

namespace {

void check(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  RgbImage img;
  try {
    img = decode_image(data, size, "fuzz.img");
  } catch (const MediaError& e) {
    check(std::strncmp(e.what(), "fuzz.img: ", 10) == 0);
    return 0;
  }
  check(img.width > 0 && img.height > 0 && img.width <= kMaxImageSide && img.height <= kMaxImageSide);
  check(img.rgb.size() == size_t(img.width) * size_t(img.height) * 3);
  // Small images only through the resize (a large one would only make the run slow, not find more).
  if (int64_t(img.width) * img.height <= 512 * 512) {
    const ImageSize t = vision_target_size(img.width, img.height, 48, 40, 280);
    check(t.width % 48 == 0 && t.height % 48 == 0 && t.width > 0 && t.height > 0);
    const RgbImage r = resize_and_pad(img, t);
    check(r.width == t.width && r.height == t.height && r.rgb.size() == size_t(t.width) * t.height * 3);
    const auto x = normalize_planar(r, {0, 0, 0}, {1, 1, 1});
    check(x.size() == r.rgb.size());
  }
  return 0;
}
