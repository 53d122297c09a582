#include "media/audio_encoder.h"

#include <algorithm>
#include <cmath>

#include "kernels/matmul.h"
#include "kernels/thread_pool.h"
#include "media/audio_ops.h"
#include "media/encoder_matmul.h"
#include "media/mmproj_file.h"

namespace gem4::media {

namespace {

std::string blk(int il, const std::string& what) { return "a.blk." + std::to_string(il) + "." + what; }

// Rows (x, out) = clamped linear of x (rows x in; clamped in place under kLlamaCppInPlace).
// One kernels::matmul over the whole reduction, not ClampedLinear::forward's 32-long slices: the audio
// tower has no fp16 table after its convolutions for a last-bit difference to jump in, the slices made an
// E2B-sized tower ~3.5x slower (29 s instead of 8 s for 30 s of audio on 2 threads), and the reference
// projector's rows agree to ~2e-6 either way. The clamps are ClampedLinear's (clamp_input).
//
// F16 and BF16 weights (the real E2B/E4B files) go through encoder_matmul, which multiplies a copy of
// the activations rounded to their type, as ggml converts them (and does not slice 16-bit weights).
std::vector<float> apply(const ClampedLinear& l, float* x, int64_t rows, ThreadPool* pool) {
  std::vector<float> y(size_t(rows * l.out()));
  std::vector<float> scratch;
  int64_t ld = 0;
  const float* in = l.clamp_input(x, rows, l.in(), scratch, &ld);
  if (l.w.type == GgmlType::F16 || l.w.type == GgmlType::BF16)
    encoder_matmul(l.w, in, rows, ld, y.data(), l.out(), pool);
  else
    matmul(l.w, in, rows, ld, y.data(), l.out(), pool);
  l.output.apply(y.data(), rows, l.out(), l.out());
  return y;
}

// y[r][o] = float(sum_k x[r][k] * w[o][k] in double), k < 9.
void conv_single_channel_double(const float* x, int64_t rows, const float* w, int64_t out, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * 9;
    for (int64_t o = 0; o < out; ++o) {
      const float* wo = w + o * 9;
      double sum = 0.0;
      for (int k = 0; k < 9; ++k) sum += double(xr[k] * wo[k]);
      y[r * out + o] = float(sum);
    }
  }
}

void add_bias(float* y, int64_t rows, const std::vector<float>& b) {
  if (b.empty()) return;
  const int64_t w = int64_t(b.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < w; ++i) y[r * w + i] += b[i];
}

}  // namespace

