#include "media/vision_synthetic.h"

#include <cmath>
#include <string>

#include "gguf/gguf_writer.h"
#include "media/synthetic_tensors.h"

namespace gem4::media {

void add_synthetic_vision_tower(gguf::GgufWriter& w, const SyntheticVisionTower& c) {
  w.set_string("general.architecture", "clip");
  w.set_string("general.type", "mmproj");
  w.set_bool("clip.has_vision_encoder", true);
  w.set_string("clip.vision.projector_type", "gemma4v");
  w.set_u32("clip.vision.projection_dim", uint32_t(c.n_embd_out));
  w.set_u32("clip.vision.image_size", 224);  // the converter's placeholder (unused by gemma4v)
  w.set_u32("clip.vision.patch_size", uint32_t(c.patch));
  w.set_u32("clip.vision.embedding_length", uint32_t(c.n_embd));
  w.set_u32("clip.vision.feed_forward_length", uint32_t(c.n_ff));
  w.set_u32("clip.vision.block_count", uint32_t(c.n_layer));
  w.set_u32("clip.vision.attention.head_count", uint32_t(c.n_head));
  w.set_f32_array("clip.vision.image_mean", {0.0f, 0.0f, 0.0f});  // the real processor config
  w.set_f32_array("clip.vision.image_std", {1.0f, 1.0f, 1.0f});
  w.set_f32("clip.vision.attention.layer_norm_epsilon", 1e-6f);

  SyntheticTensors b(w, c.seed, c.matrix_type, c.clamps);
  const int64_t d = c.n_embd, p = c.patch, hd = c.n_embd / c.n_head;
  // The converter writes the patch convolution as F16 in an F16 file and F32 otherwise; its input is
  // 2x - 1 in [-1, 1], so variance 1/fan_in keeps the patch embeddings O(1).
  const GgmlType patch_type = c.matrix_type == GgmlType::F16 ? GgmlType::F16 : GgmlType::F32;
  b.tensor("v.patch_embd.weight", {p, p, 3, d}, patch_type, 0.0, std::sqrt(3.0 / double(3 * p * p)));
  b.tensor("v.position_embd.weight", {d, c.pos_size, 2}, GgmlType::F32, 0.0, 0.5);
  for (int il = 0; il < c.n_layer; ++il) {
    const std::string pre = "v.blk." + std::to_string(il) + ".";
    b.norm(pre + "ln1.weight", d);
    for (const char* m : {"attn_q", "attn_k", "attn_v"}) b.matrix(pre + m, d, d, true);
    b.norm(pre + "attn_q_norm.weight", hd);
    b.norm(pre + "attn_k_norm.weight", hd);
    b.matrix(pre + "attn_out", d, d, true);
    b.norm(pre + "attn_post_norm.weight", d);
    b.norm(pre + "ln2.weight", d);
    b.matrix(pre + "ffn_gate", d, c.n_ff, true);
    b.matrix(pre + "ffn_up", d, c.n_ff, true);
    b.matrix(pre + "ffn_down", c.n_ff, d, true);
    b.norm(pre + "ffn_post_norm.weight", d);
  }
  b.matrix("mm.input_projection", d, c.n_embd_out, false);
}

}  // namespace gem4::media
