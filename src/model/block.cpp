#include "model/block.h"

#include <algorithm>

#include "kernels/ops.h"
#include "kernels/thread_pool.h"

namespace gem4 {

double run_products(const MatmulTarget* targets, int count, const float* x, int rows, int ldx,
                    ThreadPool* pool) {
  if (rows <= 0) return 0;
  if (count == 1) {
    matmul(targets[0].w, x, rows, ldx, targets[0].y, targets[0].ldy, pool);
  } else {
    matmul_shared_input(targets, count, x, rows, ldx, pool);
  }
  double macs = 0;
  for (int j = 0; j < count; ++j) macs += double(targets[j].w.in) * double(targets[j].w.out) * rows;
  return macs;
}

void BlockBuffers::resize(int n, const ModelConfig& c) {
  const size_t rows = size_t(std::max(n, 0)), d = size_t(c.d_model);
  const size_t qw = size_t(c.max_q_width()), ff = size_t(c.max_ff());
  a.resize(rows * d), o.resize(rows * d);
  q.resize(rows * qw), attn.resize(rows * qw);
  gate.resize(rows * ff), up.resize(rows * ff), act.resize(rows * ff);
}

DecoderBlock::DecoderBlock(const ModelConfig& c, const ModelWeights& w, ThreadPool* pool, MatmulHook matmul,
                           BlockBuffers& buf)
    : c_(c), w_(w), pool_(pool), matmul_(std::move(matmul)), buf_(buf) {}

void DecoderBlock::norm_rows(const float* x, const float* w, int n, float* y) const {
  const int d = c_.d_model;
  const float eps = c_.rms_eps;
  parallel_for(pool_, n, 16, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) rmsnorm(x + i * d, w, d, eps, y + i * d);
  });
}

void DecoderBlock::add_normed(const float* w, float* h, int n) const {
  norm_rows(buf_.o.data(), w, n, buf_.o.data());
  const float* o = buf_.o.data();
  for (size_t i = 0; i < size_t(n) * c_.d_model; ++i) h[i] += o[i];
}

void DecoderBlock::attention_norm(int l, const float* h, int n) const {
  norm_rows(h, w_.layers[l].attn_norm.data(), n, buf_.a.data());
}

void DecoderBlock::query(int l, const int32_t* pos, int n, bool projected) const {
  const LayerWeights& lw = w_.layers[l];
  const int H = c_.n_head, hd = c_.layers[l].head_dim, qw = H * hd;
  const float eps = c_.rms_eps;
  const float* inv_freq = w_.inv_freq[l].data();
  if (!projected) {
    const MatmulTarget target{lw.attn_q, buf_.q.data(), qw};
    matmul_(&target, 1, buf_.a.data(), n, c_.d_model);
  }
  parallel_for(pool_, n, 4, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      float* q = &buf_.q[size_t(i) * qw];
      rmsnorm_groups(q, lw.attn_q_norm.data(), H, hd, eps);
      rope_neox(q, H, hd, pos[i], inv_freq);  // at the row's own position, also after pruning
    }
  });
}

double DecoderBlock::attention(int l, const AttentionKeys& keys, float* h, int n) const {
  const LayerWeights& lw = w_.layers[l];
  const int qw = keys.shape.n_head * keys.shape.head_dim;
  const double macs = attend(buf_.q.data(), n, keys.mask_pos, keys.seq, keys.shape, *keys.kv, keys.slot,
                             keys.crop, keys.kv_len, buf_.attn.data(), pool_);
  const MatmulTarget out{lw.attn_output, buf_.o.data(), c_.d_model};
  matmul_(&out, 1, buf_.attn.data(), n, qw);
  add_normed(lw.post_attention_norm.data(), h, n);
  return macs;
}

void DecoderBlock::mlp(int l, bool exact_gelu, float* h, int n) const {
  const LayerWeights& lw = w_.layers[l];
  const int d = c_.d_model, ff = c_.layers[l].n_ff;
  norm_rows(h, lw.ffn_norm.data(), n, buf_.a.data());
  const MatmulTarget gate_up[2] = {{lw.ffn_gate, buf_.gate.data(), ff}, {lw.ffn_up, buf_.up.data(), ff}};
  matmul_(gate_up, 2, buf_.a.data(), n, d);
  // Element-wise, so the split among threads does not change a bit.
  parallel_for(pool_, int64_t(n) * ff, 4096, [&](int64_t b, int64_t e, int) {
    if (exact_gelu) {
      gelu_tanh_mul(buf_.gate.data() + b, buf_.up.data() + b, buf_.act.data() + b, e - b);
    } else {
      gelu_tanh_f16_mul(buf_.gate.data() + b, buf_.up.data() + b, buf_.act.data() + b, e - b);
    }
  });
  const MatmulTarget down{lw.ffn_down, buf_.o.data(), d};
  matmul_(&down, 1, buf_.act.data(), n, ff);
  add_normed(lw.post_ffw_norm.data(), h, n);
}

void DecoderBlock::scale(int l, float* h, int n) const {
  const float s = w_.layers[l].layer_output_scale;
  for (size_t i = 0; i < size_t(n) * c_.d_model; ++i) h[i] *= s;
}

}  // namespace gem4