AudioEncoder::AudioEncoder(const MmprojFile& file) : file_(file) {
  if (!file.has_audio()) file.fail("has no audio tower (clip.has_audio_encoder / clip.audio.projector_type)");
  if (file.audio_projector() != "gemma4a")
    file.fail("audio projector type \"" + file.audio_projector() + "\" is not gemma4a");
  AudioHparams& hp = hp_;
  hp.n_embd = int(file.get_int("clip.audio.embedding_length"));
  hp.n_ff = int(file.get_int("clip.audio.feed_forward_length"));
  hp.n_layer = int(file.get_int("clip.audio.block_count"));
  hp.n_head = int(file.get_int("clip.audio.attention.head_count"));
  hp.n_mel = int(file.get_int_or("clip.audio.num_mel_bins", 128));
  hp.n_embd_out = int(file.get_int("clip.audio.projection_dim"));
  if (hp.n_embd <= 0 || hp.n_embd > 65536 || hp.n_head <= 0 || hp.n_embd % hp.n_head != 0 || hp.n_ff <= 0 ||
      hp.n_ff > 1 << 20 || hp.n_layer <= 0 || hp.n_layer > 256 || hp.n_mel <= 0 || hp.n_mel > 1024 ||
      hp.n_embd_out <= 0 || hp.n_embd_out > 1 << 20)
    file.fail("implausible audio hyper-parameters (width " + std::to_string(hp.n_embd) + ", heads " +
              std::to_string(hp.n_head) + ", FFN " + std::to_string(hp.n_ff) + ", blocks " +
              std::to_string(hp.n_layer) + ", mel bins " + std::to_string(hp.n_mel) + ", projection " +
              std::to_string(hp.n_embd_out) + ")");
  hp.head_dim = hp.n_embd / hp.n_head;
  if (hp.n_embd % 2 != 0) file.fail("odd audio width " + std::to_string(hp.n_embd));

  // Subsampling: two 3x3 stride-2 convolutions, 1 -> C0 -> C1 channels, kernels ne [3, 3, in, out].
  int in_ch = 1;
  int64_t freq = hp.n_mel;
  for (int i = 0; i < 2; ++i) {
    const std::string base = "a.conv1d." + std::to_string(i);
    const gguf::TensorInfo* t = file.find_tensor(base + ".weight");
    if (!t) file.fail_tensor(base + ".weight", "is missing");
    if (t->ne.size() < 4)
      file.fail_tensor(base + ".weight", "has shape " + shape_string(t->ne) + ", not [3, 3, in, out]");
    const int out_ch = int(t->ne[3]);
    if (out_ch <= 0 || out_ch > 4096)
      file.fail_tensor(base + ".weight", "has " + std::to_string(out_ch) + " output channels");
    hp.sscp_channels[i] = out_ch;
    conv_kernel_[i] = file.floats(base + ".weight", {3, 3, in_ch, out_ch});
    round_to_f16_inplace(conv_kernel_[i].data(), int64_t(conv_kernel_[i].size()));
    conv_matrix_[i].type = GgmlType::F32;
    conv_matrix_[i].data = conv_kernel_[i].data();
    conv_matrix_[i].in = int64_t(in_ch) * 9;
    conv_matrix_[i].out = out_ch;
    conv_matrix_[i].row_bytes = size_t(in_ch) * 9 * sizeof(float);
    if (file.find_tensor(base + ".bias")) conv_bias_[i] = file.floats(base + ".bias", {out_ch});
    conv_norm_[i] = file.floats(base + ".norm.weight", {out_ch});
    in_ch = out_ch;
    freq = (freq - 1) / 2 + 1;
  }
  const int64_t flat = freq * hp.sscp_channels[1];
  input_projection_ = load_clamped_linear(file, "a.input_projection", flat, hp.n_embd);
  if (file.find_tensor("a.input_projection.bias"))
    input_projection_bias_ = file.floats("a.input_projection.bias", {hp.n_embd});

  const std::vector<float> sinusoids = relative_position_sinusoids(hp.n_embd, hp.max_past);
  const int64_t n = hp.n_embd;
  for (int il = 0; il < hp.n_layer; ++il) {
    Block b;
    auto ffn = [&](const std::string& suffix) {
      Ffn f;
      f.norm = file.floats(blk(il, "ffn_norm" + suffix + ".weight"), {n});
      f.up = load_clamped_linear(file, blk(il, "ffn_up" + suffix), n, hp.n_ff);
      f.down = load_clamped_linear(file, blk(il, "ffn_down" + suffix), hp.n_ff, n);
      f.post_norm = file.floats(blk(il, "ffn_post_norm" + suffix + ".weight"), {n});
      return f;
    };
    b.ffn1 = ffn("");
    b.ffn2 = ffn("_1");
    b.attn_pre_norm = file.floats(blk(il, "attn_pre_norm.weight"), {n});
    b.q = load_clamped_linear(file, blk(il, "attn_q"), n, n);
    b.k = load_clamped_linear(file, blk(il, "attn_k"), n, n);
    b.v = load_clamped_linear(file, blk(il, "attn_v"), n, n);
    b.o = load_clamped_linear(file, blk(il, "attn_out"), n, n);
    b.per_dim_scale = file.floats(blk(il, "per_dim_scale.weight"), {hp.head_dim});
    b.attn_post_norm = file.floats(blk(il, "attn_post_norm.weight"), {n});
    // llama.cpp multiplies attn_k_rel with a plain ggml_mul_mat: clamp scalars there would be ignored.
    const ClampedLinear k_rel =
        load_clamped_linear(file, blk(il, "attn_k_rel"), n, n, /*clamps_allowed=*/false);
    std::vector<float> sin_copy = sinusoids;
    b.rel_pos = apply(k_rel, sin_copy.data(), hp.max_past + 1, nullptr);
    b.conv_pre_norm = file.floats(blk(il, "conv_norm.weight"), {n});
    b.pw1 = load_clamped_linear(file, blk(il, "conv_pw1"), n, 2 * n);
    const gguf::TensorInfo* dw = file.find_tensor(blk(il, "conv_dw.weight"));
    if (!dw) file.fail_tensor(blk(il, "conv_dw.weight"), "is missing");
    const int taps = dw->ne.empty() ? 0 : int(dw->ne[0]);
    if (taps <= 0 || taps > 64)
      file.fail_tensor(blk(il, "conv_dw.weight"), "has " + std::to_string(taps) + " taps");
    if (il == 0) hp.conv_kernel = taps;
    if (taps != hp.conv_kernel)
      file.fail_tensor(blk(il, "conv_dw.weight"), "has a different tap count than block 0");
    b.conv_dw = file.floats(blk(il, "conv_dw.weight"), {taps, n});
    b.conv_post_norm = file.floats(blk(il, "norm_conv.weight"), {n});
    b.pw2 = load_clamped_linear(file, blk(il, "conv_pw2"), n, n);
    b.out_norm = file.floats(blk(il, "ln2.weight"), {n});
    blocks_.push_back(std::move(b));
  }
  const gguf::TensorInfo* out = file.find_tensor("a.pre_encode.out.weight");
  if (!out || out->ne.size() < 2) file.fail_tensor("a.pre_encode.out.weight", "is missing or not a matrix");
  hp.out_proj_dim = int(out->ne[1]);
  out_projection_ = load_clamped_linear(file, "a.pre_encode.out", n, hp.out_proj_dim);
  if (file.find_tensor("a.pre_encode.out.bias"))
    out_projection_bias_ = file.floats("a.pre_encode.out.bias", {hp.out_proj_dim});
  mm_projection_ = load_clamped_linear(file, "mm.a.input_projection", hp.out_proj_dim, hp.n_embd_out);
  file.check_all_used({"a.", "mm.a."});
}

