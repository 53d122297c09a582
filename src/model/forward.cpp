// The Gemma 4 forward pass, step by step as in spec section 2. Every micro-batch runs:
//   embeddings and per-layer inputs (2.2, 2.3) -> decoder layers (2.4) -> head (2.5)
// with one structural twist, the execution plan of spec section 3: at the plan's cut (right after the
// last KV-owning layer has written its K/V) the rows whose outputs nobody needs are dropped, and a
// micro-batch with no output rows stops there.
#include "model/forward.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/packed_matrix.h"
#include "kernels/thread_pool.h"
#include "model/attention.h"

namespace gem4 {

void ForwardOutputs::clear() {
  logit_rows.clear();
  logits.clear();
  hidden_rows.clear();
  hidden.clear();
}

const float* ForwardOutputs::logits_of(int batch_row) const {
  for (size_t i = 0; i < logit_rows.size(); ++i)
    if (logit_rows[i] == batch_row) return logits.data() + i * size_t(n_vocab);
  return nullptr;
}

const float* ForwardOutputs::hidden_of(int batch_row) const {
  for (size_t i = 0; i < hidden_rows.size(); ++i)
    if (hidden_rows[i] == batch_row) return hidden.data() + i * size_t(d_model);
  return nullptr;
}

Forward::Forward(const Model& model, ThreadPool* pool)
    : model_(model), c_(model.config), w_(model.weights), pool_(pool) {
  if (c_.arch != "gemma4") throw std::invalid_argument("Forward: '" + c_.arch + "' is not a gemma4 text model");
}

void Forward::matmul(const MatrixView& w, const float* x, int rows, int ldx, float* y, int ldy) {
  const MatmulTarget target{w, y, ldy};
  matmul_shared(&target, 1, x, rows, ldx);
}

void Forward::matmul_shared(const MatmulTarget* targets, int count, const float* x, int rows, int ldx) {
  if (rows <= 0) return;
  const auto t0 = std::chrono::steady_clock::now();
  if (count == 1) {
    gem4::matmul(targets[0].w, x, rows, ldx, targets[0].y, targets[0].ldy, pool_);
  } else {
    matmul_shared_input(targets, count, x, rows, ldx, pool_);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double macs = 0;
  for (int j = 0; j < count; ++j) {
    const MatrixView& w = targets[j].w;
    macs += double(w.in) * double(w.out) * rows;
    // Bytes the kernel streams: the packed copy where it reads one (Q4_K's is a third larger than the
    // GGUF tensor), else the tensor.
    stats.weight_bytes += reads_packed(w) ? double(packed_matrix_bytes(w)) : double(w.row_bytes) * double(w.out);
  }
  stats.matmul_seconds += secs;
  stats.matmul_macs += macs;
  if (rows > 4 && ggml_block_elems(targets[0].w.type) > 1) {
    stats.int8_gemm_seconds += secs;
    stats.int8_gemm_macs += macs;
  }
}

void Forward::rmsnorm_rows(const float* x, int ldx, const float* w, int width, float* y, int ldy) {
  const float eps = c_.rms_eps;
  parallel_for(pool_, n_, 16, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) rmsnorm(x + i * ldx, w, width, eps, y + i * ldy);
  });
}

