// A gemma4a audio tower with random weights in the layout of llama.cpp's converter (tensor names,
// shapes, the clamp scalars, F32 convolutions and norms, matrices in a chosen type), for tests of other
// shapes than the reference file's and for speed measurements at the real E2B/E4B dimensions. The
// weights are uniform with the variance of 1/fan_in, so activations stay O(1); nothing is meaningful.
#pragma once
#include <cstdint>

#include "gguf/ggml_types.h"

namespace gem4::gguf {
class GgufWriter;
}

namespace gem4::media {

struct SyntheticAudioTower {
  int n_embd = 1024;  // E2B/E4B: 12 blocks of 1024, 8 heads of 128, FFN 4096, convolutions 128/32
  int n_head = 8;
  int n_ff = 4096;
  int n_layer = 12;
  int n_mel = 128;
  int sscp_channels[2] = {128, 32};
  int conv_kernel = 5;
  int out_proj_dim = 1536;
  int n_embd_out = 1536;  // the text model's width (E2B 1536, E4B 2560)
  GgmlType matrix_type = GgmlType::F16;
  bool clamps = true;
  uint64_t seed = 1;
};

// Adds the clip.audio.* keys (and general.architecture "clip", clip.has_audio_encoder) and every a.* /
// mm.a.* tensor of the tower to `w`. The tensor bytes are produced when the file is written.
void add_synthetic_audio_tower(gguf::GgufWriter& w, const SyntheticAudioTower& cfg);

}  // namespace gem4::media
