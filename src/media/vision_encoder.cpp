#include "media/vision_encoder.h"

#include <cmath>

#include "kernels/ops.h"
#include "kernels/thread_pool.h"
#include "media/encoder_matmul.h"
#include "media/mmproj_file.h"
#include "media/vision_ops.h"

namespace gem4::media {

VisionEncoder::VisionEncoder(const MmprojFile& f) : file_(f) {
  if (!f.has_vision()) f.fail("holds no vision tower (no clip.vision.projector_type)");
  const auto positive = [&](const char* key) {
    const int64_t v = f.get_int(key);
    if (v <= 0 || v > (1 << 20))
      f.fail(std::string("key ") + key + " is " + std::to_string(v) + ", out of range");
    return int(v);
  };
  hp_.n_embd = positive("clip.vision.embedding_length");
  hp_.n_ff = positive("clip.vision.feed_forward_length");
  hp_.n_layer = positive("clip.vision.block_count");
  hp_.n_head = positive("clip.vision.attention.head_count");
  hp_.patch = positive("clip.vision.patch_size");
  hp_.n_merge = int(f.get_int_or("clip.vision.projector.scale_factor", 3));
  if (hp_.n_merge <= 0 || hp_.n_merge > 64) f.fail("key clip.vision.projector.scale_factor is out of range");
  if (hp_.n_embd % hp_.n_head != 0)
    f.fail("clip.vision.embedding_length (" + std::to_string(hp_.n_embd) +
           ") is not a multiple of clip.vision.attention.head_count (" + std::to_string(hp_.n_head) + ")");
  hp_.head_dim = hp_.n_embd / hp_.n_head;
  if (hp_.head_dim % 4 != 0)
    f.fail("vision head width " + std::to_string(hp_.head_dim) + " is not a multiple of 4 (2-D RoPE)");
  hp_.eps = float(f.get_float_or("clip.vision.attention.layer_norm_epsilon", 1e-6));
  const auto triple = [&](const char* key, std::array<float, 3> fallback) {
    const std::vector<float> v = f.get_float_array_or(key, {fallback.begin(), fallback.end()});
    if (v.size() != 3)
      f.fail(std::string("key ") + key + " has " + std::to_string(v.size()) + " values, expected 3");
    return std::array<float, 3>{v[0], v[1], v[2]};
  };
  hp_.mean = triple("clip.vision.image_mean", {0, 0, 0});
  hp_.std = triple("clip.vision.image_std", {1, 1, 1});
  for (float s : hp_.std)
    if (!(s != 0.0f)) f.fail("key clip.vision.image_std has a zero");

  const int d = hp_.n_embd, p = hp_.patch;
  patch_kernel_ = f.floats("v.patch_embd.weight", {p, p, 3, d});
  round_to_f16(patch_kernel_.data(), int64_t(patch_kernel_.size()));
  patch_matrix_.type = GgmlType::F32;
  patch_matrix_.data = patch_kernel_.data();
  patch_matrix_.in = int64_t(3) * p * p;
  patch_matrix_.out = d;
  patch_matrix_.row_bytes = size_t(patch_matrix_.in) * sizeof(float);

  const gguf::TensorInfo* pos = f.find_tensor("v.position_embd.weight");
  if (!pos) f.fail_tensor("v.position_embd.weight", "is missing");
  if (pos->ne.size() < 2 || pos->ne[1] <= 0 || pos->ne[1] > (1 << 20))
    f.fail_tensor("v.position_embd.weight",
                  "has shape " + shape_string(pos->ne) + ", expected [n_embd, n_pos, 2]");
  hp_.pos_size = int(pos->ne[1]);
  pos_table_ = f.floats("v.position_embd.weight", {d, hp_.pos_size, 2});

  const int hd = hp_.head_dim, ff = hp_.n_ff;
  for (int il = 0; il < hp_.n_layer; ++il) {
    const std::string b = "v.blk." + std::to_string(il) + ".";
    Block blk;
    blk.ln1 = f.floats(b + "ln1.weight", {d});
    blk.q = load_clamped_linear(f, b + "attn_q", d, d);
    blk.k = load_clamped_linear(f, b + "attn_k", d, d);
    blk.v = load_clamped_linear(f, b + "attn_v", d, d);
    blk.q_norm = f.floats(b + "attn_q_norm.weight", {hd});
    blk.k_norm = f.floats(b + "attn_k_norm.weight", {hd});
    blk.o = load_clamped_linear(f, b + "attn_out", d, d);
    blk.attn_post_norm = f.floats(b + "attn_post_norm.weight", {d});
    blk.ln2 = f.floats(b + "ln2.weight", {d});
    blk.gate = load_clamped_linear(f, b + "ffn_gate", d, ff);
    blk.up = load_clamped_linear(f, b + "ffn_up", d, ff);
    blk.down = load_clamped_linear(f, b + "ffn_down", ff, d);
    blk.ffn_post_norm = f.floats(b + "ffn_post_norm.weight", {d});
    // Optional: the converter writes a vision layer_scalar as out_scale, and llama.cpp (de3ff81)
    // multiplies the block's output by it when the file has one. One value or one per channel.
    if (const gguf::TensorInfo* t = f.find_tensor(b + "out_scale.weight")) {
      const int64_t m = t->ne.empty() ? 1 : t->ne[0];
      if (m != 1 && m != d)
        f.fail_tensor(b + "out_scale.weight",
                      "has shape " + shape_string(t->ne) + ", expected [1] or [" + std::to_string(d) + "]");
      blk.out_scale = f.floats(b + "out_scale.weight", {m});
    }
    blocks_.push_back(std::move(blk));
  }
  if (f.find_tensor("v.std_bias") || f.find_tensor("v.std_scale")) {
    std_bias_ = f.floats("v.std_bias", {d});
    std_scale_ = f.floats("v.std_scale", {d});
  }
  const gguf::TensorInfo* proj = f.find_tensor("mm.input_projection.weight");
  if (!proj) f.fail_tensor("mm.input_projection.weight", "is missing");
  if (proj->ne.size() < 2 || proj->ne[1] <= 0 || proj->ne[1] > (1 << 20))
    f.fail_tensor("mm.input_projection.weight",
                  "has shape " + shape_string(proj->ne) + ", expected [n_embd, n_embd_text]");
  hp_.n_embd_out = int(proj->ne[1]);
  projection_ = load_clamped_linear(f, "mm.input_projection", d, hp_.n_embd_out, false);
  const int64_t stated = f.get_int_or("clip.vision.projection_dim", hp_.n_embd_out);
  if (stated != hp_.n_embd_out)
    f.fail("clip.vision.projection_dim is " + std::to_string(stated) +
           " but mm.input_projection.weight projects to " + std::to_string(hp_.n_embd_out));
  f.check_all_used({"v.", "mm."}, {"mm.a."});
}

ImageSize VisionEncoder::target_size(int width, int height) const {
  return vision_target_size(width, height, hp_.align(), hp_.min_tokens, hp_.max_tokens);
}

int VisionEncoder::n_tokens(int width, int height) const {
  const ImageSize s = target_size(width, height);
  return (s.width / hp_.align()) * (s.height / hp_.align());
}

std::vector<float> VisionEncoder::encode(const RgbImage& image, ThreadPool* pool,
                                         const EncoderTrace& trace) const {
  if (image.width <= 0 || image.height <= 0) throw MediaError("the image has no pixels");
  return encode_resized(resize_and_pad(image, target_size(image.width, image.height)), pool, trace);
}

void VisionEncoder::run_block(const Block& b, float* h, int64_t n, const std::vector<int>& col,
                              const std::vector<int>& row, ThreadPool* pool) const {
  const int d = hp_.n_embd, hd = hp_.head_dim, nh = hp_.n_head, ff = hp_.n_ff;
  const float eps = hp_.eps;
  std::vector<float> a(size_t(n) * d), q(a.size()), k(a.size()), v(a.size()), att(a.size()), o(a.size());
  for (int64_t r = 0; r < n; ++r) rmsnorm(h + r * d, b.ln1.data(), d, eps, a.data() + r * d);
  // One input buffer for q, k, v in llama.cpp's execution order (for kLlamaCppInPlace, clamped_linear.h).
  b.q.forward(a.data(), n, d, q.data(), d, pool);
  b.k.forward(a.data(), n, d, k.data(), d, pool);
  b.v.forward(a.data(), n, d, v.data(), d, pool);
  rmsnorm_groups(q.data(), b.q_norm.data(), n * nh, hd, eps);
  rmsnorm_groups(k.data(), b.k_norm.data(), n * nh, hd, eps);
  rmsnorm_groups(v.data(), nullptr, n * nh, hd, eps);
  // 2-D RoPE: the first half of each head turns with the patch's column, the second with its row.
  for (int64_t r = 0; r < n; ++r) {
    for (float* x : {q.data() + r * d, k.data() + r * d}) {
      rope_neox_view(x, nh, hd, hd / 2, col[r], hp_.rope_theta);
      rope_neox_view(x + hd / 2, nh, hd, hd / 2, row[r], hp_.rope_theta);
    }
  }
  // Full bidirectional attention, scale 1, per head: scores = Q K^T, softmax, out = P V.
  std::vector<float> scores(size_t(n) * n), vt(size_t(hd) * n);
  for (int hh = 0; hh < nh; ++hh) {
    MatrixView kv;
    kv.type = GgmlType::F32;
    kv.data = k.data() + hh * hd;
    kv.in = hd;
    kv.out = n;
    kv.row_bytes = size_t(d) * sizeof(float);
    matmul(kv, q.data() + hh * hd, n, d, scores.data(), n, pool);
    parallel_for(pool, n, 16, [&](int64_t r0, int64_t r1, int) {
      for (int64_t r = r0; r < r1; ++r) softmax(scores.data() + r * n, n);
    });
    for (int64_t j = 0; j < n; ++j)
      for (int t = 0; t < hd; ++t) vt[size_t(t) * n + j] = v[size_t(j) * d + hh * hd + t];
    MatrixView vv;
    vv.type = GgmlType::F32;
    vv.data = vt.data();
    vv.in = n;
    vv.out = hd;
    vv.row_bytes = size_t(n) * sizeof(float);
    matmul(vv, scores.data(), n, n, att.data() + hh * hd, d, pool);
  }
  b.o.forward(att.data(), n, d, o.data(), d, pool);
  for (int64_t r = 0; r < n; ++r) {
    rmsnorm(o.data() + r * d, b.attn_post_norm.data(), d, eps, o.data() + r * d);
    for (int t = 0; t < d; ++t) h[r * d + t] += o[r * d + t];
  }
  // FFN: down(gelu_quick(gate(b)) * up(b)); under kLlamaCppInPlace gate's input clamp acts on the buffer
  // up reads.
  for (int64_t r = 0; r < n; ++r) rmsnorm(h + r * d, b.ln2.data(), d, eps, a.data() + r * d);
  std::vector<float> g(size_t(n) * ff), u(g.size());
  b.gate.forward(a.data(), n, d, g.data(), ff, pool);
  b.up.forward(a.data(), n, d, u.data(), ff, pool);
  gelu_quick_f16_mul(g.data(), u.data(), g.data(), int64_t(g.size()));
  b.down.forward(g.data(), n, ff, o.data(), d, pool);
  for (int64_t r = 0; r < n; ++r) {
    rmsnorm(o.data() + r * d, b.ffn_post_norm.data(), d, eps, o.data() + r * d);
    for (int t = 0; t < d; ++t) h[r * d + t] += o[r * d + t];
  }
}

std::vector<float> VisionEncoder::encode_resized(const RgbImage& img, ThreadPool* pool,
                                                 const EncoderTrace& trace) const {
  const int al = hp_.align(), p = hp_.patch, d = hp_.n_embd;
  if (img.width <= 0 || img.height <= 0 || img.width % al != 0 || img.height % al != 0)
    throw MediaError("the resized image is " + std::to_string(img.width) + "x" + std::to_string(img.height) +
                     ", not a positive multiple of " + std::to_string(al) + " on each side");
  const int gx = img.width / p, gy = img.height / p;
  if (gx > hp_.pos_size || gy > hp_.pos_size)
    throw MediaError("the image is " + std::to_string(gx) + "x" + std::to_string(gy) +
                     " patches, more than the projector's position table holds (" +
                     std::to_string(hp_.pos_size) + ") on a side");
  const int64_t n = int64_t(gx) * gy;
  const auto emit = [&](const std::string& name, const float* x, int64_t rows, int64_t cols) {
    if (trace) trace(name, x, rows, cols);
  };

  // Patch embedding: a GEMM of the fp16-rounded im2col rows with the fp16-rounded kernel.
  std::vector<float> planar = normalize_planar(img, hp_.mean, hp_.std);
  std::vector<float> patches = image_patches(planar.data(), img.width, img.height, p);
  planar.clear();
  planar.shrink_to_fit();
  round_to_f16(patches.data(), int64_t(patches.size()));
  std::vector<float> h(size_t(n) * d);
  encoder_matmul(patch_matrix_, patches.data(), n, patch_matrix_.in, h.data(), d, pool);
  patches.clear();
  patches.shrink_to_fit();
  emit("inp", h.data(), n, d);

  std::vector<int> col(n), row(n);
  for (int64_t i = 0; i < n; ++i) {
    col[i] = int(i % gx);
    row[i] = int(i / gx);
    const float* tx = pos_table_.data() + size_t(col[i]) * d;
    const float* ty = pos_table_.data() + (size_t(hp_.pos_size) + row[i]) * d;
    float* x = h.data() + i * d;
    for (int t = 0; t < d; ++t) x[t] = (x[t] + tx[t]) + ty[t];
  }
  emit("pos_embd", h.data(), n, d);

  for (int il = 0; il < hp_.n_layer; ++il) {
    run_block(blocks_[il], h.data(), n, col, row, pool);
    emit("layer_out-" + std::to_string(il), h.data(), n, d);
    if (const std::vector<float>& s = blocks_[il].out_scale; !s.empty())
      for (int64_t i = 0; i < n * d; ++i) h[i] *= s[s.size() == 1 ? 0 : i % d];
  }

  std::vector<float> pooled = average_pool_grid(h.data(), gx, gy, d, hp_.n_merge);
  const int64_t nt = int64_t(gx / hp_.n_merge) * (gy / hp_.n_merge);
  const float s = std::sqrt(float(d));
  for (float& x : pooled) x *= s;
  emit("pooled", pooled.data(), nt, d);
  if (!std_bias_.empty())
    for (int64_t r = 0; r < nt; ++r)
      for (int t = 0; t < d; ++t) pooled[r * d + t] = (pooled[r * d + t] - std_bias_[t]) * std_scale_[t];
  for (int64_t r = 0; r < nt; ++r) rmsnorm(pooled.data() + r * d, nullptr, d, hp_.eps, pooled.data() + r * d);
  std::vector<float> out(size_t(nt) * hp_.n_embd_out);
  projection_.forward(pooled.data(), nt, d, out.data(), hp_.n_embd_out, pool);
  emit("embd", out.data(), nt, hp_.n_embd_out);
  return out;
}

}  // namespace gem4::media
