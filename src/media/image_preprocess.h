// What llama.cpp's multimodal library does to an image before the gemma4v tower sees it (the full rules
// are in ../shared/testdata/mtmd-ref/manifest.json, preprocessing_facts): pick a target size that is a
// multiple of patch*merge (48) with a token count in [min, max], resize into it keeping the aspect ratio
// (bilinear, align-corners sampling, uint8 truncation) and centre it on black, then normalise to the
// planar float input of the patch convolution. Every step is float32 arithmetic in llama.cpp's order,
// so the resized pixels match bit for bit.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "media/image.h"

namespace gem4::media {

struct ImageSize {
  int width = 0;
  int height = 0;
};

// The target size for an image of w x h: sides rounded to multiples of `align`, then scaled down (floor)
// when the area exceeds max_tokens * align^2 or up (ceil) when it is under min_tokens * align^2.
ImageSize vision_target_size(int w, int h, int align, int min_tokens, int max_tokens);

// Aspect-preserving bilinear resize into target (the new size is ceil(side * scale), capped by the
// target), pasted at the centre (integer division) of a black image of the target size. A copy when the
// sizes already agree.
RgbImage resize_and_pad(const RgbImage& src, ImageSize target);

// x = ((u / 255 - mean[c]) / std[c]) * 2 - 1 in float32 (the gemma4v graph's scale_bias after the
// processor's normalisation), planar [3][height][width].
std::vector<float> normalize_planar(const RgbImage& img, const std::array<float, 3>& mean,
                                    const std::array<float, 3>& std);

}  // namespace gem4::media
