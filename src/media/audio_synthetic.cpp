#include "media/audio_synthetic.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gguf/gguf_writer.h"
#include "tensor/quant.h"

namespace gem4::media {

namespace {

// splitmix64: a fast, seedable stream of uniform bits (hundreds of millions of weights at E2B size).
struct Uniform {
  uint64_t state;
  explicit Uniform(uint64_t seed) : state(seed * 0x9E3779B97F4A7C15ull + 1) {}
  double next() {  // in [-1, 1)
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return double(z >> 11) * (2.0 / 9007199254740992.0) - 1.0;
  }
};

uint64_t name_seed(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (char c : name) h = (h ^ uint8_t(c)) * 1099511628211ull;
  return h;
}

class Builder {
 public:
  Builder(gguf::GgufWriter& w, const SyntheticAudioTower& cfg) : w_(w), cfg_(cfg) {}

  // Values uniform in [center - spread, center + spread], stored as `type` (rows of ne[0]).
  void tensor(const std::string& name, const std::vector<int64_t>& ne, GgmlType type, double center,
              double spread) {
    const uint64_t seed = name_seed(cfg_.seed, name);
    const int64_t row = ne[0];
    w_.add_tensor_lazy(name, ne, type, [=](uint8_t* dst, size_t nbytes) {
      Uniform u(seed);
      const size_t row_bytes = ggml_row_bytes(type, row);
      std::vector<float> tmp(size_t(row), 0.0f);
      for (size_t off = 0; off + row_bytes <= nbytes; off += row_bytes) {
        for (float& v : tmp) v = float(center + spread * u.next());
        if (type == GgmlType::F32)
          std::memcpy(dst + off, tmp.data(), row_bytes);
        else
          quantize_row(type, tmp.data(), dst + off, row);
      }
    });
  }
  // A weight of `in` inputs: uniform with variance 1/in.
  void matrix(const std::string& base, int64_t in, int64_t out, bool clamped) {
    tensor(base + ".weight", {in, out}, cfg_.matrix_type, 0.0, std::sqrt(3.0 / double(in)));
    if (!clamped || !cfg_.clamps) return;
    scalar(base + ".input_min", -3.0f);
    scalar(base + ".input_max", 3.0f);
    scalar(base + ".output_min", -4.0f);
    scalar(base + ".output_max", 4.0f);
  }
  void norm(const std::string& name, int64_t n) { tensor(name, {n}, GgmlType::F32, 1.0, 0.2); }
  void scalar(const std::string& name, float v) {
    std::vector<uint8_t> b(4);
    std::memcpy(b.data(), &v, 4);
    w_.add_tensor(name, {1}, GgmlType::F32, std::move(b));
  }

 private:
  gguf::GgufWriter& w_;
  const SyntheticAudioTower& cfg_;
};

}  // namespace

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

  Builder b(w, c);
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