void Forward::run(const Batch& batch, KvCache& kv, ForwardOutputs& out) {
  out.n_vocab = int(w_.token_embd.out);
  out.d_model = c_.d_model;
  if (ubatch > kv.max_ubatch())
    throw std::invalid_argument("ubatch " + std::to_string(ubatch) + " exceeds the KV cache's max_ubatch " +
                                std::to_string(kv.max_ubatch()));
  // Validate the whole batch before touching the cache.
  std::vector<int> next(kv.n_seq());
  for (int s = 0; s < kv.n_seq(); ++s) next[s] = kv.seq_len(s);
  for (size_t i = 0; i < batch.size(); ++i) {
    const BatchRow& r = batch[i];
    const std::string where = "batch row " + std::to_string(i) + ": ";
    if (r.token < 0 || r.token >= out.n_vocab)
      throw std::invalid_argument(where + "token id " + std::to_string(r.token) + " outside the vocabulary (" +
                                  std::to_string(out.n_vocab) + ")");
    if (r.seq < 0 || r.seq >= kv.n_seq())
      throw std::invalid_argument(where + "sequence id " + std::to_string(r.seq) + " outside [0, " +
                                  std::to_string(kv.n_seq()) + ")");
    if (r.pos >= kv.n_ctx())
      throw std::invalid_argument(where + "position " + std::to_string(r.pos) + " does not fit the context of " +
                                  std::to_string(kv.n_ctx()) + " tokens");
    if (r.pos != next[r.seq])
      throw std::invalid_argument(where + "position " + std::to_string(r.pos) + " of sequence " +
                                  std::to_string(r.seq) + " does not continue its cache (next position " +
                                  std::to_string(next[r.seq]) + ")");
    next[r.seq]++;
  }
  for (const MicroBatchPlan& plan : plan_batch(batch, ubatch, c_, switches)) run_micro_batch(batch, plan, kv, out);
}

// Per-layer inputs (spec 2.3) for layers [first_layer, first_layer + n_layers) of the active rows:
//   ple[l] = (rmsnorm((W_plp x0)[l] / sqrt(d)) + E_ple[token][l] * sqrt(P)) / sqrt(2)
void Forward::compute_ple(int first_layer, int n_layers, int n) {
  if (c_.ple_dim == 0 || n_layers <= 0 || n == 0) return;
  const int P = c_.ple_dim, LP = c_.n_layer * P;
  const MatrixView proj = w_.ple_model_proj.rows(int64_t(first_layer) * P, int64_t(n_layers) * P);
  matmul(proj, x0_.data(), n, c_.d_model, ple_.data() + first_layer * P, LP);
  const float inv_sqrt_d = 1.0f / std::sqrt(float(c_.d_model)), sqrt_p = std::sqrt(float(P));
  const float inv_sqrt2 = 1.0f / std::sqrt(2.0f);
  parallel_for(pool_, n, 4, [&](int64_t b, int64_t e, int) {
    thread_local std::vector<float> tok_row;
    tok_row.resize(LP);
    for (int64_t i = b; i < e; ++i) {
      float* ctx = ple_.data() + i * LP + int64_t(first_layer) * P;
      for (int64_t j = 0; j < int64_t(n_layers) * P; ++j) ctx[j] *= inv_sqrt_d;
      rmsnorm_groups(ctx, w_.ple_proj_norm.data(), n_layers, P, c_.rms_eps);
      matrix_get_row(w_.ple_token_embd, tok_[i], tok_row.data());  // a lookup: only seen rows are read
      const float* tok = tok_row.data() + int64_t(first_layer) * P;
      for (int64_t j = 0; j < int64_t(n_layers) * P; ++j) ctx[j] = (ctx[j] + tok[j] * sqrt_p) * inv_sqrt2;
    }
  });
}

// The pruning step: keep only the rows of plan.keep in every per-row buffer that later layers read.
void Forward::prune_rows(const MicroBatchPlan& plan) {
  const int d = c_.d_model, LP = c_.n_layer * c_.ple_dim;
  const int n_keep = int(plan.keep.size());
  if (n_keep != n_) {
    for (int j = 0; j < n_keep; ++j) {
      const int i = plan.keep[j];  // keep is increasing, so j <= i and in-place gathering is safe
      if (i == j) continue;
      tok_[j] = tok_[i];
      pos_[j] = pos_[i];
      seq_[j] = seq_[i];
      row_[j] = row_[i];
      std::memcpy(&h_[size_t(j) * d], &h_[size_t(i) * d], d * sizeof(float));
      std::memcpy(&a_[size_t(j) * d], &a_[size_t(i) * d], d * sizeof(float));
      std::memcpy(&x0_[size_t(j) * d], &x0_[size_t(i) * d], d * sizeof(float));
      if (LP) std::memcpy(&ple_[size_t(j) * LP], &ple_[size_t(i) * LP], LP * sizeof(float));
    }
    n_ = n_keep;
  }
  // PLE context projection of the tail layers, only for the rows that reach them.
  if (switches.ple_crop && plan.cut_layer < c_.n_layer) compute_ple(plan.cut_layer, c_.n_layer - plan.cut_layer, n_);
}

