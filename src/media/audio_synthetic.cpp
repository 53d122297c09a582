#include "media/audio_synthetic.h"

#include <cmath>
#include <string>

#include "gguf/gguf_writer.h"
#include "media/synthetic_tensors.h"

namespace gem4::media {

void add_synthetic_audio_tower(gguf::GgufWriter& w, const SyntheticAudioTower& c) {
  w.set_string("general.architecture", "clip");
  w.set_string("general.type", "mmproj");
  w.set_bool("clip.has_audio_encoder", true);
  w.set_string("clip.audio.projector_type", "gemma4a");
  w.set_u32("clip.audio.projection_dim", uint32_t(c.n_embd_out));
  w.set_u32("clip.audio.embedding_length", uint32_t(c.n_embd));
  w.set_u32("clip.audio.feed_forward_length", uint32_t(c.n_ff));
  w.set_u32("clip.audio.block_count", uint32_t(c.n_layer));
  w.set_u32("clip.audio.attention.head_count", uint32_t(c.n_head));
  w.set_u32("clip.audio.num_mel_bins", uint32_t(c.n_mel));
  w.set_f32("clip.audio.attention.layer_norm_epsilon", 1e-6f);

  SyntheticTensors b(w, c.seed, c.matrix_type, c.clamps);
  const int64_t n = c.n_embd;
  int64_t in_ch = 1, freq = c.n_mel;
  for (int i = 0; i < 2; ++i) {
    const std::string base = "a.conv1d." + std::to_string(i);
    b.tensor(base + ".weight", {3, 3, in_ch, c.sscp_channels[i]}, GgmlType::F32, 0.0,
             std::sqrt(3.0 / double(in_ch * 9)));
    b.norm(base + ".norm.weight", c.sscp_channels[i]);
    in_ch = c.sscp_channels[i];
    freq = (freq - 1) / 2 + 1;
  }
  b.matrix("a.input_projection", freq * in_ch, n, false);
  for (int il = 0; il < c.n_layer; ++il) {
    const std::string p = "a.blk." + std::to_string(il) + ".";
    for (const char* s : {"", "_1"}) {
      b.norm(p + "ffn_norm" + s + ".weight", n);
      b.matrix(p + "ffn_up" + s, n, c.n_ff, true);
      b.matrix(p + "ffn_down" + s, c.n_ff, n, true);
      b.norm(p + "ffn_post_norm" + s + ".weight", n);
    }
    b.norm(p + "attn_pre_norm.weight", n);
    for (const char* m : {"attn_q", "attn_k", "attn_v", "attn_out"}) b.matrix(p + m, n, n, true);
    b.matrix(p + "attn_k_rel", n, n, false);
    b.tensor(p + "per_dim_scale.weight", {n / c.n_head}, GgmlType::F32, 1.0, 0.3);
    b.norm(p + "attn_post_norm.weight", n);
    b.norm(p + "conv_norm.weight", n);
    b.matrix(p + "conv_pw1", n, 2 * n, true);
    b.tensor(p + "conv_dw.weight", {c.conv_kernel, n}, GgmlType::F32, 0.0, std::sqrt(3.0 / c.conv_kernel));
    b.norm(p + "norm_conv.weight", n);
    b.matrix(p + "conv_pw2", n, n, true);
    b.norm(p + "ln2.weight", n);
  }
  b.matrix("a.pre_encode.out", n, c.out_proj_dim, false);
  b.tensor("a.pre_encode.out.bias", {c.out_proj_dim}, GgmlType::F32, 0.0, 0.1);
  b.matrix("mm.a.input_projection", c.out_proj_dim, c.n_embd_out, false);
}

}  // namespace gem4::media
