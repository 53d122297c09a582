// The Gemma 4 forward pass, step by step as in spec section 2. Every micro-batch runs:
//   embeddings and per-layer inputs (2.2, 2.3) -> decoder layers (2.4) -> head (2.5)
// in the two stages of its plan (spec section 3, model/batch.h): all rows run the layers up to the
// plan's cut (right after the last KV-owning layer has written its K/V), the rows whose outputs
// nobody needs are dropped there, and the rest run the remaining layers and the head. A micro-batch
// with no output rows stops at the cut. The layer math itself is model/block.h, shared with the
// assistant drafter.
#include "model/forward.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>

#include "kernels/llama_order.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/packed_matrix.h"
#include "kernels/thread_pool.h"

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
  double macs = 0;
  if (llama_cols_ > 0 && targets[0].w.type == GgmlType::F32) {
    for (int j = 0; j < count; ++j) {
      const MatmulTarget& t = targets[j];
      llama_matmul_f32(t.w, x, rows, ldx, t.y, t.ldy, llama_cols_ >= 2, pool_);
      macs += double(t.w.in) * double(t.w.out) * rows;
    }
  } else {
    macs = run_products(targets, count, x, rows, ldx, pool_);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const size_t first_span = streamed ? streamed->size() : 0;
  double bytes = 0;
  for (int j = 0; j < count; ++j) bytes += count_streamed(targets[j].w);
  stats.weight_bytes += bytes;
  count_product_time(secs, macs, rows > 4 && ggml_block_elems(targets[0].w.type) > 1);
  add_to_breakdown(targets[0].w, count, secs, bytes, first_span);
}

void Forward::matmul_group(const MatmulJob* jobs, int count) {
  const auto t0 = std::chrono::steady_clock::now();
  double macs = 0, gemm_macs = 0;
  if (llama_cols_ == 0) {
    run_group(jobs, count, pool_);
  } else {
    // With llama.cpp's F32 order (matmul_shared's first branch) its F32 products go that way one by one
    // (the router among quantized experts, say); the rest run as a group.
    std::vector<MatmulJob> rest;
    for (int j = 0; j < count; ++j) {
      const MatmulJob& t = jobs[j];
      if (t.w.type != GgmlType::F32) {
        rest.push_back(t);
      } else if (t.rows > 0) {
        llama_matmul_f32(t.w, t.x, t.rows, t.ldx, t.y, t.ldy, llama_cols_ >= 2, pool_);
      }
    }
    if (!rest.empty()) run_group(rest.data(), int(rest.size()), pool_);
  }
  const size_t first_span = streamed ? streamed->size() : 0;
  double bytes = 0;
  for (int j = 0; j < count; ++j) {
    const MatmulJob& t = jobs[j];
    if (t.rows <= 0) continue;
    const double m = double(t.w.in) * double(t.w.out) * double(t.rows);
    macs += m;
    if (t.rows > 4 && ggml_block_elems(t.w.type) > 1) gemm_macs += m;
    bytes += count_streamed(t.w);
  }
  stats.weight_bytes += bytes;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (count > 0) add_to_breakdown(jobs[0].w, count, secs, bytes, first_span);
  stats.matmul_seconds += secs;
  stats.matmul_macs += macs;
  // The GEMM jobs' share of the time, in proportion to their multiply-adds.
  if (macs > 0 && gemm_macs > 0) {
    stats.int8_gemm_seconds += secs * gemm_macs / macs;
    stats.int8_gemm_macs += gemm_macs;
  }
}

double Forward::count_streamed(const MatrixView& w) {
  const ByteSpan span = streamed_weights(w);
  if (streamed) streamed->push_back(span);
  return double(span.size);
}

void Forward::add_to_breakdown(const MatrixView& first, int count, double secs, double bytes,
                               size_t first_span) {
  if (!breakdown) return;
  std::string kind = std::string(ggml_type_name(first.type)) + " " + std::to_string(first.out) + "x" +
                     std::to_string(first.in);
  if (count > 1) kind += " (" + std::to_string(count) + ")";
  ProductTime& t = (*breakdown)[kind];
  t.seconds += secs;
  t.weight_bytes += bytes;
  t.calls++;
  if (streamed)
    t.spans.insert(t.spans.end(), streamed->begin() + std::ptrdiff_t(first_span), streamed->end());
}