void Forward::run_micro_batch(const Batch& batch, const MicroBatchPlan& plan, KvCache& kv, ForwardOutputs& out) {
  const int d = c_.d_model, T = plan.count, L = c_.n_layer, P = c_.ple_dim;
  const int LP = L * P;
  stats.micro_batches++;
  stats.rows += T;

  // Size buffers for the whole micro-batch (no-ops after the first call of this size).
  n_ = T;
  tok_.resize(T), pos_.resize(T), seq_.resize(T), row_.resize(T);
  x0_.resize(size_t(T) * d), h_.resize(size_t(T) * d), a_.resize(size_t(T) * d), o_.resize(size_t(T) * d);
  ple_.resize(size_t(T) * LP);
  q_.resize(size_t(T) * c_.max_q_width()), attn_.resize(size_t(T) * c_.max_q_width());
  int max_kv = 0;
  for (const auto& l : c_.layers) max_kv = std::max(max_kv, l.n_kv_heads * l.head_dim);
  k_.resize(size_t(T) * max_kv), v_.resize(size_t(T) * max_kv);
  gate_.resize(size_t(T) * c_.max_ff()), up_.resize(size_t(T) * c_.max_ff()), act_.resize(size_t(T) * c_.max_ff());
  pg_.resize(size_t(T) * std::max(P, 1));
  kv_len_.assign(kv.n_seq(), 0);
  for (int s = 0; s < kv.n_seq(); ++s) kv_len_[s] = kv.seq_len(s);
  for (int i = 0; i < T; ++i) {
    const BatchRow& r = batch[plan.first + i];
    tok_[i] = r.token, pos_[i] = r.pos, seq_[i] = r.seq, row_[i] = plan.first + i;
    kv_len_[r.seq] = std::max(kv_len_[r.seq], r.pos + 1);
  }

  // 2.2 Token embedding: x0 = E[token] * sqrt(d).
  const float emb_scale = std::sqrt(float(d));
  parallel_for(pool_, T, 8, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      float* x = &x0_[size_t(i) * d];
      matrix_get_row(w_.token_embd, tok_[i], x);
      for (int j = 0; j < d; ++j) x[j] *= emb_scale;
    }
  });
  std::copy(x0_.begin(), x0_.begin() + size_t(T) * d, h_.begin());

  // 2.3 Per-layer inputs: for every row, the layers every row passes through; the rest after pruning.
  const bool crop_ple = switches.ple_crop && plan.cut_layer < L;
  compute_ple(0, crop_ple ? plan.cut_layer : L, T);

  // 2.4 Decoder layers, with the pruning cut of the plan.
  bool finished_early = false;
  for (int l = 0; l < L; ++l) {
    if (l == plan.cut_layer && !plan.cut_after_kv) {
      prune_rows(plan);
      if (n_ == 0) {
        finished_early = true;
        break;
      }
    }
    if (l >= c_.first_shared) stats.tail_rows += n_;
    attention_block(l, kv, l == plan.cut_layer && plan.cut_after_kv, plan);
    if (n_ == 0) {  // an output-free micro-batch: nothing after the last K/V write is needed
      finished_early = true;
      break;
    }
    mlp_block(l);
    if (P > 0) ple_block(l);
    const float s = w_.layers[l].layer_output_scale;  // step 17: scales the whole residual stream
    for (size_t i = 0; i < size_t(n_) * d; ++i) h_[i] *= s;
  }
  for (int s = 0; s < kv.n_seq(); ++s) kv.set_seq_len(s, kv_len_[s]);
  if (finished_early) {
    stats.skipped_tails++;
    return;
  }
  if (plan.cut_layer >= L) prune_rows(plan);  // no pruning plan: drop rows only before the head
  if (n_ == 0) return;

  // 2.5 Head: final norm (the MTP hidden state), tied LM head, softcap.
  rmsnorm_rows(h_.data(), d, w_.output_norm.data(), d, a_.data(), d);
  int n_logits = 0;
  for (int i = 0; i < n_; ++i) {
    const BatchRow& r = batch[row_[i]];
    if (r.hidden) {
      out.hidden_rows.push_back(row_[i]);
      out.hidden.insert(out.hidden.end(), a_.begin() + size_t(i) * d, a_.begin() + size_t(i + 1) * d);
    }
    if (r.logits) {
      if (n_logits != i) std::memcpy(&a_[size_t(n_logits) * d], &a_[size_t(i) * d], d * sizeof(float));
      out.logit_rows.push_back(row_[i]);
      n_logits++;
    }
  }
  if (n_logits == 0) return;
  const size_t V = w_.token_embd.out, base = out.logits.size();
  out.logits.resize(base + size_t(n_logits) * V);
  float* logits = out.logits.data() + base;
  matmul(w_.token_embd, a_.data(), n_logits, d, logits, int(V));
  if (c_.final_softcap > 0) {
    // Split the elements, not the rows: decode has one row of 262,144 tanh's (~5 % of a token).
    parallel_for(pool_, int64_t(n_logits) * int64_t(V), 8192, [&](int64_t b, int64_t e, int) {
      softcap(logits + b, e - b, c_.final_softcap);
    });
  }
}

