#include "model/block.h"

#include <algorithm>
#include <cmath>

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

double run_group(const MatmulJob* jobs, int count, ThreadPool* pool) {
  matmul_group(jobs, count, pool);
  double macs = 0;
  for (int j = 0; j < count; ++j) macs += double(jobs[j].w.in) * double(jobs[j].w.out) * double(jobs[j].rows);
  return macs;
}

void BlockBuffers::resize(int n, const ModelConfig& c) {
  const size_t rows = size_t(std::max(n, 0)), d = size_t(c.d_model);
  const size_t qw = size_t(c.max_q_width()), ff = size_t(c.max_ff());
  a.resize(rows * d), o.resize(rows * d);
  q.resize(rows * qw), attn.resize(rows * qw);
  gate.resize(rows * ff), up.resize(rows * ff);
}

DecoderBlock::DecoderBlock(const ModelConfig& c, const ModelWeights& w, ThreadPool* pool, MatmulHook matmul,
                           MatmulGroupHook group, BlockBuffers& buf)
    : c_(c), w_(w), pool_(pool), matmul_(std::move(matmul)), group_(std::move(group)), buf_(buf) {}

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
  const ModelWeights::Rope& rope = w_.rope[l];
  if (!projected) {
    const MatmulTarget target{lw.attn_q, buf_.q.data(), qw};
    matmul_(&target, 1, buf_.a.data(), n, c_.d_model);
  }
  parallel_for(pool_, n, 4, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      float* q = &buf_.q[size_t(i) * qw];
      rmsnorm_groups(q, lw.attn_q_norm.data(), H, hd, eps);
      // At the row's own position, also after pruning.
      rope_neox(q, H, hd, pos[i], rope.theta_scale, rope.factors.data());
    }
  });
}

double DecoderBlock::attention(int l, const AttentionKeys& keys, float* h, int n) const {
  const LayerWeights& lw = w_.layers[l];
  const int qw = keys.shape.n_head * keys.shape.head_dim;
  const double macs = attend(buf_.q.data(), n, keys.mask_pos, keys.seq, keys.shape, *keys.kv, keys.slot,
                             keys.crop, keys.kv_len, buf_.attn.data(), pool_, keys.mask_hi, keys.llama_cols);
  const MatmulTarget out{lw.attn_output, buf_.o.data(), c_.d_model};
  matmul_(&out, 1, buf_.attn.data(), n, qw);
  add_normed(lw.post_attention_norm.data(), h, n);
  return macs;
}

namespace {
void gelu_mul(bool exact, const float* g, const float* u, float* y, int64_t n) {
  if (exact) {
    gelu_tanh_mul(g, u, y, n);
  } else {
    gelu_tanh_f16_mul(g, u, y, n);
  }
}
}  // namespace

void DecoderBlock::mlp(int l, bool exact_gelu, float* h, int n) const {
  if (c_.n_expert > 0) return moe_mlp(l, exact_gelu, h, n);
  const LayerWeights& lw = w_.layers[l];
  const int d = c_.d_model, ff = c_.layers[l].n_ff;
  norm_rows(h, lw.ffn_norm.data(), n, buf_.a.data());
  const MatmulTarget gate_up[2] = {{lw.ffn_gate, buf_.gate.data(), ff}, {lw.ffn_up, buf_.up.data(), ff}};
  matmul_(gate_up, 2, buf_.a.data(), n, d);
  // Element-wise, so the split among threads does not change a bit; in place, into gate.
  parallel_for(pool_, int64_t(n) * ff, 4096, [&](int64_t b, int64_t e, int) {
    gelu_mul(exact_gelu, buf_.gate.data() + b, buf_.up.data() + b, buf_.gate.data() + b, e - b);
  });
  const MatmulTarget down{lw.ffn_down, buf_.o.data(), d};
  matmul_(&down, 1, buf_.gate.data(), n, ff);
  add_normed(lw.post_ffw_norm.data(), h, n);
}

