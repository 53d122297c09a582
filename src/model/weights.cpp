#include "model/weights.h"

#include <algorithm>
#include <unordered_set>

#include <cmath>
#include <stdexcept>

#include "gguf/gguf.h"
#include "tensor/quant.h"

namespace gem4 {

TensorTable tensor_table_from_gguf(const gguf::GgufFile& f) {
  TensorTable t;
  for (const auto& info : f.tensors()) {
    TensorRef r;
    r.type = info.type;
    r.ne = info.ne;
    r.data = f.tensor_data(info);
    r.nbytes = info.nbytes;
    t.emplace(info.name, std::move(r));
  }
  return t;
}

ParamCount count_params(const TensorTable& t) {
  ParamCount c;
  for (const auto& [name, r] : t) {
    int64_t n = 1;
    for (auto e : r.ne) n *= e;
    c.params += n;
    c.bytes += int64_t(r.nbytes);
  }
  return c;
}

namespace {

class Binder {
 public:
  Binder(const TensorTable& t, const std::string& file) : t_(t), file_(file) {}

  // A lookup that does not count as a use (presence checks).
  const TensorRef* find(const std::string& name) const {
    auto it = t_.find(name);
    return it == t_.end() ? nullptr : &it->second;
  }
  // Marks a tensor read on purpose, or known to be unused (it then is no error).
  void use(const std::string& name) const { used_.insert(name); }

  // Every tensor of the file must be used or known to be unused: a layout gem4 does not know (an
  // expert tensor of a newer converter, an untied output head) must not load and give wrong logits.
  void check_all_used() const {
    std::vector<std::string> unused;
    for (const auto& [name, r] : t_)
      if (!used_.count(name)) unused.push_back(name);
    if (unused.empty()) return;
    std::sort(unused.begin(), unused.end());
    std::string list;
    for (size_t i = 0; i < unused.size() && i < 8; ++i) list += (i ? "', '" : "") + unused[i];
    throw std::runtime_error(file_ + ": tensor '" + list + "'" + (unused.size() > 8 ? " and more" : "") +
                             (unused.size() == 1 ? " is" : " are") +
                             " not part of any Gemma 4 layout gem4 knows (refusing to load rather than ignore " +
                             (unused.size() == 1 ? "it" : "them") + ")");
  }

  std::runtime_error error(const std::string& name, const std::string& what) const {
    return std::runtime_error(file_ + ": tensor '" + name + "': " + what);
  }

  static std::string shape_str(const std::vector<int64_t>& ne) {
    std::string s = "[";
    for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
    return s + "]";
  }

  const TensorRef& require(const std::string& name, const std::vector<int64_t>& ne) const {
    const TensorRef* r = find(name);
    if (!r) throw error(name, "missing (expected shape " + shape_str(ne) + ")");
    use(name);
    std::vector<int64_t> got = r->ne;
    while (got.size() > ne.size() && got.back() == 1) got.pop_back();
    if (got != ne) throw error(name, "has shape " + shape_str(r->ne) + ", expected " + shape_str(ne));
    return *r;
  }

  MatrixView matrix(const std::string& name, int64_t in, int64_t out) const {
    const TensorRef& r = require(name, {in, out});
    require_supported_weight_type(r.type, file_ + ": " + name);
    MatrixView m;
    m.type = r.type;
    m.data = r.data;
    m.in = in;
    m.out = out;
    m.row_bytes = ggml_row_bytes(r.type, in);
    return m;
  }

  // Expert e of a [in, out, n_expert] tensor as an in -> out matrix.
  std::vector<MatrixView> experts(const std::string& name, int64_t in, int64_t out, int64_t n_expert) const {
    const TensorRef& r = require(name, {in, out, n_expert});
    require_supported_weight_type(r.type, file_ + ": " + name);
    std::vector<MatrixView> v(n_expert);
    const size_t row = ggml_row_bytes(r.type, in);
    for (int64_t e = 0; e < n_expert; ++e) {
      v[e].type = r.type;
      v[e].data = r.data + size_t(e) * size_t(out) * row;
      v[e].in = in;
      v[e].out = out;
      v[e].row_bytes = row;
    }
    return v;
  }