void Forward::count_product_time(double secs, double macs, bool int8_gemm) {
  stats.matmul_seconds += secs;
  stats.matmul_macs += macs;
  if (int8_gemm) {
    stats.int8_gemm_seconds += secs;
    stats.int8_gemm_macs += macs;
  }
}

// Built per micro-batch: its hook points at this Forward, which its owner may have moved since.
DecoderBlock Forward::block() {
  return DecoderBlock(c_, w_, pool_, std::bind_front(&Forward::matmul_shared, this),
                      std::bind_front(&Forward::matmul_group, this), buf_);
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
    if (r.span >= 0 && i > 0 && batch[i - 1].span == r.span && batch[i - 1].seq != r.seq)
      throw std::invalid_argument(where + "span " + std::to_string(r.span) + " crosses from sequence " +
                                  std::to_string(batch[i - 1].seq) + " to " + std::to_string(r.seq));
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
  const int64_t block = ggml_block_elems(w_.ple_token_embd.type);
  const bool by_layers = (int64_t(first_layer) * P) % block == 0 && (int64_t(n_layers) * P) % block == 0;
  parallel_for(pool_, n, 4, [&](int64_t b, int64_t e, int) {
    thread_local std::vector<float> tok_row;
    tok_row.resize(LP);
    for (int64_t i = b; i < e; ++i) {
      float* ctx = ple_.data() + i * LP + int64_t(first_layer) * P;
      for (int64_t j = 0; j < int64_t(n_layers) * P; ++j) ctx[j] *= inv_sqrt_d;
      rmsnorm_groups(ctx, w_.ple_proj_norm.data(), n_layers, P, c_.rms_eps);
      // A lookup (only seen rows are read) of these layers' columns where they start and end on a
      // block: a pruned E2B prompt's first call covers 15 of the 35 layers, and the whole row took
      // 1.9 % of its time (scalar dequantization).
      const float* tok = tok_row.data() + int64_t(first_layer) * P;
      if (by_layers) {
        matrix_get_row_part(w_.ple_token_embd, tok_[i], int64_t(first_layer) * P, int64_t(n_layers) * P,
                            tok_row.data());
        tok = tok_row.data();
      } else {
        matrix_get_row(w_.ple_token_embd, tok_[i], tok_row.data());
      }
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
      hi_[j] = hi_[i];
      seq_[j] = seq_[i];
      row_[j] = row_[i];
      std::memcpy(&h_[size_t(j) * d], &h_[size_t(i) * d], d * sizeof(float));
      std::memcpy(&buf_.a[size_t(j) * d], &buf_.a[size_t(i) * d], d * sizeof(float));
      std::memcpy(&x0_[size_t(j) * d], &x0_[size_t(i) * d], d * sizeof(float));
      if (LP) std::memcpy(&ple_[size_t(j) * LP], &ple_[size_t(i) * LP], LP * sizeof(float));
    }
    n_ = n_keep;
  }
  // PLE context projection of the tail layers, only for the rows that reach them.
  compute_ple(plan.ple_split, c_.n_layer - plan.ple_split, n_);
}

void Forward::run_micro_batch(const Batch& batch, const MicroBatchPlan& plan, KvCache& kv, ForwardOutputs& out) {
  const int d = c_.d_model, T = plan.count, L = c_.n_layer, P = c_.ple_dim;
  const int LP = L * P;
  stats.micro_batches++;
  stats.rows += T;

  // Size buffers for the whole micro-batch (no-ops after the first call of this size).
  n_ = T;
  tok_.resize(T), pos_.resize(T), seq_.resize(T), row_.resize(T), hi_.resize(T);
  x0_.resize(size_t(T) * d), h_.resize(size_t(T) * d);
  ple_.resize(size_t(T) * LP);
  buf_.resize(T, c_);
  int max_kv = 0;
  for (const auto& l : c_.layers) max_kv = std::max(max_kv, l.n_kv_heads * l.head_dim);
  k_.resize(size_t(T) * max_kv), v_.resize(size_t(T) * max_kv);
  pg_.resize(size_t(T) * std::max(P, 1));
  kv_len_.assign(kv.n_seq(), 0);
  for (int s = 0; s < kv.n_seq(); ++s) kv_len_[s] = kv.seq_len(s);
  for (int i = 0; i < T; ++i) {
    const BatchRow& r = batch[plan.first + i];
    tok_[i] = r.token, pos_[i] = r.pos, seq_[i] = r.seq, row_[i] = plan.first + i;
    kv_len_[r.seq] = std::max(kv_len_[r.seq], r.pos + 1);
  }
  // The last position each row sees: its own, or the last of its span (an image sees all of itself).
  has_spans_ = false;
  for (int i = T - 1; i >= 0; --i) {
    const BatchRow& r = batch[plan.first + i];
    const bool same = r.span >= 0 && i + 1 < T && batch[plan.first + i + 1].span == r.span;
    hi_[i] = same ? hi_[i + 1] : pos_[i];
    has_spans_ |= same;
  }
  const DecoderBlock blk = block();
  // llama.cpp runs every row of its micro-batch through every layer: that count picks its order.
  llama_cols_ = switches.llama_f32_order ? T : 0;

  // 2.2 Token embedding: x0 = E[token] * sqrt(d); a media row brings its own embedding, unscaled.
  const float emb_scale = std::sqrt(float(d));
  parallel_for(pool_, T, 8, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      float* x = &x0_[size_t(i) * d];
      if (const float* m = batch[plan.first + i].embd) {
        std::copy(m, m + d, x);
        continue;
      }
      matrix_get_row(w_.token_embd, tok_[i], x);
      for (int j = 0; j < d; ++j) x[j] *= emb_scale;
    }
  });
  std::copy(x0_.begin(), x0_.begin() + size_t(T) * d, h_.begin());

  // 2.3 Per-layer inputs of the layers before the plan's split, for every row (the rest after the cut).
  compute_ple(0, plan.ple_split, T);

  // 2.4 Decoder layers: all rows up to the cut, which comes after every K/V write ...
  run_stage(StackPoint{0, false}, plan.cut, kv, blk);
  // ... the cut: only the rows with outputs go on ...
  prune_rows(plan);
  // ... and they run the rest of the stack.
  if (n_ > 0) run_stage(plan.cut, StackPoint{L, false}, kv, blk);
  for (int s = 0; s < kv.n_seq(); ++s) kv.set_seq_len(s, kv_len_[s]);
  if (n_ == 0) {
    if (plan.cut.layer < L) stats.skipped_tails++;  // nothing after the last K/V write ran
    return;
  }

  head(batch, out, blk);
}