void Forward::attention_block(int l, KvCache& kv, bool cut_here, const MicroBatchPlan& plan) {
  const LayerConfig& L = c_.layers[l];
  const LayerWeights& lw = w_.layers[l];
  const int d = c_.d_model, hd = L.head_dim, H = c_.n_head, Hk = L.n_kv_heads;
  const int qw = H * hd, kvw = Hk * hd;
  const float eps = c_.rms_eps;
  const float* inv_freq = w_.inv_freq[l].data();

  // 1. a = rmsnorm(h, attn_norm)
  rmsnorm_rows(h_.data(), d, lw.attn_norm.data(), d, a_.data(), d);

  // 3. KV-owning layers: k = rope(knorm(W_k a)), v = vnorm(W_v a); append to the cache, all rows.
  // Where every row goes on to the query (no cut here), q is computed with k and v in one call, so
  // the three products share one quantization of `a` and one barrier.
  const bool q_with_kv = L.owns_kv && !cut_here;
  if (L.owns_kv) {
    MatmulTarget targets[3] = {{lw.attn_k, k_.data(), kvw}};
    int count = 1;
    if (lw.has_v) targets[count++] = {lw.attn_v, v_.data(), kvw};
    if (q_with_kv) targets[count++] = {lw.attn_q, q_.data(), qw};
    matmul_shared(targets, count, a_.data(), n_, d);
    if (!lw.has_v) {
      std::copy(k_.begin(), k_.begin() + size_t(n_) * kvw, v_.begin());  // k_eq_v: V is the raw K projection
    }
    parallel_for(pool_, n_, 4, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) {
        float* k = &k_[size_t(i) * kvw];
        float* v = &v_[size_t(i) * kvw];
        rmsnorm_groups(k, lw.attn_k_norm.data(), Hk, hd, eps);
        rope_neox(k, Hk, hd, pos_[i], inv_freq);
        rmsnorm_groups(v, nullptr, Hk, hd, eps);  // V-norm has no weight and V gets no RoPE
      }
    });
    for (int i = 0; i < n_; ++i) kv.write(L.kv_slot, seq_[i], pos_[i], &k_[size_t(i) * kvw], &v_[size_t(i) * kvw]);
  }

  // The optimal cut (spec 3.2): after layer K-1's K/V write, only rows with outputs go on.
  if (cut_here) {
    prune_rows(plan);
    if (n_ == 0) return;
  }

  // 2. q = rope(qnorm(W_q a))
  if (!q_with_kv) matmul(lw.attn_q, a_.data(), n_, d, q_.data(), qw);
  parallel_for(pool_, n_, 4, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      float* q = &q_[size_t(i) * qw];
      rmsnorm_groups(q, lw.attn_q_norm.data(), H, hd, eps);
      rope_neox(q, H, hd, pos_[i], inv_freq);
    }
  });

  // 4. Attention over this layer's cache, or the donor's for a KV-shared layer.
  AttentionShape shape{H, Hk, hd, L.sliding ? c_.sliding_window : 0};
  stats.attention_macs += attend(q_.data(), n_, pos_.data(), seq_.data(), shape, kv, L.kv_slot,
                                 switches.mask_crop, kv_len_.data(), attn_.data(), pool_);

  // 5-7. h += rmsnorm(W_o attn, post_attention_norm)
  matmul(lw.attn_output, attn_.data(), n_, qw, o_.data(), d);
  rmsnorm_rows(o_.data(), d, lw.post_attention_norm.data(), d, o_.data(), d);
  for (size_t i = 0; i < size_t(n_) * d; ++i) h_[i] += o_[i];
}