int64_t AudioEncoder::n_tokens_for_frames(int64_t frames) {
  if (frames <= 0) return 0;
  int64_t t = frames;
  for (int i = 0; i < 2; ++i) t = (t - 1) / 2 + 1;
  return t;
}

int64_t AudioEncoder::n_tokens(const std::vector<float>& pcm16k) const {
  int64_t total = 0;
  const int64_t n = int64_t(pcm16k.size());
  for (int64_t off = 0; off < n; off += kMelChunkSamples)
    total += n_tokens_for_frames(mel_frame_count(std::min(kMelChunkSamples, n - off)));
  return total;
}

std::vector<float> AudioEncoder::encode(const std::vector<float>& pcm16k, ThreadPool* pool,
                                        const AudioTrace& trace) const {
  const int64_t total = n_tokens(pcm16k);
  if (total == 0)
    throw AudioError("audio of " + std::to_string(pcm16k.size()) +
                     " samples at 16 kHz is too short for one mel frame");
  // One 30 s chunk at a time (log_mel_chunks' split): a long clip never holds all its features at once.
  std::vector<float> rows;
  rows.reserve(size_t(total) * size_t(hp_.n_embd_out));
  const int64_t n = int64_t(pcm16k.size());
  int chunk = 0;
  for (int64_t off = 0; off < n; off += kMelChunkSamples) {
    const LogMel mel = log_mel_gemma4a(pcm16k.data() + off, std::min(kMelChunkSamples, n - off), hp_.n_mel);
    if (mel.frames == 0) continue;  // a trailing sample too short for a frame (log_mel_chunks drops it too)
    const std::vector<float> r = encode_mel(mel, pool, trace, chunk++);
    rows.insert(rows.end(), r.begin(), r.end());
  }
  return rows;
}