void DecoderBlock::moe_mlp(int l, bool exact_gelu, float* h, int n) const {
  const LayerWeights& lw = w_.layers[l];
  const int d = c_.d_model, ff = c_.layers[l].n_ff, E = c_.n_expert, K = c_.n_expert_used, fe = c_.n_ff_exp;
  const size_t nd = size_t(n) * d;
  buf_.dense.resize(nd), buf_.router_in.resize(nd), buf_.expert_in.resize(nd), buf_.expert_sum.assign(nd, 0.0f);
  buf_.router_logits.resize(size_t(n) * E);

  // The three inputs: m = rmsnorm(h, ffn_norm) for the dense branch, rmsnorm(h) / sqrt(d) *
  // router_scale for the router, pre_ffw_norm_2(h) for the experts.
  norm_rows(h, lw.ffn_norm.data(), n, buf_.a.data());
  norm_rows(h, nullptr, n, buf_.router_in.data());
  const float inv_sqrt_d = 1.0f / std::sqrt(float(d));
  for (int i = 0; i < n; ++i) {
    float* r = &buf_.router_in[size_t(i) * d];
    for (int j = 0; j < d; ++j) r[j] = r[j] * inv_sqrt_d * lw.router_scale[j];
  }
  norm_rows(h, lw.pre_ffw_norm_2.data(), n, buf_.expert_in.data());

  // Dense gate and up, and the router, at one barrier.
  const MatmulJob first[3] = {{lw.ffn_gate, buf_.a.data(), n, d, buf_.gate.data(), ff},
                              {lw.ffn_up, buf_.a.data(), n, d, buf_.up.data(), ff},
                              {lw.router, buf_.router_in.data(), n, d, buf_.router_logits.data(), E}};
  group_(first, 3);

  // Top-k per row: softmax over all experts, keep K, renormalise, times the expert's scale.
  std::vector<std::vector<std::pair<int, float>>> rows_of(E);  // expert -> (row, weight)
  std::vector<int> order(E);
  std::vector<float> p(E);
  for (int i = 0; i < n; ++i) {
    const float* z = &buf_.router_logits[size_t(i) * E];
    const float mx = *std::max_element(z, z + E);
    double sum = 0;
    for (int e = 0; e < E; ++e) sum += p[e] = std::exp(z[e] - mx);
    for (int e = 0; e < E; ++e) p[e] = float(p[e] / sum);
    for (int e = 0; e < E; ++e) order[e] = e;
    std::partial_sort(order.begin(), order.begin() + K, order.end(),
                      [&](int a, int b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    float top = 0;
    for (int k = 0; k < K; ++k) top += p[order[k]];
    for (int k = 0; k < K; ++k) {
      const int e = order[k];
      rows_of[e].push_back({i, p[e] / top * lw.expert_scale[e]});
    }
  }

  // The used experts' rows gathered one expert after the other (expert e's from row offset[e]).
  std::vector<int> used, offset(E + 1, 0);
  for (int e = 0; e < E; ++e) {
    offset[e + 1] = offset[e] + int(rows_of[e].size());
    if (!rows_of[e].empty()) used.push_back(e);
  }
  const size_t total = size_t(offset[E]);
  buf_.ex_x.resize(total * d), buf_.ex_gu.resize(total * 2 * fe);
  buf_.ex_act.resize(total * fe), buf_.ex_y.resize(total * d);
  // An expert with one row reads it in place (decode: every expert reads the same row, which the
  // kernels then quantize once per thread for the whole group); others read their rows gathered.
  for (int e : used)
    if (rows_of[e].size() > 1)
      for (size_t r = 0; r < rows_of[e].size(); ++r)
        std::copy_n(&buf_.expert_in[size_t(rows_of[e][r].first) * d], d, &buf_.ex_x[(offset[e] + r) * d]);

  // The dense down product and every expert's gate|up at one barrier, then every expert's down.
  // For one row the experts' gate|up could be one shared-input product (one quantization of the row
  // instead of one per hand-out), with the dense down moved to the last barrier: on a Zen 5, 26B-A4B
  // Q4_0, tokens alternated between the two forms, the median pair was 0.998-1.003 (no gain).
  parallel_for(pool_, int64_t(n) * ff, 4096, [&](int64_t b, int64_t e, int) {
    gelu_mul(exact_gelu, buf_.gate.data() + b, buf_.up.data() + b, buf_.gate.data() + b, e - b);
  });
  std::vector<MatmulJob> jobs;
  jobs.reserve(2 * used.size() + 1);
  jobs.push_back({lw.ffn_down, buf_.gate.data(), n, ff, buf_.dense.data(), d});
  for (int e : used) {
    const float* x = rows_of[e].size() == 1 ? &buf_.expert_in[size_t(rows_of[e][0].first) * d]
                                            : &buf_.ex_x[size_t(offset[e]) * d];
    float* gu = &buf_.ex_gu[size_t(offset[e]) * 2 * fe];
    const int64_t m = int64_t(rows_of[e].size());
    if (!lw.expert_gate_up.empty()) {
      jobs.push_back({lw.expert_gate_up[e], x, m, d, gu, 2 * fe});
    } else {  // separate tensors: gate into the first half of each row, up into the second
      jobs.push_back({lw.expert_gate[e], x, m, d, gu, 2 * fe});
      jobs.push_back({lw.expert_up[e], x, m, d, gu + fe, 2 * fe});
    }
  }
  group_(jobs.data(), int(jobs.size()));
  parallel_for(pool_, int64_t(total), 4, [&](int64_t b, int64_t e, int) {
    for (int64_t r = b; r < e; ++r) {
      const float* g = &buf_.ex_gu[size_t(r) * 2 * fe];
      gelu_mul(exact_gelu, g, g + fe, &buf_.ex_act[size_t(r) * fe], fe);
    }
  });
  jobs.clear();
  for (int e : used) {
    jobs.push_back({lw.expert_down[e], &buf_.ex_act[size_t(offset[e]) * fe], int64_t(rows_of[e].size()), fe,
                    &buf_.ex_y[size_t(offset[e]) * d], d});
  }
  group_(jobs.data(), int(jobs.size()));
  norm_rows(buf_.dense.data(), lw.post_ffw_norm_1.data(), n, buf_.dense.data());

  // Each row's experts added with their weights, in expert order.
  for (int e : used) {
    for (size_t r = 0; r < rows_of[e].size(); ++r) {
      float* acc = &buf_.expert_sum[size_t(rows_of[e][r].first) * d];
      const float* y = &buf_.ex_y[(offset[e] + r) * d];
      const float wgt = rows_of[e][r].second;
      for (int j = 0; j < d; ++j) acc[j] += wgt * y[j];
    }
  }
  norm_rows(buf_.expert_sum.data(), lw.post_ffw_norm_2.data(), n, buf_.expert_sum.data());

  // h += post_ffw_norm(dense + experts)
  for (size_t i = 0; i < nd; ++i) buf_.o[i] = buf_.dense[i] + buf_.expert_sum[i];
  add_normed(lw.post_ffw_norm.data(), h, n);
}

void DecoderBlock::scale(int l, float* h, int n) const {
  const float s = w_.layers[l].layer_output_scale;
  for (size_t i = 0; i < size_t(n) * c_.d_model; ++i) h[i] *= s;
}

}  // namespace gem4