// Layers [from, to) of the stack on the active rows, counted in half layers (StackPoint::half).
void Forward::run_stage(StackPoint from, StackPoint to, KvCache& kv, const DecoderBlock& blk) {
  for (int half = from.half(); half < to.half(); ++half) {
    const int l = half / 2;
    if (half % 2 == 0) {
      layer_input(l, kv, /*with_query=*/half + 1 < to.half(), blk);
    } else {
      layer_rest(l, kv, /*query_projected=*/half > from.half() && c_.layers[l].owns_kv, blk);
    }
  }
}

// Steps 1 and 3 of layer l: the normed input and, on KV-owning layers, the K/V write (all rows).
void Forward::layer_input(int l, KvCache& kv, bool with_query, const DecoderBlock& blk) {
  const LayerConfig& L = c_.layers[l];
  const LayerWeights& lw = w_.layers[l];
  const int d = c_.d_model, hd = L.head_dim, Hk = L.n_kv_heads;
  const int qw = c_.n_head * hd, kvw = Hk * hd;
  const float eps = c_.rms_eps;
  if (l >= c_.first_shared) stats.tail_rows += n_;

  // 1. a = rmsnorm(h, attn_norm)
  blk.attention_norm(l, h_.data(), n_);
  if (!L.owns_kv) return;

  // 3. k = rope(knorm(W_k a)), v = vnorm(W_v a); append to the cache. Where the same rows go on to the
  // query (no cut in between), q is computed with k and v in one call, so the three products share
  // one quantization of `a` and one barrier.
  MatmulTarget targets[3] = {{lw.attn_k, k_.data(), kvw}};
  int count = 1;
  if (lw.has_v) targets[count++] = {lw.attn_v, v_.data(), kvw};
  if (with_query) targets[count++] = {lw.attn_q, buf_.q.data(), qw};
  matmul_shared(targets, count, buf_.a.data(), n_, d);
  if (!lw.has_v) {
    std::copy(k_.begin(), k_.begin() + size_t(n_) * kvw, v_.begin());  // k_eq_v: V is the raw K projection
  }
  const ModelWeights::Rope& rope = w_.rope[l];
  parallel_for(pool_, n_, 4, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      float* k = &k_[size_t(i) * kvw];
      float* v = &v_[size_t(i) * kvw];
      rmsnorm_groups(k, lw.attn_k_norm.data(), Hk, hd, eps);
      rope_neox(k, Hk, hd, pos_[i], rope.theta_scale, rope.factors.data());
      rmsnorm_groups(v, nullptr, Hk, hd, eps);  // V-norm has no weight and V gets no RoPE
    }
  });
  for (int i = 0; i < n_; ++i)
    kv.write(L.kv_slot, seq_[i], pos_[i], &k_[size_t(i) * kvw], &v_[size_t(i) * kvw]);
}