std::vector<float> AudioEncoder::encode_mel(const LogMel& mel, ThreadPool* pool, const AudioTrace& trace,
                                            int chunk_index) const {
  if (mel.n_mel != hp_.n_mel)
    throw AudioError(file_.path() + ": mel input has " + std::to_string(mel.n_mel) +
                     " bins, the tower reads " + std::to_string(hp_.n_mel));
  if (mel.frames <= 0) throw AudioError(file_.path() + ": empty mel input");
  const auto emit = [&](const std::string& name, const float* data, int64_t rows, int64_t cols) {
    if (trace) trace(chunk_index, name, data, rows, cols);
  };

  // Subsampling convolutions over (time, frequency), activations [time][freq][channel].
  std::vector<float> act = mel.data;  // [frames][n_mel][1]
  int64_t t_len = mel.frames, f_len = mel.n_mel, ch = 1;
  for (int i = 0; i < 2; ++i) {
    std::vector<float> cols = im2col_3x3_s2(act.data(), t_len, f_len, ch);
    round_to_f16_inplace(cols.data(), int64_t(cols.size()));
    t_len = (t_len - 1) / 2 + 1;
    f_len = (f_len - 1) / 2 + 1;
    ch = hp_.sscp_channels[i];
    act.assign(size_t(t_len * f_len * ch), 0.0f);
    if (i == 0) {
      // ggml sums the 9 fp16 products of a single-channel window in double: its output is rounded to
      // fp16 again by the next convolution, where a last-bit difference would move a value by an fp16
      // step, so this one is computed the same way.
      const int64_t rows = t_len * f_len;
      const auto part = [&](int64_t r0, int64_t r1, int) {
        conv_single_channel_double(cols.data() + r0 * 9, r1 - r0, conv_kernel_[0].data(), ch,
                                   act.data() + r0 * ch);
      };
      if (pool)
        pool->parallel_for(rows, 64, part);
      else
        part(0, rows, 0);
    } else {
      encoder_matmul(conv_matrix_[i], cols.data(), t_len * f_len, conv_matrix_[i].in, act.data(), ch, pool);
    }
    add_bias(act.data(), t_len * f_len, conv_bias_[i]);
    layer_norm_rows(act.data(), t_len * f_len, ch, conv_norm_[i].data(), hp_.eps, /*relu=*/true);
  }
  // Flattened per frame as (freq, channel): feature f * C1 + c, which is act's layout already.
  const int64_t n = t_len, d = hp_.n_embd;
  std::vector<float> h = apply(input_projection_, act.data(), n, pool);
  add_bias(h.data(), n, input_projection_bias_);
  emit("sscp_out", h.data(), n, d);

  for (int il = 0; il < hp_.n_layer; ++il) {
    const Block& b = blocks_[il];
    run_ffn(b.ffn1, h.data(), n, pool);
    run_attention(b, h.data(), n, pool);
    run_light_conv(b, h.data(), n, pool);
    run_ffn(b.ffn2, h.data(), n, pool);
    rms_norm_rows(h.data(), h.data(), n, d, b.out_norm.data(), hp_.eps);
    emit("layer_out-" + std::to_string(il), h.data(), n, d);
  }

  std::vector<float> o = apply(out_projection_, h.data(), n, pool);
  add_bias(o.data(), n, out_projection_bias_);
  rms_norm_rows(o.data(), o.data(), n, hp_.out_proj_dim, nullptr, hp_.eps);
  std::vector<float> e = apply(mm_projection_, o.data(), n, pool);
  emit("embd", e.data(), n, hp_.n_embd_out);
  return e;
}