void Forward::mlp_block(int l) {
  const LayerWeights& lw = w_.layers[l];
  const int d = c_.d_model, ff = c_.layers[l].n_ff;
  // 8-11. h += rmsnorm(W_down(gelu(W_gate m) * W_up m), post_ffw_norm), m = rmsnorm(h, ffn_norm)
  rmsnorm_rows(h_.data(), d, lw.ffn_norm.data(), d, a_.data(), d);
  const MatmulTarget gate_up[2] = {{lw.ffn_gate, gate_.data(), ff}, {lw.ffn_up, up_.data(), ff}};
  matmul_shared(gate_up, 2, a_.data(), n_, d);
  parallel_for(pool_, int64_t(n_) * ff, 4096, [&](int64_t b, int64_t e, int) {
    if (!switches.exact_gelu) gelu_tanh_f16_mul(gate_.data() + b, up_.data() + b, act_.data() + b, e - b);
    else gelu_tanh_mul(gate_.data() + b, up_.data() + b, act_.data() + b, e - b);
  });
  matmul(lw.ffn_down, act_.data(), n_, ff, o_.data(), d);
  rmsnorm_rows(o_.data(), d, lw.post_ffw_norm.data(), d, o_.data(), d);
  for (size_t i = 0; i < size_t(n_) * d; ++i) h_[i] += o_[i];
}

void Forward::ple_block(int l) {
  const LayerWeights& lw = w_.layers[l];
  const int d = c_.d_model, P = c_.ple_dim, LP = c_.n_layer * P;
  // 12-16. h += rmsnorm(W_proj(gelu(W_gate h) * ple[l]), post_norm)
  matmul(lw.ple_inp_gate, h_.data(), n_, d, pg_.data(), P);
  for (int i = 0; i < n_; ++i) {
    float* g = &pg_[size_t(i) * P];
    const float* pl = &ple_[size_t(i) * LP + size_t(l) * P];
    if (!switches.exact_gelu) gelu_tanh_f16_mul(g, pl, g, P);
    else gelu_tanh_mul(g, pl, g, P);
  }
  matmul(lw.ple_proj, pg_.data(), n_, P, o_.data(), d);
  rmsnorm_rows(o_.data(), d, lw.ple_post_norm.data(), d, o_.data(), d);
  for (size_t i = 0; i < size_t(n_) * d; ++i) h_[i] += o_[i];
}

}  // namespace gem4
