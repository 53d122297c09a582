// The Gemma 4 assistant: the MTP drafter of spec section 5.1 (`gemma4-assistant` GGUFs).
//
// A draft step reads a token t and a hidden vector h of the target's width, and returns the
// assistant's logits for the next token and h_next, the h of the following step:
//   x = target_token_embd[t] * sqrt(d_target)            (the TARGET's embedding table and width)
//   z = W_pre · concat(x, h)                              (x first, then h, as llama.cpp's ggml_concat)
//   per layer: a = rmsnorm(z, attn_norm); q = rope(qnorm(W_q a)) at the step's position;
//              attention of q over the TARGET's KV cache; z += rmsnorm(W_o attn, post_attention_norm);
//              z += rmsnorm(MLP(rmsnorm(z, ffn_norm)), post_ffw_norm); z *= layer_scalar
//              (no K/V projections, no PLE; nothing is written to any cache)
//   y = rmsnorm(z, output_norm); logits = token_embd_assistant · y (no softcap); h_next = W_post · y
//
// Which target KV an assistant layer reads: sliding layers the target's last sliding KV-owning layer,
// full layers its last full KV-owning layer (tiny-gemma4: 3 and 4; E2B: 13 and 14).
//
// Positions: every draft step of a round uses the same position p, the position of the last
// sampled token, which the target has NOT processed yet. The query sees the target keys at positions
// q with q < p (the cache holds nothing at p) and, on sliding layers, p - q < window: llama.cpp's
// causal and window mask at position p over a cache that ends at p - 1.
//
// Optional centroid ("masked embedding") head, as in transformers' Gemma4AssistantMaskedEmbedder:
// tensors `masked_embedding.centroids[.weight]` [d, n_centroids] and `[masked_embedding.]token_ordering`
// [n_vocab] (cluster c holds the tokens token_ordering[c*K .. (c+1)*K), K = n_vocab / n_centroids).
// The head scores the centroids, keeps the top-k clusters and computes logits only for their tokens;
// every other token gets -infinity. `use_centroid_head = false` selects the dense head.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/matmul.h"
#include "model/block.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace gem4 {

class ThreadPool;

struct CentroidHead {
  MatrixView centroids;                 // d -> n_centroids
  std::vector<int32_t> token_ordering;  // [n_vocab]
  int n_centroids = 0;
  int per_cluster = 0;                  // n_vocab / n_centroids
  int top_k = 32;                       // clusters kept (key gemma4-assistant.centroid_intermediate_top_k)
};

class Assistant {
 public:
  // Binds an assistant to the target whose KV cache and embeddings it reads. Throws
  // std::invalid_argument naming both files when they do not fit together (architectures, widths,
  // vocabulary, head shapes of the KV layers read).
  Assistant(const Model& assistant, const Model& target, ThreadPool* pool);

  bool has_centroid_head() const { return head_.n_centroids > 0; }
  bool use_centroid_head = true;  // when the file has one; false: dense head
  // GELU by the exact tanh formula instead of llama.cpp's f16 table (as PlanSwitches::exact_gelu).
  bool exact_gelu = false;
  int centroid_top_k() const { return head_.top_k; }
  void set_centroid_top_k(int k);

  int n_vocab() const { return int(w_.token_embd.out); }
  int d_backbone() const { return c_.d_backbone; }
  const ModelConfig& config() const { return c_; }
  // The target KV slot (and layer) assistant layer l reads.
  int kv_slot(int l) const { return slot_[l]; }
  int kv_layer(int l) const { return donor_[l]; }

  // Draft steps for n independent rows (row i: token, position, sequence of the target cache,
  // h[i * d_backbone ...]). Writes logits [n, n_vocab] and h_next [n, d_backbone] (h_next may be
  // null). Throws std::invalid_argument when a position cannot be drafted at: p < 1, p beyond the
  // cached length of its sequence, or keys the sliding window needs already overwritten.
  void step(const int32_t* tokens, const int32_t* pos, const int32_t* seq, const float* h, int n,
            const KvCache& target_kv, float* logits, float* h_next);

  double matmul_macs = 0;  // work done so far (for step-cost accounting)

 private:
  void matmul(const MatrixView& w, const float* x, int rows, int ldx, float* y, int ldy);
  void matmul_shared(const MatmulTarget* targets, int count, const float* x, int rows, int ldx);
  void matmul_group(const MatmulJob* jobs, int count);
  void head(const float* y, int n, float* logits);

  const Model& target_;
  const ModelConfig& c_;
  const ModelWeights& w_;
  ThreadPool* pool_;
  CentroidHead head_;
  std::vector<int> slot_, donor_, kv_heads_;

  // Buffers for the current call; row i of each is row i of the call.
  std::vector<float> xh_, z_, y_, cent_;
  BlockBuffers buf_;
  std::vector<int32_t> mask_pos_;
};

}  // namespace gem4