// h += 0.5 * post_norm(down(silu(up(norm(h))))).
void AudioEncoder::run_ffn(const Ffn& f, float* h, int64_t n, ThreadPool* pool) const {
  const int64_t d = hp_.n_embd;
  std::vector<float> a(size_t(n * d));
  rms_norm_rows(h, a.data(), n, d, f.norm.data(), hp_.eps);
  std::vector<float> u = apply(f.up, a.data(), n, pool);
  for (float& x : u) x = silu(x);
  std::vector<float> y = apply(f.down, u.data(), n, pool);
  rms_norm_rows(y.data(), y.data(), n, d, f.post_norm.data(), hp_.eps);
  for (int64_t i = 0; i < n * d; ++i) h[i] += y[i] * 0.5f;
}

void AudioEncoder::run_attention(const Block& b, float* h, int64_t n, ThreadPool* pool) const {
  const int64_t d = hp_.n_embd;
  const int hd = hp_.head_dim;
  std::vector<float> a(size_t(n * d));
  rms_norm_rows(h, a.data(), n, d, b.attn_pre_norm.data(), hp_.eps);
  // llama.cpp runs V, then K, then Q (the order matters for kLlamaCppInPlace, clamped_linear.h).
  std::vector<float> v = apply(b.v, a.data(), n, pool);
  std::vector<float> k = apply(b.k, a.data(), n, pool);
  std::vector<float> q = apply(b.q, a.data(), n, pool);
  const float q_scale = (1.0f / std::sqrt(float(hd))) / std::log(2.0f);
  const float k_scale = std::log(1.0f + std::exp(1.0f)) / std::log(2.0f);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < d; ++i) {
      q[r * d + i] = (q[r * d + i] * q_scale) * b.per_dim_scale[i % hd];
      k[r * d + i] = k[r * d + i] * k_scale;
    }
  std::vector<float> x(size_t(n * d));
  const auto heads = [&](int64_t h0, int64_t h1, int) {
    for (int64_t head = h0; head < h1; ++head) {
      const int64_t off = head * hd;
      chunked_attention_head(q.data() + off, k.data() + off, v.data() + off, d, b.rel_pos.data() + off, d, n,
                             hd, hp_.chunk, hp_.max_past, 50.0f, x.data() + off);
    }
  };
  // Each head's result depends only on its own values: the split does not change any bit.
  if (pool)
    pool->parallel_for(hp_.n_head, 1, heads);
  else
    heads(0, hp_.n_head, 0);
  std::vector<float> y = apply(b.o, x.data(), n, pool);
  rms_norm_rows(y.data(), y.data(), n, d, b.attn_post_norm.data(), hp_.eps);
  for (int64_t i = 0; i < n * d; ++i) h[i] += y[i];
}

// h += pw2(silu(post_norm(depthwise(glu(pw1(pre_norm(h))))))).
void AudioEncoder::run_light_conv(const Block& b, float* h, int64_t n, ThreadPool* pool) const {
  const int64_t d = hp_.n_embd;
  std::vector<float> a(size_t(n * d));
  rms_norm_rows(h, a.data(), n, d, b.conv_pre_norm.data(), hp_.eps);
  const std::vector<float> p = apply(b.pw1, a.data(), n, pool);  // [n][2d]
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < d; ++i) a[r * d + i] = p[r * 2 * d + i] * sigmoid(p[r * 2 * d + d + i]);
  std::vector<float> c(size_t(n * d));
  causal_depthwise_conv(a.data(), n, d, b.conv_dw.data(), hp_.conv_kernel, c.data());
  rms_norm_rows(c.data(), c.data(), n, d, b.conv_post_norm.data(), hp_.eps);
  for (float& x : c) x = silu(x);
  const std::vector<float> y = apply(b.pw2, c.data(), n, pool);
  for (int64_t i = 0; i < n * d; ++i) h[i] += y[i];
}

}  // namespace gem4::media
