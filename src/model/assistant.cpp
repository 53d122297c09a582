#include "model/assistant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>

#include "gguf/gguf.h"
#include "kernels/ops.h"
#include "kernels/thread_pool.h"
#include "tensor/quant.h"

namespace gem4 {

namespace {

const TensorRef* find_tensor(const Model& m, std::initializer_list<const char*> names, std::string* found) {
  for (const char* n : names) {
    auto it = m.tensors.find(n);
    if (it != m.tensors.end()) {
      *found = n;
      return &it->second;
    }
  }
  return nullptr;
}

// The centroid head, when the file has one (spec 5.1; llama.cpp ignores these tensors).
CentroidHead bind_centroid_head(const Model& m, int d, int n_vocab) {
  CentroidHead h;
  std::string cname, oname;
  const TensorRef* c = find_tensor(m, {"masked_embedding.centroids.weight", "masked_embedding.centroids"}, &cname);
  const TensorRef* o = find_tensor(m, {"masked_embedding.token_ordering", "token_ordering",
                                       "masked_embedding.token_ordering.weight", "token_ordering.weight"},
                                   &oname);
  const std::string& file = m.file ? m.file->path() : std::string("assistant");
  if (!c && !o) return h;
  if (!c || !o)
    throw std::invalid_argument(file + ": centroid head needs both masked_embedding.centroids and token_ordering (found only '" +
                                (c ? cname : oname) + "')");
  if (c->ne.size() < 2 || c->ne[0] != d || c->ne[1] <= 0)
    throw std::invalid_argument(file + ": tensor '" + cname + "' must have shape [" + std::to_string(d) + ", n_centroids]");
  const int nc = int(c->ne[1]);
  if (n_vocab % nc != 0)
    throw std::invalid_argument(file + ": tensor '" + cname + "': " + std::to_string(nc) +
                                " centroids do not divide the vocabulary of " + std::to_string(n_vocab));
  require_supported_weight_type(c->type, file + ": " + cname);
  h.centroids.type = c->type;
  h.centroids.data = c->data;
  h.centroids.in = d;
  h.centroids.out = nc;
  h.centroids.row_bytes = ggml_row_bytes(c->type, d);
  if (o->ne.empty() || o->ne[0] != n_vocab)
    throw std::invalid_argument(file + ": tensor '" + oname + "' must have " + std::to_string(n_vocab) + " entries");
  h.token_ordering.resize(n_vocab);
  for (int i = 0; i < n_vocab; ++i) {
    int64_t v;
    switch (o->type) {
      case GgmlType::I32: v = reinterpret_cast<const int32_t*>(o->data)[i]; break;
      case GgmlType::I64: v = reinterpret_cast<const int64_t*>(o->data)[i]; break;
      case GgmlType::F32: v = int64_t(reinterpret_cast<const float*>(o->data)[i]); break;
      default:
        throw std::invalid_argument(file + ": tensor '" + oname + "' has type " + ggml_type_name(o->type) +
                                    "; expected I32, I64 or F32");
    }
    if (v < 0 || v >= n_vocab)
      throw std::invalid_argument(file + ": tensor '" + oname + "' entry " + std::to_string(i) + " = " +
                                  std::to_string(v) + " is not a token id");
    h.token_ordering[i] = int32_t(v);
  }
  h.n_centroids = nc;
  h.per_cluster = n_vocab / nc;
  if (m.file) h.top_k = int(m.file->get_int_or("gemma4-assistant.centroid_intermediate_top_k", 32));
  h.top_k = std::clamp(h.top_k, 1, nc);
  return h;
}

}  // namespace

Assistant::Assistant(const Model& assistant, const Model& target, ThreadPool* pool)
    : target_(target), c_(assistant.config), w_(assistant.weights), pool_(pool) {
  const std::string a_name = assistant.file ? assistant.file->path() : "assistant";
  const std::string t_name = target.file ? target.file->path() : "target";
  const std::string both = a_name + " with target " + t_name + ": ";
  if (c_.arch != "gemma4-assistant") throw std::invalid_argument(both + "'" + c_.arch + "' is not a gemma4-assistant");
  const ModelConfig& tc = target.config;
  if (tc.arch != "gemma4") throw std::invalid_argument(both + "the target's architecture is '" + tc.arch + "'");
  if (c_.d_backbone != tc.d_model)
    throw std::invalid_argument(both + "embedding_length_out " + std::to_string(c_.d_backbone) +
                                " differs from the target's embedding_length " + std::to_string(tc.d_model));
  if (w_.token_embd.out != target.weights.token_embd.out)
    throw std::invalid_argument(both + "vocabularies differ (" + std::to_string(w_.token_embd.out) + " vs " +
                                std::to_string(target.weights.token_embd.out) + " tokens)");
  if (tc.sliding_window < 2) throw std::invalid_argument(both + "the target's sliding window must be at least 2");
  for (int l = 0; l < c_.n_layer; ++l) {
    const LayerConfig& L = c_.layers[l];
    int donor = -1;
    for (int t = 0; t < tc.n_layer; ++t)
      if (tc.layers[t].owns_kv && tc.layers[t].sliding == L.sliding) donor = t;
    if (donor < 0)
      throw std::invalid_argument(both + "assistant layer " + std::to_string(l) + " (" + (L.sliding ? "sliding" : "full") +
                                  ") has no target KV layer of its type to read");
    const LayerConfig& D = tc.layers[donor];
    if (D.head_dim != L.head_dim)
      throw std::invalid_argument(both + "assistant layer " + std::to_string(l) + " has head_dim " +
                                  std::to_string(L.head_dim) + " but target layer " + std::to_string(donor) +
                                  " stores " + std::to_string(D.head_dim));
    if (c_.n_head % D.n_kv_heads != 0)
      throw std::invalid_argument(both + "assistant head count " + std::to_string(c_.n_head) +
                                  " is not a multiple of target layer " + std::to_string(donor) + "'s " +
                                  std::to_string(D.n_kv_heads) + " KV heads");
    donor_.push_back(donor);
    slot_.push_back(D.kv_slot);
    kv_heads_.push_back(D.n_kv_heads);
  }
  head_ = bind_centroid_head(assistant, c_.d_model, int(w_.token_embd.out));
}

void Assistant::set_centroid_top_k(int k) {
  if (has_centroid_head()) head_.top_k = std::clamp(k, 1, head_.n_centroids);
}

void Assistant::matmul_shared(const MatmulTarget* targets, int count, const float* x, int rows, int ldx) {
  matmul_macs += run_products(targets, count, x, rows, ldx, pool_);
}

void Assistant::matmul_group(const MatmulJob* jobs, int count) {
  matmul_macs += run_group(jobs, count, pool_);
}

void Assistant::matmul(const MatrixView& w, const float* x, int rows, int ldx, float* y, int ldy) {
  const MatmulTarget target{w, y, ldy};
  matmul_shared(&target, 1, x, rows, ldx);
}

void Assistant::step(const int32_t* tokens, const int32_t* pos, const int32_t* seq, const float* h, int n,
                     const KvCache& kv, float* logits, float* h_next) {
  if (n <= 0) return;
  const ModelConfig& tc = target_.config;
  const int d = c_.d_model, db = c_.d_backbone, H = c_.n_head, V = n_vocab();
  // The sliding slot the assistant reads keeps the last capacity() positions of each sequence.
  int ring = 0;
  for (int l = 0; l < c_.n_layer; ++l)
    if (c_.layers[l].sliding) ring = kv.capacity(slot_[l]);
  for (int i = 0; i < n; ++i) {
    const std::string where = "assistant step row " + std::to_string(i) + ": ";
    if (tokens[i] < 0 || tokens[i] >= V) throw std::invalid_argument(where + "token " + std::to_string(tokens[i]) + " outside the vocabulary");
    if (seq[i] < 0 || seq[i] >= kv.n_seq()) throw std::invalid_argument(where + "sequence " + std::to_string(seq[i]) + " out of range");
    const int len = kv.seq_len(seq[i]);
    if (pos[i] < 1 || pos[i] > len)
      throw std::invalid_argument(where + "position " + std::to_string(pos[i]) + " needs target keys at [0, " +
                                  std::to_string(pos[i]) + "), but the target cache holds " + std::to_string(len));
    if (ring > 0 && std::max(0, pos[i] - tc.sliding_window + 1) < len - ring)
      throw std::invalid_argument(where + "position " + std::to_string(pos[i]) + " lies too far behind the cache end " +
                                  std::to_string(len) + ": its sliding-window keys were overwritten");
  }

  xh_.resize(size_t(n) * 2 * db);
  z_.resize(size_t(n) * d), y_.resize(size_t(n) * d);
  buf_.resize(n, c_);
  // Built per call: its hook points at this Assistant, which its owner may have moved since.
  const DecoderBlock blk(c_, w_, pool_, std::bind_front(&Assistant::matmul_shared, this),
                         std::bind_front(&Assistant::matmul_group, this), buf_);
  // The attention mask sits one position back: the keys a query at p sees are those at q <= p - 1
  // (and, on sliding layers, q >= p - window + 1, i.e. a window of window - 1 ending at p - 1).
  mask_pos_.resize(n);
  for (int i = 0; i < n; ++i) mask_pos_[i] = pos[i] - 1;

  // x = E_target[t] * sqrt(d_target); xh = concat(x, h); z = W_pre xh
  const float emb_scale = std::sqrt(float(db));
  for (int i = 0; i < n; ++i) {
    float* x = &xh_[size_t(i) * 2 * db];
    matrix_get_row(target_.weights.token_embd, tokens[i], x);
    for (int j = 0; j < db; ++j) x[j] *= emb_scale;
    std::memcpy(x + db, h + size_t(i) * db, db * sizeof(float));
  }
  matmul(w_.nextn_pre_proj, xh_.data(), n, 2 * db, z_.data(), d);

  // The target's layer steps (spec 2.4), without K/V projections or PLE: the queries, rotated at p,
  // read the target's cache.
  float* z = z_.data();
  for (int l = 0; l < c_.n_layer; ++l) {
    const LayerConfig& L = c_.layers[l];
    blk.attention_norm(l, z, n);
    blk.query(l, pos, n, /*projected=*/false);
    AttentionKeys keys;
    keys.kv = &kv;
    keys.slot = slot_[l];
    keys.shape = AttentionShape{H, kv_heads_[l], L.head_dim, L.sliding ? tc.sliding_window - 1 : 0};
    keys.mask_pos = mask_pos_.data();
    keys.seq = seq;
    blk.attention(l, keys, z, n);
    blk.mlp(l, exact_gelu, z, n);
    blk.scale(l, z, n);
  }

  blk.norm_rows(z, w_.output_norm.data(), n, y_.data());
  head(y_.data(), n, logits);
  if (h_next) matmul(w_.nextn_post_proj, y_.data(), n, d, h_next, db);
}

void Assistant::head(const float* y, int n, float* logits) {
  const int d = c_.d_model, V = n_vocab();
  if (!has_centroid_head() || !use_centroid_head) {
    matmul(w_.token_embd, y, n, d, logits, V);  // tied, no softcap (spec 5.1 step 5)
    return;
  }
  const int nc = head_.n_centroids, k = head_.top_k, per = head_.per_cluster;
  cent_.resize(size_t(n) * nc);
  matmul(head_.centroids, y, n, d, cent_.data(), nc);
  std::vector<int> order(nc);
  std::vector<float> row(d);
  for (int i = 0; i < n; ++i) {
    float* out = logits + size_t(i) * V;
    std::fill(out, out + V, -std::numeric_limits<float>::infinity());
    const float* cs = &cent_[size_t(i) * nc];
    for (int c = 0; c < nc; ++c) order[c] = c;
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int a, int b) { return cs[a] > cs[b] || (cs[a] == cs[b] && a < b); });
    const float* yi = y + size_t(i) * d;
    for (int j = 0; j < k; ++j) {
      const int c = order[j];
      for (int t = 0; t < per; ++t) {
        const int32_t tok = head_.token_ordering[size_t(c) * per + t];
        const float* e;
        if (w_.token_embd.type == GgmlType::F32) {
          e = reinterpret_cast<const float*>(static_cast<const uint8_t*>(w_.token_embd.data) + size_t(tok) * w_.token_embd.row_bytes);
        } else {
          matrix_get_row(w_.token_embd, tok, row.data());
          e = row.data();
        }
        out[tok] = dot_f32(e, yi, d);
      }
    }
    matmul_macs += double(k) * per * d;
  }
}

}  // namespace gem4