// Steps 2 and 4-17 of layer l: the query, attention over this layer's cache (or the donor's for a
// KV-shared layer), MLP, PLE and the layer scalar.
void Forward::layer_rest(int l, const KvCache& kv, bool query_projected, const DecoderBlock& blk) {
  const LayerConfig& L = c_.layers[l];
  blk.query(l, pos_.data(), n_, query_projected);
  AttentionKeys keys;
  keys.kv = &kv;
  keys.slot = L.kv_slot;
  keys.shape = AttentionShape{c_.n_head, L.n_kv_heads, L.head_dim, L.sliding ? c_.sliding_window : 0};
  keys.mask_pos = pos_.data();
  keys.seq = seq_.data();
  keys.crop = switches.mask_crop;
  keys.kv_len = kv_len_.data();
  keys.mask_hi = has_spans_ ? hi_.data() : nullptr;
  keys.llama_cols = llama_cols_;
  stats.attention_macs += blk.attention(l, keys, h_.data(), n_);
  blk.mlp(l, switches.exact_gelu, h_.data(), n_);
  if (c_.ple_dim > 0) ple_block(l, blk);
  blk.scale(l, h_.data(), n_);
}

void Forward::ple_block(int l, const DecoderBlock& blk) {
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
  matmul(lw.ple_proj, pg_.data(), n_, P, buf_.o.data(), d);
  blk.add_normed(lw.ple_post_norm.data(), h_.data(), n_);
}

// 2.5 Head: final norm (the MTP hidden state), tied LM head, softcap.
void Forward::head(const Batch& batch, ForwardOutputs& out, const DecoderBlock& blk) {
  const int d = c_.d_model;
  float* y = buf_.a.data();
  blk.norm_rows(h_.data(), w_.output_norm.data(), n_, y);
  int n_logits = 0;
  for (int i = 0; i < n_; ++i) {
    const BatchRow& r = batch[row_[i]];
    if (r.hidden) {
      out.hidden_rows.push_back(row_[i]);
      out.hidden.insert(out.hidden.end(), y + size_t(i) * d, y + size_t(i + 1) * d);
    }
    if (r.logits) {
      if (n_logits != i) std::memcpy(y + size_t(n_logits) * d, y + size_t(i) * d, d * sizeof(float));
      out.logit_rows.push_back(row_[i]);
      n_logits++;
    }
  }
  if (n_logits == 0) return;
  const size_t V = w_.token_embd.out, base = out.logits.size();
  out.logits.resize(base + size_t(n_logits) * V);
  float* logits = out.logits.data() + base;
  if (llama_cols_ > 0) llama_cols_ = n_logits;  // llama.cpp keeps only the output rows for its head
  matmul(w_.token_embd, y, n_logits, d, logits, int(V));
  if (c_.final_softcap > 0) {
    // Split the elements, not the rows: decode has one row of 262,144 tanh's (~5 % of a token).
    parallel_for(pool_, int64_t(n_logits) * int64_t(V), 8192,
                 [&](int64_t b, int64_t e, int) { softcap(logits + b, e - b, c_.final_softcap); });
  }
}

}  // namespace gem4
