#include "media/image_preprocess.h"

#include <algorithm>
#include <cmath>

namespace gem4::media {

ImageSize vision_target_size(int w, int h, int align, int min_tokens, int max_tokens) {
  if (w <= 0 || h <= 0 || align <= 0) return {0, 0};
  const int64_t min_pixels = int64_t(min_tokens) * align * align;
  const int64_t max_pixels = int64_t(max_tokens) * align * align;
  const float f = float(align);
  const auto round_to = [&](float x) { return int(std::round(x / f)) * align; };
  const auto ceil_to = [&](float x) { return int(std::ceil(x / f)) * align; };
  const auto floor_to = [&](float x) { return int(std::floor(x / f)) * align; };
  int hb = std::max(align, round_to(float(h)));
  int wb = std::max(align, round_to(float(w)));
  const float area = float(int64_t(h) * w);
  if (int64_t(hb) * wb > max_pixels) {
    const float beta = std::sqrt(area / float(max_pixels));
    hb = std::max(align, floor_to(float(h) / beta));
    wb = std::max(align, floor_to(float(w) / beta));
  } else if (int64_t(hb) * wb < min_pixels) {
    const float beta = std::sqrt(float(min_pixels) / area);
    hb = ceil_to(float(h) * beta);
    wb = ceil_to(float(w) * beta);
  }
  return {wb, hb};
}

namespace {

float lerp(float a, float b, float t) { return a + (b - a) * t; }

// Bilinear with align-corners sampling: destination pixel d reads source position d * (S-1) / (D-1).
// A source side of 1 pixel (which llama.cpp refuses) repeats that pixel.
RgbImage resize_bilinear(const RgbImage& src, int tw, int th) {
  RgbImage dst;
  dst.width = tw;
  dst.height = th;
  dst.rgb.resize(size_t(tw) * th * 3);
  const float xr = tw > 1 ? float(src.width - 1) / float(tw - 1) : 0.0f;
  const float yr = th > 1 ? float(src.height - 1) / float(th - 1) : 0.0f;
  const int xmax = std::max(0, src.width - 2), ymax = std::max(0, src.height - 2);
  const int xstep = src.width > 1 ? 1 : 0, ystep = src.height > 1 ? 1 : 0;
  const auto at = [&](int x, int y, int c) { return float(src.rgb[(size_t(y) * src.width + x) * 3 + c]); };
  for (int y = 0; y < th; ++y) {
    const float py = yr * float(y);
    const int y0 = std::min(int(py), ymax);
    const float ty = py - float(y0);
    for (int x = 0; x < tw; ++x) {
      const float px = xr * float(x);
      const int x0 = std::min(int(px), xmax);
      const float tx = px - float(x0);
      for (int c = 0; c < 3; ++c) {
        const float top = lerp(at(x0, y0, c), at(x0 + xstep, y0, c), tx);
        const float bottom = lerp(at(x0, y0 + ystep, c), at(x0 + xstep, y0 + ystep, c), tx);
        dst.rgb[(size_t(y) * tw + x) * 3 + c] = uint8_t(lerp(top, bottom, ty));
      }
    }
  }
  return dst;
}

}  // namespace

RgbImage resize_and_pad(const RgbImage& src, ImageSize target) {
  if (target.width == src.width && target.height == src.height) return src;
  const float scale =
      std::min(float(target.width) / float(src.width), float(target.height) / float(src.height));
  const int nw = std::min(int(std::ceil(float(src.width) * scale)), target.width);
  const int nh = std::min(int(std::ceil(float(src.height) * scale)), target.height);
  const RgbImage resized = resize_bilinear(src, std::max(nw, 1), std::max(nh, 1));
  RgbImage dst;
  dst.width = target.width;
  dst.height = target.height;
  dst.rgb.assign(size_t(target.width) * target.height * 3, 0);
  const int ox = (target.width - resized.width) / 2, oy = (target.height - resized.height) / 2;
  for (int y = 0; y < resized.height; ++y)
    std::copy_n(&resized.rgb[size_t(y) * resized.width * 3], size_t(resized.width) * 3,
                &dst.rgb[(size_t(y + oy) * dst.width + ox) * 3]);
  return dst;
}

std::vector<float> normalize_planar(const RgbImage& img, const std::array<float, 3>& mean,
                                    const std::array<float, 3>& std) {
  const size_t plane = size_t(img.width) * img.height;
  std::vector<float> out(plane * 3);
  for (size_t i = 0; i < plane; ++i)
    for (int c = 0; c < 3; ++c) {
      const float x = (float(img.rgb[i * 3 + c]) / 255.0f - mean[c]) / std[c];
      out[c * plane + i] = x * 2.0f - 1.0f;
    }
  return out;
}

}  // namespace gem4::media
