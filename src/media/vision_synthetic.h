// A gemma4v vision tower with random weights in the layout of llama.cpp's converter (tensor names and
// shapes, the clamp scalars, F32 norms and position tables, the patch convolution F16 in an F16 file and
// F32 otherwise, matrices in a chosen type), for speed measurements at the real E2B/E4B dimensions and
// tests of other shapes. Weights are uniform with the variance of 1/fan_in, so activations stay O(1).
#pragma once
#include <cstdint>

#include "gguf/ggml_types.h"

namespace gem4::gguf {
class GgufWriter;
}

namespace gem4::media {

struct SyntheticVisionTower {
  int n_embd = 768;  // E2B/E4B: 16 blocks of 768, 12 heads of 64, FFN 3072, 16-pixel patches
  int n_head = 12;
  int n_ff = 3072;
  int n_layer = 16;
  int patch = 16;
  int pos_size = 10240;   // rows of each learned position table (by column, by row)
  int n_embd_out = 1536;  // the text model's width (E2B 1536, E4B 2560)
  GgmlType matrix_type = GgmlType::F16;
  bool clamps = true;
  uint64_t seed = 1;
};

// Adds the clip.vision.* keys (and general.architecture "clip", clip.has_vision_encoder) and every v.* /
// mm.* tensor of the tower to `w`. The tensor bytes are produced when the file is written.
void add_synthetic_vision_tower(gguf::GgufWriter& w, const SyntheticVisionTower& cfg);

}  // namespace gem4::media