  std::vector<float> vec(const std::string& name, int64_t n) const {
    const TensorRef& r = require(name, {n});
    require_supported_weight_type(r.type, file_ + ": " + name);
    if (n % ggml_block_elems(r.type) != 0) throw error(name, "length not a multiple of its type's block");
    std::vector<float> v(n);
    dequantize_row(r.type, r.data, v.data(), n);
    return v;
  }

 private:
  const TensorTable& t_;
  const std::string& file_;
  mutable std::unordered_set<std::string> used_;
};

}  // namespace

ModelWeights ModelWeights::bind(const ModelConfig& c, const TensorTable& t, const std::string& file) {
  Binder b(t, file);
  ModelWeights w;
  const int64_t d = c.d_model;
  const bool assistant = c.arch == "gemma4-assistant";
  const TensorRef* emb = b.find("token_embd.weight");
  if (!emb || emb->ne.size() != 2 || emb->ne[0] != d)
    throw b.error("token_embd.weight", emb ? "has shape " + Binder::shape_str(emb->ne) + ", expected [" +
                                                 std::to_string(d) + ", n_vocab]"
                                           : "missing");
  w.token_embd = b.matrix("token_embd.weight", d, emb->ne[1]);
  w.output_norm = b.vec("output_norm.weight", d);
  if (c.ple_dim > 0) {
    const int64_t lp = int64_t(c.n_layer) * c.ple_dim;
    w.ple_token_embd = b.matrix("per_layer_token_embd.weight", lp, emb->ne[1]);
    w.ple_model_proj = b.matrix("per_layer_model_proj.weight", d, lp);
    w.ple_proj_norm = b.vec("per_layer_proj_norm.weight", c.ple_dim);
  }
  if (assistant) {
    if (c.d_backbone <= 0) throw b.error("nextn.pre_projection.weight", "needs gemma4-assistant.embedding_length_out");
    w.nextn_pre_proj = b.matrix("nextn.pre_projection.weight", 2 * int64_t(c.d_backbone), d);
    w.nextn_post_proj = b.matrix("nextn.post_projection.weight", d, c.d_backbone);
  }

  // RoPE: sliding layers use plain NeoX frequencies; full layers divide by rope_freqs (proportional
  // RoPE, spec 1.3): a divisor of 1e30 means the pair does not rotate, which we store as exactly 0.
  bool any_full = false;
  for (const auto& L : c.layers) any_full |= !L.sliding;
  if (const TensorRef* rf = b.find("rope_freqs.weight")) {
    int64_t half_full = 0;
    for (const auto& L : c.layers)
      if (!L.sliding) half_full = L.head_dim / 2;
    if (any_full) w.rope_freqs = b.vec("rope_freqs.weight", half_full);
    b.use("rope_freqs.weight");  // only full layers read it
    (void)rf;
  }
  w.rope.resize(c.n_layer);
  for (int l = 0; l < c.n_layer; ++l) {
    const LayerConfig& L = c.layers[l];
    ModelWeights::Rope& r = w.rope[l];
    r.theta_scale = std::pow(L.rope_base, -2.0f / float(L.n_rot));  // powf, as llama.cpp takes it
    r.factors.assign(L.head_dim / 2, 1.0f);
    if (!L.sliding && !w.rope_freqs.empty())
      std::copy_n(w.rope_freqs.begin(), L.head_dim / 2, r.factors.begin());
  }

  w.layers.resize(c.n_layer);
  for (int l = 0; l < c.n_layer; ++l) {
    const LayerConfig& L = c.layers[l];
    LayerWeights& lw = w.layers[l];
    const std::string p = "blk." + std::to_string(l) + ".";
    const int64_t q_w = int64_t(c.n_head) * L.head_dim, kv_w = int64_t(L.n_kv_heads) * L.head_dim;
    lw.attn_norm = b.vec(p + "attn_norm.weight", d);
    lw.attn_q = b.matrix(p + "attn_q.weight", d, q_w);
    lw.attn_q_norm = b.vec(p + "attn_q_norm.weight", L.head_dim);
    if (!L.owns_kv) {
      // On shared layers attn_k/attn_v/attn_k_norm may be present (llama.cpp converter) but are never read.
      for (const char* n : {"attn_k.weight", "attn_v.weight", "attn_k_norm.weight"}) b.use(p + n);
    }
    if (L.owns_kv) {
      lw.attn_k = b.matrix(p + "attn_k.weight", d, kv_w);
      lw.attn_k_norm = b.vec(p + "attn_k_norm.weight", L.head_dim);
      lw.has_v = b.find(p + "attn_v.weight") != nullptr;
      if (lw.has_v) lw.attn_v = b.matrix(p + "attn_v.weight", d, kv_w);
    }
    lw.attn_output = b.matrix(p + "attn_output.weight", q_w, d);
    lw.post_attention_norm = b.vec(p + "post_attention_norm.weight", d);
    lw.ffn_norm = b.vec(p + "ffn_norm.weight", d);
    lw.ffn_gate = b.matrix(p + "ffn_gate.weight", d, L.n_ff);
    lw.ffn_up = b.matrix(p + "ffn_up.weight", d, L.n_ff);
    lw.ffn_down = b.matrix(p + "ffn_down.weight", L.n_ff, d);
    lw.post_ffw_norm = b.vec(p + "post_ffw_norm.weight", d);
    if (b.find(p + "layer_output_scale.weight")) lw.layer_output_scale = b.vec(p + "layer_output_scale.weight", 1)[0];
    if (c.n_expert > 0) {
      const int64_t E = c.n_expert, fe = c.n_ff_exp;
      lw.post_ffw_norm_1 = b.vec(p + "post_ffw_norm_1.weight", d);
      lw.pre_ffw_norm_2 = b.vec(p + "pre_ffw_norm_2.weight", d);
      lw.post_ffw_norm_2 = b.vec(p + "post_ffw_norm_2.weight", d);
      lw.router = b.matrix(p + "ffn_gate_inp.weight", d, E);
      lw.router_scale = b.vec(p + "ffn_gate_inp.scale", d);
      // The merged gate|up tensor llama.cpp's converter writes, or (as llama.cpp also reads) separate
      // gate and up tensors; a file with both, or with one of the separate pair only, is refused.
      const bool merged = b.find(p + "ffn_gate_up_exps.weight");
      const bool gate = b.find(p + "ffn_gate_exps.weight"), up = b.find(p + "ffn_up_exps.weight");
      if (merged && (gate || up))
        throw b.error(
            p + (gate ? "ffn_gate_exps.weight" : "ffn_up_exps.weight"),
            "beside ffn_gate_up_exps: a layer has either the merged gate|up experts or separate ones");
      if (merged || !(gate || up)) {
        lw.expert_gate_up = b.experts(p + "ffn_gate_up_exps.weight", d, 2 * fe, E);
      } else {
        lw.expert_gate = b.experts(p + "ffn_gate_exps.weight", d, fe, E);
        lw.expert_up = b.experts(p + "ffn_up_exps.weight", d, fe, E);
      }
      lw.expert_down = b.experts(p + "ffn_down_exps.weight", fe, d, E);
      lw.expert_scale = b.vec(p + "ffn_down_exps.scale", E);
    }
    if (c.ple_dim > 0) {
      lw.ple_inp_gate = b.matrix(p + "inp_gate.weight", d, c.ple_dim);
      lw.ple_proj = b.matrix(p + "proj.weight", c.ple_dim, d);
      lw.ple_post_norm = b.vec(p + "post_norm.weight", d);
    }
  }
  if (assistant) {
    // The centroid head's tensors are bound by the drafter (model/assistant.cpp).
    for (const char* n : {"masked_embedding.centroids.weight", "masked_embedding.centroids",
                          "masked_embedding.token_ordering", "token_ordering", "masked_embedding.token_ordering.weight",
                          "token_ordering.weight"})
      b.use(n);
  }
  b.check_all_used();
  return w;
}

}  // namespace gem4
